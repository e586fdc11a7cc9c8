"""What checking the NVMe swap files costs (issue 37): every swap file gets one checksum per 1 MiB
block when written and is checked when read back (``zerolab/offload/nvme.py``, ``CHECKSUM``).

    python benchmarks/nvme_checksum.py [--world 2] [--repeats 5] [--steps 12] [--nvme-path DIR]

1. Throughput of each checksum on a 16 MiB tile (best of 7, one thread): ``sum64`` (the sum of the
   block's 8-byte words mod 2**64, numpy), ``crc32`` (zlib), against a plain copy of the bytes.
2. The NVMe step: ``offload_bench.py``'s "s2 opt=nvme" (an MLP of 8 Linear(768, 768), 4.7M
   parameters, Adam, fp32 masters and moments on NVMe, pipelined reads and writes, 2 ranks on gloo),
   median step time with the files checked by ``sum64``, by ``crc32`` and not at all; the three are
   interleaved in every repeat (same ranks, same folder) and each ratio is the median over repeats
   of (its median step / the same repeat's unchecked median), so a shared machine's drift cancels.

Writes ``benchmarks/results/nvme_checksum.json`` and a one-line summary ``nvme_checksum.txt``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist

import zerolab

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from offload_bench import make_mlp, variants  # noqa: E402

KINDS = ("none", "sum64", "crc32")


def throughput(tile=16 << 20, rounds=7) -> dict:
    from zerolab.offload.nvme import block_sums
    t = torch.randn(tile // 4)
    view = memoryview(t.view(torch.uint8).numpy())
    fns = {"copy": lambda: bytes(view), "sum64": lambda: block_sums(view, 1 << 20, "sum64"),
           "crc32": lambda: block_sums(view, 1 << 20, "crc32"), "crc32 (one call)": lambda: zlib.crc32(view)}
    out = {}
    for name, fn in fns.items():
        fn()
        best = min(_timed(fn) for _ in range(rounds))
        out[name] = tile / best / 1e9
    return {f"{k}_GBps": round(v, 2) for k, v in out.items()}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_times(steps, nvme) -> dict:
    """On every rank: the median step of "s2 opt=nvme" with each kind of check, one after the other."""
    from zerolab.offload import nvme as nv
    info = zerolab.rank_info()
    torch.manual_seed(1 + info.rank)
    x = torch.randn(32, 768)
    zero = variants(nvme)["s2 opt=nvme"]
    cfg = {"train_micro_batch_size_per_gpu": 32, "train_batch_size": 32 * info.world_size,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "gradient_clipping": 1.0,
           "zero_optimization": {"reduce_bucket_size": 2_000_000, **zero}}
    out = {}
    for kind in KINDS:
        nv.CHECKSUM = None if kind == "none" else kind
        engine = zerolab.initialize(make_mlp(), cfg)
        assert engine.stage.home.nvme.checksum == nv.CHECKSUM

        def step():
            loss = engine(x).float().square().mean()
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
        out[kind] = {"median_s": statistics.median(times),
                     "swap_bytes": engine.stage.home.nvme.bytes_on_disk()}
        engine.close()
    nv.CHECKSUM = "sum64"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--nvme-path", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "nvme_checksum.json"))
    args = ap.parse_args(argv)
    folder = args.nvme_path or tempfile.mkdtemp(prefix="zerolab-checksum-bench-")
    result = {"world": args.world, "torch": torch.__version__, "numpy": np.__version__,
              "zlib": zlib.ZLIB_RUNTIME_VERSION, "cpus": os.cpu_count(), "throughput": throughput()}
    ratios: dict[str, list[float]] = {}
    medians: dict[str, list[float]] = {}
    with zerolab.Crew(args.world, threads=1) as crew:
        for _ in range(args.repeats):
            res = crew.run(step_times, args.steps, folder)[0]
            for kind, r in res.items():
                ratios.setdefault(kind, []).append(r["median_s"] / res["none"]["median_s"])
                medians.setdefault(kind, []).append(r["median_s"])
    result["step_s_median"] = {k: statistics.median(v) for k, v in medians.items()}
    result["step_ratio_vs_unchecked"] = {k: statistics.median(v) for k, v in ratios.items()}
    result["ratios_per_repeat"] = ratios
    result["swap_bytes_per_rank"] = res["none"]["swap_bytes"]
    if not args.nvme_path:
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    r, t = result["step_ratio_vs_unchecked"], result["throughput"]
    line = (f"NVMe step (s2 opt=nvme, 4.7M params, {args.world} ranks, median of {args.repeats} repeats x "
            f"{args.steps} steps): checked by sum64 {r['sum64']:.3f}x, by crc32 {r['crc32']:.3f}x the unchecked "
            f"step ({result['step_s_median']['none'] * 1e3:.1f} ms); checksum alone on 16 MiB: sum64 "
            f"{t['sum64_GBps']:.1f} GB/s, crc32 {t['crc32_GBps']:.2f} GB/s, a copy {t['copy_GBps']:.1f} GB/s")
    with open(os.path.splitext(args.out)[0] + ".txt", "w") as f:
        f.write(line + "\n")
    print(json.dumps(result, indent=2))
    print(line)


if __name__ == "__main__":
    main()
