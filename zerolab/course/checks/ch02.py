"""Chapter 2 check: the learner's ring reduce-scatter, run on real ranks.

The learner writes::

    def ring_reduce_scatter(chunks, rank, world_size, send_recv):
        ...
        return chunks

``chunks`` is this rank's copy of the tensor, cut into ``world_size`` 1-D pieces with
``tensor_split`` (so sizes may differ by one element); ``send_recv(send_tensor, recv_tensor)``
sends ``send_tensor`` to the right neighbour (rank + 1) while it fills ``recv_tensor`` with
what the left neighbour (rank - 1) sends, in one step of the ring. After the function,
``chunks[rank]`` must hold the sum of chunk ``rank`` over all ranks.

:func:`check_ring_reduce_scatter` runs it on crews of 2, 3 and 4 ranks, with tensor lengths
that do not divide by the world size, and checks three things:

1. the values: ``chunks[rank]`` equals the sum over ranks (computed here without any
   communication, and cross-checked with :func:`zerolab.comm.ring_reduce_scatter`);
2. the traffic: each rank called ``send_recv`` N-1 times and sent exactly the N-1 chunks it
   does not own, which is (N-1)/N of the tensor (give or take the one-element difference
   between uneven chunks);
3. the engine: stage 0 (DDP from scratch) trains TinyLM with the learner's reduce-scatter
   (followed by zerolab's ring all-gather) as its gradient all-reduce, and ends with the same
   parameters as single-process training.

Each rank's input is chosen so that a wrong answer can be read: rank k contributes
``2**k * (1 + i % 7)`` at element i, so the sum at element i, divided by ``1 + i % 7``, is a
bit mask of the ranks whose contribution arrived. The error message says which are missing.
"""
from __future__ import annotations

import traceback
from typing import Callable

import torch
import torch.distributed as dist

from ... import i18n
from ...comm import CommRecord, Ledger, ring_all_gather, ring_reduce_scatter as reference_ring_reduce_scatter
from ...crew import Crew, CrewTimeout, RankError
from . import ExerciseCheckFailed, not_implemented, passed, rank_failure

T = i18n.catalogue("checks.ch02")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_ring_reduce_scatter", "trace_ring", "ring_input"]

# (world size, tensor length): lengths that do not divide by the world size, so chunks differ.
CASES = ((2, 11), (3, 14), (4, 18))
HINT = T.mark("Hint: follow one chunk around the ring. Chunk c must visit every rank once and end, "
        "fully summed, at rank c after N-1 steps; each step moves it one rank to the right. So "
        "where does chunk c start, and which chunk is rank r holding on its way at step s? The "
        "chunk a rank receives is the one its left neighbour sends.")


def _hint() -> str:
    return T(HINT)


def ring_input(rank: int, numel: int, dtype=torch.float32) -> torch.Tensor:
    """Rank ``rank``'s tensor: ``2**rank * (1 + i % 7)`` at element i (exact in any float type)."""
    i = torch.arange(numel)
    return ((1 + i % 7) * 2 ** rank).to(dtype)


