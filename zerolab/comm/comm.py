"""The collectives the engine uses, each written down: :class:`Comm` calls ``torch.distributed``
on one process group and writes a :class:`~zerolab.comm.ledger.CommRecord` per call into its
:class:`~zerolab.comm.ledger.Ledger` (and a span into its timeline).

What a record counts and how (bytes on the wire, DeepSpeed's calls apart from zerolab's
checks) is in :mod:`zerolab.comm.ledger`; the ring collectives written with send/recv for the
course are in :mod:`zerolab.comm.rings`. Both are re-exported here (``zerolab.comm.Ledger``,
``zerolab.comm.ring_all_reduce``), where the chapters import them from.
"""
from __future__ import annotations

import functools
import time

import torch
import torch.distributed as dist

from ..i18n import catalogue
from .ledger import CommRecord, Ledger, wire_factor
from .rings import ring_all_gather, ring_all_reduce, ring_reduce_scatter

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["CommRecord", "Ledger", "Comm", "Pending", "wire_factor", "ring_all_reduce",
           "ring_reduce_scatter", "ring_all_gather", "default_comm"]


class _All:
    """Several works waited for as one (the per-owner reduces of one bucket)."""

    def __init__(self, works):
        self.works = works

    def wait(self) -> None:
        for w in self.works:
            if w is not None:
                w.wait()


class Pending:
    """An asynchronous collective in flight (``async_op=True``): :meth:`wait` blocks until it is
    done, then writes it to the ledger (seconds from issue to completion) and the timeline
    (the collective's span, and the wait: the part the rank could not hide)."""

    def __init__(self, comm: "Comm", op: str, t: torch.Tensor, numel: int, tag: str, work,
                 kind: str = "zero"):
        self.comm, self.op, self.t, self.numel, self.tag, self.work = comm, op, t, numel, tag, work
        self.kind = kind
        self.t0 = time.perf_counter()
        self.done = False
        # written down now, in the order calls are issued (as DeepSpeed issues them); its seconds
        # are filled in at wait()
        self.record = CommRecord(op, numel, numel * t.element_size(), str(t.dtype).replace("torch.", ""),
                                 comm.world_size, 0.0, tag, 0.0, kind, comm.link)
        comm.ledger.add(self.record)

    def wait(self) -> None:
        if self.done:
            return
        w0 = time.perf_counter()
        if self.work is not None:
            self.work.wait()
        end = time.perf_counter()
        self.done = True
        c = self.comm
        object.__setattr__(self.record, "seconds", end - self.t0)      # (a frozen record, finished here)
        object.__setattr__(self.record, "waited", getattr(self.work, "waited", 0.0))
        if c.timeline is not None:
            c.timeline.add("async", f"{self.op} {self.tag}".strip(), self.t0, end)
            c.timeline.add("wait", f"wait {self.tag}".strip(), w0, end)


