"""Collectives over shared memory, for CPU ranks on one machine.

gloo moves every collective through TCP over loopback and its own worker threads. On a small
(virtual) machine each of those calls costs a few thread wake-ups, and they are what a ZeRO
step on CPU waits for: measured on 2 vCPUs, a 16-byte all-reduce right after some computation
takes 0.2 ms at best and 1-4 ms in one call of three, and stages 1-3 make three such calls per
step where DDP makes one (``benchmarks/step_time.py``). Here the ranks exchange data through
one shared memory segment instead, the way DeepSpeed's CPU backend and oneCCL do, and no other
thread has to run for a collective to finish.

How it works, for N ranks:

* **One segment**, made by rank 0 under ``/dev/shm`` (or the temp folder), mapped by every
  rank and unlinked at once (nothing is left behind if a rank dies). It holds two flags per
  rank and ``ROUNDS`` rounds of N slots, one slot per rank.
* **A collective has two halves.** *Post*: the rank copies its input into its slot of the
  round, then raises its flag to the collective's sequence number. *Complete*: it waits until
  every flag has reached that number, reads what it needs from the others' slots, and raises
  its *done* flag. A blocking call does both at once; an asynchronous one (``async_op``, for
  ``overlap_comm`` and stage 3's prefetch) posts now and completes at ``wait()``, so the rank
  computes while the others catch up, and nothing else has to run meanwhile.
* **Sums are taken in rank order**, so every rank gets the same bits (an all-reduce's result
  is identical on all ranks; at 2 ranks it is gloo's, bit for bit).
* **Rounds are reused** in turn: before posting collective s into the round of s - ROUNDS a
  rank waits until every rank is done reading that one (it completes its own first).
* **Waiting** spins, yielding the core (``sched_yield``), then sleeps briefly if a peer is
  far behind. With more ranks than usable cores (affinity and cgroup quota) it sleeps almost
  at once: a spinning rank must not take the core of the rank it waits for. A peer whose
  process has exited is named within a fraction of a second, one that never arrives after the
  process group's timeout (:class:`ShmTimeout`).
* Tensors larger than a slot go through in pieces, at once. Only x86-64 (whose stores are
  seen in program order) and one machine; otherwise :func:`transport` returns None and gloo
  is used. ``ZEROLAB_SHM=0`` turns it off. The choice does not depend on the core count, so a
  crew computes the same bits, in the same order, on a laptop and on a large server.
"""
from __future__ import annotations

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

from .nvme import pid_alive

__all__ = ["ShmTransport", "ShmTimeout", "transport", "made", "enabled"]

_LINE = 64                            # one cache line per rank's flag
ROUNDS = 4                            # collectives whose slots can be in use at once
_BUDGET = 32 << 20                    # bytes of slots in all (Docker's /dev/shm is 64 MiB)


class ShmTimeout(RuntimeError):
    """A rank waited longer than the timeout for the others to reach a collective."""


def enabled(world_size: int) -> bool:
    """Can the ranks of this process's default group use shared memory? (Rank-independent
    checks only; :func:`transport` also checks that all ranks share one machine.) Not on a CPU
    other than x86-64, nor with ``ZEROLAB_SHM=0``."""
    if os.environ.get("ZEROLAB_SHM", "1") == "0" or world_size < 2:
        return False
    return platform.machine().lower() in ("x86_64", "amd64")


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


