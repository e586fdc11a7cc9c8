"""Collectives over shared memory for CPU ranks on one machine: the opt-in ``zshm`` backend.

By default every collective of zerolab goes through ``torch.distributed`` as it is: gloo on
CPU, NCCL on GPUs. This module adds a third backend that CPU ranks on one x86-64 machine may
*ask for*: ``zerolab.Crew(n, backend="shm")``, ``zerolab.launch(fn, n, backend="shm")``, or
``dist.init_process_group("zshm", ...)`` / ``dist.new_group(backend="zshm")`` after
``import zerolab.crew.shm`` (which calls :func:`register`). It is a real ``torch.distributed``
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

The code, in three modules: :mod:`zerolab.crew.shm_segment` (the machine's checks, the segment's
layout and file, its making across ranks), :mod:`zerolab.crew.shm_transport` (the protocol above:
posting, reading, waiting, the reduction table) and this one (the process group and its
registration as ``zshm``).
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from .shm_segment import (ROUNDS, SEGMENT_PREFIX, ShmUnavailable, open_segment, problem_here,
                          remove_stale_segments, usable_cores)
from .shm_transport import REDUCE_OPS, ShmTimeout, ShmTransport, ShmWork

__all__ = ["BACKEND", "register", "ShmProcessGroup", "ShmTransport", "ShmWork", "ShmTimeout",
           "ShmUnavailable", "transport_of", "problem_here", "remove_stale_segments", "usable_cores",
           "SEGMENT_PREFIX", "ROUNDS"]

BACKEND = "zshm"                      # the name torch.distributed knows it by
BUDGET = 32 << 20                     # bytes of slots in all (Docker's /dev/shm is 64 MiB); rank 0's
                                      # value at the group's creation counts
RO = dist.ReduceOp


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
        buf, slot, pids = open_segment(store, rank, size, timeout.total_seconds(), BUDGET)
        self.transport = ShmTransport(buf, size, rank, slot, pids, timeout.total_seconds())

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
        if op not in REDUCE_OPS:
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
        if op not in REDUCE_OPS:
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
        if op not in REDUCE_OPS:
            return self._gloo("_reduce_scatter_base", output, input, opts)
        self._check([output, input])
        c, back = self._staged(output)
        inp = input if input.is_contiguous() else input.contiguous()
        return self._tr().reduce_scatter(c, inp, op, result=[output],
                                         finish=self._chain(self._avg(c, op), back))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _op(opts)
        if op not in REDUCE_OPS:
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


def _create_pg(store, rank: int, size: int, timeout: datetime.timedelta) -> ShmProcessGroup:
    return ShmProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Make ``"zshm"`` a ``torch.distributed`` backend for CPU tensors (idempotent; done on
    import of this module)."""
    if "ZSHM" not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_pg, devices=["cpu"])


register()
