"""Mixed precision in every stage: fp16 and bf16 with fp32 masters and the loss scaler.

* At one rank the engine IS the single-process mixed-precision recipe, so it must match a
  hand-written one (model in 16 bit, fp32 master weights, scaled loss, unscale + clip, step
  on the masters, copy back) bit for bit, the clipping factor computed as DeepSpeed computes it
  at each stage, and at stage 3 with DeepSpeed's own F.linear (memory_efficient_linear). (It once matched only within 1e-6 where it was written and failed on another
  CPU at 5e-5: the recipe divided where DeepSpeed multiplies by the inverse, and computed the
  factor in fp64 where DeepSpeed uses fp32; an ulp in the clipping factor is enough for the fp16
  copy of a master to round the other way, which Adam then amplifies.)
* At 2 and 3 ranks the 16-bit gradients are summed in a different order, so we state a
  tolerance: within 1e-2 (absolute, on weights of order 1) of the same recipe and 2e-2 of
  fp32 training.
* One inf on one rank skips the step on every rank, and nothing is lost.
"""
import math

import pytest
import torch

import zerolab
from zerolab.precision.loss_scaler import make_loss_scaler
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine, train_reference
from zerolab.zero.stage3 import linear as zlinear


def cfg(stage, world, prec, gas=1):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
            "train_batch_size": 2 * gas * world, "gradient_clipping": 0.5,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "zero_optimization": {"stage": stage, "reduce_bucket_size": 900,
                                  "stage3_param_persistence_threshold": 30},
            prec: {"enabled": True, **({"initial_scale_power": 8} if prec == "fp16" else {})}}


def clip_combined(stage, grads, scale, clip):
    """DeepSpeed 0.19.8's loss scale x clipping factor at one rank, one parameter group, in its
    own dtypes (None: an invalid norm, the step is skipped). Stage 0: FP16_Optimizer.step (the
    flat fp32 gradient's fp32 norm, squared as a Python float, rounded to fp32, rooted; the factor
    in Python floats). Stages 1-2: get_grad_norm_direct and unscale_and_clip_grads (each gradient's
    fp64 norm, stacked, squared, summed, one fp32, rooted; the factor an fp32 tensor). Stage 3: the
    same in fp64."""
    if stage == 0:
        flat = torch.cat([g.reshape(-1) for g in grads])
        sq = flat.norm(2.0).item() ** 2.0
        total = torch.tensor([sq], dtype=torch.float32).item() ** 0.5
        if not math.isfinite(total):
            return None
        c = (math.sqrt(0.0 + total ** 2.0) / scale + 1e-6) / clip
        return c * scale if c > 1 else scale
    total = torch.stack([g.double().norm(2.0) for g in grads]).pow(2.0).sum()
    if stage in (1, 2):
        total = total.float()
    total = torch.linalg.vector_norm((total ** 0.5).reshape(1), ord=2.0)
    if not torch.isfinite(total):
        return None
    return torch.clamp(((total / scale) + 1e-6) / clip, min=1.0) * scale