class _SendRecv:
    """The ``send_recv`` handed to the learner: one step of the ring over real send/recv.

    Before the payload moves, the neighbours swap its size; if any rank's receive buffer does
    not match what its left neighbour is about to send, *every* rank raises (a mismatched
    send/recv would otherwise hang). Each payload is written to ``ledger`` (send = the bytes
    this rank put on the wire), and ``schedule`` notes, per step, which chunk was sent (found
    by its memory) and which chunks changed before the next step (where the message went).
    """

    def __init__(self, rank: int, world_size: int, chunks: list[torch.Tensor], ledger: Ledger):
        self.rank, self.n = rank, world_size
        self.ledger = ledger
        self.chunks = chunks                     # the learner's list (watched, never changed here)
        self.schedule: list[list] = []           # per step: [chunk sent, chunks changed after]
        self._snap = self._snapshot()

    def _snapshot(self) -> list:
        return [c.detach().clone() if isinstance(c, torch.Tensor) else None for c in self.chunks]

    def _which(self, t) -> int | None:
        """Which of the learner's chunks ``t`` is (by memory), or None."""
        if not isinstance(t, torch.Tensor) or not t.numel():
            return None
        for i, c in enumerate(self.chunks):
            if isinstance(c, torch.Tensor) and c.numel() == t.numel() and c.data_ptr() == t.data_ptr():
                return i
        return None

    def _note_changes(self) -> None:
        """Record which chunks changed since the last step: where that step's message went."""
        if self.schedule and self.schedule[-1][1] is None:
            changed = [i for i, (c, old) in enumerate(zip(self.chunks, self._snap))
                       if isinstance(c, torch.Tensor) and old is not None
                       and (c.shape != old.shape or not torch.equal(c, old))]
            self.schedule[-1][1] = changed
        self._snap = self._snapshot()

    def finish(self) -> None:
        self._note_changes()

    def __call__(self, send_tensor: torch.Tensor, recv_tensor: torch.Tensor) -> None:
        step = len(self.schedule)
        right, left = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        self._note_changes()
        self.schedule.append([self._which(send_tensor), None])
        problem = ""
        if not isinstance(send_tensor, torch.Tensor) or not isinstance(recv_tensor, torch.Tensor):
            problem = T("rank {rank}, step {step}: send_recv takes two tensors, got {a} and {b}", rank=self.rank,
                        step=step, a=type(send_tensor).__name__, b=type(recv_tensor).__name__)
        elif not recv_tensor.is_contiguous():
            problem = T("rank {rank}, step {step}: the receive buffer must be contiguous", rank=self.rank, step=step)
        mine = torch.tensor([send_tensor.numel() if not problem else -1], dtype=torch.int64)
        theirs = torch.empty(1, dtype=torch.int64)
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right),
                                           dist.P2POp(dist.irecv, theirs, left)]):
            req.wait()
        if not problem and int(theirs) >= 0 and int(theirs) != recv_tensor.numel():
            problem = T("rank {rank}, step {step}: the left neighbour (rank {left}) sends {sends} elements, but "
                        "the receive buffer has {has}: the chunk a rank receives must be the one its left "
                        "neighbour sends", rank=self.rank, step=step, left=left, sends=int(theirs),
                        has=recv_tensor.numel())
        if not problem and send_tensor.dtype != recv_tensor.dtype:
            problem = T("rank {rank}, step {step}: send is {send} but the receive buffer is {recv}; use "
                        "torch.empty_like on a chunk", rank=self.rank, step=step, send=send_tensor.dtype,
                        recv=recv_tensor.dtype)
        problems: list[str] = [""] * self.n
        dist.all_gather_object(problems, problem)
        if any(problems):
            raise ExerciseCheckFailed(next(p for p in problems if p))
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, send_tensor.contiguous(), right),
                                           dist.P2POp(dist.irecv, recv_tensor, left)]):
            req.wait()
        dtype = str(send_tensor.dtype).replace("torch.", "")
        self.ledger.add(CommRecord("send", send_tensor.numel(), send_tensor.numel() * send_tensor.element_size(),
                                   dtype, self.n, 0.0, f"ring step {step}"))
        self.ledger.add(CommRecord("recv", recv_tensor.numel(), recv_tensor.numel() * recv_tensor.element_size(),
                                   dtype, self.n, 0.0, f"ring step {step}"))


def _describe_schedule(schedule) -> str:
    parts = []
    for s, (sent, changed) in enumerate(schedule):
        a = T("a tensor that is not one of the chunks") if sent is None else T("chunk {c}", c=sent)
        if not changed:
            parts.append(T("step {s}: sent {a}, then changed no chunk", s=s, a=a))
            continue
        chunks = T("chunk {c}", c=("、" if i18n.is_zh() else ", ").join(str(i) for i in changed))
        parts.append(T("step {s}: sent {a}, then changed {changed}", s=s, a=a, changed=chunks))
    return ("；" if i18n.is_zh() else "; ").join(parts) or T("send_recv was never called")


def _contributors(got: torch.Tensor, weights: torch.Tensor, n: int) -> str:
    """Read the bit mask of contributing ranks from one element (see the module docstring)."""
    mask = float(got) / float(weights)
    if mask != int(mask) or not 0 <= mask < 2 ** n:
        return T("a value that is not each rank's contribution added once")
    present = [k for k in range(n) if int(mask) >> k & 1]
    missing = [k for k in range(n) if k not in present]
    return ((T("the contributions of ranks {present}", present=present) if present else
             T("the contributions of ranks none"))
            + (T("; missing ranks {missing}", missing=missing) if missing else ""))


