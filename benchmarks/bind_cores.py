"""Ranks bound to cores or not: the CPU and the time of gloo collectives and of a stage-3 run.

``zerolab.Crew`` binds each rank to one core when the ranks outnumber the cores (``bind_cores``,
zerolab/crew/crew.py). This measures why, on this machine, both ways in turns (``--repeats``
rounds, the order alternating), medians:

* 1,000 all-gathers of 16 bytes on 2, 3 and 4 ranks: CPU seconds per call summed over the ranks
  (``time.process_time`` in each rank: the gloo threads included), and wall time per call;
* chapter 13's stage-3 run (its GPT, bf16, 4 ranks as 2 virtual nodes, the exact run and qwZ,
  20 steps each: ``zerolab.course.chapters.ch13.curves``): CPU summed over the ranks, and wall.

    python benchmarks/bind_cores.py [--repeats 3] [--calls 1000] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

import zerolab


def _calls(n: int) -> tuple[float, float]:
    x = torch.zeros(2, dtype=torch.int64)
    out = torch.empty(2 * zerolab.world_size(), dtype=torch.int64)
    dist.barrier()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        dist.all_gather_into_tensor(out, x)
    return time.process_time() - c0, time.perf_counter() - w0


def _stage3(steps: int) -> tuple[float, float]:
    from zerolab.course.chapters import ch13
    dist.barrier()
    c0, w0 = time.process_time(), time.perf_counter()
    ch13.curves({"exact": {}, "qwZ": {"zero_quantized_weights": True}}, steps)
    return time.process_time() - c0, time.perf_counter() - w0


def _measure(world: int, bind: bool, fn, *args, nodes: int = 1) -> tuple[float, float]:
    with zerolab.Crew(world, nodes=nodes, echo=False, bind_cores=bind, timeout=600) as crew:
        assert crew.cores[0] is not None if bind else crew.cores == [None] * world
        res = crew.run(fn, *args)
    return sum(c for c, _ in res), max(w for _, w in res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    rows: dict[str, dict[bool, list]] = {}
    for r in range(a.repeats):
        for bind in ((False, True) if r % 2 == 0 else (True, False)):
            for world in (2, 3, 4):
                rows.setdefault(f"{world} ranks, {a.calls:,} all-gathers of 16 B", {}).setdefault(bind, []).append(
                    _measure(world, bind, _calls, a.calls))
            rows.setdefault(f"chapter 13 stage 3, 4 ranks, 2 x {a.steps} steps", {}).setdefault(bind, []).append(
                _measure(4, bind, _stage3, a.steps, nodes=2))
    print(f"{cores} usable cores, gloo; medians of {a.repeats} repeats, bound and unbound in turns")
    print(f"{'':48}{'unbound CPU s':>14}{'wall s':>9}{'bound CPU s':>13}{'wall s':>9}{'CPU':>8}{'wall':>8}")
    for name, by in rows.items():
        cu, wu = (statistics.median(x[i] for x in by[False]) for i in (0, 1))
        cb, wb = (statistics.median(x[i] for x in by[True]) for i in (0, 1))
        print(f"{name:48}{cu:>14.2f}{wu:>9.2f}{cb:>13.2f}{wb:>9.2f}{cb / cu:>7.2f}x{wb / wu:>7.2f}x")


if __name__ == "__main__":
    main()
