"""DeepSpeed 0.19.8's stage-3 parameter all-gathers, call by call, on two models that are not
plain stacks of layers: what a module's fetch gathers (its own parameters, a tied weight, a weight
read outside its module, frozen parameters), and when it releases them.

* ``hooks``: exercise 8c's model (``zerolab.course.checks.hooks3.HooksNet``, rebuilt here: this venv has
  no zerolab): an embedding tied to the output layer, ``nn.MultiheadAttention`` (which reads
  ``out_proj.weight`` without calling ``out_proj``), an MLP, and a weight ``mix`` read by the root's
  own ``F.linear``. SGD with momentum.
* ``lora``: a frozen embedding and base layer with a trainable low-rank adapter beside the base, a
  trainable LayerNorm and an output layer whose bias is frozen. SGD with momentum, over the
  trainable parameters only.

Both in fp32, stage 3, nothing persistent, no prefetch, reuse distance 0; micro-batch 2 per rank of
token batches from ``torch.Generator`` seed 80; cross-entropy over the next token. Run in a DeepSpeed
venv (see record_loss_scaler_traces.py), one model per process:

    DS_ACCELERATOR=cpu /path/to/dsvenv/bin/python -m torch.distributed.run --standalone \\
        --nproc_per_node 2 benchmarks/ds_reference/ds_stage3_units.py hooks out.json

Rank 0 writes ``out.json``: per step, the elements of each parameter all-gather in forward, in
backward and in the step, the losses, and each parameter's shape (so that a test can tell the
models apart if one changes). ``tests/test_stage3_units.py`` compares zerolab's calls with
``benchmarks/results/ds_stage3_units.json``.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB, D, SEQ, STEPS = 32, 16, 6, 3
CONFIG = {"train_micro_batch_size_per_gpu": 2, "zero_allow_untested_optimizer": True,
          "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
          "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
                                "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0}}


class HooksNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.embed = nn.Embedding(VOCAB, D)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.mix = nn.Linear(D, D, bias=False)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        h = self.embed(x)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        h = h + self.mlp(h)
        h = h + F.linear(h, self.mix.weight)
        return self.head(h)


class LoraNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed = nn.Embedding(VOCAB, D)
        self.base = nn.Linear(D, D)
        self.a = nn.Linear(D, 4, bias=False)
        self.b = nn.Linear(4, D, bias=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        for p in (*self.embed.parameters(), *self.base.parameters(), self.head.bias):
            p.requires_grad_(False)

    def forward(self, x):
        h = self.embed(x)
        h = self.base(h) + self.b(self.a(h))
        return self.head(self.norm(h))


MODELS = {"hooks": HooksNet, "lora": LoraNet}


def batches(world: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(80)
    return [torch.randint(0, VOCAB, (2 * world, SEQ + 1), generator=g) for _ in range(STEPS)]


def run(name: str) -> dict:
    import deepspeed
    import deepspeed.comm.comm as dcc

    deepspeed.init_distributed("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    model = MODELS[name]()
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    engine, *_ = deepspeed.initialize(model=model, config={**CONFIG, "train_batch_size": 2 * world},
                                      model_parameters=[p for p in model.parameters() if p.requires_grad])
    log, phase = [], ["init"]
    orig = dcc.cdb.all_gather_into_tensor

    def counting(*args, **kwargs):
        out = args[0] if args else kwargs["output_tensor"]
        log.append((phase[0], out.numel()))
        return orig(*args, **kwargs)
    dcc.cdb.all_gather_into_tensor = counting
    steps, losses = [], []
    for t in batches(world):
        x, y = t[2 * rank:2 * rank + 2, :-1], t[2 * rank:2 * rank + 2, 1:]
        phase[0] = "forward"
        loss = F.cross_entropy(engine(x).reshape(-1, VOCAB), y.reshape(-1))
        phase[0] = "backward"
        engine.backward(loss)
        phase[0] = "step"
        engine.step()
        steps.append({ph: [n for p, n in log if p == ph] for ph in ("forward", "backward", "step")})
        losses.append(float(loss))
        log.clear()
    return {"model": name, "world": world, "steps": steps, "losses": losses, "shapes": shapes,
            "deepspeed": deepspeed.__version__, "torch": torch.__version__}


if __name__ == "__main__":
    out = run(sys.argv[1])
    if dist.get_rank() == 0:
        with open(sys.argv[2], "w") as f:
            json.dump(out, f)
        print(json.dumps(out))
