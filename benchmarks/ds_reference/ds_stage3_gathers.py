"""DeepSpeed 0.19.8's stage-3 parameter all-gathers per step, at two reuse distances.

The model of ``benchmarks/stage3_gathers.py`` (six Linear(64, 64), biases persistent, prefetch
off, 2 ranks); run in a DeepSpeed venv (see record_loss_scaler_traces.py):

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --standalone \\
        --nproc_per_node 2 benchmarks/ds_reference/ds_stage3_gathers.py

Rank 0 prints, for stage3_max_reuse_distance 0 and 10^9, the (calls, elements) of every
all-gather in each of 5 steps, counted by wrapping torch.distributed's all-gather functions.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

COUNT = {"calls": 0, "numel": 0}


def _wrap(name: str) -> None:
    orig = getattr(dist, name, None)
    if orig is None:
        return

    def counted(*args, _orig=orig, **kwargs):
        out = args[0] if args else kwargs.get("output_tensor", kwargs.get("tensor_list"))
        COUNT["calls"] += 1
        COUNT["numel"] += out.numel() if isinstance(out, torch.Tensor) else sum(t.numel() for t in out)
        return _orig(*args, **kwargs)
    setattr(dist, name, counted)


for _name in ("all_gather_into_tensor", "_all_gather_base", "all_gather"):
    _wrap(_name)

import deepspeed  # noqa: E402  (after the wrapping, so that it binds the counted functions)


def per_step(distance: int, steps: int = 5) -> list[tuple[int, int]]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    cfg = {"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 64,
                                 "stage3_max_reuse_distance": distance, "stage3_prefetch_bucket_size": 0}}
    engine, *_ = deepspeed.initialize(model=model, config=cfg, model_parameters=model.parameters())
    x = torch.randn(4, 64)
    out = []
    for _ in range(steps):
        COUNT.update(calls=0, numel=0)
        engine.backward(engine(x).pow(2).mean())
        engine.step()
        out.append((COUNT["calls"], COUNT["numel"]))
    return out


if __name__ == "__main__":
    rows = {d: per_step(d) for d in (0, 10 ** 9)}
    if dist.get_rank() == 0:
        for d, steps in rows.items():
            print(f"DeepSpeed stage3_max_reuse_distance {d:,}: (calls, elements) per step {steps}")
