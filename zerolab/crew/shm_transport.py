"""The protocol of :mod:`zerolab.crew.shm` over one mapped segment (:mod:`zerolab.crew.shm_segment`):
collectives posted into slots, read once every rank's flag has reached them, rounds reused in
turn, sums taken in rank order. Its correctness rests on x86-64's store order (see
:mod:`zerolab.crew.shm`'s docstring, "Memory ordering").
"""
from __future__ import annotations

import collections
import mmap
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work
from torch.futures import Future

from .procs import pid_alive
from .shm_segment import LINE, ROUNDS, sizes, usable_cores

RO = dist.ReduceOp


class ShmTimeout(RuntimeError):
    """A rank waited longer than the timeout for the others to reach a collective, or a peer's
    process exited while this rank waited for it."""


class _Piece:
    """One collective number: ``fill(slots)`` writes this rank's slot at post, ``read(slots)``
    runs once every rank has posted."""
    __slots__ = ("seq", "nbytes", "dtype", "fill", "read", "work", "slots")

    def __init__(self, nbytes, dtype, fill, read, work):
        self.seq, self.nbytes, self.dtype, self.fill, self.read, self.work = 0, nbytes, dtype, fill, read, work
        self.slots = None


class ShmWork(Work):
    """An issued shared-memory collective (a ``torch.distributed`` Work). ``wait()`` posts what
    is still queued and reads every piece; ``get_future()`` completes it and returns a finished
    future (what DDP's comm hook asks for). ``waited``: the seconds this rank spent in ``wait()``
    waiting for the other ranks (0 when they were already there)."""

    def __init__(self, tr: "ShmTransport", what: str, result, finish=None):
        super().__init__()
        self.tr, self.what, self._result, self._finish = tr, what, result, finish
        self.left = 0                         # pieces not yet read
        self.last = 0                         # the sequence number of its last piece
        self.waited = 0.0

    def _piece_read(self) -> None:
        self.left -= 1
        if self.left == 0 and self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def wait(self, timeout=None) -> bool:
        if self.left:
            self.waited += self.tr._block(lambda: self.left == 0, self)
        return True

    def is_completed(self) -> bool:
        return self.left == 0

    def is_success(self) -> bool:
        return self.left == 0

    def exception(self):
        return None

    def result(self):
        return self._result

    def get_future(self) -> Future:
        self.wait()
        fut = Future()
        fut.set_result(self._result)
        return fut

    def __repr__(self) -> str:
        return f"ShmWork({self.what!r}, {'done' if self.left == 0 else f'{self.left} pieces left'})"


