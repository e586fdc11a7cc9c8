"""Exercise checks: run the learner's piece inside the real engine, on real ranks.

Each chapter's checks live in ``zerolab/course/checks/chNN.py``. A check takes the learner's
function, plugs it into the engine (or the collectives) on a crew of ranks, compares the
result with zerolab's own implementation, and either prints what was verified or raises
:class:`ExerciseCheckFailed` saying *what* is wrong (which rank, which value, expected vs got)
and naming the likely mistake in a ``hint:`` line.

**How a failure looks.** In Jupyter (IPython) a failed check shows only its message, a few
lines, not the chained traceback through zerolab's internals. The full traceback (and the
complete message, with any rank's traceback) is there on demand::

    import zerolab.course.checks
    zerolab.course.checks.full_tracebacks()      # then run the check cell again; full_tracebacks(False) undoes it

or start Jupyter with the environment variable ``ZEROLAB_FULL_TRACEBACK=1``. Outside IPython
(a plain script) Python prints the whole traceback as usual.

Convention in ``solutions/*.ipynb`` (the source; ``exercises/`` is generated from it by
``tools/make_exercises.py``): the learner's part of a cell sits between the lines
``# BEGIN SOLUTION`` and ``# END SOLUTION``; in the exercise it becomes
``raise NotImplementedError(...)`` at the same indentation.
"""
from __future__ import annotations

import os
import sys

from ...i18n import catalogue

T = catalogue("checks")   # what every check shows, in the edition's language (zerolab/i18n/language.py)

__all__ = ["ExerciseCheckFailed", "passed", "not_implemented", "full_tracebacks", "rank_failure",
           "SHORT_LINES", "crew_of", "close_crews"]

_CREWS: dict = {}                 # (world size, nodes) -> the crew the checks keep between calls


def crew_of(n: int, nodes: int = 1):
    """A crew of ``n`` ranks (as ``nodes`` virtual nodes) kept for the checks (starting one costs seconds)."""
    import zerolab
    crew = _CREWS.get((n, nodes))
    if crew is None:
        crew = _CREWS[n, nodes] = zerolab.Crew(n, timeout=180, nodes=nodes)
    return crew


def close_crews() -> None:
    """Stop the ranks the checks started (they also stop when the kernel exits)."""
    while _CREWS:
        _CREWS.popitem()[1].close()

# At most this many lines of the message in the short display (a rank's traceback is longer).
SHORT_LINES = 8
_FULL = False


def full_tracebacks(on: bool = True) -> None:
    """Show failed checks with Python's full (chained) traceback from now on (``on=False``: short again)."""
    global _FULL
    _FULL = bool(on)


def _full_wanted() -> bool:
    return _FULL or os.environ.get("ZEROLAB_FULL_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no")


class ExerciseCheckFailed(AssertionError):
    """The learner's piece does not do what the engine needs; the message says why.

    ``ExerciseCheckFailed(message, details=...)``: ``message`` is what the learner reads (what is
    wrong, what was expected, a ``hint:``); ``details`` (a rank's traceback, say) is shown only
    with :func:`full_tracebacks`, and is always in ``str(exc)`` outside IPython's short display.
    """

    def __init__(self, message: str = "", *, details: str | None = None):
        self.message = str(message)
        self.details = details
        super().__init__(self.message + (f"\n\n{details}" if details else ""))
        _record(False, self.message)

    # IPython calls this (if the attribute exists) instead of formatting the traceback. When
    # the full traceback is asked for, the attribute disappears and IPython does its usual.
    def __getattr__(self, name):
        if name == "_render_traceback_" and not _full_wanted():
            return self._short_traceback
        raise AttributeError(name)

    def _short_traceback(self) -> list[str]:
        red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
        lines = self.message.rstrip().splitlines() or ["(no message)"]
        hidden = len(lines) - SHORT_LINES
        if hidden > 0:
            lines = lines[:SHORT_LINES - 1] + [T("  ... ({n} more lines)", n=hidden + 1)]
        out = [f"{red}{bold}ExerciseCheckFailed{reset}{red}: {lines[0]}{reset}"] + lines[1:]
        out.append(T("(the full traceback and the rank's traceback: run zerolab.course.checks.full_tracebacks(), then this "
                     "cell again)") if self.details else
                   T("(the full traceback: run zerolab.course.checks.full_tracebacks(), then this cell again)"))
        return ["\n".join(out)]


def rank_failure(exc: BaseException, what: str, hint: str) -> ExerciseCheckFailed:
    """An :class:`ExerciseCheckFailed` for a RankError/CrewTimeout: ``what`` failed, the rank's
    own error line (the useful sentence, first), a hint; the rank's traceback as details."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    return ExerciseCheckFailed(T("{what} failed on the ranks: {first}\n  hint: {hint}", what=what, first=first,
                                 hint=hint), details=text)


def passed(message: str) -> None:
    print(T("PASSED: {message}", message=message))
    _record(True, message)


def _record(ok: bool, message: str) -> None:
    """Learner progress (zerolab.course.progress, ``zerolab progress``); it never breaks a check."""
    try:
        from ..progress import record_check
        record_check(ok, message)
    except Exception as exc:      # noqa: BLE001
        print(f"zerolab: progress not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)


def not_implemented(exc: BaseException) -> bool:
    """True if ``exc`` (or its rank traceback) is the exercise's NotImplementedError."""
    text = f"{type(exc).__name__}: {exc}"
    return "NotImplementedError" in text
