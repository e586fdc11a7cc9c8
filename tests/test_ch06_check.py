"""Exercise 6's check (zerolab/course/checks/ch06.py), both ways: the solution passes (alone and in
the engine on 2 ranks); wrong bucket assignments a learner might write fail, each with a hint
that names the mistake."""
from __future__ import annotations

import pytest
from check_messages import assert_hint

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch06 import check_alone, check_bucket_params, check_engine
from zerolab.memory.flat import bucket_params


def _greedy(close_when):
    """The greedy rule with another test for closing the bucket before adding parameter n."""
    def fn(named, bucket_numel):
        out, cur, size = [], [], 0
        for i, (_, p) in enumerate(named):
            n = p.numel()
            if close_when(cur, size, n, bucket_numel):
                out.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += n
        if cur:
            out.append(cur)
        return out
    return fn


off_by_one = _greedy(lambda cur, size, n, lim: cur and size + n >= lim)
forgot_oversize = _greedy(lambda cur, size, n, lim: size + n > lim)   # opens with an empty bucket


def close_after_overflow(named, bucket_numel):
    out, cur, size = [], [], 0
    for i, (_, p) in enumerate(named):
        cur.append(i)
        size += p.numel()
        if size >= bucket_numel:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def largest_first(named, bucket_numel):
    order = sorted(range(len(named)), key=lambda i: -named[i][1].numel())
    buckets = bucket_params([named[i] for i in order], bucket_numel)
    return [[order[i] for i in b] for b in buckets]


def last_bucket_dropped(named, bucket_numel):
    return bucket_params(named, bucket_numel)[:-1]


# That the solution passes is not run here: nbval runs solutions/06_bucket_params.ipynb (its cell
# `check_bucket_params(bucket_params)`) in each of run_tests.sh's three passes and compares its output with
# the stored one, which has "PASSED", "stage 2, reduce_bucket_size 100".


@pytest.mark.parametrize("fn, words", [
    (off_by_one, ["off by one", "not >="]),
    (forgot_oversize, ["an empty bucket", "if current and"]),
    (close_after_overflow, ["> bucket_numel", "close the bucket before"]),
    (largest_first, ["wrong order"]),
    (last_bucket_dropped, ["in no bucket"]),
])
def test_wrong_assignments_fail_with_a_hint(fn, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_alone(fn)
    text = info.value.message
    assert "expected:" in text and "yours:" in text, text
    assert_hint(text, words)


def test_not_implemented_propagates():
    def empty(named, bucket_numel):
        raise NotImplementedError("Exercise: write this part")
    with pytest.raises(NotImplementedError):
        check_bucket_params(empty)


@pytest.mark.timeout(300)
def test_the_engine_part_catches_a_wrong_rule_on_the_ranks():
    with pytest.raises(ExerciseCheckFailed) as info:
        check_engine(off_by_one)
    assert "the collectives differ" in info.value.message, info.value.message
