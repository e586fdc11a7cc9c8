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