def mixed_reference(config, batches, dtype, stage):
    """Single-process mixed precision, written out by hand, as DeepSpeed takes each step at
    ``stage``: the clipping factor in DeepSpeed's dtypes (clip_combined), then the gradients
    multiplied by 1 / (loss scale x clipping factor). Any other arithmetic moves the factor by an
    ulp, which the fp16 copy of the masters can amplify."""
    model = TinyLM().to(dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    masters = [p.detach().float().clone() for p in params]
    opt = torch.optim.AdamW(masters, lr=3e-3, weight_decay=0.1)
    scaler = make_loss_scaler(config["fp16"] if dtype == torch.float16 else None)
    for x, y in batches:
        scale = scaler.cur_scale                     # the scale this step's backward uses
        for p in params:
            p.grad = None
        (lm_loss(model(x), y) * scale).backward()
        grads = [p.grad.float() for p in params]
        combined = clip_combined(stage, grads, scale, config["gradient_clipping"])
        overflow = combined is None
        scaler.update_scale(overflow)
        if overflow:
            continue
        for m, g in zip(masters, grads):
            m.grad = g * (1.0 / combined)
        opt.step()
        with torch.no_grad():
            for p, m in zip(params, masters):
                p.copy_(m)
    out = {n: p.detach().float() for n, p in model.named_parameters()}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    out.update({n: m.clone() for n, m in zip(trainable, masters)})
    return out


def run(prec, steps=4):
    world = zerolab.world_size()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[prec]
    out = {}
    for stage in (0, 1, 2, 3):
        c = cfg(stage, world, prec)
        batches = lm_batches(steps, c["train_batch_size"], seed=stage)
        engine = zerolab.initialize(TinyLM(), c)
        train_engine(engine, batches, lm_loss)
        got = engine.full_params()
        if stage == 3:                # DeepSpeed's stage-3 F.linear (memory_efficient_linear) in the recipe too
            zlinear.install()
        try:
            same = mixed_reference(c, batches, dtype, stage)
        finally:
            if stage == 3:
                zlinear.uninstall()
        fp32 = train_reference(TinyLM(), {**{k: v for k, v in c.items() if k != prec}}, batches, lm_loss)
        out[stage] = {"vs_recipe": max(float((got[k] - same[k]).abs().max()) for k in got),
                      "vs_fp32": max(float((got[k] - fp32[k]).abs().max()) for k in got),
                      "masters_fp32": all(m.dtype == torch.float32 for m in engine.stage.masters),
                      "model_dtype": str(next(engine.module.parameters()).dtype),
                      "skipped": engine.skipped_steps}
    return out


@pytest.mark.parametrize("prec", ["fp16", "bf16"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_mixed_precision_every_stage(world, prec):
    res = zerolab.launch(run, world, prec, echo=False, timeout=300)
    for stage, r in res[0].items():
        assert r["masters_fp32"] and r["model_dtype"] == f"torch.{'float16' if prec == 'fp16' else 'bfloat16'}"
        # 16-bit gradients pre-divided by N and summed across ranks in another order
        tol_recipe = 0.0 if world == 1 else 1e-2   # one rank: bit for bit
        assert r["vs_recipe"] <= tol_recipe, (stage, r)
        assert r["vs_fp32"] <= 2e-2, (stage, r)
    if prec == "fp16":   # initial scale 2^8 and this model: no overflow expected
        assert all(r["skipped"] == 0 for r in res[0].values())


def inject_inf(stage):
    """Rank 1's loss becomes inf at step 1: every rank must skip that step."""
    world = zerolab.world_size()
    c = cfg(stage, world, "fp16")
    engine = zerolab.initialize(TinyLM(), c)
    batches = lm_batches(3, c["train_batch_size"], seed=1)
    snapshots, scales = [], []
    for i, batch in enumerate(batches):
        before = engine.full_params()
        x, y = [t[zerolab.rank() * 2:(zerolab.rank() + 1) * 2] for t in batch]
        loss = lm_loss(engine(x), y)
        if i == 1 and zerolab.rank() == world - 1:
            loss = loss * float("inf")
        engine.backward(loss)
        engine.step()
        after = engine.full_params()
        opt_steps = sorted({int(s["step"]) for s in engine.optimizer.state.values()})
        snapshots.append(all(torch.equal(before[k], after[k]) for k in before))
        scales.append((engine.loss_scale, opt_steps))
    return {"unchanged": snapshots, "skipped": engine.skipped_steps, "global": engine.global_steps,
            "scales": scales, "log": engine.log}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_inf_on_one_rank_skips_the_step_everywhere(stage):
    res = zerolab.launch(inject_inf, 3, stage, echo=False, timeout=120)
    for r in res:
        assert r["unchanged"] == [False, True, False]        # step 1 skipped, params untouched
        assert r["skipped"] == 1 and r["global"] == 3
        # hysteresis 2: the first overflow keeps the scale (2^8), the optimizer step count stays
        assert [s for s, _ in r["scales"]] == [256.0, 256.0, 256.0]
        assert [steps for _, steps in r["scales"]] == [[1], [1], [2]]
    assert "overflow: skipping step" in res[0]["log"][0]
