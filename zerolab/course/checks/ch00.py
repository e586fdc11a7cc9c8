"""Chapter 0 check: the learner's ring all-gather, run on real ranks against ``dist.all_gather``.

The learner writes::

    def ring_all_gather(chunks, rank, world_size, send_recv):
        ...
        return chunks

``chunks`` is a list of ``world_size`` 1-D tensors (sizes may differ by one element); only
``chunks[rank]`` is this rank's real data at the start, the others are placeholders filled
with -1. ``send_recv(send_tensor, recv_tensor)`` sends ``send_tensor`` to the right neighbour
(rank + 1) while it fills ``recv_tensor`` with what the left neighbour (rank - 1) sends (the
same helper as chapter 2's exercise). After the function every chunk must hold its owner's
data, on every rank.

:func:`check_ring_all_gather` runs it on 2, 3 and 4 ranks with lengths that do not divide by
the world size, compares the result with ``torch.distributed.all_gather`` of the same chunks,
and checks the traffic: N-1 calls of ``send_recv``, each sending one chunk, (N-1)/N of the
tensor in all. Chunk c's elements are ``1000 * (c + 1) + i``, so a wrong chunk can be read:
the message says which chunk it holds (or that nothing arrived).
"""
from __future__ import annotations

import traceback
from typing import Callable

import torch
import torch.distributed as dist

from ... import i18n
from ...comm import Ledger
from ...crew import Crew, CrewTimeout, RankError
from . import ExerciseCheckFailed, passed, rank_failure
from .ch02 import _SendRecv, _describe_schedule

T = i18n.catalogue("checks.ch00")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_ring_all_gather", "CASES"]

CASES = ((2, 9), (3, 14), (4, 18))
HINT = T.mark("hint: in step s, rank r sends the chunk it got most recently (its own, chunk r, at "
        "step 0),\n  that is chunk (r - s) % N, and receives chunk (r - s - 1) % N from the left; "
        "N-1 steps in all")


def _hint() -> str:
    return T(HINT)


def chunk_values(c: int, numel: int) -> torch.Tensor:
    """Chunk ``c``'s data: ``1000 * (c + 1) + i`` (exact in float32; tells chunks apart)."""
    return 1000.0 * (c + 1) + torch.arange(numel, dtype=torch.float32)


def _what_it_holds(got: torch.Tensor, sizes: list[int]) -> str:
    if bool((got == -1).all()):
        return T("only the placeholder -1 (nothing arrived in it)")
    for c, size in enumerate(sizes):
        if size == got.numel() and torch.equal(got, chunk_values(c, size)):
            return T("chunk {c}'s data", c=c)
    return T("values that are no chunk's data")


def _rank_task(fn: Callable, numel: int, language: str = "en") -> dict:
    with i18n.using(language):          # a rank speaks the language of the notebook that started it
        return _rank_check(fn, numel)


