"""Exercise 9's check (zerolab/course/checks/ch09.py), both ways: the solution's config passes (alone and
in the engine on 2 and 3 ranks); configs a learner might write fail, each with a hint that names
the mistake."""
from __future__ import annotations

import copy

import pytest
from check_messages import assert_hint

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch09 import check_alone, check_capstone_config, check_engine, reference_config


def changed(edit):
    """reference_config with ``edit(config, world_size)`` applied."""
    def fn(world_size):
        cfg = copy.deepcopy(reference_config(world_size))
        edit(cfg, world_size)
        return cfg
    return fn


def _set(path, value):
    def edit(cfg, n):
        d = cfg
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return edit


def _fixed_micro(cfg, n):
    cfg["train_micro_batch_size_per_gpu"] = 6


def _scaled_global(cfg, n):
    cfg["train_batch_size"] = 24 * n
    cfg["train_micro_batch_size_per_gpu"] = 12


def _stage2(cfg, n):
    cfg["zero_optimization"]["stage"] = 2
    del cfg["zero_optimization"]["offload_param"]          # stage 2 refuses it (DeepSpeed ignores it)


def _warmup_lr(cfg, n):
    cfg["scheduler"]["type"] = "WarmupLR"
    del cfg["scheduler"]["params"]["total_num_steps"]      # WarmupLR has no such parameter


def _fp16(cfg, n):
    del cfg["bf16"]
    cfg["fp16"] = {"enabled": True}


WRONG = [
    (changed(_fixed_micro), ["does not load", "micro-batch from world_size"]),
    (changed(_scaled_global), ["train_batch_size", "divide it, do not multiply"]),
    (changed(_set(("train_micro_batch_size_per_gpu",), KeyError)), ["batch keys", "missing"]),
    (changed(_stage2), ["stage", "shards them"]),
    (changed(_set(("zero_optimization", "stage"), 2)), ["does not load", "stage is 2"]),
    (changed(_set(("zero_optimization", "offload_param"), KeyError)), ["offload_param", "warehouse"]),
    (changed(_set(("zero_optimization", "offload_optimizer"), KeyError)), ["offload_optimizer", "notebook"]),
    (changed(_set(("zero_optimization", "stage3_param_persistence_threshold"), KeyError)),
     ["persistence", "nothing would be sharded"]),
    (changed(_fp16), ["precision", "loss scaler"]),
    (changed(_set(("bf16",), KeyError)), ["precision", "fp32"]),
    (changed(_set(("optimizer", "type"), "Adam")), ["AdamW", "decoupled"]),
    (changed(_set(("gradient_clipping",), 0.0)), ["gradient_clipping", "turns clipping off"]),
    (changed(_warmup_lr), ["learning rate at step", "WarmupDecayLR"]),
    (changed(_set(("scheduler", "params", "warmup_type"), KeyError)), ["learning rate at step", "'log'"]),
    (changed(_set(("scheduler", "params", "warmup_max_lr"), KeyError)), ["learning rate at step", "0.001"]),
    (changed(_set(("scheduler", "params", "total_num_steps"), 200)), ["learning rate at step", "total_num_steps"]),
    (changed(_set(("scheduler",), KeyError)), ["learning rate at step", "no 'scheduler' block"]),
]


# That the solution passes is not run here: nbval runs solutions/09_capstone_config.ipynb (its cell
# `check_capstone_config(capstone_config)`) in each of run_tests.sh's three passes and compares its output
# with the stored one, which has "PASSED", "engine: 3 ranks".


@pytest.mark.parametrize("fn, words", WRONG, ids=[f"wrong{i}" for i in range(len(WRONG))])
def test_wrong_configs_fail_with_a_hint(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_alone(fn)
    text = info.value.message
    assert_hint(text, words)


def test_not_implemented_propagates():
    def empty(world_size):
        raise NotImplementedError("Exercise: write this part")
    with pytest.raises(NotImplementedError):
        check_capstone_config(empty)


@pytest.mark.timeout(300)
def test_the_engine_part_catches_a_config_that_trains_differently():
    """A config the alone part would not see (a different eps) fails on the ranks."""
    fn = changed(_set(("optimizer", "params", "eps"), 1e-3))
    check_alone(fn)
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(fn, worlds=(2,))
    assert "losses differ" in info.value.message, info.value.message
