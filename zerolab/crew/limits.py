"""What a crew may be, and how it fails: the backend a crew resolves to, the rank cap of a small
machine, and the errors a notebook sees when a rank raises, dies or hangs.

The parent side (:mod:`zerolab.crew`) raises these; their summary lines (not a rank's Python
traceback, which is shown as the rank wrote it) are in the edition's language (``zerolab/i18n/language.py``).
Everything public here is re-exported by ``zerolab.crew`` and ``zerolab``.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ..i18n import catalogue

T = catalogue("crew")      # the summary lines in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["SHM_NAMES", "resolve_backend", "CrewError", "RankError", "CrewTimeout", "TooManyRanks",
           "max_ranks", "set_max_ranks", "fit_ranks"]


SHM_NAMES = ("shm", "zshm")      # what a crew accepts for zerolab's shared-memory backend


def resolve_backend(backend: str, world_size: int) -> str:
    """The ``torch.distributed`` backend a crew of ``world_size`` ranks uses for ``backend``:

    * ``"auto"``: NCCL with one GPU per rank where there are enough GPUs, else gloo (never the
      shared-memory backend: that one is asked for by name);
    * ``"gloo"`` or ``"nccl"``: that one;
    * ``"shm"`` (or its torch name ``"zshm"``): zerolab's shared-memory collectives for CPU ranks
      on one x86-64 machine (:mod:`zerolab.crew.shm`). Returns ``"zshm"``. Where it cannot work, the
      ranks refuse at the start with :class:`zerolab.crew.shm.ShmUnavailable` and the reason; there is
      no fallback to gloo.
    """
    if backend == "auto":
        enough = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
        return "nccl" if enough and dist.is_nccl_available() else "gloo"
    if backend in SHM_NAMES:
        return "zshm"
    if backend not in ("gloo", "nccl"):
        raise ValueError(T("backend must be 'auto', 'gloo', 'nccl' or 'shm' (zerolab's shared-memory collectives for "
                           "CPU ranks on one machine), not {backend}", backend=repr(backend)))
    if backend == "nccl" and not (torch.cuda.is_available() and torch.cuda.device_count() >= world_size):
        raise ValueError(T("backend='nccl' needs {n} GPUs; this machine has {gpus}", n=world_size,
                           gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0))
    return backend


class CrewError(RuntimeError):
    """Base class of the crew's errors."""


_PEER_SYMPTOMS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                  "DistBackendError", "DistNetworkError")


def _is_peer_symptom(failure: dict) -> bool:
    """An error that a rank gets because *another* rank failed (its socket closed)."""
    text = f"{failure['type']}: {failure['message']}"
    return any(s in text for s in _PEER_SYMPTOMS)


class RankError(CrewError):
    """A rank raised (or died). ``.rank`` is the rank that most likely caused it: the lowest
    rank whose error is not merely a peer's connection dropping; ``.failures`` maps rank ->
    traceback (empty for a rank that died without one)."""

    def __init__(self, failures: dict[int, dict], others: str = ""):
        self.failures = {r: f["traceback"] for r, f in failures.items()}
        causes = [r for r in failures if not _is_peer_symptom(failures[r])]
        self.rank = min(causes or failures)
        first = failures[self.rank]
        ranks = ", ".join(str(r) for r in sorted(failures))
        lines = [first["message"]                  # "rank 2 died during run (exit code -9)": says it all
                 if first["type"] == "RankDied" else
                 T("rank {rank} raised {type}: {message}", rank=self.rank, type=first["type"],
                   message=first["message"]),
                 T("(ranks that failed: {ranks}{others})", ranks=ranks, others=others), "",
                 T("--- traceback from rank {rank} ---", rank=self.rank),
                 first["traceback"].rstrip() or T("(none: the process ended without a Python exception; "
                                                  "what it printed is above)")]
        for r in sorted(failures):
            if r != self.rank and failures[r]["traceback"] != first["traceback"]:
                lines += ["", T("--- traceback from rank {rank} ---", rank=r),
                          failures[r]["traceback"].rstrip() or failures[r]["message"]]
        super().__init__("\n".join(lines))