def _rank_check(fn: Callable, numel: int) -> dict:
    r, n = dist.get_rank(), dist.get_world_size()
    sizes = [c.numel() for c in torch.arange(numel).tensor_split(n)]
    chunks = [chunk_values(c, s) if c == r else torch.full((s,), -1.0) for c, s in enumerate(sizes)]
    ledger = Ledger()
    send_recv = _SendRecv(r, n, chunks, ledger)
    where = T("world size {n}, rank {r}", n=n, r=r)
    result = {"rank": r, "error": None}
    try:
        out = fn(chunks, r, n, send_recv)
        send_recv.finish()
    except ExerciseCheckFailed as exc:
        result["error"] = T("world size {n}: {error}", n=n, error=exc) + "\n" + _hint()
        return result
    except Exception as exc:
        result["error"] = T("{where}: your ring_all_gather raised {name}: {error}\n"
                            "  hint: the error is in your function; the full traceback shows the line",
                            where=where, name=type(exc).__name__, error=exc)
        result["details"] = traceback.format_exc(limit=-3)
        result["not_implemented"] = isinstance(exc, NotImplementedError)
        return result
    counts: list = [None] * n
    dist.all_gather_object(counts, len(send_recv.schedule))
    if len(set(counts)) > 1:
        result["error"] = T("world size {n}: the ranks called send_recv different numbers of times "
                            "({counts}); every rank must take the same N-1 = {steps} steps.", n=n,
                            counts=", ".join(f"rank {k}: {c}" for k, c in enumerate(counts)), steps=n - 1)
        return result
    # The answer: torch's own all-gather of each rank's real chunk (uneven sizes: padded).
    mine = torch.zeros(max(sizes))
    mine[:sizes[r]] = chunk_values(r, sizes[r])
    gathered = [torch.empty(max(sizes)) for _ in range(n)]
    dist.all_gather(gathered, mine)
    expected = [gathered[c][:sizes[c]] for c in range(n)]
    out = chunks if out is None else out
    try:
        got = [out[c] for c in range(n)]
    except Exception:
        result["error"] = T("{where}: return the list of {n} chunks (got {type})", where=where, n=n,
                            type=type(out).__name__)
        return result
    for c in range(n):
        g = got[c]
        if not isinstance(g, torch.Tensor) or g.shape != expected[c].shape:
            shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
            result["error"] = T("{where}: chunk {c} should have shape {want}, got {shape}", where=where, c=c,
                                want=tuple(expected[c].shape), shape=shape) + "\n" + _hint()
            return result
        if not torch.equal(g.float(), expected[c]):
            result["error"] = T(
                "{where}: chunk {c} holds {holds},\n  but dist.all_gather gives chunk {c}'s data.\n"
                "  What rank {r} did: {schedule}.", where=where, c=c, holds=_what_it_holds(g.float(), sizes),
                r=r, schedule=_describe_schedule(send_recv.schedule)) + "\n" + _hint()
            return result
    sends = [rec for rec in ledger.records if rec.op == "send"]
    sent = sum(rec.numel for rec in sends)
    should = numel - sizes[(r + 1) % n]
    if len(sends) != n - 1 or sent != should:
        result["error"] = T(
            "{where}: the chunks are right, but the traffic is not a ring's: rank {r} called "
            "send_recv {calls} times and sent {sent} elements; a ring all-gather takes "
            "N-1 = {steps} steps and sends every chunk except the one it receives last: "
            "{should} of {numel} elements.\n  What rank {r} did: {schedule}.", where=where, r=r,
            calls=len(sends), sent=sent, steps=n - 1, should=should, numel=numel,
            schedule=_describe_schedule(send_recv.schedule))
        return result
    result.update(sent_bytes=int(ledger.totals()["send"]["bytes"]), sends=len(sends))
    return result


def check_ring_all_gather(fn: Callable, *, cases=CASES, timeout: float = 20.0) -> None:
    """Run ``fn`` (the learner's ring all-gather) on real ranks; raise
    :class:`ExerciseCheckFailed` saying what is wrong, or print what was verified."""
    lines = []
    for n, numel in cases:
        with Crew(n, backend="gloo", timeout=timeout) as crew:
            try:
                results = crew.run(_rank_task, fn, numel, i18n.lang(), timeout=timeout)
            except CrewTimeout as exc:
                raise ExerciseCheckFailed(T(
                    "world size {n}: ranks {ranks} were still waiting after {timeout:g} s: "
                    "every rank must call send_recv the same number of times (N-1).", n=n, ranks=exc.ranks,
                    timeout=timeout)) from None
            except RankError as exc:
                raise rank_failure(exc, T("world size {n}", n=n), T("a rank raised inside the check's "
                                   "ring; full_tracebacks() shows the line")) from None
        errors = [res for res in results if res["error"]]
        if errors:
            first = errors[0]
            if first.get("not_implemented"):
                raise ExerciseCheckFailed(T("ring_all_gather is not written yet "
                                            "(NotImplementedError on world size {n}).", n=n))
            raise ExerciseCheckFailed(first["error"], details=first.get("details"))
        sizes = [c.numel() for c in torch.arange(numel).tensor_split(n)]
        per_rank = ", ".join(f"{res['sent_bytes']}" for res in results)
        lines.append(T("N={n}: {numel} float32 elements in chunks of {sizes}; bytes sent by "
                       "rank: {per_rank}", n=n, numel=numel, sizes=sizes, per_rank=per_rank))
    passed(T("your ring all-gather equals dist.all_gather on every rank, in N-1 steps of one "
             "chunk:") + "\n  " + "\n  ".join(lines))
