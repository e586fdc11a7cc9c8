#!/usr/bin/env python
"""Sizing for a shared server: what each chapter costs one learner, measured.

    .venv/bin/python tools/measure_chapters.py                  # every chapter, one at a time
    .venv/bin/python tools/measure_chapters.py 02 03 --json out.json
    .venv/bin/python tools/measure_chapters.py --dir solutions  # the exercises, solved (checks included)

Each chapter notebook is executed top to bottom by ``jupyter nbconvert --execute`` into a
temporary folder (the notebooks in notebooks/ are never written), while a sampler walks the
process tree every ``--interval`` seconds: the kernel, its forkserver and every rank. For each
chapter it prints

* peak RSS: the largest sum of resident memory over the kernel and its ranks at one instant
  (counts the shared pages of libtorch once per process: an upper bound);
* peak PSS: the same with each shared page split among the processes that map it (what the
  machine really spends; Linux only);
* the most processes alive at once, the wall time, and the CPU time (user + system) of the
  kernel and its ranks, from the last sample of each process (a process that lives shorter
  than one interval is missed) and, as a cross-check, from getrusage of every reaped child
  (which also counts nbconvert itself, about 2 s).

Requires psutil (in the test extras). Numbers depend on the machine and its load: say where
they were taken.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


class Sampler(threading.Thread):
    def __init__(self, root_pid: int, interval: float):
        super().__init__(daemon=True)
        self.root = psutil.Process(root_pid)
        self.interval = interval
        self.stop = threading.Event()
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.peak_kernel_rss = 0
        self.cpu: dict[int, float] = {}     # pid -> last seen user+system seconds (kernel and ranks)
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            rss = pss = n = 0
            for p in _tree(self.root)[1:]:          # skip nbconvert itself: not a learner's cost
                try:
                    with p.oneshot():
                        rss_p = p.memory_info().rss
                        try:
                            pss_p = p.memory_full_info().pss
                        except (psutil.AccessDenied, AttributeError):
                            pss_p = rss_p
                        t = p.cpu_times()
                        self.cpu[p.pid] = t.user + t.system
                        if "ipykernel" in " ".join(p.cmdline()):
                            self.peak_kernel_rss = max(self.peak_kernel_rss, rss_p)
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    continue
                rss += rss_p
                pss += pss_p
                n += 1
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, n)
            self.samples += 1
            self.stop.wait(self.interval)


def measure(nb: str, interval: float, timeout: int) -> dict:
    jupyter = os.path.join(os.path.dirname(sys.executable), "jupyter")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="zerolab-measure-") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([jupyter, "nbconvert", "--to", "notebook", "--execute",
                                 f"--ExecutePreprocessor.timeout={timeout}", "--output-dir", out, nb],
                                cwd=os.path.dirname(nb), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        s = Sampler(proc.pid, interval)
        s.start()
        log = proc.communicate()[0].decode(errors="replace")
        wall = time.perf_counter() - t0
        s.stop.set()
        s.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"notebook": os.path.relpath(nb, ROOT), "ok": proc.returncode == 0,
            "wall_s": round(wall, 1),
            "peak_rss_gb": round(s.peak_rss / 1e9, 2), "peak_pss_gb": round(s.peak_pss / 1e9, 2),
            "peak_kernel_rss_gb": round(s.peak_kernel_rss / 1e9, 2),
            "peak_processes": s.peak_procs,
            "cpu_s_sampled": round(sum(s.cpu.values()), 1),
            "cpu_s_rusage": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in os.getloadavg()],
            "samples": s.samples, "log_tail": "" if proc.returncode == 0 else log[-2000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", help="chapter numbers (00 .. 04); default: all")
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a cell may take")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--dir", default="notebooks", help="folder of the notebooks (notebooks, solutions, exercises)")
    a = ap.parse_args()
    nbs = sorted(glob.glob(os.path.join(ROOT, a.dir, "[0-9][0-9]_*.ipynb")))
    if a.chapters:
        nbs = [nb for nb in nbs if os.path.basename(nb)[:2] in {c.zfill(2) for c in a.chapters}]
    print(f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 1e9:.1f} GB; one chapter at a time",
          flush=True)
    print(f"{'chapter':<40}{'wall s':>8}{'CPU s':>8}{'peak RSS':>10}{'peak PSS':>10}{'kernel':>8}{'procs':>6}",
          flush=True)
    results = []
    for nb in nbs:
        r = measure(nb, a.interval, a.timeout)
        results.append(r)
        print(f"{os.path.basename(nb):<40}{r['wall_s']:>8}{r['cpu_s_sampled']:>8}{r['peak_rss_gb']:>8} GB"
              f"{r['peak_pss_gb']:>7} GB{r['peak_kernel_rss_gb']:>5} GB{r['peak_processes']:>6}"
              + ("" if r["ok"] else "   FAILED"), flush=True)
        if not r["ok"]:
            print(r["log_tail"], flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