def _rank_task(fn: Callable, numel: int, language: str = "en") -> dict:
    with i18n.using(language):          # a rank speaks the language of the notebook that started it
        return _rank_check(fn, numel)


def _rank_check(fn: Callable, numel: int) -> dict:
    """Runs on every rank: the learner's function on this rank's input, checked here."""
    r, n = dist.get_rank(), dist.get_world_size()
    x = ring_input(r, numel)
    chunks = [c.clone() for c in x.tensor_split(n)]
    sizes = [c.numel() for c in chunks]
    ledger = Ledger()
    send_recv = _SendRecv(r, n, chunks, ledger)
    result = {"rank": r, "error": None}
    try:
        out = fn(chunks, r, n, send_recv)
        send_recv.finish()
    except ExerciseCheckFailed as exc:
        result["error"] = T("world size {n}: {error}", n=n, error=exc) + "\n" + _hint()
        return result
    except Exception as exc:
        result["error"] = T("world size {n}, rank {r}: your ring_reduce_scatter raised {kind}: {error}\n"
                            "  hint: the error is in your function; the full traceback shows the line",
                            n=n, r=r, kind=type(exc).__name__, error=exc)
        result["details"] = traceback.format_exc(limit=-3)
        result["not_implemented"] = isinstance(exc, NotImplementedError)
        return result
    # Did every rank take the same number of steps? (A collective, not send/recv: a rank still
    # waiting in send_recv never mistakes it for a neighbour's message; it times out instead.)
    counts: list = [None] * n
    dist.all_gather_object(counts, len(send_recv.schedule))
    if len(set(counts)) > 1:
        result["error"] = T("world size {n}: the ranks called send_recv different numbers of times ({counts}); "
                            "every rank must take the same N-1 = {steps} steps.", n=n,
                            counts=", ".join(f"rank {k}: {c}" for k, c in enumerate(counts)), steps=n - 1)
        return result
    out = chunks if out is None else out
    expected_full = sum(ring_input(k, numel) for k in range(n))
    expected = expected_full.tensor_split(n)[r]
    reference = reference_ring_reduce_scatter(x)[r]          # zerolab's own ring, same input
    assert torch.equal(reference, expected), "zerolab.comm.ring_reduce_scatter disagrees with the sum"
    where = T("world size {n}, rank {r}", n=n, r=r)
    try:
        got = out[r]
    except Exception:
        result["error"] = T("{where}: the function must return the list of {n} chunks (got {type})", where=where,
                            n=n, type=type(out).__name__)
        return result
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        result["error"] = T("{where}: chunk {r} should be a tensor of shape {want}, got {shape}", where=where, r=r,
                            want=tuple(expected.shape), shape=shape)
        return result
    if not torch.equal(got.to(expected.dtype), expected):
        bad = int((got.to(expected.dtype) != expected).nonzero()[0])
        start = sum(sizes[:r])
        weight = 1 + (start + bad) % 7
        result["error"] = T(
            "{where}: chunk {r} (elements {first}..{last} of the tensor) is wrong.\n"
            "  expected {want}\n  got      {got}\n"
            "  element {bad} of the chunk holds {holds} (it should hold all {n} ranks' contributions, each once).\n"
            "  What rank {r} did: {schedule}.", where=where, r=r, first=start, last=start + sizes[r] - 1,
            want=expected.tolist(), got=got.tolist(), bad=bad, holds=_contributors(got[bad], weight, n), n=n,
            schedule=_describe_schedule(send_recv.schedule)) + "\n" + _hint()
        return result
    sends = [rec for rec in ledger.records if rec.op == "send"]
    sent = sum(rec.numel for rec in sends)
    should = numel - sizes[r]
    if len(sends) != n - 1 or sent != should:
        result["error"] = T(
            "{where}: the values are right, but the traffic is not a ring's: rank {r} called send_recv {calls} "
            "times and sent {sent} elements; a ring reduce-scatter takes N-1 = {steps} steps and sends each chunk "
            "except its own once: {should} of {numel} elements.\n  What rank {r} did: {schedule}.", where=where,
            r=r, calls=len(sends), sent=sent, steps=n - 1, should=should, numel=numel,
            schedule=_describe_schedule(send_recv.schedule))
        return result
    result.update(sent_numel=sent, sent_bytes=int(ledger.totals()["send"]["bytes"]), numel=numel,
                  element_size=x.element_size(), sends=len(sends))
    return result


