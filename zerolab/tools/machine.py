"""This machine's facts as the course needs them: memory (capped by a cgroup), the CPU and its SIMD
features, /dev/shm, the torch build, CJK fonts. ``zerolab report`` (:mod:`zerolab.tools.report`) prints
them and judges them.

Nothing here needs psutil or a GPU: memory and CPU facts come from /proc and the cgroup files
where they exist (Linux, containers, JupyterHub), else from what the platform offers.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

__all__ = ["memory", "cpu", "shm", "torch_facts", "cjk_fonts", "CJK_SAMPLE"]

CJK_SAMPLE = "搬家队显存四巨头"  # characters of the chapters' subtitles


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
