"""Collectives over shared memory for CPU ranks on one machine: the opt-in ``zshm`` backend.

By default every collective of zerolab goes through ``torch.distributed`` as it is: gloo on
CPU, NCCL on GPUs. This module adds a third backend that CPU ranks on one x86-64 machine may
*ask for*: ``zerolab.Crew(n, backend="shm")``, ``zerolab.launch(fn, n, backend="shm")``, or
``dist.init_process_group("zshm", ...)`` / ``dist.new_group(backend="zshm")`` after
``import zerolab.shm`` (which calls :func:`register`). It is a real ``torch.distributed``
process group, so whatever runs on the group runs over it: zerolab's engine, and torch's own
``DistributedDataParallel`` too, which lets a speed comparison run both sides on the same
transport. It is never chosen for you (``backend="auto"`` means NCCL or gloo), and where it
cannot work it refuses, on every rank, with the reason (:class:`ShmUnavailable`); it never
falls back to gloo silently.

Why: gloo moves every collective through TCP over loopback and its own worker threads. On a
small (virtual) machine each call costs a few thread wake-ups: measured on 2 vCPUs, a 16-byte
all-reduce right after some computation takes 0.2 ms at best and 1-4 ms in one call of three
(``benchmarks/transport_floor.py``). Here the ranks exchange data through one shared memory
segment, the way DeepSpeed's CPU backend and oneCCL do, and no other thread has to run for a
collective to finish.

**What goes through shared memory**: all-reduce (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR,
BXOR), all-gather (list and ``all_gather_into_tensor``), reduce-scatter (list and
``reduce_scatter_tensor``), broadcast and reduce, of CPU tensors. Everything else (barrier,
gather, scatter, all-to-all, send/recv, PREMUL_SUM) goes to a gloo process group built from
the same store (under the prefix ``gloo/``), after this rank has posted every shared-memory
collective it issued before (so a peer still finishing one of those never waits for a rank
that sits in gloo).

How it works, for N ranks:

* **One segment**, made by rank 0 under ``/dev/shm`` (or the temp folder), named
  ``zerolab-shm-<host>-<pid>-<id>``, its path passed to the others through the process group's
  store (not a collective), mapped by every rank and unlinked as soon as every rank has mapped
  it or failed (nothing is left behind if a rank fails; a segment whose creator was killed
  before it could unlink is removed by the next creation on the host:
  :func:`remove_stale_segments`). It holds two flags per rank and ``ROUNDS`` rounds of N slots.
* **A collective has two halves.** *Post*: the rank copies its input into its slot of the
  round, then raises its flag to the collective's sequence number. *Read*: once every flag has
  reached that number, it reads what it needs from the others' slots, then raises its *done*
  flag to the highest number below which it has read everything. A blocking call posts and
  reads at once; an asynchronous one returns a :class:`ShmWork` and is read at its ``wait()``
  at the latest (earlier if the rank calls into the group again once every rank has posted
  it), so the rank computes while the others catch up, and nothing else has to run meanwhile.
  ``get_future()`` completes the call before it returns a finished future: torch's DDP asks
  for the future of each bucket's all-reduce as soon as it issues it, so over this backend
  DDP's all-reduces complete in its backward hook (no overlap with the rest of backward; the
  other ranks' arrival is what it waits for).
* **Rounds are reused** in turn: collective s goes into round s mod ``ROUNDS``, and a rank may
  post it only once every rank's *done* flag has reached s - ``ROUNDS`` (everyone has read the
  round's previous collective). A tensor larger than a slot goes in pieces, one collective
  number each; an asynchronous call posts at issue the pieces whose rounds are free and the
  rest as rounds free up (whenever this rank next calls into the group, at the latest at its
  ``wait()``), so a large asynchronous call does not block at issue either.
* **Sums are taken in rank order**, so every rank gets the same bits (an all-reduce's result
  is identical on all ranks; at 2 ranks it is gloo's, bit for bit, since a + b = b + a).
* **Waiting** spins, yielding the core (``sched_yield``), then sleeps briefly if a peer is far
  behind. With more ranks than usable cores (affinity and cgroup quota) it sleeps almost at
  once: a spinning rank must not take the core of the rank it waits for. A peer whose process
  has exited is named within a fraction of a second, one that never arrives after the process
  group's timeout (:class:`ShmTimeout`).

**Memory ordering: x86-64 only.** The flags are plain 8-byte stores and loads, with no fence
and no atomic instruction (Python has none to offer). That is correct on x86-64 because its
memory model is total store order: (1) a core's stores become visible to other cores in
program order, so a peer that sees a rank's flag at s also sees the slot data that rank wrote
before raising it (publication: data, then flag); (2) loads are not reordered with older
loads, so once a rank has read a peer's flag at s, its later loads of the peer's slot return
data written before that flag (read after flag); (3) a store is not reordered before an older
load, so a rank's *done* flag becomes visible only after its reads of the round have completed,
and a peer that overwrites the slot afterwards cannot change what was read. Aligned 8-byte
stores and loads are single-copy atomic, so a flag is never seen half-written. The copies are
torch's copy kernels: ordinary stores, or glibc's ``memcpy``, whose non-temporal (streaming)
path for very large copies, the one x86-64 exception to (1), ends in ``sfence``; a copy split
over torch's intra-op threads ends at their join, whose locked instructions order those
threads' stores before the flag store that follows (x86-64 stores are seen by all cores in one
order). The compiler cannot move the copies across the flag stores either: each is a separate
call into C from the interpreter. On ARM (aarch64) or
POWER none of (1)-(3) holds: the flag store would need release semantics (``stlr``, or
``dmb ish`` before it), the flag load acquire semantics (``ldar``, or ``dmb ish`` after it),
and the *done* store a barrier after the reads; without them a peer may read stale slot data
or overwrite a slot still being read. So on any other CPU :func:`problem_here` names this and
the group refuses to start (use ``backend='gloo'``).
"""
from __future__ import annotations