def _engine_task(fn: Callable, steps: int = 2) -> dict:
    """Stage 0 (DDP) on TinyLM, its gradient all-reduce made of the learner's reduce-scatter
    and zerolab's ring all-gather; compared with single-process training."""
    import zerolab
    from ...models import TinyLM, lm_batches, lm_loss
    from ...zero.reference import train_engine, train_reference

    r, n = dist.get_rank(), dist.get_world_size()
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "train_batch_size": 2 * n,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
           "zero_optimization": {"stage": 0}}     # DeepSpeed's stage 0: one bucket of 5e8 elements
    batches = lm_batches(steps, cfg["train_batch_size"], seed=2)
    engine = zerolab.initialize(TinyLM(), cfg)
    comm = engine.comm
    calls = []

    def all_reduce_by_ring(t, op=dist.ReduceOp.SUM, *, tag="", async_op=False):
        if op != dist.ReduceOp.SUM:
            raise ValueError("this check's ring all-reduce sums only")
        flat = t.reshape(-1)
        chunks = [c.clone() for c in flat.tensor_split(n)]
        ledger = Ledger()
        out = fn(chunks, r, n, _SendRecv(r, n, chunks, ledger))
        out = chunks if out is None else out
        full = ring_all_gather(out)
        t.copy_(full.reshape(t.shape))
        calls.append((tag, t.numel()))
        if async_op:                              # the engine asked for a handle: it is done already
            from zerolab.comm import Pending
            return Pending(comm, "all_reduce", t, t.numel(), tag, None)
        return t

    comm.all_reduce = all_reduce_by_ring          # this engine only, this rank only
    train_engine(engine, batches, lm_loss)
    got = engine.full_params()
    ref = train_reference(TinyLM(), cfg, batches, lm_loss)
    diff = max(float((got[k] - ref[k]).abs().max()) for k in ref)
    rel = max(float(((got[k] - ref[k]).abs() / (1e-6 / 1e-5 + ref[k].abs())).max()) for k in ref)
    return {"max_abs_diff": diff, "ok": rel < 1e-5, "steps": steps,
            "grad_calls": sum(1 for tag, _ in calls if tag.startswith("grads")),
            "numel": max(numel for tag, numel in calls if tag.startswith("grads"))}


def _run(crew: Crew, task, *args, timeout: float) -> list[dict]:
    n = crew.world_size
    try:
        return crew.run(task, *args, timeout=timeout)
    except CrewTimeout as exc:
        raise ExerciseCheckFailed(T(
            "world size {n}: ranks {ranks} were still waiting after {timeout:g} s. Usually one rank stopped "
            "calling send_recv while its neighbour was still waiting for it: every rank must call send_recv "
            "the same number of times (N-1).", n=n, ranks=exc.ranks, timeout=timeout)) from None
    except RankError as exc:
        raise rank_failure(exc, T("world size {n}", n=n), T("a rank raised inside the check's ring; the rank's "
                           "traceback (full_tracebacks()) names the line")) from None


