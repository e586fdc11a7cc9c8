"""The rank cap: ZEROLAB_MAX_RANKS (or zerolab.set_max_ranks) for a small machine.

A crew bigger than the cap is refused, before any process starts, with a message that names the
cap and what to do; it is never shrunk behind the chapter's back (the chapter's formulas use the
N it asked for). ``fit_ranks`` is the explicit way for a cell to run at a smaller N. Without a cap
nothing changes.
"""
from __future__ import annotations

import pytest

import zerolab
from zerolab import Crew, TooManyRanks, fit_ranks, launch, max_ranks, set_max_ranks
from conftest import stray_descendants


def _world(x):
    return zerolab.world_size() * x


@pytest.fixture(autouse=True)
def no_cap(monkeypatch):
    """Every test starts and ends without a cap, whatever the environment running the suite says."""
    monkeypatch.delenv("ZEROLAB_MAX_RANKS", raising=False)
    set_max_ranks(None)
    yield
    set_max_ranks(None)


def test_no_cap_changes_nothing():
    assert max_ranks() is None
    assert fit_ranks(4) == 4
    assert fit_ranks((1, 2, 3, 4)) == (1, 2, 3, 4)
    assert launch(_world, 4, 10, backend="gloo", timeout=60) == [40] * 4


def test_env_cap_refuses_a_bigger_launch_before_starting_ranks(monkeypatch):
    monkeypatch.setenv("ZEROLAB_MAX_RANKS", "2")
    assert max_ranks() == 2
    before = {p.pid for p in stray_descendants()}
    with pytest.raises(TooManyRanks) as info:
        launch(_world, 4, 10, backend="gloo")
    msg = str(info.value)
    assert "a crew of 4 ranks was asked for, but ZEROLAB_MAX_RANKS=2 allows at most 2" in msg
    assert "N = 2" in msg and "docs/INSTRUCTOR.md" in msg
    assert (info.value.asked, info.value.allowed) == (4, 2)
    assert isinstance(info.value, ValueError) and isinstance(info.value, zerolab.CrewError)
    assert {p.pid for p in stray_descendants()} <= before      # nothing was started
    # At or under the cap the same call runs, on the ranks asked for.
    assert launch(_world, 2, 10, backend="gloo", timeout=60) == [20, 20]


def test_fit_ranks_caps_with_a_one_line_note(monkeypatch, capsys):
    monkeypatch.setenv("ZEROLAB_MAX_RANKS", "2")
    n = fit_ranks(4)
    assert n == 2
    out = capsys.readouterr().out
    assert out == "zerolab: 2 ranks instead of 4 (ZEROLAB_MAX_RANKS=2); what follows is measured at N = 2\n"
    assert launch(_world, n, 10, backend="gloo", timeout=60) == [20, 20]     # runs on the capped number
    capsys.readouterr()
    assert fit_ranks((1, 2, 3, 4)) == (1, 2)
    assert capsys.readouterr().out == "zerolab: crews of 1, 2 only, not 3, 4 (ZEROLAB_MAX_RANKS=2)\n"
    assert fit_ranks(2) == 2 and fit_ranks((1, 2)) == (1, 2)
    assert capsys.readouterr().out == ""                    # nothing cut, nothing said


def test_set_max_ranks_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("ZEROLAB_MAX_RANKS", "8")
    zerolab.set_max_ranks(1)
    assert max_ranks() == 1
    with pytest.raises(TooManyRanks, match=r"zerolab\.set_max_ranks\(1\) allows at most 1"):
        Crew(2, backend="gloo")
    zerolab.set_max_ranks(None)
    assert max_ranks() == 8
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError):
            set_max_ranks(bad)


@pytest.mark.parametrize("value", ["0", "-3", "four"])
def test_a_bad_environment_value_is_an_error_not_ignored(monkeypatch, value):
    monkeypatch.setenv("ZEROLAB_MAX_RANKS", value)
    with pytest.raises(ValueError, match="ZEROLAB_MAX_RANKS"):
        max_ranks()
    with pytest.raises(ValueError, match="must be a whole number"):
        Crew(1, backend="gloo")


def test_empty_environment_value_means_no_cap(monkeypatch):
    monkeypatch.setenv("ZEROLAB_MAX_RANKS", " ")
    assert max_ranks() is None
