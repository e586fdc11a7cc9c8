"""zerolab.course.lm_runs (chapter 10's helpers) without ranks: the model's size, the config it is
trained from, the traffic unit. The runs themselves are in chapter 10's notebooks (nbval)."""
from __future__ import annotations

import pytest

import zerolab
from zerolab.course import lm_runs


def test_the_model_and_its_unit():
    assert lm_runs.PSI_LM == 188_900                      # the number chapters 3 and 10 print
    assert lm_runs.in_psi(3 * 0.75 * 2 * lm_runs.PSI_LM, 4) == pytest.approx(3.0)


@pytest.mark.parametrize("world, accumulate, micro", [(4, 1, 3), (2, 1, 6), (4, 4, 3)])
def test_lm_config_is_a_valid_deepspeed_config(world, accumulate, micro):
    cfg = lm_runs.lm_config(3, world, global_batch=12 * accumulate, accumulate=accumulate)
    loaded = zerolab.load_config(cfg, world)
    assert loaded.train_micro_batch_size_per_gpu == micro and loaded.bf16.enabled
    z = cfg["zero_optimization"]
    assert (z["stage3_param_persistence_threshold"], z["stage3_max_reuse_distance"]) == (0, 0)
    assert "zerolab" not in cfg and lm_runs.lm_config(2, 2, ideal=True)["zerolab"] == {"ideal_reduce_scatter": True}
    assert "bf16" not in lm_runs.lm_config(2, 2, "fp32")
