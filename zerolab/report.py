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
import shutil
import subprocess
import sys
import time

from .i18n import catalogue

T = catalogue("report")      # the preflight's lines in Chinese (zerolab/messages_zh.py), with --lang zh

# What the course needs, measured (docs/INSTRUCTOR.md, "Sizing"): the largest chapter (3: its
# kernel and 10 ranks) peaked at 1.06 GB proportional set size (3.7 GB if each rank's shared
# libtorch pages are counted again); with the Jupyter server and a kernel left open from an
# earlier chapter, 2 GB free is the line below which a chapter may be killed.
COURSE_NEEDS_GB = 2.0
TESTED_TORCH = "2.13.0"
CHAPTER_RANKS = 4            # the most ranks one crew of the course starts (ch00, ch02, ch03)
RANKS_AT_ONCE = 10           # chapters 2 and 3 keep crews of 1, 2, 3 and 4 ranks side by side
CJK_SAMPLE = "搬家队显存四巨头"  # characters of the chapters' subtitles


# ----------------------------------------------------------------------------- facts

def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _meminfo() -> dict[str, int]:
    """Bytes from /proc/meminfo (Linux); empty elsewhere."""
    text = _read("/proc/meminfo") or ""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def _cgroup_memory() -> tuple[int | None, int | None]:
    """(limit, used) in bytes of this process's memory cgroup, if it has a limit."""
    for limit_f, used_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                             "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = (_read(limit_f) or "").strip()
        if limit.isdigit() and int(limit) < 2 ** 60:
            used = (_read(used_f) or "").strip()
            return int(limit), int(used) if used.isdigit() else None
    return None, None


def memory() -> dict:
    """total / available bytes for this process: the machine's, capped by a cgroup limit."""
    info = _meminfo()
    total, avail = info.get("MemTotal"), info.get("MemAvailable")
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            pass
    limit, used = _cgroup_memory()
    out = {"total": total, "available": avail, "cgroup_limit": limit}
    if limit is not None:
        out["total"] = min(total or limit, limit)
        if used is not None:
            out["available"] = min(avail if avail is not None else limit, max(0, limit - used))
    return out


def cpu() -> dict:
    """Model, SIMD features that change float kernels, logical cores, cores usable here."""
    model, flags = platform.processor() or platform.machine(), set()
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "Hardware") and model in ("", platform.machine(), "x86_64"):
            model = val.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(val.split())
    if sys.platform == "darwin":
        try:
            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                   text=True, timeout=5).stdout.strip() or model
        except (OSError, subprocess.SubprocessError):
            pass
    features = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16",
                            "asimd", "sve") if f in flags]
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    quota = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    if len(quota) == 2 and quota[0].isdigit():
        usable = min(usable, max(1, round(int(quota[0]) / int(quota[1]))))
    return {"model": model or "unknown", "machine": platform.machine(), "features": features,
            "logical": os.cpu_count() or 1, "usable": usable}


def shm() -> dict | None:
    if not os.path.isdir("/dev/shm"):
        return None
    u = shutil.disk_usage("/dev/shm")
    return {"total": u.total, "free": u.free}


def _gb(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 1e9:.1f} GB"


def torch_facts() -> dict:
    import torch
    import torch.distributed as dist
    f = {"version": torch.__version__, "cuda_build": torch.version.cuda,
         "git": (getattr(torch.version, "git_version", "") or "")[:10],
         "cpu_capability": torch.backends.cpu.get_cpu_capability(),
         "capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
         "threads": torch.get_num_threads(), "mkl": torch.backends.mkl.is_available(),
         "openmp": torch.backends.openmp.is_available(), "distributed": dist.is_available(),
         "gloo": dist.is_available() and dist.is_gloo_available(),
         "nccl": dist.is_available() and dist.is_nccl_available(), "nccl_version": None, "gpus": []}
    if f["nccl"]:
        try:
            v = torch.cuda.nccl.version()
            f["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            f["gpus"].append(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, "
                             f"compute {p.major}.{p.minor}")
    return f


