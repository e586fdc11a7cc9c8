"""Exercise 5's check (zerolab/course/checks/ch05.py), both ways: the solution (the tiled host optimizer
step) and another valid design pass, alone and as the engine's step on 2 ranks; designs a learner
might get wrong fail, each with a hint that names the mistake."""
from __future__ import annotations

import pytest
import torch
from check_messages import assert_hint

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch05 import check_alone, check_engine, check_host_step, reference_host_step


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


def _designed(*, down=None, write_value=None, write_when="each", order=1, per_tile=False, drop="none"):
    """The solution with one design decision changed.

    down(g, inv, combined): a tile's gradient from its slice g = grads[i][a:b];
    write_value(t): what goes up for tile t (default: t itself); write_when: "each" (after each
    sub-group's step) or "end" (all tiles after the last sub-group); order: 1 or -1 (reversed);
    per_tile: one optimizer.step() per tile; drop: "none" (grad = None) or "zero" (grad.zero_())."""
    down = down or (lambda g, inv, c: g.float() * inv)
    write_value = write_value or (lambda t: t)

    def fn(home, optimizer, grads, combined):
        inv = 1.0 / combined
        done = []
        for sg in home.sub_groups[::order]:
            batches = [[j] for j in sg] if per_tile else [sg]
            for part in batches:
                for j in part:
                    i, a, b = home.tiles[j]
                    home.tensors[j].grad = down(grads[i][a:b], inv, combined)
                optimizer.step()
                for j in part:
                    t = home.tensors[j]
                    if drop == "zero":
                        t.grad.zero_()
                    else:
                        t.grad = None
                    if write_when == "each":
                        i, a, b = home.tiles[j]
                        home.stage.write_params(i, a, write_value(t))
                    done.append(j)
        if write_when == "end":
            for j in done:
                i, a, b = home.tiles[j]
                home.stage.write_params(i, a, write_value(home.tensors[j]))
    return fn


writes_at_the_end = _designed(write_when="end")
steps_in_reverse = _designed(order=-1)
steps_tile_by_tile = _designed(per_tile=True)
zeroes_instead_of_dropping = _designed(drop="zero")
unscales_twice = _designed(down=lambda g, inv, c: g.float() * inv * inv)
writes_a_bf16_master = _designed(write_value=lambda t: t.to(torch.bfloat16))


def writes_the_gradient(home, optimizer, grads, combined):
    """Writes each tile's gradient up instead of its updated master."""
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = grads[i][a:b].float() * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            home.stage.write_params(i, a, home.tensors[j].grad)
            home.tensors[j].grad = None


def writes_from_the_group_start(home, optimizer, grads, combined):
    """Writes every tile of group i from element 0 (write_params(i, 0, ...))."""
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = grads[i][a:b].float() * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            home.tensors[j].grad = None
            home.stage.write_params(i, 0, home.tensors[j])


def another_good_design(home, optimizer, grads, combined):
    """A valid design that is not the solution's: copies and unscales in place, writes each tile
    up (rounded once, to the model's dtype) before dropping its gradient."""
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            t.grad = torch.empty_like(t).copy_(grads[i][a:b])
            t.grad.mul_(1.0 / combined)
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            home.stage.write_params(i, a, t.detach().to(home.stage.dtype))
            t.grad = None


def test_the_alone_part_accepts_the_solution_and_the_reference():
    assert check_alone(host_step) == 3
    assert check_alone(reference_host_step) == 3
    assert check_alone(another_good_design) == 3


# That the solution passes is not run here: nbval runs solutions/05_host_step.ipynb (its cell
# `check_host_step(host_step)`) in each of run_tests.sh's three passes and compares its output with the stored
# one, which has "PASSED", "bit-identical", "stage 3 + offload_param, fp16".


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
    (writes_at_the_end, ["not written up yet", "finish each sub-group before the next"]),
    (steps_in_reverse, ["sub-group 0 was due", "in order"]),
    (steps_tile_by_tile, ["one optimizer.step() per sub-group", "tile by tile"]),
    (zeroes_instead_of_dropping, ["zeroing is not dropping", "grad = None"]),
    (unscales_twice, ["unscaled twice"]),
    (writes_a_bf16_master, ["rounded the master to bfloat16", "rounds it once"]),
    (writes_the_gradient, ["wrote the gradient up"]),
    (writes_from_the_group_start, ["its own start"]),
])
def test_wrong_loops_fail_with_a_hint(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_alone(fn)
    text = info.value.message
    assert_hint(text, words)
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
    (writes_at_the_end, ["finish each sub-group before the next"]),
])
def test_the_engine_part_catches_a_wrong_loop_on_the_ranks(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(fn, cases=((3, "fp16", True),), sizes=(37,))
    text = info.value.message
    assert "the engine, stage 3 + offload_param, fp16, sub_group_size 37" in text, text
    for w in words:
        assert w in text, text
