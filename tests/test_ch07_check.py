"""Exercise 7's check (zerolab/course/checks/ch07.py), both ways: the solution passes (alone and in the
engine on 2 and 3 ranks); wrong memory formulas and wrong rules a learner might write fail, each
with a hint that names the mistake."""
from __future__ import annotations

import pytest
from check_messages import assert_hint

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch07 import (LADDER, check_choices, check_choose_config, check_device_bytes, check_engine,
                                 reference_choose_config, reference_device_bytes, zero_block)


def _formula(drop=None):
    """The device-bytes formula with one mistake."""
    def fn(facts, stage, opt, par):
        n, psi = facts.psi / facts.world_size, facts.psi
        p, k = facts.param_bytes, facts.optimizer_bytes
        if drop == "fp16 bytes everywhere":
            p, k = 2, 12
        if drop == "12 optimizer bytes":          # mixed precision's master + moments, in fp32 too
            k = 12
        params = 0 if par else (p * n if stage == 3 or (drop == "params sharded early" and stage >= 1) else p * psi)
        if drop == "stage 1 offload drops grads":
            grads = 0 if opt else (p * n if stage >= 2 else p * psi)
        else:
            grads = 0 if (opt and stage >= 2) else (p * n if stage >= 2 else p * psi)
        states = 0 if opt else (k * n if stage >= 1 else k * psi)
        extra = (0 if drop == "activations" else facts.activation_bytes) + (
            0 if drop == "buffers" else facts.buffer_bytes[stage])
        return params + grads + states + extra
    return fn


def _chooser(order, device=reference_device_bytes):
    def fn(facts, budget):
        for rung in order:
            if device(facts, *rung) <= budget:
                return zero_block(*rung)
        return None
    return fn


def smallest_always(facts, budget):                # "the most memory-saving config is the best"
    return zero_block(3, True, True)


stage_major = _chooser(sorted(LADDER, key=lambda r: (r[0], r[1], r[2])))   # offload before the next stage
strict = _chooser(LADDER, lambda f, *r: 1.2 * reference_device_bytes(f, *r))   # 20 % headroom: too cautious


@pytest.mark.parametrize("drop, words", [
    ("activations", ["activations"]),
    ("buffers", ["buffers of stage"]),
    ("params sharded early", ["Psi against Psi/N"]),
    ("stage 1 offload drops grads", ["stage 1 still keeps the full gradient"]),
    ("fp16 bytes everywhere", ["fp32"]),
    ("12 optimizer bytes", ["no separate master copy", "8 bytes per parameter"]),
])
def test_wrong_formulas_fail_with_a_hint(drop, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_device_bytes(_formula(drop))
    text = info.value.message
    assert "expected" in text and "yours" in text, text
    assert_hint(text, words)


def test_the_formula_passes_alone():
    assert check_device_bytes(_formula()) == 32
    assert check_choices(_formula(), reference_choose_config) > 30


strictly_under = _chooser(LADDER, lambda f, *r: reference_device_bytes(f, *r) + 1)   # need < budget


@pytest.mark.parametrize("fn, words", [
    (strictly_under, ["<= the budget"]),
    (smallest_always, ["also fits", "comes first"]),
    (stage_major, ["raise the", "only when no stage 0-3 fits"]),
    (strict, ["<= the budget"]),
    (_chooser(LADDER, _formula("activations")), ["> the budget"]),
    (lambda facts, budget: None, ["the first config that fits"]),
    (lambda facts, budget: {"stage": 0, "offload_optimizer": {"device": "cpu"}}, ["not a config DeepSpeed"]),
])
def test_wrong_choices_fail_with_a_hint(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_choices(reference_device_bytes, fn)
    text = info.value.message
    assert_hint(text, words)


def test_not_implemented_propagates():
    def empty(*args):
        raise NotImplementedError("Exercise: write this part")
    with pytest.raises(NotImplementedError):
        check_choose_config(empty, empty)


# That the solution passes is not run here: nbval runs solutions/07_captains_pick.ipynb (its cell
# `check_choose_config(device_bytes, choose_config)`) in each of run_tests.sh's three passes and compares its
# output with the stored one, which has "PASSED", "N = 3, fp32", "None: every config over it".


@pytest.mark.timeout(400)
def test_the_engine_catches_a_choice_that_does_not_fit_and_one_too_cautious():
    # forgetting the buffers passes nowhere alone; in the engine it picks stage 3 at 1.5 MB where
    # stage 3 really needs its gathered layers on top: the engine runs out of memory
    no_buffers = _chooser(LADDER, _formula("buffers"))
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(no_buffers)
    assert "ran out of memory" in info.value.message, info.value.message
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(strict)
    assert "also fits" in info.value.message, info.value.message
