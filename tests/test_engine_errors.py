"""Errors are part of the product: each misuse gets a clear message and nothing hangs."""
import pytest
import torch
from torch import nn

import zerolab
from zerolab.models import MLP, TinyLM, lm_loss, regression_batches, mse_loss
from zerolab.zero.reference import train_engine, train_reference


def base(stage=3, world=2, **extra):
    return {"train_batch_size": 2 * world, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}, **extra}


def test_initialize_outside_ranks_says_how():
    with pytest.raises(RuntimeError, match="inside a function run by zerolab.launch"):
        zerolab.initialize(MLP(), base())


def diverge():
    """Rank 1 skips a layer: stage 3 must raise, not hang."""
    engine = zerolab.initialize(MLP((4, 5, 6, 3)), base())
    x = torch.randn(2, 4)
    h = engine.module.layers[0](x)
    if zerolab.rank() == 1:
        h = torch.zeros(2, 6)                 # rank 1 never runs layers[1]
    else:
        h = engine.module.layers[1](h)
    return engine.module.layers[2](h)


def test_stage3_divergent_ranks_raise_instead_of_hanging():
    with pytest.raises(zerolab.RankError, match="ranks ran different modules"):
        zerolab.launch(diverge, 2, echo=False, timeout=60)


def tiny_params(stage):
    """A model whose tensors are smaller than the world size (a bias of 1 element, 4 ranks)."""
    world = zerolab.world_size()
    cfg = {**base(stage, world), "gradient_clipping": 0.0}
    batches = regression_batches(3, 2 * world, d_in=3, d_out=1)
    ref = train_reference(MLP((3, 2, 1)), cfg, batches, mse_loss)
    engine = zerolab.initialize(MLP((3, 2, 1)), cfg)
    train_engine(engine, batches, mse_loss)
    got = engine.full_params()
    return max(float((got[k] - ref[k]).abs().max()) for k in ref)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_tensors_smaller_than_world_size_are_padded(stage):
    diffs = zerolab.launch(tiny_params, 4, stage, echo=False, timeout=60)
    assert max(diffs) < 1e-6


def make(cfg, optimizer=None):
    zerolab.initialize(MLP(), cfg, optimizer=optimizer)


@pytest.mark.parametrize("cfg,optimizer,message", [
    (base(zero_optimization={"stage": 2, "offload_param": {"device": "cpu"}}), None,
     "'zero_optimization.offload_param' offloads the parameter shards of ZeRO stage 3; stage is 2"),
    (base(zero_optimisation={"stage": 2}), None, "did you mean 'zero_optimization'"),
    ({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2}, torch.optim.SGD, "train_batch_size"),
    ({"train_batch_size": 2}, None, "no optimizer"),
    ({"train_batch_size": 2, "zero_optimization": {"stage": 1}}, lambda ps: torch.optim.LBFGS(ps),
     "zero_allow_untested_optimizer"),
])
def test_config_and_optimizer_errors_name_the_problem(cfg, optimizer, message):
    with pytest.raises(zerolab.RankError, match=message):
        zerolab.launch(make, 1, cfg, optimizer, echo=False, timeout=60)
