"""Exercise checks: run the learner's piece inside the real engine, on real ranks.

Each chapter's checks live in ``zerolab/checks/chNN.py``. A check takes the learner's
function, plugs it into the engine (or the collectives) on a crew of ranks, compares the
result with zerolab's own implementation, and either prints what was verified or raises
:class:`ExerciseCheckFailed` saying *what* is wrong (which rank, which value, expected vs got).

Convention in ``solutions/*.ipynb`` (the source; ``exercises/`` is generated from it by
``tools/make_exercises.py``): the learner's part of a cell sits between the lines
``# BEGIN SOLUTION`` and ``# END SOLUTION``; in the exercise it becomes
``raise NotImplementedError(...)`` at the same indentation.
"""
from __future__ import annotations

__all__ = ["ExerciseCheckFailed", "passed", "not_implemented"]


class ExerciseCheckFailed(AssertionError):
    """The learner's piece does not do what the engine needs; the message says why."""


def passed(message: str) -> None:
    print(f"PASSED: {message}")


def not_implemented(exc: BaseException) -> bool:
    """True if ``exc`` (or its rank traceback) is the exercise's NotImplementedError."""
    text = f"{type(exc).__name__}: {exc}"
    return "NotImplementedError" in text
