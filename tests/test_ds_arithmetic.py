"""DeepSpeed's own arithmetic where it is not plain data parallelism's, reproduced bit for bit.

* Gradient clipping at stage 0 in fp32 is DeepSpeed's ``runtime.utils.clip_grad_norm_`` (per
  parameter fp32 norms, stacked, squared and summed in fp32, rooted, / N, all-reduced; the
  gradients multiplied by min(1, clip / (norm + 1e-6))), not torch's ``clip_grad_norm_`` and not
  a Python-float factor: they differ in the last bit of the factor, which Adam carries on.
  (The 16-bit stages' factors are tested in test_mixed_precision.py.)
* Stage 3 passes every module's tensors in and out through an identity autograd function, as
  DeepSpeed's module hooks do: a module called as ``attn(h, h, h)`` receives three tensors, so
  ``nn.MultiheadAttention`` takes its separate-projection path there, as under DeepSpeed. At
  stages 0-2 and after ``close()`` the module sees the tensors it was given.

``zerolab compare --model tied`` measures both against DeepSpeed 0.19.8 itself
(benchmarks/results/compare_configs.txt).
"""
import pytest
import torch
from torch import nn

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine


def _cfg(stage, world, clip):
    return {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * world, "gradient_clipping": clip,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "zero_optimization": {"stage": stage}}


def deepspeed_clip_grad_norm_(grads, max_norm, world=1):
    """DeepSpeed 0.19.8's runtime.utils.clip_grad_norm_ at one rank, written out."""
    total = torch.stack([g.float().norm(2.0) for g in grads]).pow(2.0).sum().float()
    total = total.pow(1. / 2.0) * 1.0 / float(world)
    coef = torch.tensor([float(max_norm)]) / (total + 1e-6)
    coef = torch.min(torch.tensor([1.0]), coef)
    for g in grads:
        g.mul_(coef)


def _one_rank_stage0(clip, steps=4):
    c = _cfg(0, 1, clip)
    batches = lm_batches(steps, 2, seed=5)
    engine = zerolab.initialize(TinyLM(), c)
    train_engine(engine, batches, lm_loss)
    got = engine.full_params()
    engine.close()
    model = TinyLM()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1)
    ref = {}
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x), y).backward()
        if clip > 0:
            deepspeed_clip_grad_norm_([p.grad for p in params], clip)
        opt.step()
    ref = {n: p.detach() for n, p in model.named_parameters()}
    return max(float((got[k] - ref[k]).abs().max()) for k in got)


@pytest.mark.parametrize("clip", [0.5, 0.0])
def test_stage0_fp32_clips_as_deepspeeds_clip_grad_norm(clip):
    assert zerolab.launch(_one_rank_stage0, 1, clip, echo=False, timeout=300)[0] == 0.0


class Probe(nn.Module):
    """Records, at each call, whether its three inputs are one tensor."""

    def __init__(self, d=8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.seen = []

    def forward(self, q, k, v):
        self.seen.append(q is k and k is v)
        return self.lin(q + k + v)


class Root(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.embed = nn.Linear(d, d)
        self.probe = Probe(d)

    def forward(self, x):
        h = self.embed(x)
        return self.probe(h, h, h)


def _seen(stage):
    torch.manual_seed(0)
    model = Root()
    engine = zerolab.initialize(model, _cfg(stage, zerolab.world_size(), 1.0))
    x = torch.randn(2, 8)
    engine.backward(engine(x).square().mean())
    engine.step()
    during = list(model.probe.seen)
    engine.close()
    model.probe.seen.clear()
    model(x)
    return during, list(model.probe.seen)


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_stage3_gives_each_module_new_tensors_as_deepspeed_does(stage):
    during, after_close = zerolab.launch(_seen, 2, stage, echo=False, timeout=300)[0]
    assert during == [stage != 3]
    assert after_close == [True]


def _mha_stage3_vs_separate_tensors():
    """Stage 3 at one rank on self-attention equals one process calling attention with three
    distinct tensors, bit for bit (and not the same tensor three times, here)."""
    class SelfAttn(nn.Module):
        def __init__(self, distinct=False):
            super().__init__()
            torch.manual_seed(0)
            self.inp = nn.Linear(6, 16)
            self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
            self.head = nn.Linear(16, 3)
            self.distinct = distinct

        def forward(self, x):
            h = self.inp(x)
            q, k, v = (h.view_as(h), h.view_as(h), h.view_as(h)) if self.distinct else (h, h, h)
            a, _ = self.attn(q, k, v, need_weights=False)
            return self.head(h + a)

    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 5, 6, generator=g) for _ in range(3)]
    engine = zerolab.initialize(SelfAttn(), _cfg(3, 1, 0.0))
    for x in xs:
        engine.backward(engine(x).square().mean())
        engine.step()
    got = engine.full_params()
    engine.close()
    out = {}
    for distinct in (True, False):
        model = SelfAttn(distinct)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        for x in xs:
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
        out[distinct] = max(float((got[n] - p.detach()).abs().max()) for n, p in model.named_parameters())
    return out


def test_stage3_self_attention_computes_what_deepspeed_computes():
    out = zerolab.launch(_mha_stage3_vs_separate_tensors, 1, echo=False, timeout=300)[0]
    assert out[True] == 0.0, out
    assert out[False] > 0.0, out          # the test can tell the two paths apart
