"""The CPU of a command, split by the kind of process that spent it (Linux).

    python benchmarks/cpu_by_process.py <command ...>
    python benchmarks/cpu_by_process.py .venv/bin/python -m pytest --nbval --nbval-current-env \\
        --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \\
        --ignore=notebooks/zh --ignore=solutions/zh notebooks solutions

Samples ``/proc`` four times a second while the command runs and keeps, for every process that
appeared, the most CPU (user + system) it was seen to have spent; a process's kind comes from its
command line: a Jupyter kernel, a crew's forkserver, a rank (a forkserver's child), pytest,
Chromium, Jupyter's server, or the program's name. A process that lives less than a sample apart
is missed, and one sampled last a moment before it ends loses that moment: the total comes out a
little under ``cpu_of.py``'s, which counts the command's processes exactly. Other work on the
machine is counted too, under its own kind: measure on a quiet machine.
One notebook pass alone, on the 2-core machine of 2026-12-04 16:12: 277 CPU-seconds seen over 251 s;
ranks 115 (153 of them), kernels 81 (34), forkservers 68 (34).
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _kind(cmd: str, parent_cmd: str) -> str:
    if "forkserver" in cmd:
        return "rank" if "forkserver" in parent_cmd else "forkserver"
    for needle, kind in (("resource_tracker", "resource tracker"), ("ipykernel", "kernel"),
                         ("pytest", "pytest"), ("chrom", "chromium"), ("jupyter", "jupyter server")):
        if needle in cmd:
            return kind
    return os.path.basename(cmd.split(" ")[0]) or "?"


def _snapshot() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds, command line) of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, cmd)
    return out


def main(argv: list[str]) -> int:
    if not argv or not sys.platform.startswith("linux"):
        print(__doc__, file=sys.stderr)
        return 2
    before = {pid: cpu for pid, (_, cpu, _) in _snapshot().items()}
    kinds: dict[int, str] = {}
    spent: dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv)
    while True:
        done = proc.poll() is not None
        now = _snapshot()
        for pid, (ppid, cpu, cmd) in now.items():
            if pid == os.getpid():
                continue
            if pid not in kinds and cmd:          # (a zombie's command line is empty: keep its first kind)
                kinds[pid] = _kind(cmd, now.get(ppid, (0, 0, ""))[2])
            spent[pid] = max(spent.get(pid, 0.0), cpu - before.get(pid, 0.0))
        if done:
            break
        time.sleep(0.25)
    total = collections.Counter()
    count = collections.Counter()
    for pid, cpu in spent.items():
        if cpu > 0:
            total[kinds.get(pid, "?")] += cpu
            count[kinds.get(pid, "?")] += 1
    print(f"[cpu_by_process] wall {time.perf_counter() - t0:.1f} s, CPU seen {sum(total.values()):.1f} s",
          file=sys.stderr)
    for kind, cpu in total.most_common():
        print(f"  {cpu:8.1f} s  {count[kind]:5d} processes  {kind}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
