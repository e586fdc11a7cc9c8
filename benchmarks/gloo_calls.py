"""What one collective call costs over gloo here, against the bytes it moves: the numbers behind
the README's note on stage 3's step time (issue 34).

Stage 3 with DeepSpeed's default persistence threshold keeps every parameter of the step-time
model (``step_models.ResMLP``: 4 weights, 4 biases, 6 LayerNorm vectors) gathered, and refreshes
each after the step in an all-gather of its own, all issued before any is waited on
(``_allgather_params_coalesced``). This times, on 2 ranks, those 14 all-gathers issued one after
another, the same 14 issued together and then waited on, one all-gather of the same bytes in one
buffer, and torch DDP's one all-reduce of the whole model; medians of ``--repeats``, each between
barriers.

    python benchmarks/gloo_calls.py [--repeats 60] [--backend gloo]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import zerolab

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import ResMLP  # noqa: E402


def bench(repeats: int) -> dict:
    world = dist.get_world_size()
    shards = [torch.randn(-(-p.numel() // world)) for p in ResMLP().parameters()]
    outs = [torch.empty(world * s.numel()) for s in shards]
    whole = torch.randn(sum(p.numel() for p in ResMLP().parameters()))
    one_in, one_out = torch.cat(shards), torch.empty(world * sum(s.numel() for s in shards))

    def one_by_one():
        for o, s in zip(outs, shards):
            dist.all_gather_into_tensor(o, s)

    def issued_together():
        for w in [dist.all_gather_into_tensor(o, s, async_op=True) for o, s in zip(outs, shards)]:
            w.wait()

    cases = {f"{len(shards)} all-gathers, one after another": one_by_one,
             f"{len(shards)} all-gathers, issued together": issued_together,
             "1 all-gather of the same bytes": lambda: dist.all_gather_into_tensor(one_out, one_in),
             "1 all-reduce of the whole model (DDP's bucket)": lambda: dist.all_reduce(whole)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, fn in cases.items():           # in turns, so that slow spells fall on all alike
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--backend", default="gloo")
    a = ap.parse_args()
    ms = zerolab.launch(bench, 2, a.repeats, backend=a.backend, echo=False)[0]
    psi = sum(p.numel() for p in ResMLP().parameters())
    print(f"2 ranks over {a.backend}, ResMLP's {len(list(ResMLP().parameters()))} parameters ({psi:,} fp32), "
          f"medians of {a.repeats}, each between barriers")
    for name, t in ms.items():
        print(f"  {name:<48}{t:7.2f} ms")


if __name__ == "__main__":
    main()
