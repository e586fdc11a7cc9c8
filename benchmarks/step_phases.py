"""Where a step's time goes at stages 0-2 against torch DDP, and how much one collective varies.

The model and batch of ``step_time.py`` (ResMLP, 325,464 fp32 parameters, Adam, clipping 1.0,
batch 32 per rank, 2 ranks). Per variant, the median over steps (2 interleaved repeats) of:
forward, backward (DDP's all-reduce overlaps it), the boundary reduce (stages 0-1), the
optimizer step's own collectives and checks ("stats+": the overflow / norm all-reduce and the
rest of engine.step), the optimizer step (home.step) and publish (the parameter all-gather of
stages 1-2). Beside them the floors of stage 0 and stages 1-2 (``step_models.hand_zero``:
DeepSpeed's calls written by hand, no engine), timed phase by phase under the same names
("stats+": the norm's all-reduce and the clipping). Then the spread of one 1.3 MB all-reduce over 20 calls x 3 repeats:
``dist.all_reduce`` beside zerolab's ``Comm.all_reduce`` (the same call plus the ledger).

Everything in a run, DDP and zerolab alike, goes through one backend, ``--backend``: gloo (TCP
over loopback and its worker threads) or shm (zerolab's shared-memory backend ``zshm``,
zerolab/crew/shm.py). Run it once per backend to compare the transports.

    python benchmarks/step_phases.py [--backend gloo|shm] [--steps 40] [--repeats 2] [--calls 20]
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


def _timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        wrapper.last = time.perf_counter() - t0
        return out
    wrapper.last = 0.0
    return wrapper


# hand_zero's phases under the names of zerolab's columns
_FLOOR_PHASES = {"forward": "forward", "backward": "backward", "reduce": "reduce", "norm": "stats+",
                 "step": "home.step", "publish": "publish"}


def phases(variant, steps: int = 40) -> dict:
    torch.manual_seed(1 + zerolab.rank())
    x, y = torch.randn(32, ResMLP.WIDTH), torch.randn(32, ResMLP.WIDTH)
    loss_fn = nn.MSELoss()
    t = {}
    if variant == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(ResMLP())
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        for _ in range(steps):
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            t3 = time.perf_counter()
            for k, v in (("forward", t1 - t0), ("backward", t2 - t1), ("step", t3 - t2), ("total", t3 - t0)):
                t.setdefault(k, []).append(v)
    elif isinstance(variant, str):                # "floor N": DeepSpeed's calls by hand, no engine
        marks = []
        step = hand_zero(x, y, int(variant[-1]), tick=lambda phase: marks.append((phase, time.perf_counter())))
        for _ in range(steps):
            dist.barrier()
            marks.clear()
            t0 = prev = time.perf_counter()
            step()
            row = {"publish": 0.0}
            for phase, at in marks:
                row[_FLOOR_PHASES[phase]] = at - prev
                prev = at
            row["total"] = prev - t0
            for k in ("forward", "backward", "reduce", "home.step", "publish", "stats+", "total"):
                t.setdefault(k, []).append(row[k])
    else:
        engine = zerolab.initialize(ResMLP(), {"train_batch_size": 64, "gradient_clipping": 1.0,
                                              "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
                                              "zero_optimization": {"stage": variant}})
        st = engine.stage
        st.reduce_grads, st.publish, st.home.step = (_timed(st.reduce_grads), _timed(st.publish),
                                                     _timed(st.home.step))
        for _ in range(steps):
            dist.barrier()
            t0 = time.perf_counter()
            loss = loss_fn(engine(x), y)
            t1 = time.perf_counter()
            engine.backward(loss)
            t2 = time.perf_counter()
            engine.step()
            t3 = time.perf_counter()
            parts = {"reduce": st.reduce_grads.last, "home.step": st.home.step.last, "publish": st.publish.last}
            parts["stats+"] = t3 - t2 - sum(parts.values())
            for k, v in (("forward", t1 - t0), ("backward", t2 - t1), *parts.items(), ("total", t3 - t0)):
                t.setdefault(k, []).append(v)
        engine.close()
    return {k: statistics.median(v[5:] or v) * 1e3 for k, v in t.items()}


def all_reduce_spread(repeats: int = 3, calls: int = 20) -> dict:
    from zerolab.comm import Comm
    comm, buf = Comm(), torch.randn(325_464)
    out = {}
    for _ in range(repeats):
        for name, fn in (("dist.all_reduce", lambda: dist.all_reduce(buf)),
                         ("Comm.all_reduce", lambda: comm.all_reduce(buf, tag="probe"))):
            times = []
            for _ in range(calls):
                buf.normal_()
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            out.setdefault(name, []).append(statistics.median(times[3:] or times) * 1e3)
    return out


def main(steps: int = 40, repeats: int = 2, calls: int = 20) -> dict:
    runs: dict = {}
    for _ in range(repeats):
        for v in ("ddp", "floor 0", 0, "floor 1", 1, 2):
            runs.setdefault(v, []).append(phases(v, steps))
    return {"phases": {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in runs.items()},
            "all_reduce": all_reduce_spread(3, calls)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("gloo", "shm"), default="gloo",
                    help="the transport of DDP and zerolab alike (shm: zerolab's zshm)")
    ap.add_argument("--steps", type=int, default=40, help="steps per variant (the first 5 are warm-up)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--calls", type=int, default=20, help="all-reduce calls per repeat (the first 3 are warm-up)")
    a = ap.parse_args()
    res = zerolab.launch(main, 2, a.steps, a.repeats, a.calls, backend=a.backend, echo=False)[0]
    backend = zerolab.crew.resolve_backend(a.backend, 2)
    print(f"2 ranks, {backend}, ResMLP 325,464 params; ms per step, rank 0 (median of steps, "
          f"of {a.repeats} repeats)")
    for v, ph in res["phases"].items():
        name = ("torch DDP" if v == "ddp" else f"{v}, no engine" if isinstance(v, str)
                else f"zerolab stage {v}")
        print(f"  {name:20}" + "  ".join(f"{k} {ms:.2f}" for k, ms in ph.items()))
    print(f"one 1.3 MB all-reduce over {backend}, median ms of {a.calls} calls, in 3 repeats:")
    for name, ms in res["all_reduce"].items():
        print(f"  {name:16}" + "  ".join(f"{m:.2f}" for m in ms))