class ShmTransport:
    """Shared-memory collectives for all ranks of the default process group (see the module
    docstring). Made collectively: every rank must construct it at the same point."""

    def __init__(self, timeout_s: float | None = None, budget: int = _BUDGET):
        self.n, self.rank = dist.get_world_size(), dist.get_rank()
        self.timeout_s = timeout_s or float(os.environ.get("ZEROLAB_PG_TIMEOUT_S", 1800))
        self.slot = max(_LINE, (budget // (ROUNDS * self.n)) // _LINE * _LINE)
        size = 2 * _LINE * self.n + ROUNDS * self.n * self.slot
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        path = [None]
        if self.rank == 0:
            path[0] = _create(os.path.join(folder, f"zerolab-{uuid.uuid4().hex}"), size)
        dist.broadcast_object_list(path, src=0)
        if path[0] is None:
            raise OSError("rank 0 could not make a shared memory segment")
        ok = torch.ones(1)
        self._map = None
        try:
            fd = os.open(path[0], os.O_RDWR)
            try:
                self._map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        except OSError:
            ok.zero_()
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)       # everyone has it mapped: drop the name
        if self.rank == 0:
            os.unlink(path[0])
        if not ok.item():
            if self._map is not None:
                self._map.close()
            raise OSError("a rank could not map the shared memory segment")
        lines = np.ndarray((2, self.n, _LINE // 8), dtype=np.int64, buffer=self._map)
        self.flags = lines[0, :, 0]          # flags[r]: the last collective rank r has posted
        self.done = lines[1, :, 0]           # done[r]: rank r has read everything up to here
        self.data = torch.frombuffer(self._map, dtype=torch.uint8, offset=2 * _LINE * self.n,
                                     count=ROUNDS * self.n * self.slot).view(ROUNDS, self.n, self.slot)
        # spin (yielding) while every rank has a core of its own, else sleep almost at once
        self.spin_limit = 20_000 if self.n <= usable_cores() else 50
        self.seq = 0
        self.waited = 0.0
        self._unread: dict[int, object] = {}           # posted, not yet completed: seq -> Handle
        self.pids = [None] * self.n                    # to tell a dead peer from a slow one
        dist.all_gather_object(self.pids, os.getpid())

    # -- the protocol: post (write my slot, raise my flag), then complete (wait, read) -------
    def _post(self, what: str, dtype: torch.dtype, numel: int, fill, read) -> "Handle":
        """Start collective ``seq + 1``: ``fill(slots)`` writes this rank's slot, then the flag
        goes up. ``read(slots)`` runs at completion, once every rank has posted."""
        s = self.seq = self.seq + 1
        if s > ROUNDS:                         # this round's slots were collective s - ROUNDS's:
            old = self._unread.get(s - ROUNDS)  # everyone must have read them
            if old is not None:
                old.wait()
            self._wait(self.done, s - ROUNDS, s, what)
        nbytes = numel * dtype.itemsize
        slots = self.data[s % ROUNDS, :, :nbytes].view(dtype)
        fill(slots)
        self.flags[self.rank] = s
        h = Handle(self, s, what, slots, read)
        self._unread[s] = h
        return h

    def _complete(self, h: "Handle") -> None:
        w = self._wait(self.flags, h.seq, h.seq, h.what)
        h.waited += w
        self.waited += w
        h.read(h.slots)
        del self._unread[h.seq]
        self.done[self.rank] = min(self._unread, default=self.seq + 1) - 1

    def _wait(self, flags, level: int, seq: int, what: str) -> float:
        """Until every rank's ``flags`` reach ``level``: spin yielding the core, then sleep a
        little; name a dead peer at once and a missing one after the timeout. Returns the
        seconds waited (the time until the last rank arrived)."""
        if flags.min() >= level:
            return 0.0
        spins, t0 = 0, time.monotonic()
        while flags.min() < level:
            spins += 1
            if spins < self.spin_limit:
                os.sched_yield()
                continue
            time.sleep(50e-6)
            if spins % 2_000 == 0:                     # every 0.1-0.2 s: has a peer died?
                dead = [r for r in range(self.n) if flags[r] < level and not pid_alive(self.pids[r])]
                if dead:
                    raise ShmTimeout(f"rank {self.rank} waited in collective #{seq} ({what}) for "
                                     f"rank(s) {dead}, whose process has exited")
            if time.monotonic() - t0 > self.timeout_s:
                late = [r for r in range(self.n) if flags[r] < level]
                raise ShmTimeout(
                    f"rank {self.rank} waited {self.timeout_s:.0f} s in collective #{seq} ({what}) "
                    f"for rank(s) {late}, which never reached it: a rank crashed, hangs, or issued "
                    "different collectives (a branch taken on one rank only)")
        return time.monotonic() - t0

    def _pieces(self, t: torch.Tensor, total: int, per: int = 1):
        """Ranges [a, b) of ``total`` elements, each fitting a slot (``per`` of them per slot)."""
        step = max(1, self.slot // t.element_size() // per)
        return [(a, min(a + step, total)) for a in range(0, total, step)]

    def _run(self, posts, async_op: bool):
        """Post each piece; complete them now, or (one piece, ``async_op``) when waited for.
        ``self.waited``: what a blocking call spent waiting for the other ranks to arrive."""
        self.waited = 0.0
        if async_op and len(posts) == 1:
            return posts[0]()
        for post in posts:
            post().wait()
        return Handle.DONE

    # -- the collectives (CPU tensors, in place like torch.distributed) ----------------------
    # Each returns a Handle; with async_op the rank may compute until handle.wait(), and must
    # not touch the tensors before (a tensor larger than a slot is done at once, in pieces).
    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, what: str = "all_gather",
                   async_op: bool = False):
        src, dst, r = inp.reshape(-1), out.view(self.n, -1), self.rank
        return self._run([lambda a=a, b=b: self._post(
            what, inp.dtype, b - a, lambda sl: sl[r].copy_(src[a:b]),
            lambda sl: dst[:, a:b].copy_(sl)) for a, b in self._pieces(inp, src.numel())], async_op)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op=dist.ReduceOp.SUM,
                       what: str = "reduce_scatter", async_op: bool = False):
        n, r = self.n, self.rank
        src, dst = inp.view(n, -1), out.view(-1)
        return self._run([lambda a=a, b=b: self._post(
            what, inp.dtype, n * (b - a), lambda sl: sl[r].view(n, b - a).copy_(src[:, a:b]),
            lambda sl: _reduce_into(dst[a:b], sl.view(n, n, b - a)[:, r], op))
            for a, b in self._pieces(inp, dst.numel(), per=n)], async_op)

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM, what: str = "all_reduce",
                   async_op: bool = False):
        flat, r = t.view(-1), self.rank
        return self._run([lambda a=a, b=b: self._post(
            what, t.dtype, b - a, lambda sl: sl[r].copy_(flat[a:b]),
            lambda sl: _reduce_into(flat[a:b], sl, op)) for a, b in self._pieces(t, flat.numel())],
            async_op)

    def broadcast(self, t: torch.Tensor, src: int, what: str = "broadcast"):
        flat, r = t.view(-1), self.rank
        return self._run([lambda a=a, b=b: self._post(
            what, t.dtype, b - a, lambda sl: sl[src].copy_(flat[a:b]) if r == src else None,
            lambda sl: flat[a:b].copy_(sl[src]) if r != src else None)
            for a, b in self._pieces(t, flat.numel())], False)

    def close(self) -> None:
        self.data = self.flags = None
        try:
            self._map.close()
        except BufferError:               # a view still exists somewhere; the OS frees it at exit
            pass


class Handle:
    """A posted collective: :meth:`wait` waits for every rank's post, then reads."""

    def __init__(self, tr, seq: int, what: str, slots, read):
        self.tr, self.seq, self.what, self.slots, self.read = tr, seq, what, slots, read
        self.finished = tr is None
        self.waited = 0.0                     # seconds its completion waited for the other ranks

    def wait(self) -> None:
        if not self.finished:
            self.finished = True
            self.tr._complete(self)

    def is_completed(self) -> bool:
        return self.finished


Handle.DONE = Handle(None, 0, "", None, None)

REDUCE_OPS = (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN)


def _reduce_into(dst: torch.Tensor, parts: torch.Tensor, op) -> None:
    """dst = parts[0] (op) parts[1] (op) ... in rank order: the same bits on every rank."""
    dst.copy_(parts[0])
    for p in parts[1:]:
        if op == dist.ReduceOp.SUM:
            dst.add_(p)
        elif op == dist.ReduceOp.MAX:
            torch.maximum(dst, p, out=dst)
        else:
            torch.minimum(dst, p, out=dst)


_TRANSPORT: dict = {}                     # the default group -> its transport (or None)


def transport() -> ShmTransport | None:
    """This process's shared-memory transport for the default group, made on first use (a
    collective call: every rank reaches it at the same collective), or None where it cannot
    be used (see :func:`enabled`; ranks on different machines; no shared memory)."""
    pg = dist.group.WORLD
    key = id(pg)
    if key in _TRANSPORT and _TRANSPORT[key][0] is pg:
        return _TRANSPORT[key][1]
    tr = None
    n = dist.get_world_size()
    if enabled(n) and dist.get_backend() == "gloo":
        hosts = [None] * n
        dist.all_gather_object(hosts, (socket.gethostname(), _boot_id()))
        if len(set(hosts)) == 1:
            try:
                tr = ShmTransport()
            except OSError:                              # no shared memory here: keep gloo
                tr = None
    _TRANSPORT.clear()
    _TRANSPORT[key] = (pg, tr)
    return tr


def made() -> bool:
    """Has this process made a transport for its current default group?"""
    entry = _TRANSPORT.get(id(dist.group.WORLD))
    return entry is not None and entry[0] is dist.group.WORLD and entry[1] is not None


def _create(path: str, size: int) -> str | None:
    """Make the segment's file, its space reserved now (ENOSPC here, not SIGBUS later)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None
    os.close(fd)
    return path


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
