"""``zerolab report``: this machine as the course sees it, on one screen (in the spirit of
DeepSpeed's ``ds_report``), and ``zerolab report --preflight``: the learner's one-time check.

    zerolab report                 torch build, CUDA / NCCL / gloo, GPUs, /dev/shm, CPU model and
                                   SIMD features, cores, memory, and what the course can run here
    zerolab report --preflight     Python and torch, a crew of 4 ranks started and torn down,
                                   JupyterLab and ipywidgets, plotting, CJK fonts, free memory;
                                   ends with one line, READY or what to fix (exit status 1)

Nothing here needs psutil or a GPU: memory and CPU facts come from /proc and the cgroup files
where they exist (Linux, containers, JupyterHub), else from what the platform offers.
"""
from __future__ import annotations

import dataclasses
import io
import os
import platform
import sys
import time

from ..i18n import catalogue, lang, width
# The facts themselves live in zerolab.tools.machine; they are this module's names too, as before the split.
from .machine import CJK_SAMPLE, cjk_fonts, cpu, memory, shm, torch_facts  # noqa: F401

T = catalogue("report")      # the report's and the preflight's lines in Chinese (zerolab/i18n/messages_zh.py), --lang zh

# What the course needs, measured (docs/INSTRUCTOR.md, "Sizing"): the largest chapter (3: its
# kernel and 10 ranks) peaked at 1.06 GB proportional set size (3.7 GB if each rank's shared
# libtorch pages are counted again); with the Jupyter server and a kernel left open from an
# earlier chapter, 2 GB free is the line below which a chapter may be killed.
COURSE_NEEDS_GB = 2.0
TESTED_TORCH = "2.13.0"
CHAPTER_RANKS = 4            # the most ranks one crew of the course starts (ch00, ch02, ch03)
RANKS_AT_ONCE = 10           # chapters 2 and 3 keep crews of 1, 2, 3 and 4 ranks side by side


def _gb(n: int | None) -> str:
    return T("unknown") if n is None else f"{n / 1e9:.1f} GB"


def _row(label: str, value: str, indent: str = "") -> str:
    """``label ....... value``: the values in one column (a CJK character takes two)."""
    return f"{indent}{label} {'.' * max(1, (17 if indent else 18) - width(label))} {value}"


def report_text() -> str:
    """The one-screen report."""
    from .. import __version__
    t, c, m, s = torch_facts(), cpu(), memory(), shm()
    yes = lambda b: T("yes") if b else T("no")  # noqa: E731
    L = [T("zerolab {version} report: {node}", version=__version__, node=platform.node() or T("this machine")),
         "-" * 78,
         _row("python", f"{sys.version.split()[0]} ({sys.executable})"),
         _row("torch", t["version"] + (f" (git {t['git']})" if t["git"] else "")
              + ("" if t["version"].split("+")[0] == TESTED_TORCH
                 else T("  [the course is tested with {version}]", version=TESTED_TORCH))),
         _row(T("torch build"), T("CUDA {cuda}, MKL {mkl}, OpenMP {openmp}, {threads} intra-op threads",
                                  cuda=t["cuda_build"] or T("none (CPU build)"), mkl=yes(t["mkl"]),
                                  openmp=yes(t["openmp"]), threads=t["threads"])),
         _row(T("float kernels"), t["cpu_capability"]
              + (T(" (forced by ATEN_CPU_CAPABILITY={env})", env=t["capability_env"]) if t["capability_env"] else
                 T(" (the widest this CPU allows; ATEN_CPU_CAPABILITY=avx2/default narrows it)"))),
         _row("torch.distributed", T("{dist}: gloo {gloo}, NCCL {nccl}", dist=yes(t["distributed"]),
                                     gloo=yes(t["gloo"]), nccl=yes(t["nccl"]))
              + (f" {t['nccl_version']}" if t["nccl_version"] else "")),
         _row("GPUs", str(len(t["gpus"]) or T("none")))]
    L += [f"                    {g}" for g in t["gpus"]]
    L += [_row("CPU", f"{c['model']} ({c['machine']})"),
          _row(T("CPU features"), (", ".join(c["features"]) or T("none of avx2/avx512/amx/asimd"))
               + (T("  [AVX-512: wider float kernels, last digits differ from AVX2]")
                  if "avx512f" in c["features"] else "")),
          _row(T("cores"), T("{logical} logical, {usable} usable by this process", logical=c["logical"],
                             usable=c["usable"])),
          _row(T("memory"), T("{total} total, {available} available", total=_gb(m["total"]),
                              available=_gb(m["available"]))
               + (T(" (cgroup limit {limit})", limit=_gb(m["cgroup_limit"])) if m["cgroup_limit"] else "")),
          _row(T("shared memory"), T("none (/dev/shm missing)") if s is None else
               T("/dev/shm {total}, {free} free", total=_gb(s["total"]), free=_gb(s["free"]))
               + (T("  [small: enough for gloo on CPU; NCCL wants docker --shm-size=1g or more]")
                  if s["total"] < 1e9 else "")),
          "-" * 78, T("what the course can run here:")]
    avail = m["available"]
    enough = avail is None or avail >= COURSE_NEEDS_GB * 1e9
    L.append(_row(T("every chapter"), T("yes: up to {ranks} ranks at once on gloo (CPU), about {need:g} GB free needed"
                                        if enough and t["gloo"] else
                                        "NO: up to {ranks} ranks at once on gloo (CPU), about {need:g} GB free needed",
                                        ranks=RANKS_AT_ONCE, need=COURSE_NEEDS_GB)
                  + ("" if enough else T(", {available} available", available=_gb(avail))), "  "))
    if c["usable"] < 2:
        L.append(_row(T("note"), T("1 usable core: the chapters run, several times slower than on 2"), "  "))
    n = len(t["gpus"])
    if n and t["nccl"]:
        L.append(_row(T("NCCL crews"), T("up to {n} ranks, one GPU each (backend='auto' picks NCCL when every rank "
                                         "gets a GPU)", n=n), "  "))
    else:
        L.append(_row(T("NCCL crews"), T("no ({why}): backend='auto' runs every crew on gloo, as the stored chapters "
                                         "were", why=T("no CUDA GPU") if not n else T("torch has no NCCL")), "  "))
    L.append(_row(T("learner's check"), "zerolab report --preflight", "  "))
    return "\n".join(L)