class CrewTimeout(CrewError, TimeoutError):
    """Some ranks did not finish in time. ``.ranks`` lists them."""

    def __init__(self, ranks: list[int], timeout: float):
        self.ranks = ranks
        super().__init__(T("ranks {ranks} did not finish within {timeout:g} s; the crew was stopped (every rank "
                           "process killed). A hung collective usually means the ranks did not all call the same "
                           "collectives in the same order.", ranks=ranks, timeout=timeout))


class TooManyRanks(CrewError, ValueError):
    """A crew was asked for more ranks than :func:`max_ranks` allows on this machine."""

    def __init__(self, asked: int, allowed: int, source: str):
        self.asked, self.allowed, self.source = asked, allowed, source
        super().__init__(T(
            "a crew of {asked} ranks was asked for, but {source} allows at most {allowed} here. Run the cell with "
            "N <= {allowed} (chapter 0: N = {allowed} at the top; docs/INSTRUCTOR.md lists what each chapter can "
            "do): its claims are formula against measurement at the N it runs, so they hold, but its output will "
            "differ from the stored one (made with the default N)", asked=asked, source=source, allowed=allowed))


# ----------------------------------------------------------------------------- the rank cap

MAX_RANKS_ENV = "ZEROLAB_MAX_RANKS"
_MAX_RANKS: int | None = None       # set_max_ranks's value; None: the environment variable decides


def set_max_ranks(n: int | None) -> None:
    """Allow crews of at most ``n`` ranks in this process (None: back to ``$ZEROLAB_MAX_RANKS``)."""
    global _MAX_RANKS
    if n is not None and (isinstance(n, bool) or int(n) != n or n < 1):
        raise ValueError(T("set_max_ranks needs a whole number >= 1 or None, not {value}", value=repr(n)))
    _MAX_RANKS = None if n is None else int(n)


def _cap() -> tuple[int | None, str]:
    """The cap and where it comes from (for messages)."""
    if _MAX_RANKS is not None:
        return _MAX_RANKS, f"zerolab.set_max_ranks({_MAX_RANKS})"
    text = os.environ.get(MAX_RANKS_ENV, "").strip()
    if not text:
        return None, ""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(T("{env}={value}: it must be a whole number >= 1 (or unset: no cap)", env=MAX_RANKS_ENV,
                           value=repr(text)))
    return n, f"{MAX_RANKS_ENV}={n}"


def max_ranks() -> int | None:
    """The most ranks one crew may have here: ``set_max_ranks``'s value, else ``$ZEROLAB_MAX_RANKS``,
    else None (no cap). ``Crew`` and ``launch`` refuse more (:class:`TooManyRanks`); they never
    shrink a crew silently, because a chapter computes its formulas from the N it asked for."""
    return _cap()[0]


def fit_ranks(sizes):
    """For a notebook that can run at a smaller N: ``fit_ranks(4)`` is ``min(4, max_ranks())``,
    ``fit_ranks((1, 2, 3, 4))`` the sizes that fit. Prints a one-line note when the cap cuts."""
    cap, source = _cap()
    if isinstance(sizes, int):
        if cap is not None and sizes > cap:
            print(T("zerolab: {cap} ranks instead of {sizes} ({source}); what follows is measured at N = {cap}",
                    cap=cap, sizes=sizes, source=source))
            return cap
        return sizes
    sizes = tuple(sizes)
    kept = tuple(n for n in sizes if cap is None or n <= cap)
    if kept != sizes:
        dropped = ", ".join(str(n) for n in sizes if n not in kept)
        print(T("zerolab: crews of {kept} only, not {dropped} ({source})",
                kept=", ".join(map(str, kept)) or T("no size"), dropped=dropped, source=source))
    return kept
