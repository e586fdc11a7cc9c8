"""How much the crew costs, and how the from-scratch ring compares with the library.

    python benchmarks/crew_bench.py            # about 30 s on 2 cores
    python benchmarks/crew_bench.py --reps 20 --mb 10 --worlds 2 4

Measures:
  1. crew start-up: the first ``Crew(N)`` in a fresh Python process (it starts the forkserver,
     which imports torch once), a second ``Crew(N)`` in the same process, and a reused
     crew's ``run`` of a function that does nothing;
  2. a 10 MB (fp32) all-reduce at 2 and 4 ranks: ``dist.all_reduce`` against
     ``zerolab.comm.ring_all_reduce`` (send/recv in Python, step by step).

Every figure is a median over ``--reps`` repetitions. A collective's time is the slowest
rank's time for that repetition (the call is done when the last rank is done). Timings on a
shared machine vary by tens of percent between runs; compare ratios, not single numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import zerolab
from zerolab.comm import ring_all_reduce

FIRST_START = """
import time, zerolab
t0 = time.perf_counter()
crew = zerolab.Crew({n})
print(time.perf_counter() - t0)
crew.close()
"""


def first_start_s(n: int) -> float:
    """Seconds for the first Crew(n) in a fresh interpreter (torch already imported there)."""
    out = subprocess.run([sys.executable, "-c", FIRST_START.format(n=n)], capture_output=True,
                         text=True, check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def _noop():
    return None


def _all_reduce_times(numel: int, reps: int) -> dict[str, list[float]]:
    """On every rank: time reps of the library and the ring all-reduce of ``numel`` fp32."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(dist.get_rank()))
    times: dict[str, list[float]] = {"library": [], "ring": []}
    for name, fn in [("library", lambda t: dist.all_reduce(t)), ("ring", ring_all_reduce)]:
        fn(x.clone())                                   # warm-up: connections, allocations
        for _ in range(reps):
            y = x.clone()
            dist.barrier()                              # start together
            t0 = time.perf_counter()
            fn(y)
            times[name].append(time.perf_counter() - t0)
    # the two must agree, or the timing means nothing
    lib, ring = x.clone(), ring_all_reduce(x)
    dist.all_reduce(lib)
    assert torch.allclose(lib, ring, rtol=1e-4, atol=1e-4)
    return times


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--mb", type=float, default=10.0, help="all-reduce size in MB (10^6 bytes)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    numel = int(args.mb * 1e6) // 4

    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores, "
          f"backend {zerolab.crew.resolve_backend('auto', max(args.worlds))}; medians of {args.reps} reps\n")

    print("crew start-up")
    print(f"{'ranks':>5} {'first Crew() in a fresh process':>32} {'next Crew()':>12} "
          f"{'run(no-op) on a reused crew':>28}")
    for n in args.worlds:
        first = first_start_s(n)
        starts = []
        for _ in range(3):
            t0 = time.perf_counter()
            crew = zerolab.Crew(n, echo=False)
            starts.append(time.perf_counter() - t0)
            if _ < 2:
                crew.close()
        runs = []
        for _ in range(max(args.reps, 20)):
            t0 = time.perf_counter()
            crew.run(_noop)
            runs.append(time.perf_counter() - t0)
        crew.close()
        print(f"{n:>5} {first:>30.2f} s {statistics.median(starts):>10.3f} s "
              f"{statistics.median(runs) * 1e3:>25.2f} ms")

    print(f"\nall-reduce of {args.mb:g} MB ({numel} fp32 elements)")
    print(f"{'ranks':>5} {'dist.all_reduce':>16} {'ring_all_reduce':>16} {'ring/library':>13} "
          f"{'library bus GB/s':>17}")
    for n in args.worlds:
        with zerolab.Crew(n, echo=False, timeout=600) as crew:
            per_rank = crew.run(_all_reduce_times, numel, args.reps)
        row = {}
        for name in ("library", "ring"):
            slowest = [max(r[name][i] for r in per_rank) for i in range(args.reps)]
            row[name] = statistics.median(slowest)
        bus = 2 * (n - 1) / n * numel * 4 / row["library"] / 1e9
        print(f"{n:>5} {row['library'] * 1e3:>13.1f} ms {row['ring'] * 1e3:>13.1f} ms "
              f"{row['ring'] / row['library']:>12.2f}x {bus:>17.2f}")


if __name__ == "__main__":
    main()
