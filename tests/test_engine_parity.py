"""The heart of the suite: every stage trains exactly like plain single-process training.

For world sizes 1-4, stages 0-3, gradient accumulation 1 and 2, clipping on and off, AdamW
with weight decay, on TinyLM (tied weights, a frozen parameter, LayerNorms, sizes that do not
divide by the world size): after several steps every parameter equals the reference trained
on the same global batches in one process. Each world size runs all its cases on one crew.
"""
import itertools

import pytest
import torch

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine, train_reference

STAGES = (0, 1, 2, 3)
CASES = [dict(stage=s, gas=g, clip=c) for s, g, c in itertools.product(STAGES, (1, 2), (0.0, 0.05))]


def ds_config(stage, gas, clip, world, micro=2, **zero):
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": gas,
        "train_batch_size": micro * gas * world,
        "gradient_clipping": clip,
        # eps 1e-6 instead of 1e-8: Adam divides by sqrt(v) + eps, so for an element whose
        # gradient is ~1e-9 (rounding noise from summing in another order, e.g. over 3 ranks)
        # a tiny eps turns noise into a full-size step; a real bug changes gradients far more.
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}},
        # small buckets, so several buckets (and straddling parameters) are exercised
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 700,
                              "stage3_param_persistence_threshold": 30, **zero},
    }


def max_rel_diff(a: dict, b: dict, atol: float = 1e-5) -> float:
    """The largest |a - b| / (atol / rtol + |b|) over all elements, scaled so that a value
    below 1e-5 means |a - b| <= 1e-5 + 1e-5 |b| everywhere (torch.testing's rule with
    rtol=1e-5, atol=1e-5). The atol matters for elements near zero, where Adam turns a
    rounding-level difference in a tiny gradient into a visible one (seen: 2.5e-6 at 3-4
    ranks, stage 1, accumulation 2); one real optimizer step here moves weights by ~3e-3,
    so a wrong gradient or shard is still caught by a factor of 300."""
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float(((a[k] - b[k]).abs() / (atol / 1e-5 + b[k].abs())).max()) for k in a)


def run_cases(cases, steps=3):
    """Train every case on this rank; return, by case, the engine's full parameters and the
    single-process reference this rank computed (both on the CPU, compared in the test)."""
    world = zerolab.world_size()
    out = {}
    for case in cases:
        cfg = ds_config(case["stage"], case["gas"], case["clip"], world)
        batches = lm_batches(steps, cfg["train_batch_size"], seed=case["stage"])
        ref = train_reference(TinyLM(), cfg, batches, lm_loss)
        engine = zerolab.initialize(TinyLM(), cfg)
        train_engine(engine, batches, lm_loss)
        out[str(case)] = {"params": engine.full_params(), "ref": ref, "steps": engine.global_steps}
    return out


def differing(a: dict, b: dict) -> list[str]:
    """Names whose tensors are not bit-for-bit equal (dtype and shape included)."""
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return [k for k in a if not (a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                 and torch.equal(a[k], b[k]))]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_all_stages_match_single_process(world):
    results = zerolab.launch(run_cases, world, CASES, echo=False, timeout=240)
    assert len(results) == world and all(r.keys() == {str(c) for c in CASES} for r in results)
    for case in map(str, CASES):
        rank0 = results[0][case]["params"]
        assert rank0 and all(v.dtype == torch.float32 for v in rank0.values())
        for r, res in enumerate(results):
            got = res[case]
            assert got["steps"] == 3, f"world {world}, rank {r}, {case}: {got['steps']} optimizer steps"
            # every rank holds the same full parameters, exactly (they are gathered, not recomputed)
            bad = differing(got["params"], rank0)
            assert not bad, f"world {world}, {case}: rank {r}'s parameters differ from rank 0's: {bad}"
            # ... and they equal the single-process run within rtol 1e-5, atol 1e-5
            diff = max_rel_diff(got["params"], got["ref"])
            assert diff < 1e-5, (f"world {world}, rank {r}, {case}: parameters differ from the "
                                 f"single-process run: max relative difference {diff:.3g}")
