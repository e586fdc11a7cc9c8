"""Learner progress: the exercise checks record passes and failures; ``zerolab progress`` shows them.

Every test points $ZEROLAB_PROGRESS at a temporary file. Recording must never break a check:
an unwritable or damaged file gives a one-line warning and the check behaves as before.
"""
from __future__ import annotations

import json
import pytest

from zerolab.course import progress
from zerolab.course.checks import ExerciseCheckFailed, passed
from zerolab.cli import main as cli


@pytest.fixture
def pfile(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "progress.json"          # the folder does not exist yet
    monkeypatch.setenv("ZEROLAB_PROGRESS", str(path))
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    return path


def _fake_check(module: str, name: str):
    """A function named ``name`` that lives in module ``module`` (as the stack sees it): it passes
    with ok=True and raises ExerciseCheckFailed with ok=False."""
    env = {"__name__": module, "passed": passed, "ExerciseCheckFailed": ExerciseCheckFailed}
    exec(f"def {name}(ok):\n"
         f"    if not ok:\n"
         f"        raise ExerciseCheckFailed('chunk 1 on rank 2 is wrong\\n  hint: follow one chunk')\n"
         f"    passed('your ring works')\n", env)
    return env[name]


def test_a_check_records_failures_then_a_pass(pfile, capsys):
    check = _fake_check("zerolab.course.checks.ch02", "check_ring_reduce_scatter")
    with pytest.raises(ExerciseCheckFailed):
        check(False)
    check(True)
    assert "PASSED: your ring works" in capsys.readouterr().out
    data = json.loads(pfile.read_text())
    recs = data["records"]
    assert [(r["exercise"], r["passed"]) for r in recs] == [("ch02.check_ring_reduce_scatter", False),
                                                             ("ch02.check_ring_reduce_scatter", True)]
    assert recs[0]["message"] == "chunk 1 on rank 2 is wrong"             # the first line only
    assert recs[1]["time"].endswith("+00:00") and "notebook" not in recs[1]
    entry = next(e for e in progress.summary(recs) if e["exercise"] == "ch02.check_ring_reduce_scatter")
    assert entry["status"] == "done" and entry["attempts"] == 2 and entry["failures"] == 1


def test_only_checks_are_recorded_not_helpers_or_other_code(pfile):
    helper = _fake_check("zerolab.course.checks.ch02", "trace_ring")             # not a check_ function
    with pytest.raises(ExerciseCheckFailed):
        helper(False)
    ExerciseCheckFailed("made outside any check")
    passed("outside any check")
    assert not pfile.exists()


def test_the_outermost_check_names_the_exercise(pfile):
    inner = _fake_check("zerolab.course.checks.ch04", "check_sequences")
    env = {"__name__": "zerolab.course.checks.ch04", "inner": inner}
    exec("def check_update_scale():\n    inner(True)\n", env)
    env["check_update_scale"]()
    assert [r["exercise"] for r in progress.load()] == ["ch04.check_update_scale"]


def test_the_notebook_is_recorded_when_jupyter_names_it(pfile, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/zerolab/exercises/01_weigh_the_backpack.ipynb")
    _fake_check("zerolab.course.checks.ch01", "check_model_state_bytes")(True)
    assert progress.load()[0]["notebook"].endswith("exercises/01_weigh_the_backpack.ipynb")


def test_a_real_check_records_its_failure(pfile):
    from zerolab.course.checks.ch03 import check_shard_range
    with pytest.raises(ExerciseCheckFailed, match="shard_range"):
        check_shard_range(lambda padded, n, r: (0, padded))        # every rank owns everything
    (rec,) = progress.load()
    assert rec["exercise"] == "ch03.check_shard_range" and rec["passed"] is False
    assert rec["message"].startswith("shard_range:")


def test_a_real_check_records_its_pass(pfile):
    from zerolab.course.checks.ch03 import check_shard_range, close_crews

    def shard_range(padded_numel, world_size, rank):
        size = padded_numel // world_size
        return rank * size, (rank + 1) * size
    try:
        check_shard_range(shard_range, world_sizes=(2,))
    finally:
        close_crews()
    assert [(r["exercise"], r["passed"]) for r in progress.load()] == [("ch03.check_shard_range", True)]


def test_an_unwritable_place_never_breaks_a_check(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")                       # its "folder" is a file: no one can write there, not even root
    monkeypatch.setenv("ZEROLAB_PROGRESS", str(blocker / "progress.json"))
    check = _fake_check("zerolab.course.checks.ch01", "check_model_state_bytes")
    check(True)                                                 # passes as before
    with pytest.raises(ExerciseCheckFailed, match="chunk 1"):   # fails as before
        check(False)
    out, err = capsys.readouterr()
    assert "PASSED: your ring works" in out
    err = err.splitlines()
    assert len(err) == 2 and all(line.startswith("zerolab: progress not recorded (") and
                                 line.endswith("the check itself is unaffected") for line in err)


def test_a_damaged_file_is_left_alone_with_a_warning(pfile, capsys):
    pfile.parent.mkdir(parents=True)
    pfile.write_text("{not json")
    _fake_check("zerolab.course.checks.ch01", "check_model_state_bytes")(True)
    assert pfile.read_text() == "{not json"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a zerolab progress file" in err and "delete it" in err
    assert cli(["progress"]) == 2


def test_off_and_pytest_default_record_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROLAB_PROGRESS", "off")
    assert progress.progress_path() is None
    assert progress.record("ch01.check_model_state_bytes", True) is False
    monkeypatch.delenv("ZEROLAB_PROGRESS")
    assert progress.progress_path() is None          # inside pytest, without the variable: nothing


def test_nbval_kernels_record_nothing_by_default(monkeypatch):
    """A kernel nbval starts has no pytest module, but inherits PYTEST_CURRENT_TEST."""
    monkeypatch.delenv("ZEROLAB_PROGRESS", raising=False)
    monkeypatch.setitem(progress.sys.modules, "pytest", None)
    monkeypatch.delitem(progress.sys.modules, "pytest")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "notebooks/03_three_stages.ipynb::Cell 40 (call)")
    assert progress.progress_path() is None
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert str(progress.progress_path()).endswith(".zerolab/progress.json")     # a learner's kernel


def test_the_file_keeps_the_newest_records(pfile, monkeypatch):
    monkeypatch.setattr(progress, "MAX_RECORDS", 5)
    for i in range(8):
        progress.record("ch04.check_update_scale", i == 7, f"run {i}")
    recs = progress.load()
    assert [r["message"] for r in recs] == [f"run {i}" for i in range(3, 8)]


def test_zerolab_progress_prints_what_is_done(pfile, capsys):
    assert cli(["progress"]) == 0
    out = capsys.readouterr().out
    n = len(progress.EXERCISES)
    assert out.count("not started") == n and f"0 of {n} exercises done" in out
    progress.record("ch01.check_model_state_bytes", False, "params: your number is 2 times too big")
    progress.record("ch01.check_model_state_bytes", True, "ok")
    progress.record("ch02.check_ring_reduce_scatter", False, "chunk 1 is wrong")
    assert cli(["progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"exercise checks recorded in {pfile}:"
    one = next(line for line in lines if "Exercise 1 " in line)
    two = next(line for line in lines if "Exercise 2 " in line)
    assert one.split()[0] == "done" and "(2 runs)" in one
    assert two.split()[0] == "tried" and two.endswith("not passed yet (1 run); last: chunk 1 is wrong")
    assert lines[-1] == f"1 of {len(progress.EXERCISES)} exercises done"


def test_zerolab_progress_json_for_the_instructor(pfile, capsys):
    progress.record("ch04.check_update_scale", True, "ok")
    assert cli(["progress", "--json", "--name", "Ana"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "Ana" and data["zerolab_progress"] == 1
    status = {e["exercise"]: e["status"] for e in data["exercises"]}
    assert status == {**dict.fromkeys(progress.EXERCISES, "not started"), "ch04.check_update_scale": "done"}
    assert str(pfile) not in json.dumps(data)          # no home path (user name) in what is shared


def test_every_listed_exercise_is_a_real_check():
    import importlib
    for key in progress.EXERCISES:
        module, fn = key.split(".")
        assert callable(getattr(importlib.import_module(f"zerolab.course.checks.{module}"), fn, None)), key


def test_a_solution_notebook_records_nothing(pfile, monkeypatch, tmp_path):
    # an instructor's dry run of solutions/ (JupyterLab names the notebook) or the course's rebuild
    # (jupyter execute in the solutions folder) must not mark the learner's exercises done
    check = _fake_check("zerolab.course.checks.ch01", "check_model_state_bytes")
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/zerolab/solutions/01_weigh_the_backpack.ipynb")
    check(True)
    monkeypatch.delenv("JPY_SESSION_NAME")
    (tmp_path / "solutions").mkdir()
    monkeypatch.chdir(tmp_path / "solutions")
    check(True)
    assert not pfile.exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/zerolab/exercises/01_weigh_the_backpack.ipynb")
    check(True)                                                     # the learner's own notebook counts
    assert [r["passed"] for r in progress.load()] == [True]
