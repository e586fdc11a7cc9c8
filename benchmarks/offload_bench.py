"""Offload, measured: step time with and without offload, NVMe file throughput against this disk,
and the host optimizer step against DeepSpeed's DeepSpeedCPUAdam.

    python benchmarks/offload_bench.py [--world 2] [--repeats 3] [--steps 20]
        [--nvme-path DIR]                          # a folder on the disk to measure (default: a temp folder)
        [--ds-python /path/to/dsvenv/bin/python]   # adds DeepSpeedCPUAdam (JIT-built by DeepSpeed)

1. Step time (issue 9: offload to cpu within 1.3x of no offload on this machine): an MLP of 8
   Linear(768, 768) layers (4.7M parameters), Adam, 2 ranks (gloo), fp32 and bf16; zerolab stage 2
   without offload, with offload_optimizer cpu, with nvme; stage 3 without offload, with
   offload_optimizer + offload_param cpu. Interleaved repeats; each entry is the median over repeats
   of (its median step time / the same repeat's no-offload median), so a shared machine's drift cancels.
2. NVMe throughput (target: at least 70% of the disk): zerolab's NvmeStore writes and reads a 256 MiB
   state in 16 MiB tiles on its I/O threads; the baseline is one 256 MiB file written and read
   sequentially with large buffers. Both writes are timed to fsync, both reads start with the
   files evicted from the page cache (posix_fadvise DONTNEED), so both measure the disk.
3. Host optimizer: torch's Adam(W) on 4M fp32 elements in its three forms (for-loop, foreach,
   fused) and DeepSpeedCPUAdam (when --ds-python is given), median step seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn

import zerolab

HERE = os.path.dirname(os.path.abspath(__file__))


def make_mlp(width=768, layers=8) -> nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods)


def variants(nvme):
    return {
        "s2": {"stage": 2},
        "s2 opt=cpu": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
        "s2 opt=nvme": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": nvme,
                                                          "pipeline_read": True, "pipeline_write": True},
                        "sub_group_size": 1_000_000},
        "s3": {"stage": 3},
        "s3 opt+param=cpu": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    }


def step_times(precision, steps, nvme):
    info = zerolab.rank_info()
    torch.manual_seed(1 + info.rank)
    x = torch.randn(32, 768)
    out = {}
    for name, zero in variants(nvme).items():
        cfg = {"train_micro_batch_size_per_gpu": 32, "train_batch_size": 32 * info.world_size,
               "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "gradient_clipping": 1.0,
               "zero_optimization": {"reduce_bucket_size": 2_000_000, **zero}}
        if precision != "fp32":
            cfg[precision] = {"enabled": True}
        engine = zerolab.initialize(make_mlp(), cfg)
        xb = x.to(engine.dtype)

        def step():
            loss = engine(xb).float().square().mean()
            engine.backward(loss)
            engine.step()
        for _ in range(3):
            step()
        times = []
        for _ in range(steps):
            dist.barrier()
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        mark = engine.timeline.mark()
        step()
        summary = engine.timeline.since(mark).summary()
        out[name] = {"median_s": statistics.median(times), "host_step_s": summary["host_step"],
                     "nvme_io_s": summary["nvme_io"]}
        engine.close()
    return out


def _sync_and_evict(paths):
    """fsync each file (its bytes are on the disk) and drop it from the page cache, so that the
    next read comes from the disk: both sides of the comparison measure the disk, not memory."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def nvme_throughput(folder, total=256 << 20, tile=16 << 20, rounds=3):
    """Best of ``rounds`` (alternating) for each of: one sequential file (the disk's bandwidth)
    and zerolab's NvmeStore (tiles on its I/O threads). Writes are timed until fsync returns;
    reads start from an evicted page cache."""
    from zerolab.offload.nvme import NvmeStore
    n = tile // 4
    tiles = [torch.randn(n) for _ in range(total // tile)]
    blob = memoryview(torch.cat(tiles).numpy()).cast("B")
    back = bytearray(total)
    outs = [torch.empty(n) for _ in tiles]
    best = {"disk_write": 0.0, "disk_read": 0.0, "zerolab_write": 0.0, "zerolab_read": 0.0}
    ok = True
    for _ in range(rounds):
        path = os.path.join(folder, "baseline.bin")
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            for a in range(0, len(blob), 16 << 20):
                f.write(blob[a:a + (16 << 20)])
            os.fsync(f.fileno())
        best["disk_write"] = max(best["disk_write"], total / (time.perf_counter() - t0))
        _sync_and_evict([path])
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            view = memoryview(back)
            got = 0
            while got < total:
                got += f.readinto(view[got:])
        best["disk_read"] = max(best["disk_read"], total / (time.perf_counter() - t0))
        os.remove(path)

        store = NvmeStore(folder, 0, total)
        t0 = time.perf_counter()
        for fut in [store.write(j, "master", t) for j, t in enumerate(tiles)]:
            fut.result()
        files = list(store.sizes)
        for p in files:                      # fsync: the bytes are on the disk
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        best["zerolab_write"] = max(best["zerolab_write"], total / (time.perf_counter() - t0))
        _sync_and_evict(files)
        t0 = time.perf_counter()
        for fut in [store.read(j, "master", o) for j, o in enumerate(outs)]:
            fut.result()
        best["zerolab_read"] = max(best["zerolab_read"], total / (time.perf_counter() - t0))
        ok = ok and all(torch.equal(a, b) for a, b in zip(tiles, outs))
        store.close()
    return {**{f"{k}_GBps": v / 1e9 for k, v in best.items()},
            "write_ratio": best["zerolab_write"] / best["disk_write"],
            "read_ratio": best["zerolab_read"] / best["disk_read"], "round_trip_exact": ok}


def torch_adam(n=4_000_000, steps=12):
    out = {}
    for form, kw in (("for-loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        torch.manual_seed(0)
        p = nn.Parameter(torch.randn(n))
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
        times = []
        for _ in range(steps):
            p.grad = torch.randn(n)
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        out[form] = statistics.median(times[2:])
    return out


def ds_cpu_adam(ds_python, n=4_000_000):
    code = f"""
import time, statistics, torch
from deepspeed.ops.adam import DeepSpeedCPUAdam
torch.manual_seed(0)
p = torch.nn.Parameter(torch.randn({n}))
opt = DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
ts = []
for i in range(12):
    p.grad = torch.randn({n})
    t = time.perf_counter(); opt.step(); ts.append(time.perf_counter() - t)
print("RESULT", statistics.median(ts[2:]))
"""
    r = subprocess.run([ds_python, "-c", code], capture_output=True, text=True, timeout=1200,
                       env={**os.environ, "DS_ACCELERATOR": "cpu"})
    for line in r.stdout.splitlines():
        if line.startswith("RESULT"):
            return float(line.split()[1])
    print("DeepSpeedCPUAdam failed:", (r.stderr or r.stdout)[-800:])
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--nvme-path", default=None)
    ap.add_argument("--ds-python", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "offload_bench.json"))
    args = ap.parse_args(argv)
    folder = args.nvme_path or tempfile.mkdtemp(prefix="zerolab-offload-bench-")
    result = {"world": args.world, "torch": torch.__version__}
    for precision in ("fp32", "bf16"):
        ratios: dict[str, list[float]] = {}
        with zerolab.Crew(args.world, threads=1) as crew:
            for _ in range(args.repeats):
                res = crew.run(step_times, precision, args.steps, folder)[0]
                for name, r in res.items():
                    base = res["s3" if name.startswith("s3") else "s2"]["median_s"]
                    ratios.setdefault(name, []).append(r["median_s"] / base)
        result[f"step_time_ratio_{precision}"] = {k: statistics.median(v) for k, v in ratios.items()}
        result[f"last_repeat_{precision}"] = res
    result["nvme"] = nvme_throughput(folder)
    result["host_adam_s"] = torch_adam()
    if args.ds_python:
        result["host_adam_s"]["DeepSpeedCPUAdam"] = ds_cpu_adam(args.ds_python)
    if not args.nvme_path:
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
