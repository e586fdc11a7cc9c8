"""The exercises: generated from the solutions, and their checks can fail.

(a) ``exercises/`` is exactly what ``tools/make_exercises.py`` makes from ``solutions/``.
(b) Every exercise notebook, run as shipped (the learner has written nothing yet), makes
    every cell tagged ``check`` raise ExerciseCheckFailed or NotImplementedError: a check
    that passes on an empty exercise checks nothing. Any other cell may only raise those
    two errors (anything else, e.g. an ImportError, is a bug in the notebook).
(c) That the checks *pass* with the solutions is shown by nbval on ``solutions/``
    (``pytest --nbval solutions/``), so it is not repeated here.

Each exercise notebook is executed once (nbclient, the ``python3`` kernel, which
jupyter_client starts with this interpreter).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
EXPECTED_ERRORS = ("ExerciseCheckFailed", "NotImplementedError")
CELL_TIMEOUT_S = 240


def test_exercises_are_generated_from_solutions():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "make_exercises.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _errors(cell) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _error_text(err: dict) -> str:
    return f"{err.get('ename')}: {err.get('evalue')}\n" + "\n".join(err.get("traceback", []))


def _mentions_expected(err: dict) -> bool:
    text = _error_text(err)
    return any(name in text for name in EXPECTED_ERRORS)


def _short(cell) -> str:
    first = cell.source.strip().splitlines()[:1]
    return first[0][:80] if first else "<empty>"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_exercise_checks_fail_as_shipped(path: Path):
    nb = nbformat.read(path, as_version=4)
    checks = [i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and "check" in c.metadata.get("tags", [])]
    assert checks, f"{path.name}: no code cell tagged 'check'"

    client = nbclient.NotebookClient(nb, kernel_name="python3", allow_errors=True,
                                     timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()

    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = _errors(cell)
        if i in checks:
            if not errors:
                problems.append(f"cell {i} ({_short(cell)!r}) is tagged 'check' but passed on the empty exercise")
            elif not any(_mentions_expected(e) for e in errors):
                problems.append(f"cell {i} ({_short(cell)!r}) failed, but not with {' or '.join(EXPECTED_ERRORS)}:\n"
                                + _error_text(errors[0])[-2000:])
        else:
            for e in errors:
                if not _mentions_expected(e):
                    problems.append(f"cell {i} ({_short(cell)!r}) raised an unexpected error:\n"
                                    + _error_text(e)[-2000:])
    assert not problems, f"{path.name}:\n" + "\n\n".join(problems)


# -- how a failed check looks -------------------------------------------------------------
# A failed check shows a few lines in Jupyter (what is wrong, what was expected, a hint), not
# ~35 lines of chained traceback through zerolab's internals; the full traceback is there on
# demand (zerolab.checks.full_tracebacks()). Run through a real kernel, as a learner sees it.

MAX_SHORT_LINES = 10
ANSI = __import__("re").compile(r"\x1b\[[0-9;]*m")

WRONG_ANSWERS = '''
from zerolab.checks.ch04 import check_update_scale
from zerolab.checks.ch03 import check_shard_range

def update_scale_forgets_the_count(state, overflow):      # never adds 1 to cur_iter
    if overflow:
        if state["delayed_shift"] == 1 or state["cur_hysteresis"] == 1:
            state["cur_scale"] = max(state["cur_scale"] / state["scale_factor"], state["min_scale"])
        else:
            state["cur_hysteresis"] -= 1
        state["last_overflow_iter"] = state["cur_iter"]

def shard_range_overlapping(padded_numel, world_size, rank):   # one element too many
    size = padded_numel // world_size
    return rank * size, min((rank + 1) * size + 1, padded_numel)
'''


def _shown(err: dict) -> str:
    """The error as Jupyter displays it: the traceback lines, colours removed."""
    return ANSI.sub("", "\n".join(err.get("traceback", [])))


@pytest.mark.timeout(300)
def test_a_failed_check_is_a_few_lines_with_expected_and_hint():
    cells = [WRONG_ANSWERS,
             "check_update_scale(update_scale_forgets_the_count)",
             "check_shard_range(shard_range_overlapping)",
             "import zerolab.checks\nzerolab.checks.full_tracebacks()",
             "check_update_scale(update_scale_forgets_the_count)"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbclient.NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    errors = [_errors(c) for c in nb.cells]
    assert not errors[0] and not errors[3], [_error_text(e[0]) for e in errors if e][:1]

    scaler = errors[1][0]
    shown = _shown(scaler)
    assert scaler["ename"] == "ExerciseCheckFailed"
    assert len(shown.splitlines()) <= MAX_SHORT_LINES, shown
    assert "expected:" in shown and "yours:" in shown, shown
    assert "hint: cur_iter counts the calls" in shown, shown
    assert "full_tracebacks()" in shown, shown                    # says how to see more
    assert "Traceback" not in shown and "zerolab/checks" not in shown, shown

    shard = _shown(errors[2][0])
    assert len(shard.splitlines()) <= MAX_SHORT_LINES, shard
    assert "an overlap" in shard and "hint: rank r + 1 starts where rank r ends" in shard, shard

    full = _shown(errors[4][0])                                  # on demand: the whole chain
    assert "ch04.py" in full and len(full.splitlines()) > MAX_SHORT_LINES, full


def test_a_rank_failure_puts_the_ranks_error_first_and_its_traceback_in_details():
    from zerolab.checks import ExerciseCheckFailed, rank_failure

    class FakeRankError(Exception):
        pass

    text = ("rank 1 raised ZeroDivisionError: division by zero\n(ranks that failed: 1)\n\n"
            "--- traceback from rank 1 ---\n" + "\n".join(f'  File "x.py", line {i}' for i in range(40)))
    exc = rank_failure(FakeRankError(text), "stage 1 with your shard_range on 2 ranks", "divide by world_size")
    assert isinstance(exc, ExerciseCheckFailed)
    short = ANSI.sub("", "\n".join(exc._render_traceback_()))
    assert len(short.splitlines()) <= MAX_SHORT_LINES, short
    assert "ZeroDivisionError: division by zero" in short.splitlines()[0]
    assert "hint: divide by world_size" in short
    assert 'line 39' in str(exc)                                 # nothing lost outside the short view
