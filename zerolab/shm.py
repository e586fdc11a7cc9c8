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
  rank and unlinked at once (nothing is left behind if a rank dies). It holds a flag per rank
  and two halves of N slots, one slot per rank.
* **A collective** = every rank copies its input into its slot of the current half, then
  raises its flag to the collective's sequence number and waits until every flag has reached
  it; then it reads what it needs from the others' slots. Sums are taken in rank order, so
  every rank gets the same bits (an all-reduce's result is identical on all ranks).
* **Two halves** alternate, so a rank can fill collective k+1's slot while a slower rank still
  reads collective k. A rank that reaches collective k+2 has seen everyone arrive at k+1, and
  so finish reading k, whose half it now reuses.
* **Waiting** spins, yielding the core (``sched_yield``), then sleeps briefly if a peer is
  far behind; after the process group's timeout it raises :class:`ShmTimeout` naming the ranks
  that never arrived.
* Tensors larger than a slot go through in pieces. Only x86-64 (whose stores are seen in
  program order), one machine, and no more ranks than cores (a spinning rank must not take a
  core from the one it waits for); otherwise :func:`transport` returns None and gloo is used.
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

__all__ = ["ShmTransport", "ShmTimeout", "transport", "made", "enabled"]

_LINE = 64                            # one cache line per rank's flag
_BUDGET = 32 << 20                    # bytes of slots in all (Docker's /dev/shm is 64 MiB)


class ShmTimeout(RuntimeError):
    """A rank waited longer than the timeout for the others to reach a collective."""


def enabled(world_size: int) -> bool:
    """Can the ranks of this process's default group use shared memory? (Rank-independent
    checks only; :func:`transport` also checks that all ranks share one machine.)"""
    mode = os.environ.get("ZEROLAB_SHM", "auto")      # auto | 0 (never) | force (any core count)
    if mode == "0" or world_size < 2:
        return False
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return mode == "force" or world_size <= usable_cores()


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
        self.slot = max(_LINE, (budget // (2 * self.n)) // _LINE * _LINE)
        size = _LINE * self.n + 2 * self.n * self.slot
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
        self.flags = np.ndarray((self.n, _LINE // 8), dtype=np.int64, buffer=self._map)[:, 0]
        self.data = torch.frombuffer(self._map, dtype=torch.uint8, offset=_LINE * self.n,
                                     count=2 * self.n * self.slot).view(2, self.n, self.slot)
        self.seq = 0
        self.what = ""
        self.pids = [None] * self.n                    # to tell a dead peer from a slow one
        dist.all_gather_object(self.pids, os.getpid())

    # -- the protocol ------------------------------------------------------------------------
    def _slots(self, dtype: torch.dtype, numel: int) -> torch.Tensor:
        """The N slots of the next collective's half, as ``numel`` elements of ``dtype`` each."""
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        return self.data[(self.seq + 1) % 2, :, :nbytes].view(dtype)

    def _arrive(self) -> None:
        """Raise this rank's flag and wait until every rank has raised its own as far."""
        self.seq += 1
        s = self.seq
        flags = self.flags
        flags[self.rank] = s
        if flags.min() >= s:
            return
        spins, t0 = 0, time.monotonic()
        while flags.min() < s:
            spins += 1
            if spins < 20_000:
                os.sched_yield()
                continue
            time.sleep(50e-6)
            if spins % 2_000 == 0:                     # every 0.1-0.2 s: has a peer died?
                late = [r for r in range(self.n) if flags[r] < s]
                dead = [r for r in late if not _alive(self.pids[r])]
                if dead:
                    raise ShmTimeout(f"rank {self.rank} waited in collective #{s} ({self.what}) for "
                                     f"rank(s) {dead}, whose process has exited")
            if time.monotonic() - t0 > self.timeout_s:
                late = [r for r in range(self.n) if flags[r] < s]
                raise ShmTimeout(
                    f"rank {self.rank} waited {self.timeout_s:.0f} s in collective #{s} ({self.what}) "
                    f"for rank(s) {late}, which never reached it: a rank crashed, hangs, or issued "
                    "different collectives (a branch taken on one rank only)")

    def _elems(self, t: torch.Tensor) -> int:
        """How many elements of ``t``'s dtype fit in a slot."""
        return self.slot // t.element_size()

    # -- the collectives (contiguous CPU tensors, in place like torch.distributed) -----------
    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, what: str = "all_gather") -> None:
        self.what = what
        src, dst = inp.reshape(-1), out.view(self.n, -1)
        step = self._elems(inp)
        for a in range(0, src.numel(), step):
            b = min(a + step, src.numel())
            slots = self._slots(inp.dtype, b - a)
            slots[self.rank].copy_(src[a:b])
            self._arrive()
            dst[:, a:b].copy_(slots)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op=dist.ReduceOp.SUM,
                       what: str = "reduce_scatter") -> None:
        self.what = what
        src, dst = inp.view(self.n, -1), out.view(-1)
        step = self._elems(inp) // self.n
        for a in range(0, dst.numel(), step):
            b = min(a + step, dst.numel())
            slots = self._slots(inp.dtype, self.n * (b - a))
            slots[self.rank].view(self.n, b - a).copy_(src[:, a:b])
            self._arrive()
            mine = slots.view(self.n, self.n, b - a)[:, self.rank]
            _reduce_into(dst[a:b], mine, op)

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM, what: str = "all_reduce") -> None:
        self.what = what
        flat = t.view(-1)
        step = self._elems(t)
        for a in range(0, flat.numel(), step):
            b = min(a + step, flat.numel())
            slots = self._slots(t.dtype, b - a)
            slots[self.rank].copy_(flat[a:b])
            self._arrive()
            _reduce_into(flat[a:b], slots, op)

    def broadcast(self, t: torch.Tensor, src: int, what: str = "broadcast") -> None:
        self.what = what
        flat = t.view(-1)
        step = self._elems(t)
        for a in range(0, flat.numel(), step):
            b = min(a + step, flat.numel())
            slots = self._slots(t.dtype, b - a)
            if self.rank == src:
                slots[src].copy_(flat[a:b])
            self._arrive()
            if self.rank != src:
                flat[a:b].copy_(slots[src])

    def close(self) -> None:
        self.data = self.flags = None
        try:
            self._map.close()
        except BufferError:               # a view still exists somewhere; the OS frees it at exit
            pass


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
