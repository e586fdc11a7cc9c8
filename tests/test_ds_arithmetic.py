"""DeepSpeed's own arithmetic where it is not plain data parallelism's, reproduced bit for bit.

* Gradient clipping at stage 0 in fp32 is DeepSpeed's ``runtime.utils.clip_grad_norm_`` (per
  parameter fp32 norms, stacked, squared and summed in fp32, rooted, / N, all-reduced; the
  gradients multiplied by min(1, clip / (norm + 1e-6))), not torch's ``clip_grad_norm_`` and not
  a Python-float factor: they differ in the last bit of the factor, which Adam carries on.
  (The 16-bit stages' factors are tested in test_mixed_precision.py.)
* Stage 0 averages as DeepSpeed's engine does (``postscale_gradients``): the gradients are summed,
  then multiplied by 1/N; its ZeRO stages pre-divide by N. At 2 ranks the two agree (halving is
  exact); at 3 they do not.
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
    c = _cfg(3, 1, 0.0)      # torch's F.linear, as the one-process runs below use
    c["zero_optimization"]["memory_efficient_linear"] = False
    engine = zerolab.initialize(SelfAttn(), c)
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


# -- memory_efficient_linear: stage 3's own F.linear, DeepSpeed's ----------------------------------
from zerolab.zero.stage3 import linear as zlinear          # noqa: E402


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5), (2, 2, 3, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_zero3_linear_gradients_are_right(shape, bias):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True) if bias else None
    assert torch.autograd.gradcheck(zlinear.Zero3Linear.apply, (x, w, b))
    assert torch.allclose(zlinear.zero3_linear(x, w, b), torch.nn.functional.linear(x, w, b))


def test_zero3_linear_is_not_torchs_in_the_last_bits():
    """On 3-D bf16 inputs with a bias, DeepSpeed's matmul-then-add rounds twice where torch's fused
    linear rounds once (in fp32 the two often agree: it depends on the CPU's kernels)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(8, 16, 64, generator=g), torch.randn(96, 64, generator=g), torch.randn(96, generator=g))
    x, w, b = x.bfloat16(), w.bfloat16(), b.bfloat16()
    ours, torchs = zlinear.zero3_linear(x, w, b), torch.nn.functional.linear(x, w, b)
    assert not torch.equal(ours, torchs)
    assert torch.allclose(ours.float(), torchs.float(), rtol=2e-2, atol=5e-2)


class _LinearProbe(nn.Module):
    """Records, in each forward, whether F.linear is DeepSpeed's stage-3 linear just then."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        self.seen.append(torch.nn.functional.linear is zlinear.zero3_linear)
        return self.lin(x)


def _linear_lifecycle():
    F = torch.nn.functional
    torch_linear = F.linear
    out = {}
    for what, stage, mel in (("stage 3", 3, True), ("key false", 3, False), ("stage 2", 2, True)):
        cfg = _cfg(stage, zerolab.world_size(), 1.0)
        cfg["zero_optimization"]["memory_efficient_linear"] = mel
        probe = _LinearProbe()
        engine = zerolab.initialize(probe, cfg)
        after_init = F.linear is torch_linear
        engine.backward(engine(torch.randn(2, 4)).sum())
        after_forward = F.linear is torch_linear
        engine.step()
        engine.close()
        out[what] = (probe.seen, after_init, after_forward, F.linear is torch_linear)
    try:                                          # a forward that raises leaves torch's in place
        engine = zerolab.initialize(_LinearProbe(), _cfg(3, zerolab.world_size(), 1.0))
        engine(torch.randn(2, 5))
    except RuntimeError:
        out["after a failed forward"] = F.linear is torch_linear
    engine.close()
    return out


def test_zero3_linear_is_in_place_only_while_stage3_computes():
    out = zerolab.launch(_linear_lifecycle, 1, echo=False, timeout=300)[0]
    assert out["stage 3"] == ([True], True, True, True), out
    assert out["key false"] == ([False], True, True, True), out
    assert out["stage 2"] == ([False], True, True, True), out
    assert out["after a failed forward"] is True, out


def _tinylm_stage3_vs_one_process(mel):
    c = _cfg(3, 1, 0.0)
    c["zero_optimization"]["memory_efficient_linear"] = mel
    batches = lm_batches(3, 2, seed=7)
    engine = zerolab.initialize(TinyLM(), c)
    train_engine(engine, batches, lm_loss)
    got = engine.full_params()
    engine.close()
    out = {}
    for own in (True, False):
        if own:
            zlinear.install()
        try:
            model = TinyLM()
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1)
            for x, y in batches:
                opt.zero_grad(set_to_none=True)
                lm_loss(model(x), y).backward()
                opt.step()
        finally:
            if own:
                zlinear.uninstall()
        out[own] = max(float((got[n] - p.detach()).abs().max()) for n, p in model.named_parameters())
    return out


@pytest.mark.parametrize("mel", [True, False])
def test_stage3_linear_follows_memory_efficient_linear(mel):
    """Stage 3 on one rank equals one process with the same linear, bit for bit. Whether it also
    equals the other depends on the CPU's fp32 kernels, so that is not asserted; how far it can be
    is: within a tenth of one AdamW step (chapter 3's AMPLIFIED bound, which its text states for
    DeepSpeed's default against one process)."""
    from zerolab.course.chapters.ch03 import AMPLIFIED
    out = zerolab.launch(_tinylm_stage3_vs_one_process, 1, mel, echo=False, timeout=300)[0]
    assert out[mel] == 0.0, out
    assert out[not mel] < AMPLIFIED, out


def _stage0_average():
    """(engine's average == sum then x 1/N, == pre-divided then summed, do the two differ)."""
    import torch.distributed as dist
    torch.manual_seed(0)
    lin = nn.Linear(16, 16, bias=False)
    local = {}
    lin.weight.register_post_accumulate_grad_hook(lambda p: local.update(g=p.grad.detach().clone()))
    engine = zerolab.initialize(lin, _cfg(0, zerolab.world_size(), 0.0))
    g = torch.Generator().manual_seed(100 + zerolab.rank())
    engine.backward(engine(torch.randn(4, 16, generator=g)).square().mean())
    engine.stage.reduce_grads()                       # (what engine.step() does first)
    got = engine.stage.grads_for_step()[0][:local["g"].numel()]
    post = local["g"].reshape(-1).clone()
    dist.all_reduce(post)
    post.mul_(1.0 / zerolab.world_size())
    pre = local["g"].reshape(-1).clone().div_(zerolab.world_size())
    dist.all_reduce(pre)
    engine.close()
    return {"post": torch.equal(got, post), "pre": torch.equal(got, pre), "pre == post": torch.equal(pre, post)}


def test_stage0_sums_then_scales_as_deepspeeds_engine():
    out = zerolab.launch(_stage0_average, 3, echo=False, timeout=300)
    assert all(o["post"] for o in out), out
    assert not out[0]["pre == post"], out    # at 3 ranks the two orders round differently here
    assert not any(o["pre"] for o in out), out