import collections
import datetime
import errno
import json
import mmap
import os
import platform
import socket
import tempfile
import time
import uuid

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work
from torch.futures import Future

from .procs import pid_alive

__all__ = ["BACKEND", "register", "ShmProcessGroup", "ShmTransport", "ShmWork", "ShmTimeout",
           "ShmUnavailable", "transport_of", "problem_here", "remove_stale_segments", "usable_cores",
           "SEGMENT_PREFIX", "ROUNDS"]

BACKEND = "zshm"                      # the name torch.distributed knows it by
SEGMENT_PREFIX = "zerolab-shm-"
_LINE = 64                            # one cache line per rank's flag
ROUNDS = 4                            # collectives whose slots can be in use at once
BUDGET = 32 << 20                     # bytes of slots in all (Docker's /dev/shm is 64 MiB); rank 0's
                                      # value at the group's creation counts
_FIX = ("Use backend='gloo' (the default on CPU), or free /dev/shm / give the container more "
        "(docker run --shm-size=256m)")
RO = dist.ReduceOp


class ShmTimeout(RuntimeError):
    """A rank waited longer than the timeout for the others to reach a collective, or a peer's
    process exited while this rank waited for it."""


class ShmUnavailable(RuntimeError):
    """The ``zshm`` backend was asked for but cannot work here (raised on every rank)."""


# ----------------------------------------------------------------------------- the machine

