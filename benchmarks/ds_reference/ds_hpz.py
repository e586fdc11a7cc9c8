"""DeepSpeed 0.19.8's hpZ (zero_hpz_partition_size) on the CPU: which group each parameter
all-gather of a step runs on, and the losses.

The model of ``benchmarks/zeropp_hpz.py``'s DeepSpeed comparison: four Linear(64, 64) (4,160
elements each, one gathered unit per module), fp32, nothing persistent, no prefetch, no reuse,
Adam lr 1e-3, 4 ranks, micro-batch 2 of a global batch drawn from ``torch.Generator`` seed 1,
loss = mean(out^2). Run in a DeepSpeed venv (see record_loss_scaler_traces.py), ONE
configuration per process: DeepSpeed keeps hpZ's process group in a module global
(``utils/groups.py``, ``_ZERO_PARAM_INTRA_PARALLEL_GROUP``), and a second ``deepspeed.initialize``
in the same process reuses it whatever its own ``zero_hpz_partition_size`` says:

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --standalone \\
        --nproc_per_node 4 benchmarks/ds_reference/ds_hpz.py '{"hpz": 2, "gas": 1, "steps": 3}' out.json

Rank 0 writes ``out.json``: for every micro-step, the forward's and the backward's all-gathers as
(elements, ranks of the group), and the losses. Virtual nodes do not exist in DeepSpeed: on one host
the groups of h consecutive ranks are what would be the nodes ((0, 1) and (2, 3) for hpZ 2).
Measured (benchmarks/results/ds_hpz.json): step 1's forward and backward over (0, 1); every later
step's forward over (0, 1, 2, 3) and its backward over (0, 1); with gradient accumulation 2, the
second micro-step's forward over (0, 1) as well.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

PHASE = {"now": "init"}
LOG: list[tuple[str, int, tuple]] = []


def _wrap(name: str) -> None:
    orig = getattr(dist, name, None)
    if orig is None:
        return

    def logged(*args, _orig=orig, **kwargs):
        out = args[0] if args else kwargs.get("output_tensor", kwargs.get("tensor_list"))
        group = kwargs.get("group", args[2] if len(args) > 2 else None)
        n = out.numel() if isinstance(out, torch.Tensor) else sum(t.numel() for t in out)
        ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
        LOG.append((PHASE["now"], n, ranks))
        return _orig(*args, **kwargs)
    setattr(dist, name, logged)


for _name in ("all_gather_into_tensor", "_all_gather_base", "all_gather"):
    _wrap(_name)

import deepspeed  # noqa: E402  (after the wrapping, so that it binds the logged functions)


def run(hpz: int, gas: int = 1, steps: int = 3) -> dict:
    deepspeed.init_distributed(dist_backend="gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])
    cfg = {"train_batch_size": 2 * world * gas, "gradient_accumulation_steps": gas,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                 "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                                 "zero_hpz_partition_size": hpz}}
    engine, *_ = deepspeed.initialize(model=model, config=cfg, model_parameters=model.parameters())
    g = torch.Generator().manual_seed(1)
    losses, micro = [], []
    for s in range(steps):
        for m in range(gas):
            x = torch.randn(2 * world, 64, generator=g)[2 * rank:2 * rank + 2]
            PHASE["now"] = f"{s}.{m} forward"
            loss = engine(x).pow(2).mean()
            PHASE["now"] = f"{s}.{m} backward"
            engine.backward(loss)
            PHASE["now"] = f"{s}.{m} step"
            engine.step()
            losses.append(float(loss))
            micro.append({ph: [[n, list(r)] for p, n, r in LOG if p == f"{s}.{m} {ph}"]
                          for ph in ("forward", "backward")})
    return {"config": {"hpz": hpz, "gas": gas, "steps": steps, "world": world}, "micro": micro, "losses": losses}


if __name__ == "__main__":
    kw = json.loads(sys.argv[1])
    out = run(**kw)
    if dist.get_rank() == 0:
        with open(sys.argv[2], "w") as f:
            json.dump(out, f)
        print(json.dumps(out))