class Comm:
    """The collectives the engine uses, over one ``torch.distributed`` process group, each
    written to a ledger (and, when ``timeline`` is set, to a :class:`~zerolab.comm.timeline.Timeline`).

    Every call goes through ``torch.distributed`` on the group's backend: gloo on CPU, NCCL on
    GPUs, or zerolab's shared-memory backend when a crew asked for it (``backend="shm"``,
    :mod:`zerolab.crew.shm`). The tensors are used in place, as with ``torch.distributed``. ``op`` is
    a ``dist.ReduceOp`` (SUM by default). ``all_reduce``, ``reduce``, ``reduce_scatter`` and
    ``all_gather`` take ``async_op=True`` and then return a :class:`Pending`.

    ``kind`` files a call in the ledger: ``"zero"`` (the default) for what ZeRO itself moves,
    ``"check"`` for zerolab's own safety checks (stage 3's 16-byte order headers), which
    DeepSpeed does not send and which the ledger keeps apart (:attr:`Ledger.checks`).
    """

    def __init__(self, group=None, ledger: Ledger | None = None, timeline=None):
        self.group = group
        self.ledger = ledger if ledger is not None else Ledger()
        self.timeline = timeline              # the Timeline its collectives are drawn on, or None
        self._link: str | None = None
        self._subs: dict = {}                 # ("node",) / ("cross",) / ("sub", k) -> Comm, made once

    # -- nodes (zerolab.crew.topology) ---------------------------------------------------------
    def global_ranks(self) -> list[int]:
        """The global ranks of this Comm's group, in group order."""
        if self.group is None:
            return list(range(dist.get_world_size()))
        return list(dist.get_process_group_ranks(self.group))

    @property
    def link(self) -> str:
        """"intra" when every rank of this Comm's group is on one node (:func:`zerolab.crew.topology.current`),
        else "inter"; what each of its calls is filed under in the ledger (:meth:`Ledger.by_link`)."""
        if self._link is None:
            from ..crew.topology import current
            topo = current() if dist.is_initialized() else None
            if topo is None:
                self._link = "intra"
            else:
                self._link = "intra" if topo.same_node(self.global_ranks()) else "inter"
                self.ledger.nodes = max(self.ledger.nodes, topo.nodes)
        return self._link

    def _child(self, key: tuple, blocks: list[list[int]]) -> "Comm":
        """Make one process group per block of this Comm's ranks (group-local indices), every
        rank making all of them in the same order (``dist.new_group`` is collective over the
        whole world), and return a Comm over the block that holds this rank: same ledger and
        timeline, its own group. Cached: the groups are made only once."""
        if key not in self._subs:
            ranks, me = self.global_ranks(), self.rank
            mine = None
            for block in blocks:
                group = dist.new_group([ranks[i] for i in block])
                if me in block:
                    mine = Comm(group, self.ledger, self.timeline)
            self._subs[key] = mine
        return self._subs[key]

    def _topology_blocks(self) -> tuple[list[list[int]], list[list[int]]]:
        """This Comm's ranks (group-local) by node, and by local rank across the nodes."""
        from ..crew.topology import current
        topo = current()
        ranks = self.global_ranks()
        nodes: dict[int, list[int]] = {}
        for i, r in enumerate(ranks):
            nodes.setdefault(topo.node_of(r), []).append(i)
        by_node = list(nodes.values())
        if len({len(b) for b in by_node}) != 1:
            raise RuntimeError(T("this Comm's ranks {ranks} hold a different number of ranks on each node "
                                 "({topology}); node and cross-node groups need the same number on every node",
                                 ranks=ranks, topology=topo))
        cross = [[b[j] for b in by_node] for j in range(len(by_node[0]))]
        return by_node, cross

    def node_comm(self) -> "Comm":
        """A Comm over this rank's node (its ranks on the same node as this one): calls on it never
        leave the node (``link`` "intra"). The node and cross-node groups are made together the
        first time either is asked for, on every rank in the same order (it is collective)."""
        if ("node",) not in self._subs:
            by_node, cross = self._topology_blocks()
            self._child(("node",), by_node)
            self._child(("cross",), cross)
        return self._subs[("node",)]

    def cross_comm(self) -> "Comm":
        """A Comm over the ranks with this rank's local rank on every node (one rank per node:
        with more than one node, every call on it crosses nodes)."""
        self.node_comm()
        return self._subs[("cross",)]

    def sub_comm(self, ranks_per_group: int) -> "Comm":
        """A Comm over this rank's group of ``ranks_per_group`` consecutive ranks (ranks
        0..k-1, k..2k-1, ...: hpZ's partition groups, DeepSpeed's ``_create_zero_param_parallel_group``).
        ``ranks_per_group`` must divide this Comm's world size. Made once, collectively, then cached."""
        n, k = self.world_size, ranks_per_group
        if isinstance(k, bool) or not isinstance(k, int) or k < 1 or n % k:
            raise ValueError(T("sub_comm({k}): the group size must be a whole number >= 1 that divides the "
                               "world size {n}", k=repr(k), n=n))
        if k == n:
            return self
        return self._child(("sub", k), [list(range(s, s + k)) for s in range(0, n, k)])

    def transport(self) -> str:
        """The backend this Comm's collectives run on ("gloo", "nccl", or "zshm": zerolab.crew.shm)."""
        return dist.get_backend(self.group)

    # (asked several times per call: a group's size and this rank's place in it never change)
    @functools.cached_property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @functools.cached_property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    def _record(self, op: str, t: torch.Tensor, t0: float, tag: str, numel: int | None = None,
                kind: str = "zero") -> None:
        n = t.numel() if numel is None else numel
        end = time.perf_counter()
        self.ledger.add(CommRecord(op, n, n * t.element_size(), str(t.dtype).replace("torch.", ""),
                                   self.world_size, end - t0, tag, 0.0, kind, self.link))
        if self.timeline is not None and self.ledger.enabled:
            self.timeline.add("comm", f"{op} {tag}".strip(), t0, end)

    def _run(self, op: str, t: torch.Tensor, numel: int, tag: str, async_op: bool, kind: str, call):
        """Run ``call(async_op)`` (None on one rank) and write it down: now, or at ``wait()``."""
        if async_op:
            return Pending(self, op, t, numel, tag, call(True) if self.world_size > 1 else None, kind)
        t0 = time.perf_counter()
        if self.world_size > 1:
            call(False)
        self._record(op, t, t0, tag, numel, kind)
        return None

    def all_reduce(self, t: torch.Tensor, op=dist.ReduceOp.SUM, *, tag: str = "",
                   async_op: bool = False, kind: str = "zero"):
        p = self._run("all_reduce", t, t.numel(), tag, async_op, kind,
                      lambda a: dist.all_reduce(t, op=op, group=self.group, async_op=a))
        return p if async_op else t

    def reduce(self, t: torch.Tensor, dst: int, op=dist.ReduceOp.SUM, *, tag: str = "",
               async_op: bool = False, kind: str = "zero"):
        """Sum ``t`` over ranks into rank ``dst``'s ``t`` (the other ranks' ``t`` is undefined after)."""
        gdst = dist.get_global_rank(self.group, dst) if self.group is not None else dst
        p = self._run("reduce", t, t.numel(), tag, async_op, kind,
                      lambda a: dist.reduce(t, gdst, op=op, group=self.group, async_op=a))
        return p if async_op else t

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, op=dist.ReduceOp.SUM, *,
                       tag: str = "", async_op: bool = False, kind: str = "zero"):
        """``inp`` holds N equal chunks; rank r receives the reduction of chunk r in ``out``."""
        n = self.world_size
        if inp.numel() != out.numel() * n:
            raise ValueError(T("reduce_scatter: input has {got} elements, expected {n} x {each} (pad the flat "
                               "buffer to a multiple of the world size)", got=inp.numel(), n=n, each=out.numel()))
        if n == 1:
            out.copy_(inp)
        p = self._run("reduce_scatter", inp, inp.numel(), tag, async_op, kind,
                      lambda a: _REDUCE_SCATTER(out, inp, op=op, group=self.group, async_op=a))
        return p if async_op else out

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, *, tag: str = "", async_op: bool = False,
                   kind: str = "zero"):
        """Every rank contributes ``inp``; ``out`` holds the N pieces in rank order. ``inp`` may
        be a view of ``out`` (a rank's own shard of the flat buffer)."""
        n = self.world_size
        if out.numel() != inp.numel() * n:
            raise ValueError(T("all_gather: output has {got} elements, expected {n} x {each}",
                               got=out.numel(), n=n, each=inp.numel()))
        if n == 1:
            out.view(-1).copy_(inp.reshape(-1))
        elif inp.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
            inp = inp.clone()         # torch.distributed's input must not alias its output
        p = self._run("all_gather", out, out.numel(), tag, async_op, kind,
                      lambda a: _ALL_GATHER(out, inp, group=self.group, async_op=a))
        return p if async_op else out

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, *, tag: str = "", kind: str = "zero"):
        """``inp`` holds N equal chunks; chunk j goes to rank j, and ``out``'s chunk i comes from rank
        i (``torch.distributed.all_to_all_single``, which gloo runs on CPU). Blocking, as DeepSpeed's
        qgZ calls it. The ledger counts ``inp``'s elements and (N-1)/N of its bytes on the wire."""
        if out.numel() != inp.numel() or inp.numel() % self.world_size:
            raise ValueError(T("all_to_all: input of {inp} and output of {out} elements must be equal and cut "
                               "into {n} chunks", inp=inp.numel(), out=out.numel(), n=self.world_size))
        if self.world_size == 1:
            out.copy_(inp)
        self._run("all_to_all", inp, inp.numel(), tag, False, kind,
                  lambda a: dist.all_to_all_single(out, inp, group=self.group))
        return out

    def broadcast(self, t: torch.Tensor, src: int = 0, *, tag: str = "") -> torch.Tensor:
        gsrc = dist.get_global_rank(self.group, src) if self.group is not None else src
        self._run("broadcast", t, t.numel(), tag, False, "zero",
                  lambda a: dist.broadcast(t, src=gsrc, group=self.group))
        return t

    def agree(self, error: str | None, *, tag: str = "agree", device=None) -> list[tuple[int, str]]:
        """Did every rank do its part of an operation (a checkpoint's files)? Each rank passes
        its error text, or None when its part went well; every rank gets back the same list of
        ``(rank, error)`` of the ranks that failed (empty: all went well), so that all of them
        raise together instead of one raising while the others wait in the next collective.

        One all-reduce of a 4-byte flag when all went well; when one failed, an all-gather of the
        error texts too. Both are zerolab's own safety calls (``kind="check"``, :attr:`Ledger.checks`):
        DeepSpeed sends neither, and they are never counted as ZeRO's."""
        if self.world_size == 1:
            return [(0, error)] if error else []
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if self.transport() == "nccl" \
                else torch.device("cpu")
        flag = torch.tensor([1 if error else 0], dtype=torch.int32, device=device)
        self.all_reduce(flag, tag=tag, kind="check")
        if not int(flag.item()):
            return []
        texts: list = [None] * self.world_size
        t0 = time.perf_counter()
        dist.all_gather_object(texts, error, group=self.group)
        sent = torch.empty(len((error or "").encode()) * self.world_size, dtype=torch.uint8)
        self._record("all_gather", sent, t0, tag, kind="check")
        return [(r, t) for r, t in enumerate(texts) if t]


# torch >= 2.13 names them all_gather_single / reduce_scatter_single (the old names warn)
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


_DEFAULT: Comm | None = None
_DEFAULT_WORLD = None


def default_comm() -> Comm:
    """A process-wide :class:`Comm` over the default group (what notebooks use)."""
    global _DEFAULT, _DEFAULT_WORLD
    # (a new default group, after destroy_process_group and a new init, gets a new Comm: a Comm
    # keeps its group's size and rank)
    if _DEFAULT is None or not dist.is_initialized() or _DEFAULT_WORLD is not dist.group.WORLD:
        _DEFAULT = Comm()
        _DEFAULT_WORLD = dist.group.WORLD if dist.is_initialized() else None
    return _DEFAULT
