"""Record what DeepSpeed 0.19.8 itself prints, for the course to read beside ``zerolab report``:
its throughput log (``steps_per_print``, ``wall_clock_breakdown``) on a 2-rank stage-2 run.

Needs a venv with DeepSpeed 0.19.8 (CPU build: ``DS_BUILD_OPS=0 pip install deepspeed==0.19.8``
after torch 2.13.0). Run from the repository root:

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --nproc_per_node 2 \\
        benchmarks/ds_reference/record_ds_logs.py > log.txt 2>&1

``benchmarks/results/recorded/`` keeps one such log and ``ds_report``'s output, each with the
machine and date it was recorded on (see its README).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from step_models import ResMLP  # noqa: E402


def main():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import logging

    import deepspeed
    from deepspeed.utils import logger
    logger.setLevel(logging.INFO)          # 0.19.8 logs its progress lines at INFO, below its default level
    for handler in logger.handlers:
        handler.setLevel(logging.INFO)
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    cfg = {"train_micro_batch_size_per_gpu": 32, "steps_per_print": 10, "wall_clock_breakdown": True,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
           "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}}
    engine, *_ = deepspeed.initialize(model=ResMLP(), config=cfg)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(32, ResMLP.WIDTH), torch.randn(32, ResMLP.WIDTH)
    for _ in range(30):
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main()