# ----------------------------------------------------------------------------- preflight

@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""          # what to do when not ok
    warn: bool = False     # ok, but worth a note


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def check_python() -> Check:
    v = sys.version.split()[0]
    ok = sys.version_info >= (3, 10)
    return Check("python", ok, f"{v} ({sys.executable})",
                 T("install Python 3.10 or newer and recreate the venv (python3.11 -m venv .venv)"))


def check_torch() -> Check:
    try:
        import torch
    except Exception as e:      # noqa: BLE001
        return Check("torch", False, T("cannot import: {error}", error=e),
                     T(".venv/bin/pip install torch=={version} (see the README's set-up command)",
                       version=TESTED_TORCH))
    v = torch.__version__
    if _version_tuple(v) < (2, 4):
        return Check("torch", False, T("{version} is older than 2.4", version=v),
                     f".venv/bin/pip install torch=={TESTED_TORCH}")
    same = v.split("+")[0] == TESTED_TORCH
    return Check("torch", True, v + ("" if same else T(" (the course is tested with {version}: it should run, a "
                                                       "stored output may differ in wording)", version=TESTED_TORCH)),
                 warn=not same)


def check_crew(ranks: int = CHAPTER_RANKS) -> Check:
    import torch
    import torch.distributed as dist
    from ..crew import Crew

    def hello():
        from zerolab import rank_info
        me = rank_info()
        t = torch.tensor([float(me.rank + 1)], device=me.device)
        dist.all_reduce(t)
        return t.item()

    import socket
    try:                    # the ranks meet on 127.0.0.1: without it a crew waits out its start timeout
        with socket.create_server(("127.0.0.1", 0)) as srv, \
                socket.create_connection(srv.getsockname(), timeout=5):
            pass
    except OSError as e:
        return Check("crew", False, T("cannot connect to 127.0.0.1, where the ranks meet: {error}", error=e),
                     T("bring up the loopback interface (ip link set lo up) or allow local TCP connections "
                       "on 127.0.0.1 in the firewall"))
    t0 = time.perf_counter()
    try:
        from ..crew import fit_ranks
        ranks = fit_ranks(ranks)               # under ZEROLAB_MAX_RANKS: the most it allows
        crew = Crew(ranks, echo=False, timeout=60, start_timeout=120)
    except Exception as e:      # noqa: BLE001
        return Check("crew", False, T("{n} ranks did not start: {error}", n=ranks,
                                      error=f"{type(e).__name__}: {str(e).splitlines()[0]}"),
                     T("run `zerolab report` and check memory and /dev/shm; behind a firewall, allow "
                       "connections to 127.0.0.1 (the ranks meet there)"))
    t1 = time.perf_counter()
    try:
        got = crew.run(hello)
        t2 = time.perf_counter()
    except Exception as e:      # noqa: BLE001
        crew.close()
        return Check("crew", False, T("an all-reduce on {n} ranks failed: {error}", n=ranks, error=type(e).__name__),
                     T("run `zerolab report`; then ask your instructor with its output"))
    backend = crew.backend
    crew.close()
    t3 = time.perf_counter()
    want = float(ranks * (ranks + 1) // 2)
    if got != [want] * ranks:
        return Check("crew", False, T("all-reduce gave {got}, expected {want} on every rank", got=got, want=want),
                     T("run `zerolab report` and ask your instructor with its output"))
    return Check("crew", True, T("{n} ranks on {backend}: started in {start:.1f} s, all-reduce {reduce:.2f} s, "
                                 "torn down in {stop:.1f} s", n=ranks, backend=backend, start=t1 - t0,
                                 reduce=t2 - t1, stop=t3 - t2))


def _dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_jupyter() -> Check:
    found = {n: _dist_version(n) for n in ("jupyterlab", "ipywidgets", "ipykernel")}
    missing = [n for n, v in found.items() if v is None]
    detail = ", ".join(f"{n} {v or 'MISSING'}" for n, v in found.items())
    return Check("jupyter", not missing, detail,
                 T("{bin}/pip install -e '.[course]' (from the repository root)", bin=os.path.dirname(sys.executable)))


def check_plot() -> Check:
    try:
        import matplotlib
        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
        fig = Figure(figsize=(2, 1.5), dpi=50)
        ax = fig.add_subplot()
        ax.plot([0, 1, 2], [1, 0, 1])
        ax.set_title("ranks")
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        data = buf.getvalue()
    except Exception as e:      # noqa: BLE001
        return Check("plots", False, T("matplotlib could not render: {error}", error=f"{type(e).__name__}: {e}"),
                     f"{os.path.dirname(sys.executable)}/pip install --force-reinstall matplotlib")
    ok = data.startswith(b"\x89PNG") and len(data) > 200
    return Check("plots", ok, T("matplotlib {version} rendered a {size:,}-byte PNG", version=matplotlib.__version__,
                                size=len(data)),
                 f"{os.path.dirname(sys.executable)}/pip install --force-reinstall matplotlib")


def check_fonts() -> Check:
    names = cjk_fonts()
    if names:
        return Check("CJK fonts", True, T("{n} famil{ies} ({names}): figures can label in Chinese", n=len(names),
                                          ies="y" if len(names) == 1 else "ies",
                                          names=", ".join(names[:3]) + (", ..." if len(names) > 3 else "")))
    if lang() == "zh":      # the reader of the Chinese edition: what they will see, first
        return Check("CJK fonts", True, T("none here: in a browser on this machine the Chinese edition's text (搬家队) "
                                          "shows as boxes; its figures keep English labels; Debian/Ubuntu: "
                                          "apt-get install fonts-noto-cjk, then reload the page"), warn=True)
    return Check("CJK fonts", True, T("none here: figures of the Chinese edition keep English labels (never boxes); "
                                      "Chinese text (搬家队) in a browser on this machine may show as boxes (a browser "
                                      "elsewhere uses its own fonts); Debian/Ubuntu: apt-get install fonts-noto-cjk"),
                 warn=True)


def check_memory(need_gb: float = COURSE_NEEDS_GB) -> Check:
    m = memory()
    avail = m["available"]
    if avail is None:
        return Check("memory", True, T("free memory unknown on this platform"), warn=True)
    where = T(" (cgroup limit {limit})", limit=_gb(m["cgroup_limit"])) if m["cgroup_limit"] else ""
    ok = avail >= need_gb * 1e9
    return Check("memory", ok, T("{avail} available of {total}{where}; the chapters need about {need:g} GB",
                                 avail=_gb(avail), total=_gb(m["total"]), where=where, need=need_gb),
                 T("free memory: close other programs or notebooks (Kernel > Shut Down All Kernels), or ask for a "
                   "server with {need:g} GB or more", need=need_gb))


def preflight(ranks: int = CHAPTER_RANKS, need_gb: float = COURSE_NEEDS_GB, out=None) -> bool:
    """Run every check, print one line each and the verdict; True when READY."""
    out = out or sys.stdout
    print(T("zerolab preflight: is this machine ready for the course?"), file=out, flush=True)
    checks: list[Check] = []
    steps = [check_python, check_torch, check_jupyter, check_plot, check_fonts,
             lambda: check_memory(need_gb), lambda: check_crew(ranks)]
    for step in steps:
        try:
            c = step()
        except Exception as e:      # noqa: BLE001 - a check that breaks is a failed check
            c = Check(getattr(step, "__name__", "check").replace("check_", ""), False,
                      f"{type(e).__name__}: {e}", T("run `zerolab report` and ask your instructor with its output"))
        checks.append(c)
        mark = "ok  " if c.ok and not c.warn else ("note" if c.ok else "FAIL")
        print(f"  [{mark}] {c.name:<10} {c.detail}", file=out, flush=True)
        if not c.ok:
            print(T("         fix: {fix}", fix=c.fix), file=out, flush=True)
    failed = [c for c in checks if not c.ok]
    if failed:
        print(T("NOT READY: {what}", what="; ".join(f"{c.name}: {c.fix}" for c in failed)), file=out, flush=True)
        return False
    print(T("READY"), file=out, flush=True)      # the Chinese keeps the word READY first too
    if lang() == "zh" and any(c.name == "CJK fonts" and c.warn for c in checks):
        print(T("but the Chinese edition needs a CJK font where your browser runs: without one its text is boxes "
                "(see CJK fonts above)"), file=out, flush=True)
    return True
