"""The floor of a ZeRO-1 step on one transport: torch DDP and a hand-written ZeRO-1 step, both
over the backend this run asks for (``--backend gloo`` or ``--backend shm``, zerolab's
shared-memory ``zshm`` backend), so that the two sides always share a transport.

Two measurements on 2 ranks, each printed as percentiles over many samples:

1. **One round trip right after computing.** Each rank computes for 1 ms (a wall-clock loop,
   so both finish together), then makes one call through the process group: a 16-byte
   all-reduce (a ZeRO step's gradient-norm call) or a 0.65 MB all-gather (the parameter
   all-gather of ResMLP).
2. **A hand-written ZeRO-1 step with no zerolab engine in it** (ResMLP of step_time.py, fp32
   Adam, clipping 1.0; ``step_models.hand_zero``, DeepSpeed's calls): backward into one flat
   gradient, its all-reduce, the 4-byte norm all-reduce, Adam on this rank's shard, all-gather of
   the parameters: three calls in a row where torch DDP makes one, beside torch DDP over the same
   backend, taking turns step by step.

If the hand-written step is already far above DDP on a transport, no engine on that transport
can meet a "ZeRO-1 within 1.2x of DDP" target on that machine: the calls, not the engine, are
the cost. Run it once per backend to compare the transports.

    python benchmarks/transport_floor.py [--backend gloo|shm] [--samples 200]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import zerolab

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import ResMLP, hand_zero  # noqa: E402


def percentiles(xs, qs=(10, 50, 75, 90)) -> dict:
    xs = sorted(xs)
    return {q: xs[min(len(xs) - 1, int(q / 100 * len(xs)))] for q in qs}


def round_trips(samples: int) -> dict:
    n, backend = dist.get_world_size(), dist.get_backend()
    a = torch.randn(200, 200)
    tiny = torch.zeros(2, dtype=torch.float64)
    part, full = torch.randn(162_732), torch.empty(162_732 * n)

    def compute_1ms():
        t = time.perf_counter()
        while time.perf_counter() - t < 1e-3:
            a @ a
    calls = {f"16 B all-reduce, {backend}": lambda: dist.all_reduce(tiny),
             f"0.65 MB all-gather, {backend}": lambda: dist.all_gather_into_tensor(full, part)}
    out = {k: [] for k in calls}
    for _ in range(samples):
        for name, call in calls.items():
            dist.barrier()
            compute_1ms()
            t0 = time.perf_counter()
            call()
            out[name].append(time.perf_counter() - t0)
    return out


def steps(samples: int) -> dict:
    backend = dist.get_backend()
    torch.manual_seed(1 + dist.get_rank())
    x, y = torch.randn(32, ResMLP.WIDTH), torch.randn(32, ResMLP.WIDTH)
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(ResMLP())
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()

    def ddp_step():
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
    candidates = {f"torch DDP, {backend}": ddp_step, f"hand ZeRO-1, {backend}": hand_zero(x, y, 1)}
    for step in candidates.values():
        for _ in range(5):
            step()
    out = {k: [] for k in candidates}
    for _ in range(samples):
        for name, step in candidates.items():
            dist.barrier()
            t0 = time.perf_counter()
            step()
            out[name].append(time.perf_counter() - t0)
    return out


def main_on_ranks(samples: int):
    return round_trips(samples), steps(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--backend", choices=("gloo", "shm"), default="gloo",
                    help="the transport of both sides: gloo, or zerolab's shared-memory zshm")
    a = ap.parse_args()
    trips, step_times = zerolab.launch(main_on_ranks, 2, a.samples, backend=a.backend, echo=False,
                                       timeout=1800)[0]
    backend = zerolab.crew.resolve_backend(a.backend, 2)
    print(f"2 ranks over {backend}, rank 0, {a.samples} samples each, ms")
    print("1. one call right after 1 ms of computation")
    for name, ts in trips.items():
        p = percentiles(ts)
        print(f"   {name:28}" + "  ".join(f"p{q} {v * 1e3:6.3f}" for q, v in p.items())
              + f"  mean {statistics.mean(ts) * 1e3:6.3f}")
    print("2. one training step (ResMLP, 325,464 params, Adam, clipping 1.0), candidates in turns")
    ddp = statistics.median(step_times[f"torch DDP, {backend}"])
    for name, ts in step_times.items():
        p = percentiles(ts)
        print(f"   {name:28}" + "  ".join(f"p{q} {v * 1e3:6.2f}" for q, v in p.items())
              + f"  median x DDP {statistics.median(ts) / ddp:5.2f}")


if __name__ == "__main__":
    main()
