"""Exercise 5's check (zerolab/checks/ch05.py), both ways: the solution (the tiled host optimizer
step) passes, alone and as the engine's step on 2 ranks; loops a learner might write wrongly
fail, each with a hint that names the mistake."""
from __future__ import annotations

import pytest
import torch

from zerolab.checks import ExerciseCheckFailed
from zerolab.checks.ch05 import check_alone, check_engine, check_host_step, reference_host_step


def host_step(home, optimizer, grads, combined):
    """The solution, as the exercise notebook has it."""
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            t.grad = grads[i][a:b].to(t.device, torch.float32) * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            t.grad = None
            home.stage.write_params(i, a, t)


def _loop(grad_of, *, clear=True, write="after", all_at_once=False):
    """The loop with one piece changed: grad_of(g, inv, combined) makes a tile's gradient from
    its slice g = grads[i][a:b]; write: 'after', 'before' or None."""
    def fn(home, optimizer, grads, combined):
        inv = 1.0 / combined
        groups = [sum(home.sub_groups, [])] if all_at_once else home.sub_groups
        for sg in groups:
            for j in sg:
                i, a, b = home.tiles[j]
                if write == "before":
                    home.stage.write_params(i, a, home.tensors[j])
                home.tensors[j].grad = grad_of(grads[i][a:b], inv, combined)
            optimizer.step()
            for j in sg:
                i, a, b = home.tiles[j]
                if clear:
                    home.tensors[j].grad = None
                if write == "after":
                    home.stage.write_params(i, a, home.tensors[j])
    return fn


right = lambda g, inv, c: g.float() * inv                     # noqa: E731
forgot_unscale = _loop(lambda g, inv, c: g.float())
divided = _loop(lambda g, inv, c: g.float() / c)
unscaled_in_16_bits = _loop(lambda g, inv, c: (g * inv).float())
multiplied = _loop(lambda g, inv, c: g.float() * c)
stepped_all_at_once = _loop(right, all_at_once=True)
forgot_to_clear = _loop(right, clear=False)
no_write_back = _loop(right, write=None)
written_before_step = _loop(right, write="before")


def wrong_slice(home, optimizer, grads, combined):
    """Every tile takes its group's gradient from element 0 (grads[i][:b - a])."""
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = grads[i][:b - a].float() * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = None
            home.stage.write_params(i, a, home.tensors[j])


def whole_group(home, optimizer, grads, combined):
    """grads[i] instead of grads[i][a:b]: a shape error as soon as a group is cut into tiles."""
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = grads[i].float() * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = None
            home.stage.write_params(i, a, home.tensors[j])


def test_the_alone_part_accepts_the_solution_and_the_reference():
    assert check_alone(host_step) == 3
    assert check_alone(reference_host_step) == 3


@pytest.mark.timeout(300)
def test_the_solution_passes(capsys):
    check_host_step(host_step)
    out = capsys.readouterr().out
    assert "PASSED" in out and "bit-identical" in out and "stage 3 + offload_param, fp16" in out


@pytest.mark.parametrize("fn, words", [
    (forgot_unscale, ["forgot to unscale"]),
    (divided, ["divided by combined", "inv = 1.0 / combined"]),
    (unscaled_in_16_bits, ["16-bit", "convert to fp32 first"]),
    (multiplied, ["multiplied by combined"]),
    (stepped_all_at_once, ["stepping all at once"]),
    (forgot_to_clear, ["earlier sub-groups", "grad = None"]),
    (no_write_back, ["not writing back", "write_params"]),
    (written_before_step, ["before the step", "after optimizer.step()"]),
    (wrong_slice, ["wrong slice", "grads[i][a:b]"]),
    (whole_group, ["wrong slice"]),
])
def test_wrong_loops_fail_with_a_hint(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_alone(fn)
    text = info.value.message
    for w in words:
        assert w in text, text
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert len(text.splitlines()) <= 8, text


def test_not_implemented_propagates():
    def empty(home, optimizer, grads, combined):
        raise NotImplementedError("Exercise: write this part")
    with pytest.raises(NotImplementedError):
        check_host_step(empty)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fn, words", [
    (no_write_back, ["not writing back"]),
    (forgot_unscale, ["forgot to unscale"]),
])
def test_the_engine_part_catches_a_wrong_loop_on_the_ranks(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(fn, cases=((3, "fp16", True),), sizes=(37,))
    text = info.value.message
    assert "the engine, stage 3 + offload_param, fp16, sub_group_size 37" in text, text
    for w in words:
        assert w in text, text