def problem_here() -> str | None:
    """Why this process cannot use the shared-memory transport, or None."""
    machine = platform.machine() or "unknown"
    if machine.lower() not in ("x86_64", "amd64"):
        return (f"this CPU is {machine}, not x86-64: the shared-memory transport relies on "
                "x86-64's total store order (no fences; see zerolab.shm's docstring)")
    return None


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup CPU quota (a container
    limited to 1 CPU may still see all of the host's cores in its affinity)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                                   # not Linux
        cores = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:            # cgroup v2: "<quota> <period>" or "max ..."
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


def _folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def remove_stale_segments(folder: str | None = None) -> list[str]:
    """Delete segments left in ``folder`` (default: /dev/shm) by zerolab processes of this host
    that are gone: a segment's name holds its creator's pid, and a live creator unlinks it
    itself within a moment. Returns the names removed."""
    folder = folder or _folder()
    head = f"{SEGMENT_PREFIX}{socket.gethostname()}-"
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(head):
            continue
        try:
            pid = int(name[len(head):].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _reserve(fd: int, size: int) -> None:
    """Reserve the segment's space now (ENOSPC here, not SIGBUS at the first touch later)."""
    os.posix_fallocate(fd, 0, size)


def _create(path: str, size: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        _reserve(fd, size)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- the transport

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
    """The shared-memory protocol over one mapped segment (see the module docstring). Made by
    :class:`ShmProcessGroup`; ``pids`` tells a dead peer from a slow one."""

    def __init__(self, buf: mmap.mmap, n: int, rank: int, slot: int, pids: list[int], timeout_s: float):
        self.n, self.rank, self.slot, self.pids, self.timeout_s = n, rank, slot, pids, timeout_s
        self._map = buf
        lines = np.ndarray((2, n, _LINE // 8), dtype=np.int64, buffer=buf)
        self.flags = lines[0, :, 0]          # flags[r]: the last collective rank r has posted
        self.done = lines[1, :, 0]           # done[r]: rank r has read every collective up to here
        self.data = torch.frombuffer(buf, dtype=torch.uint8, offset=2 * _LINE * n,
                                     count=ROUNDS * n * slot).view(ROUNDS, n, slot)
        # spin (yielding) while every rank has a core of its own, else sleep almost at once
        self.spin_limit = 20_000 if n <= usable_cores() else 50
        self.issued = 0                      # the last sequence number handed out
        self.posted = 0                      # the last one this rank has posted (= flags[rank])
        self.queue: collections.deque[_Piece] = collections.deque()    # issued, not yet posted
        self.unread: collections.deque[_Piece] = collections.deque()   # posted, not yet read
        self.collectives = 0                 # calls issued (not pieces), for tests and reports

    @staticmethod
    def size_for(n: int, budget: int) -> tuple[int, int]:
        """(slot bytes, segment bytes) for ``n`` ranks and ``budget`` bytes of slots."""
        slot = max(_LINE, (budget // (ROUNDS * n)) // _LINE * _LINE)
        return slot, 2 * _LINE * n + ROUNDS * n * slot

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
                    # complete before the store below is visible; see the module docstring)
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


_REDUCE = {RO.SUM: torch.Tensor.add_, RO.AVG: torch.Tensor.add_, RO.PRODUCT: torch.Tensor.mul_,
           RO.MIN: lambda d, p: torch.minimum(d, p, out=d), RO.MAX: lambda d, p: torch.maximum(d, p, out=d),
           RO.BAND: torch.Tensor.bitwise_and_, RO.BOR: torch.Tensor.bitwise_or_,
           RO.BXOR: torch.Tensor.bitwise_xor_}


def _reduce_into(dst: torch.Tensor, parts: torch.Tensor, op) -> None:
    """dst = parts[0] (op) parts[1] (op) ... in rank order: the same bits on every rank."""
    fn = _REDUCE[op]
    dst.copy_(parts[0])
    for p in parts[1:]:
        fn(dst, p)


# ----------------------------------------------------------------------------- the process group

def _op(opts):
    op = getattr(opts, "reduceOp", RO.SUM)
    return getattr(op, "op", op)          # a ReduceOp object -> its RedOpType


class ShmProcessGroup(ProcessGroup):
    """The ``zshm`` process group: the collectives listed in the module docstring go through
    :class:`ShmTransport`, every other call to a gloo group made from the same store."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        # built first: it waits for every rank to arrive, and carries what shm does not
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self.transport = _open(store, rank, size, timeout.total_seconds())

    # -- torch's bookkeeping
    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank

    def __repr__(self) -> str:
        return f"ShmProcessGroup(rank={self._rank}, size={self._size})"

    # torch keeps a group's name in its first backend; this group has none registered (a gloo
    # backend registered here would let torch's dispatcher bypass shm), so it keeps its own
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return getattr(self, "_group_name", "")

    @property
    def pg_name(self) -> str:
        return self.group_name

    def shutdown(self) -> None:
        tr, self.transport = getattr(self, "transport", None), None
        if tr is not None:
            tr.close()
        try:
            self.gloo.shutdown()
        except Exception:                 # already shut down, or torch without it
            pass

    def abort(self) -> None:
        self.shutdown()

    # -- helpers
    def _tr(self) -> ShmTransport:
        if self.transport is None:
            raise RuntimeError("the zshm process group was shut down")
        return self.transport

    def _gloo(self, name: str, *args):
        """Delegate to gloo, after posting everything this rank has issued here."""
        self._tr().flush()
        return getattr(self.gloo, name)(*args)

    @staticmethod
    def _check(ts) -> None:
        for t in ts:
            if t.device.type != "cpu":
                raise ValueError(f"the zshm backend carries CPU tensors only, got one on {t.device}")

    @staticmethod
    def _staged(t: torch.Tensor):
        """(a contiguous tensor to work on, what to do at the end to put it back into ``t``)."""
        if t.is_contiguous():
            return t, None
        c = t.contiguous()
        return c, lambda: t.copy_(c)

    @staticmethod
    def _chain(*fns):
        fns = [f for f in fns if f is not None]
        if not fns:
            return None

        def run():
            for f in fns:
                f()
        return run

    def _avg(self, t: torch.Tensor, op):
        if op != RO.AVG:
            return None
        if not (t.is_floating_point() or t.is_complex()):
            raise ValueError(f"ReduceOp.AVG needs a floating-point tensor, got {t.dtype}")
        return lambda: t.div_(self._size)

    # -- through shared memory
    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        op = _op(opts) if opts is not None else RO.SUM
        if op not in _REDUCE:
            return self._gloo("allreduce", tensors, opts)
        self._check(tensors)
        works = []
        for t in tensors:
            c, back = self._staged(t)
            works.append(self._tr().all_reduce(c, op, result=tensors,
                                               finish=self._chain(self._avg(c, op), back)))
        return _joined(works, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        op = _op(opts)
        if op not in _REDUCE:
            return self._gloo("reduce", tensors, opts)
        self._check(tensors)
        t, root = tensors[0], opts.rootRank
        c, back = self._staged(t)
        mine = self._rank == root
        return self._tr().reduce(c, root, op, result=tensors,
                                 finish=self._chain(self._avg(c, op) if mine else None, back if mine else None))

    def broadcast(self, tensors, opts=None):
        self._check(tensors)
        works = []
        for t in tensors:
            c, back = self._staged(t)
            works.append(self._tr().broadcast(c, opts.rootRank, result=tensors,
                                              finish=back if self._rank != opts.rootRank else None))
        return _joined(works, tensors)

    def all_gather_single(self, output, input, opts=None):
        self._check([output, input])
        c, back = self._staged(output)
        return self._tr().all_gather(c, input, result=[output], finish=back)

    _allgather_base = all_gather_single

    def allgather(self, output_tensors, input_tensors, opts=None):
        works = []
        for outs, inp in zip(output_tensors, input_tensors):
            self._check([inp, *outs])
            flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype)
            parts = flat.view(self._size, -1)

            def back(outs=outs, parts=parts):
                for o, p in zip(outs, parts):
                    o.copy_(p.view_as(o))
            works.append(self._tr().all_gather(flat, inp, result=output_tensors, finish=back))
        return _joined(works, output_tensors)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return _joined([self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single(self, output, input, opts=None):
        op = _op(opts)
        if op not in _REDUCE:
            return self._gloo("_reduce_scatter_base", output, input, opts)
        self._check([output, input])
        c, back = self._staged(output)
        inp = input if input.is_contiguous() else input.contiguous()
        return self._tr().reduce_scatter(c, inp, op, result=[output],
                                         finish=self._chain(self._avg(c, op), back))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _op(opts)
        if op not in _REDUCE:
            return self._gloo("reduce_scatter", output_tensors, input_tensors, opts)
        works = []
        for out, ins in zip(output_tensors, input_tensors):
            self._check([out, *ins])
            flat = torch.cat([i.reshape(-1) for i in ins])
            c, back = self._staged(out)
            works.append(self._tr().reduce_scatter(c, flat, op, result=output_tensors,
                                                   finish=self._chain(self._avg(c, op), back)))
        return _joined(works, output_tensors)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return _joined([self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- through gloo
    def barrier(self, opts=None):
        return self._gloo("barrier", opts) if opts is not None else self._gloo("barrier")

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._gloo("alltoall_base", output, input, output_split_sizes or [],
                          input_split_sizes or [], opts)

    alltoall_base = all_to_all_single


def _through_gloo(name: str):
    def method(self, *args):
        return self._gloo(name, *args)
    method.__name__ = name
    return method


for _name in ("monitored_barrier", "gather", "scatter", "alltoall", "allgather_coalesced", "send", "recv",
              "recv_anysource"):
    setattr(ShmProcessGroup, _name, _through_gloo(_name))


def _joined(works: list[ShmWork], result):
    """One Work for several issued ones (a list of tensors)."""
    if len(works) == 1:
        return works[0]
    return _Many(works, result)


class _Many(ShmWork):
    def __init__(self, works, result):
        super().__init__(works[0].tr if works else None, "several", result)
        self.works = works

    def wait(self, timeout=None) -> bool:
        for w in self.works:
            w.wait()
        self.waited = sum(w.waited for w in self.works)
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self.works)

    is_success = is_completed


def transport_of(group=None) -> ShmTransport | None:
    """The shared-memory transport of ``group`` (default: the default group), or None when the
    group is not a ``zshm`` one."""
    if group is None:
        if not dist.is_initialized():
            return None
        group = dist.distributed_c10d._get_default_group()
    return group.transport if isinstance(group, ShmProcessGroup) else None


# ----------------------------------------------------------------------------- making the segment

def _poll(store, key: str, deadline: float, pids: dict[int, int], what: str, rank: int) -> str:
    """The store's value at ``key``, once a rank has set it; a rank in ``pids`` that dies while
    we wait is named at once, a missing one after the timeout."""
    checks = 0
    while not store.check([key]):
        time.sleep(0.002)
        checks += 1
        if checks % 25 == 0:
            dead = [r for r, pid in pids.items() if not pid_alive(pid)]
            if dead:
                raise ShmUnavailable(f"zshm: rank {rank} waited for rank(s) {dead} to {what}, whose "
                                     "process has exited")
        if time.monotonic() > deadline:
            raise ShmUnavailable(f"zshm: rank {rank} waited in vain for the other ranks to {what} "
                                 "(the process group's timeout)")
    value = store.get(key)
    return value.decode() if isinstance(value, bytes) else value


def _open(store, rank: int, n: int, timeout_s: float) -> ShmTransport:
    """Every rank: check, exchange through the store, map the segment rank 0 made. Raises
    :class:`ShmUnavailable` on every rank if any rank cannot."""
    deadline = time.monotonic() + timeout_s
    # keys of their own for each group made under this name (torch reuses names after the
    # default group is destroyed and made again over the same store)
    k = f"zshm/{(store.add('zshm/made', 1) - 1) // n}/"
    me = {"pid": os.getpid(), "host": _host_id(), "problem": problem_here() or ""}
    store.set(f"{k}hello/{rank}", json.dumps(me))
    peers = [json.loads(_poll(store, f"{k}hello/{r}", deadline, {}, "start", rank)) for r in range(n)]
    pids = [p["pid"] for p in peers]
    problems = [(r, p["problem"]) for r, p in enumerate(peers) if p["problem"]]
    if problems:
        r, why = problems[0]
        raise ShmUnavailable(f"zshm (shared-memory collectives) cannot run here: rank {r}: {why}. "
                             "Use backend='gloo'")
    hosts = sorted({p["host"] for p in peers})
    if len(hosts) > 1:
        where = ", ".join(f"rank {r} on {p['host'].split('/')[0]}" for r, p in enumerate(peers))
        raise ShmUnavailable(f"zshm (shared-memory collectives) needs every rank on one machine; "
                             f"here: {where}. Use backend='gloo' across machines")
    others = {r: pid for r, pid in enumerate(pids) if r != rank}
    path = None
    try:
        if rank == 0:
            remove_stale_segments()
            slot, size = ShmTransport.size_for(n, BUDGET)
            folder = _folder()
            path = os.path.join(folder, f"{SEGMENT_PREFIX}{socket.gethostname()}-{os.getpid()}-"
                                        f"{uuid.uuid4().hex[:12]}")
            try:
                _create(path, size)
            except OSError as e:
                path = None
                why = _describe(e, folder, size)
                store.set(f"{k}segment", json.dumps({"error": why}))
                raise ShmUnavailable(why) from None
            store.set(f"{k}segment", json.dumps({"path": path, "slot": slot, "size": size}))
            seg = {"path": path, "slot": slot, "size": size}
        else:
            seg = json.loads(_poll(store, f"{k}segment", deadline, {0: pids[0]}, "make the segment", rank))
            if "error" in seg:
                raise ShmUnavailable(seg["error"])
        buf, err = None, ""
        try:
            buf = _map(seg["path"], seg["size"])
        except OSError as e:
            err = (f"rank {rank} could not map {seg['path']}: {e.strerror or e} (ranks in separate "
                   "containers or /dev/shm namespaces cannot share it)")
        store.set(f"{k}mapped/{rank}", err or "ok")
        failed = [err] if err else []
        for r in others:
            v = _poll(store, f"{k}mapped/{r}", deadline, others, "map the segment", rank)
            if v != "ok":
                failed.append(v)
        if rank == 0:                       # everyone has it mapped (or has failed): drop the name
            os.unlink(path)
            path = None
        if failed:
            if buf is not None:
                buf.close()
            raise ShmUnavailable(f"zshm: {failed[0]}. {_FIX}")
    finally:
        if path is not None:                # rank 0 failed or was interrupted before the unlink
            try:
                os.unlink(path)
            except OSError:
                pass
    return ShmTransport(buf, n, rank, seg["slot"], pids, timeout_s)


def _describe(e: OSError, folder: str, size: int) -> str:
    try:
        free = os.statvfs(folder)
        avail = free.f_bavail * free.f_frsize
        room = f"{avail / 2**20:.1f} MiB free of {free.f_blocks * free.f_frsize / 2**20:.1f} MiB"
    except OSError:
        room = "free space unknown"
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return (f"zshm: {folder} has no room for the {size / 2**20:.1f} MiB shared-memory segment "
                f"({room}): {_FIX}")
    return f"zshm: rank 0 could not make a {size / 2**20:.1f} MiB segment in {folder} ({room}): " \
           f"{e.strerror or e}. {_FIX}"


def _create_pg(store, rank: int, size: int, timeout: datetime.timedelta) -> ShmProcessGroup:
    return ShmProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Make ``"zshm"`` a ``torch.distributed`` backend for CPU tensors (idempotent; done on
    import of this module)."""
    if "ZSHM" not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_pg, devices=["cpu"])


register()
