"""DeepSpeed 0.19.8's step time on the benchmark model, beside torch DDP in the same processes.

Run by benchmarks/step_time.py --ds-python (a separate venv with DeepSpeed: see
record_loss_scaler_traces.py for how to make one); it starts itself under torchrun:

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --nproc_per_node 2 \\
        benchmarks/ds_reference/ds_step_time.py --rounds 40 --steps 5 --out result.json

The candidates take turns (step_models.round_robin). Prints nothing; rank 0 writes
{"torch DDP": [seconds per round], "DeepSpeed stage 1": [...], ...} (medians of each round).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from step_models import ResMLP, round_robin  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="steps per candidate per round")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", required=True)
    a, _ = ap.parse_known_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1 + rank)
    x, y = torch.randn(a.batch, ResMLP.WIDTH), torch.randn(a.batch, ResMLP.WIDTH)
    steps = {}
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(ResMLP())
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-4)

    def ddp_step():
        opt.zero_grad(set_to_none=True)
        ((ddp(x) - y) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
    steps["torch DDP"] = ddp_step
    engines = []
    for stage in (1, 2, 3):
        cfg = {"train_batch_size": a.batch * world, "gradient_clipping": 1.0,
               "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
               "zero_optimization": {"stage": stage}}
        model = ResMLP()
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        engines.append(engine)

        def ds_step(engine=engine):
            engine.backward(((engine(x) - y) ** 2).mean())
            engine.step()
        steps[f"DeepSpeed stage {stage}"] = ds_step
    res = round_robin(steps, a.rounds, a.steps, torch.device("cpu"))
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