class ShmTransport:
    """The shared-memory protocol over one mapped segment (see zerolab.crew.shm's docstring). Made by
    :class:`ShmProcessGroup`; ``pids`` tells a dead peer from a slow one."""

    def __init__(self, buf: mmap.mmap, n: int, rank: int, slot: int, pids: list[int], timeout_s: float):
        self.n, self.rank, self.slot, self.pids, self.timeout_s = n, rank, slot, pids, timeout_s
        self._map = buf
        lines = np.ndarray((2, n, LINE // 8), dtype=np.int64, buffer=buf)
        self.flags = lines[0, :, 0]          # flags[r]: the last collective rank r has posted
        self.done = lines[1, :, 0]           # done[r]: rank r has read every collective up to here
        self.data = torch.frombuffer(buf, dtype=torch.uint8, offset=2 * LINE * n,
                                     count=ROUNDS * n * slot).view(ROUNDS, n, slot)
        # spin (yielding) while every rank has a core of its own, else sleep almost at once
        self.spin_limit = 20_000 if n <= usable_cores() else 50
        self.issued = 0                      # the last sequence number handed out
        self.posted = 0                      # the last one this rank has posted (= flags[rank])
        self.queue: collections.deque[_Piece] = collections.deque()    # issued, not yet posted
        self.unread: collections.deque[_Piece] = collections.deque()   # posted, not yet read
        self.collectives = 0                 # calls issued (not pieces), for tests and reports

    size_for = staticmethod(sizes)    # (slot bytes, segment bytes) for n ranks and a budget

    # -- the protocol
    def _issue(self, work: ShmWork, pieces: list[tuple]) -> ShmWork:
        """Give each piece (nbytes, dtype, fill, read) its number, queue it, post what can be
        posted now without waiting. Never blocks."""
        self.collectives += 1
        for nbytes, dtype, fill, read in pieces:
            p = _Piece(nbytes, dtype, fill, read, work)
            self.issued += 1
            p.seq = self.issued
            self.queue.append(p)
        work.left, work.last = len(pieces), self.issued
        if not pieces and work._finish is not None:
            work._finish()
            work._finish = None
        self._step()
        return work

    def _step(self) -> bool:
        """Read every piece all ranks have posted, post every queued piece whose round is free;
        repeat while anything moves. Never waits. Returns whether anything moved."""
        moved = False
        while True:
            progressed = False
            if self.unread:
                top = int(self.flags.min())
                while self.unread and self.unread[0].seq <= top:
                    p = self.unread.popleft()
                    p.read(p.slots)
                    p.slots = None
                    # everything below the oldest unread piece is read (x86-64: these loads
                    # complete before the store below is visible; see zerolab.crew.shm's docstring)
                    self.done[self.rank] = self.unread[0].seq - 1 if self.unread else self.posted
                    p.work._piece_read()
                    progressed = True
            if self.queue:
                low = int(self.done.min())
                while self.queue and (self.queue[0].seq <= ROUNDS or low >= self.queue[0].seq - ROUNDS):
                    p = self.queue.popleft()
                    p.slots = self.data[p.seq % ROUNDS, :, :p.nbytes].view(p.dtype)
                    p.fill(p.slots)
                    self.flags[self.rank] = p.seq          # after the data (x86-64 store order)
                    self.posted = p.seq
                    if not self.unread:
                        self.done[self.rank] = p.seq - 1
                    self.unread.append(p)
                    progressed = True
            if not progressed:
                return moved
            moved = True

    def _blocker(self) -> tuple[str, list[int], int, str]:
        """What this rank is waiting for: (flag name, ranks, level, collective)."""
        if self.unread and int(self.flags.min()) < self.unread[0].seq:
            p = self.unread[0]
            return "post", [r for r in range(self.n) if self.flags[r] < p.seq], p.seq, p.work.what
        p = self.queue[0]
        level = p.seq - ROUNDS
        return ("finish reading", [r for r in range(self.n) if self.done[r] < level], level,
                p.work.what)

    def _block(self, ready, work: ShmWork | None) -> float:
        """Advance until ``ready()``: spin yielding the core, then sleep a little; name a dead
        peer at once and a missing one after the timeout. Returns the seconds spent waiting
        for the other ranks."""
        self._step()
        if ready():
            return 0.0
        waited, spins, t0 = 0.0, 0, time.monotonic()
        stall = t0
        while True:
            spins += 1
            if spins < self.spin_limit:
                os.sched_yield()
            else:
                time.sleep(50e-6)
                if spins % 2_000 == 0:                     # every 0.1-0.2 s: has a peer died?
                    kind, late, level, what = self._blocker()
                    dead = [r for r in late if not pid_alive(self.pids[r])]
                    if dead:
                        raise ShmTimeout(f"rank {self.rank} waited in collective #{level} ({what}) "
                                         f"for rank(s) {dead} to {kind} it, whose process has exited")
                if time.monotonic() - stall > self.timeout_s:
                    kind, late, level, what = self._blocker()
                    raise ShmTimeout(
                        f"rank {self.rank} waited {self.timeout_s:.0f} s in collective #{level} ({what}) "
                        f"for rank(s) {late} to {kind} it, which never did: a rank crashed, hangs, or "
                        "issued different collectives (a branch taken on one rank only)")
            if self._step():
                now = time.monotonic()
                waited += now - t0
                if ready():
                    return waited
                spins, t0, stall = 0, now, now

    def flush(self) -> None:
        """Post every queued piece (before this rank leaves for gloo or stops)."""
        if self.queue:
            self._block(lambda: not self.queue, None)

    # -- the collectives, on contiguous CPU tensors; each returns its issued ShmWork
    def _pieces(self, t: torch.Tensor, total: int, per: int = 1):
        """Ranges [a, b) of ``total`` elements, each fitting a slot (``per`` of them per slot)."""
        step = max(1, self.slot // t.element_size() // per)
        return [(a, min(a + step, total)) for a in range(0, total, step)]

    def all_reduce(self, t: torch.Tensor, op=RO.SUM, what: str = "all_reduce", result=None,
                   finish=None) -> ShmWork:
        flat, r, size = t.view(-1), self.rank, t.element_size()
        work = ShmWork(self, what, [t] if result is None else result, finish)

        def piece(a, b):
            return ((b - a) * size, t.dtype, lambda sl: sl[r].copy_(flat[a:b]),
                    lambda sl: _reduce_into(flat[a:b], sl, op))
        return self._issue(work, [piece(a, b) for a, b in self._pieces(t, flat.numel())])

    def reduce(self, t: torch.Tensor, root: int, op=RO.SUM, what: str = "reduce", result=None,
               finish=None) -> ShmWork:
        flat, r, size = t.view(-1), self.rank, t.element_size()
        work = ShmWork(self, what, [t] if result is None else result, finish)

        def piece(a, b):
            return ((b - a) * size, t.dtype, lambda sl: sl[r].copy_(flat[a:b]),
                    (lambda sl: _reduce_into(flat[a:b], sl, op)) if r == root else _nothing)
        return self._issue(work, [piece(a, b) for a, b in self._pieces(t, flat.numel())])

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, what: str = "all_gather", result=None,
                   finish=None) -> ShmWork:
        """``out`` holds the N inputs in rank order; ``inp`` may be a view of it."""
        src, dst, r, size = inp.reshape(-1), out.view(self.n, -1), self.rank, inp.element_size()
        work = ShmWork(self, what, [out] if result is None else result, finish)

        def piece(a, b):
            return ((b - a) * size, inp.dtype, lambda sl: sl[r].copy_(src[a:b]),
                    lambda sl: dst[:, a:b].copy_(sl))
        return self._issue(work, [piece(a, b) for a, b in self._pieces(inp, src.numel())])

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op=RO.SUM, what: str = "reduce_scatter",
                       result=None, finish=None) -> ShmWork:
        """``inp`` holds N equal chunks; rank r gets the reduction of chunk r in ``out``."""
        n, r, size = self.n, self.rank, inp.element_size()
        src, dst = inp.view(n, -1), out.view(-1)
        work = ShmWork(self, what, [out] if result is None else result, finish)

        def piece(a, b):
            return (n * (b - a) * size, inp.dtype,
                    lambda sl: sl[r].view(n, b - a).copy_(src[:, a:b]),
                    lambda sl: _reduce_into(dst[a:b], sl.view(n, n, b - a)[:, r], op))
        return self._issue(work, [piece(a, b) for a, b in self._pieces(inp, dst.numel(), per=n)])

    def broadcast(self, t: torch.Tensor, src: int, what: str = "broadcast", result=None,
                  finish=None) -> ShmWork:
        flat, r, size = t.view(-1), self.rank, t.element_size()
        work = ShmWork(self, what, [t] if result is None else result, finish)

        def piece(a, b):
            return ((b - a) * size, t.dtype,
                    (lambda sl: sl[src].copy_(flat[a:b])) if r == src else _nothing,
                    (lambda sl: flat[a:b].copy_(sl[src])) if r != src else _nothing)
        return self._issue(work, [piece(a, b) for a, b in self._pieces(t, flat.numel())])

    def close(self) -> None:
        self.data = self.flags = self.done = None
        self.queue.clear()
        self.unread.clear()
        try:
            self._map.close()
        except BufferError:               # a view still exists somewhere; the OS frees it at exit
            pass


def _nothing(slots) -> None:
    pass


# the reductions shared memory carries (AVG: a sum, divided at the end by the process group);
# any other op goes to gloo
REDUCE_OPS = {RO.SUM: torch.Tensor.add_, RO.AVG: torch.Tensor.add_, RO.PRODUCT: torch.Tensor.mul_,
              RO.MIN: lambda d, p: torch.minimum(d, p, out=d), RO.MAX: lambda d, p: torch.maximum(d, p, out=d),
              RO.BAND: torch.Tensor.bitwise_and_, RO.BOR: torch.Tensor.bitwise_or_,
              RO.BXOR: torch.Tensor.bitwise_xor_}


def _reduce_into(dst: torch.Tensor, parts: torch.Tensor, op) -> None:
    """dst = parts[0] (op) parts[1] (op) ... in rank order: the same bits on every rank."""
    fn = REDUCE_OPS[op]
    dst.copy_(parts[0])
    for p in parts[1:]:
        fn(dst, p)