def check_ring_reduce_scatter(fn: Callable, *, cases=CASES, engine_world_sizes=(3,),
                              timeout: float = 20.0, engine_timeout: float = 180.0) -> None:
    """Run ``fn`` (the learner's ring reduce-scatter) on real ranks; raise
    :class:`ExerciseCheckFailed` saying what is wrong, or print what was verified.

    ``engine_world_sizes``: where DDP is also trained with ``fn`` (3 by default: an odd world
    size; a fresh rank's first optimizer costs seconds).
    ``timeout`` (seconds) bounds each run of ``fn`` alone, ``engine_timeout`` the DDP training."""
    lines = []
    engine_lines = []
    for n, numel in cases:
        with Crew(n, backend="gloo", timeout=timeout) as crew:
            results = _run(crew, _rank_task, fn, numel, i18n.lang(), timeout=timeout)
            errors = [res for res in results if res["error"]]
            if errors:
                first = errors[0]
                if first.get("not_implemented"):
                    raise ExerciseCheckFailed(T("ring_reduce_scatter is not written yet "
                                                "(NotImplementedError on world size {n}).", n=n))
                raise ExerciseCheckFailed(first["error"], details=first.get("details"))
            sizes = [c.numel() for c in torch.arange(numel).tensor_split(n)]
            size = results[0]["element_size"]
            per_rank = ", ".join(f"rank {res['rank']} {res['sent_bytes']} B" for res in results)
            lines.append(T("N={n}: {numel} float32 elements ({bytes} B) in chunks of {sizes}: chunk[rank] right on "
                           "every rank;\n    sent {per_rank} ((N-1)/N x {bytes} B = {share:.1f} B)", n=n,
                           numel=numel, bytes=numel * size, sizes=sizes, per_rank=per_rank,
                           share=(n - 1) / n * numel * size))
            if n in engine_world_sizes:
                res = _run(crew, _engine_task, fn, timeout=engine_timeout)
                bad = [r for r, x in enumerate(res) if not x["ok"]]
                if bad:
                    raise ExerciseCheckFailed(T(
                        "world size {n}: DDP (stage 0) with your reduce-scatter as the gradient all-reduce "
                        "trained TinyLM to different parameters than single-process training (rank {rank}: "
                        "max |difference| {diff:.3g}).", n=n, rank=bad[0], diff=res[bad[0]]["max_abs_diff"]))
                engine_lines.append(T(
                    "N={n}: DDP (zerolab stage 0) on TinyLM, its gradient all-reduce = your reduce-scatter\n"
                    "    + a ring all-gather ({calls} calls in {steps} steps, each of {numel:,} elements):\n"
                    "    every rank's parameters equal single-process training's to float32 rounding", n=n,
                    calls=res[0]["grad_calls"], steps=res[0]["steps"], numel=res[0]["numel"]))
    sizes_text = ", ".join(str(n) for n, _ in cases)
    passed(T("your ring reduce-scatter sums the right chunk on every rank (N = {sizes})\n"
             "  and sends exactly the N-1 chunks a ring sends:", sizes=sizes_text)
           + "\n  " + "\n  ".join(lines + engine_lines))


def _trace_task(fn: Callable, numel: int, language: str = "en") -> list:
    r, n = dist.get_rank(), dist.get_world_size()
    chunks = [c.clone() for c in ring_input(r, numel).tensor_split(n)]
    send_recv = _SendRecv(r, n, chunks, Ledger())
    with i18n.using(language):          # send_recv's complaints, in the notebook's language
        fn(chunks, r, n, send_recv)
    send_recv.finish()
    return send_recv.schedule


def trace_ring(fn: Callable, world_size: int = 4, numel: int = 8, *, timeout: float = 30.0) -> list:
    """Run ``fn`` once on ``world_size`` ranks and print, step by step, which chunk each rank
    sent to the right and which chunk changed afterwards (where it added what came from the
    left). Returns the schedules, index = rank."""
    with Crew(world_size, backend="gloo", timeout=timeout) as crew:
        try:
            schedules = crew.run(_trace_task, fn, numel, i18n.lang(), timeout=timeout)
        except CrewTimeout as exc:
            raise ExerciseCheckFailed(T("ranks {ranks} hung in send_recv: every rank must call it the same "
                                        "number of times", ranks=exc.ranks)) from None
        except RankError as exc:
            if not_implemented(exc):
                raise ExerciseCheckFailed(T("ring_reduce_scatter is not written yet "
                                            "(it raised NotImplementedError).")) from None
            raise rank_failure(exc, T("world size {n}", n=world_size), T("a rank raised while running your "
                               "function; the rank's traceback (full_tracebacks()) names the line")) from None
    width = 14
    print(T("each cell: the chunk the rank sent -> the chunk(s) it then added into"))
    print(T("step") + "  " + "".join(f"rank {r}".ljust(width) for r in range(world_size)).rstrip())
    for s in range(max((len(x) for x in schedules), default=0)):
        cells = []
        for sch in schedules:
            if s < len(sch):
                sent, changed = sch[s]
                text = f"{'?' if sent is None else sent} -> {','.join(map(str, changed)) if changed else '-'}"
            else:
                text = T("(no step)")
            cells.append(text + " " * (width - i18n.width(text)))     # (a CJK character takes two columns)
        print(f"{s:>4}  " + "".join(cells).rstrip())
    return schedules
