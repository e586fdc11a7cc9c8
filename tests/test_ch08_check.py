"""Exercise 8's check (zerolab/checks/ch08.py), both ways: knobs that meet the goals pass in
the engine on 2 ranks; knobs a learner might pick by mistake fail, each with a hint that names it."""
from __future__ import annotations

import pytest

from zerolab.checks import ExerciseCheckFailed, close_crews
from zerolab.checks.ch08 import check_knobs

GOOD = {"A": {"stage3_param_persistence_threshold": 64},
        "B": {"stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 16384,
              "stage3_max_live_parameters": 20480, "stage3_max_reuse_distance": 0},
        "C": {"stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 4096}}


def answers(**changed):
    table = {**GOOD, **changed}
    return lambda goal: table[goal]


@pytest.fixture(scope="module", autouse=True)
def _crews():
    yield
    close_crews()


@pytest.mark.timeout(300)
def test_knobs_that_meet_the_goals_pass(capsys):
    check_knobs(answers())
    out = capsys.readouterr().out
    assert "PASSED" in out and "bit-identical in all four runs" in out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("changed, words", [
    ({"A": {}}, ["weight(s) of 4,096 elements are persistent", "default 1e5"]),
    ({"A": {"stage3_param_persistence_threshold": 63}}, ["off by one", "numel <= threshold"]),
    ({"A": {"stage3_param_persistence_threshold": 64, "stage3_model_persistence_threshold": 256}},
     ["caps the total"]),
    ({"B": {"stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 20480,
            "stage3_max_reuse_distance": 0}},
     ["peak 24,576 elements > 20,480", "stage3_max_live_parameters bounds"]),
    ({"B": {"stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 16384,
            "stage3_max_live_parameters": 20480}},
     ["stage3_max_reuse_distance = 1,000,000,000 keeps", "lower the reuse distance"]),
    ({"B": {"stage3_param_persistence_threshold": 64, "stage3_max_live_parameters": 8192,
            "stage3_max_reuse_distance": 0}},
     ["check headers per step > 7", "larger prefetch window"]),
    ({"C": {"stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 0}},
     ["stage3_prefetch_bucket_size was changed"]),
    ({"C": {"stage3_param_persistence_threshold": 64, "stage3_max_live_parameters": 20000}},
     ["issued ahead of use", "never blocked"]),
    ({"C": {"stage3_max_live_parameters": 4096}}, ["weight(s) of 4,096 elements are persistent"]),
])
def test_wrong_knobs_fail_with_a_hint(changed, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_knobs(answers(**changed), verbose=False)
    text = info.value.message
    for w in words:
        assert w in text, text
    assert all(len(line) <= 100 for line in text.splitlines()), text


@pytest.mark.parametrize("bad, words", [
    ({"stage": 2}, ["not among the knobs"]),
    ({"stage3_max_live_parameters": -1}, ["a whole number"]),
    ([("stage3_max_live_parameters", 1)], ["returned list"]),
])
def test_malformed_answers_fail_before_any_run(bad, words):
    with pytest.raises(ExerciseCheckFailed) as info:
        check_knobs(answers(A=bad), verbose=False)
    for w in words:
        assert w in info.value.message, info.value.message


def test_not_implemented_propagates():
    def knobs(goal):
        raise NotImplementedError("Exercise: write this part")
    with pytest.raises(NotImplementedError):
        check_knobs(knobs)