def report_text() -> str:
    """The one-screen report."""
    from . import __version__
    t, c, m, s = torch_facts(), cpu(), memory(), shm()
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    L = [f"zerolab {__version__} report: {platform.node() or 'this machine'}",
         "-" * 78,
         f"python ............ {sys.version.split()[0]} ({sys.executable})",
         f"torch ............. {t['version']}"
         + (f" (git {t['git']})" if t["git"] else "")
         + ("" if t["version"].split("+")[0] == TESTED_TORCH else f"  [the course is tested with {TESTED_TORCH}]"),
         f"torch build ....... CUDA {t['cuda_build'] or 'none (CPU build)'}, MKL {yes(t['mkl'])}, "
         f"OpenMP {yes(t['openmp'])}, {t['threads']} intra-op threads",
         f"float kernels ..... {t['cpu_capability']}"
         + (f" (forced by ATEN_CPU_CAPABILITY={t['capability_env']})" if t["capability_env"] else
            " (the widest this CPU allows; ATEN_CPU_CAPABILITY=avx2/default narrows it)"),
         f"torch.distributed . {yes(t['distributed'])}: gloo {yes(t['gloo'])}, NCCL {yes(t['nccl'])}"
         + (f" {t['nccl_version']}" if t["nccl_version"] else ""),
         f"GPUs .............. {len(t['gpus']) or 'none'}"]
    L += [f"                    {g}" for g in t["gpus"]]
    L += [f"CPU ............... {c['model']} ({c['machine']})",
          f"CPU features ...... {', '.join(c['features']) or 'none of avx2/avx512/amx/asimd'}"
          + ("  [AVX-512: wider float kernels, last digits differ from AVX2]" if "avx512f" in c["features"] else ""),
          f"cores ............. {c['logical']} logical, {c['usable']} usable by this process",
          f"memory ............ {_gb(m['total'])} total, {_gb(m['available'])} available"
          + (f" (cgroup limit {_gb(m['cgroup_limit'])})" if m["cgroup_limit"] else ""),
          "shared memory ..... " + ("none (/dev/shm missing)" if s is None else
                                   f"/dev/shm {_gb(s['total'])}, {_gb(s['free'])} free"
                                   + ("  [small: enough for gloo on CPU; NCCL wants docker --shm-size=1g or more]"
                                      if s["total"] < 1e9 else "")),
          "-" * 78, "what the course can run here:"]
    avail = m["available"]
    enough = avail is None or avail >= COURSE_NEEDS_GB * 1e9
    L.append(f"  every chapter .... {'yes' if enough and t['gloo'] else 'NO'}: up to {RANKS_AT_ONCE} ranks at once "
             f"on gloo (CPU), about {COURSE_NEEDS_GB:g} GB free needed"
             + ("" if enough else f", {_gb(avail)} available"))
    if c["usable"] < 2:
        L.append("  note ............. 1 usable core: the chapters run, several times slower than on 2")
    n = len(t["gpus"])
    if n and t["nccl"]:
        L.append(f"  NCCL crews ....... up to {n} ranks, one GPU each (backend='auto' picks NCCL when "
                 "every rank gets a GPU)")
    else:
        L.append("  NCCL crews ....... no (" + ("no CUDA GPU" if not n else "torch has no NCCL")
                 + "): backend='auto' runs every crew on gloo, as the stored chapters were")
    L.append("  learner's check .. zerolab report --preflight")
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
    from .crew import Crew

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
        from .crew import fit_ranks
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


def cjk_fonts() -> list[str]:
    """Font families on this machine that have the chapters' CJK characters."""
    if sys.platform in ("darwin", "win32"):
        return ["(system fonts: macOS and Windows ship CJK fonts)"]
    fc = shutil.which("fc-list")
    if fc:
        try:
            out = subprocess.run([fc, ":charset=" + " ".join(f"{ord(ch):x}" for ch in CJK_SAMPLE[:3]),
                                  "family"], capture_output=True, text=True, timeout=20).stdout
            return sorted({line.split(",")[0].strip() for line in out.splitlines() if line.strip()})
        except (OSError, subprocess.SubprocessError):
            pass
    try:                                    # no fontconfig: ask matplotlib's font list
        from matplotlib import font_manager
        from matplotlib.ft2font import FT2Font
        names = set()
        for f in font_manager.fontManager.ttflist:
            try:
                if FT2Font(f.fname).get_char_index(ord(CJK_SAMPLE[0])):
                    names.add(f.name)
            except Exception:               # noqa: BLE001
                continue
        return sorted(names)
    except Exception:                       # noqa: BLE001
        return []


def check_fonts() -> Check:
    names = cjk_fonts()
    if names:
        return Check("CJK fonts", True, T("{n} famil{ies} ({names}): figures can label in Chinese", n=len(names),
                                          ies="y" if len(names) == 1 else "ies",
                                          names=", ".join(names[:3]) + (", ..." if len(names) > 3 else "")))
    return Check("CJK fonts", True, T("none here: figures of the Chinese edition keep English labels (never boxes); "
                                      "Chinese text (搬家队) in a browser on this machine may show as boxes (a browser "
                                      "elsewhere uses its own fonts); Debian/Ubuntu: apt-get install fonts-noto-cjk"),
                 warn=True)


def check_memory(need_gb: float = COURSE_NEEDS_GB) -> Check:
    m = memory()
    avail = m["available"]
    if avail is None:
        return Check("memory", True, T("free memory unknown on this platform"), warn=True)
    where = f" (cgroup limit {_gb(m['cgroup_limit'])})" if m["cgroup_limit"] else ""
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
    return True
