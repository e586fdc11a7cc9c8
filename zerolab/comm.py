"""Collectives with a ledger: every call the engine makes is written down.

Each record holds the op, the number of elements, the
payload bytes, the dtype, the wall time and a tag (which bucket, layer or phase).

**Bytes on the wire per rank** use the ring convention of nccl-tests' *bus bandwidth*. With
N ranks and S the size in bytes of the *full* (unsharded) tensor:

    all-reduce       2 (N-1)/N * S     (a reduce-scatter followed by an all-gather)
    reduce-scatter     (N-1)/N * S     (each rank ends with S/N, having sent N-1 chunks)
    all-gather         (N-1)/N * S     (each rank starts with S/N and receives N-1 chunks)
    all-to-all         (N-1)/N * S     (S: this rank's input; it keeps one of its N chunks, sends the rest)
    broadcast                    S     (a pipelined chain: every rank but the root receives S)
    reduce                       S     (the same chain backwards: every rank but the root sends S)
    send / recv       the bytes sent   (point-to-point, counted by the sender)

This is what each rank sends (and receives) in a bandwidth-optimal ring, so a ZeRO stage's
traffic can be compared directly with the paper: an all-reduce of Psi elements is 2 Psi.
With N = 1 nothing crosses a wire and every factor is 0.

**Two kinds of calls.** What ZeRO moves (``kind="zero"``) is what DeepSpeed moves for the same
config, and it is all that :meth:`Ledger.totals`, :meth:`Ledger.table` and
:attr:`Ledger.wire_bytes` count. zerolab's own safety calls (``kind="check"``: stage 3's 16-byte
headers that make ranks on different paths fail instead of hang; DeepSpeed sends none) are kept
apart, in :attr:`Ledger.checks`, with totals of their own (:meth:`Ledger.check_totals`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import defaultdict
from typing import Iterator

import torch
import torch.distributed as dist


__all__ = ["CommRecord", "Ledger", "Comm", "Pending", "wire_factor", "ring_all_reduce",
           "ring_reduce_scatter", "ring_all_gather", "default_comm"]


def wire_factor(op: str, world_size: int) -> float:
    """Bytes a rank puts on the wire per byte of the full tensor (see the module docstring)."""
    n = world_size
    if n <= 1:
        return 0.0
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0, "send": 1.0, "recv": 0.0}[op]


@dataclasses.dataclass(frozen=True)
class CommRecord:
    op: str             # all_reduce, reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv
    numel: int          # elements of the full tensor (the all-gathered output, the reduce-scattered input)
    bytes: int          # numel * element size
    dtype: str          # e.g. "float32"
    world_size: int
    seconds: float      # wall time of the call as seen by this rank (includes waiting for peers)
    tag: str = ""       # why: "bucket 3", "layer fc1 fwd", "step" ...
    waited: float = 0.0  # of ``seconds``, the wait for the last rank to arrive, where the
                         # transport tells it (0 on gloo and NCCL)
    kind: str = "zero"   # "zero": what ZeRO moves; "check": zerolab's own safety headers
    link: str = "intra"  # "intra": every rank of the call's group is on one node; else "inter"

    @property
    def wire_bytes(self) -> float:
        """Bytes this rank sends for this call, by the ring convention."""
        if self.op in ("send", "recv"):
            return float(self.bytes) if self.op == "send" else 0.0
        return wire_factor(self.op, self.world_size) * self.bytes


class _Mark(int):
    """A position in a ledger (an int: the ZeRO records so far), which also remembers the
    position in the ledger's checks."""
    checks: int = 0


class Ledger:
    """An append-only list of :class:`CommRecord` with totals. ``records`` holds what ZeRO
    moves; ``checks`` holds zerolab's own safety calls (``kind == "check"``), never counted
    in the totals."""

    MAX_RECORDS = 200_000         # a long run keeps the newest; marks stay valid (see mark)

    def __init__(self) -> None:
        self.records: list[CommRecord] = []
        self.checks: list[CommRecord] = []
        self.enabled = True
        self.nodes = 1                # the topology's nodes (set by a Comm): the table splits by link when > 1
        self._dropped = 0             # records dropped from the front so far
        self._dropped_checks = 0

    def add(self, rec: CommRecord) -> None:
        if not self.enabled:
            return
        if rec.kind == "check":
            self.checks.append(rec)
            if len(self.checks) > self.MAX_RECORDS:
                half = len(self.checks) // 2
                del self.checks[:half]
                self._dropped_checks += half
            return
        self.records.append(rec)
        if len(self.records) > self.MAX_RECORDS:
            half = len(self.records) // 2
            del self.records[:half]
            self._dropped += half

    def clear(self) -> None:
        self._dropped += len(self.records)
        self._dropped_checks += len(self.checks)
        self.records.clear()
        self.checks.clear()

    def __len__(self) -> int:
        return len(self.records)

    def mark(self) -> int:
        """A position to pass to :meth:`since` (e.g. at the start of a step)."""
        m = _Mark(self._dropped + len(self.records))
        m.checks = self._dropped_checks + len(self.checks)
        return m

    def since(self, mark: int) -> "Ledger":
        out = Ledger()
        out.nodes = self.nodes
        out.records = self.records[max(mark - self._dropped, 0):]
        if isinstance(mark, _Mark):
            out.checks = self.checks[max(mark.checks - self._dropped_checks, 0):]
        return out

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside (for set-up traffic that is not part of a step)."""
        before, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = before

    @staticmethod
    def _totals(records) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = defaultdict(lambda: dict(calls=0, numel=0, bytes=0,
                                                                     wire_bytes=0.0, seconds=0.0))
        for r in records:
            t = out[r.op]
            t["calls"] += 1
            t["numel"] += r.numel
            t["bytes"] += r.bytes
            t["wire_bytes"] += r.wire_bytes
            t["seconds"] += r.seconds
        return dict(out)

    def totals(self) -> dict[str, dict[str, float]]:
        """Per op: calls, numel, bytes, wire_bytes, seconds (ZeRO's calls only)."""
        return self._totals(self.records)

    def check_totals(self) -> dict[str, dict[str, float]]:
        """The same for zerolab's own safety checks (:attr:`checks`)."""
        return self._totals(self.checks)

    @property
    def wire_bytes(self) -> float:
        return sum(r.wire_bytes for r in self.records)

    def by_tag(self) -> dict[str, float]:
        """Wire bytes per tag prefix (the text before the first space)."""
        out: dict[str, float] = defaultdict(float)
        for r in self.records:
            out[r.tag.split(" ")[0] if r.tag else ""] += r.wire_bytes
        return dict(out)

    def by_link(self) -> dict[str, float]:
        """Wire bytes inside a node ("intra") and across nodes ("inter"): a call is "inter" when
        its group spans more than one node (:mod:`zerolab.topology`). Checks excluded."""
        out = {"intra": 0.0, "inter": 0.0}
        for r in self.records:
            out[r.link] += r.wire_bytes
        return out

    def table(self, *, times: bool = False, checks: bool = False) -> str:
        """A small text table of the totals per op (times are left out by default: they vary).
        ``checks=True`` adds zerolab's safety calls on a line of their own. With more than one
        node two more columns split the wire bytes: inside a node, and across nodes."""
        rows = self.totals()
        split = self.nodes > 1
        links: dict[str, dict[str, float]] = defaultdict(lambda: {"intra": 0.0, "inter": 0.0})
        for r in self.records:
            links[r.op][r.link] += r.wire_bytes
        head = f"{'op':<15}{'calls':>6}{'elements':>12}{'bytes':>12}{'wire bytes':>13}"
        head += f"{'intra-node':>12}{'inter-node':>12}" if split else ""
        head += f"{'seconds':>10}" if times else ""
        lines = [head]

        def line(name, t, op=None):
            out = f"{name:<15}{t['calls']:>6}{t['numel']:>12}{t['bytes']:>12}{t['wire_bytes']:>13.0f}"
            if split:
                lk = links.get(op)
                out += f"{lk['intra']:>12.0f}{lk['inter']:>12.0f}" if lk else " " * 24
            return out + (f"{t['seconds']:>10.4f}" if times else "")
        for op in sorted(rows):
            lines.append(line(op, rows[op], op))
        if checks:
            for op, t in sorted(self.check_totals().items()):
                lines.append(line(f"(check) {op}"[:15], t))
        return "\n".join(lines)


class _Done:
    """What an ``async_op`` call returns on one rank (nothing to wait for)."""

    def wait(self) -> None:
        pass


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

    def wait(self) -> None:
        if self.done:
            return
        w0 = time.perf_counter()
        if self.work is not None:
            self.work.wait()
        end = time.perf_counter()
        self.done = True
        c = self.comm
        c.ledger.add(CommRecord(self.op, self.numel, self.numel * self.t.element_size(),
                                str(self.t.dtype).replace("torch.", ""), c.world_size, end - self.t0, self.tag,
                                getattr(self.work, "waited", 0.0), self.kind, c.link))
        if c.timeline is not None:
            c.timeline.add("async", f"{self.op} {self.tag}".strip(), self.t0, end)
            c.timeline.add("wait", f"wait {self.tag}".strip(), w0, end)


class Comm:
    """The collectives the engine uses, over one ``torch.distributed`` process group, each
    written to a ledger (and, when ``timeline`` is set, to a :class:`~zerolab.timeline.Timeline`).

    Every call goes through ``torch.distributed`` on the group's backend: gloo on CPU, NCCL on
    GPUs, or zerolab's shared-memory backend when a crew asked for it (``backend="shm"``,
    :mod:`zerolab.shm`). The tensors are used in place, as with ``torch.distributed``. ``op`` is
    a ``dist.ReduceOp`` (SUM by default). ``all_reduce``, ``reduce``, ``reduce_scatter`` and
    ``all_gather`` take ``async_op=True`` and then return a :class:`Pending`.

    ``kind`` files a call in the ledger: ``"zero"`` (the default) for what ZeRO itself moves,
    ``"check"`` for zerolab's own safety checks (stage 3's 16-byte order headers), which
    DeepSpeed does not send and which the ledger keeps apart (:attr:`Ledger.checks`).
    """

    def __init__(self, group=None, ledger: Ledger | None = None, timeline=None):
        self.group = group
        self.ledger = ledger if ledger is not None else Ledger()
        self.timeline = timeline
        self._link: str | None = None
        self._subs: dict = {}                 # ("node",) / ("cross",) / ("sub", k) -> Comm, made once

    # -- nodes (zerolab.topology) ---------------------------------------------------------
    def global_ranks(self) -> list[int]:
        """The global ranks of this Comm's group, in group order."""
        if self.group is None:
            return list(range(dist.get_world_size()))
        return list(dist.get_process_group_ranks(self.group))

    @property
    def link(self) -> str:
        """"intra" when every rank of this Comm's group is on one node (:func:`zerolab.topology.current`),
        else "inter"; what each of its calls is filed under in the ledger (:meth:`Ledger.by_link`)."""
        if self._link is None:
            from .topology import current
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
        from .topology import current
        topo = current()
        ranks = self.global_ranks()
        nodes: dict[int, list[int]] = {}
        for i, r in enumerate(ranks):
            nodes.setdefault(topo.node_of(r), []).append(i)
        by_node = list(nodes.values())
        if len({len(b) for b in by_node}) != 1:
            raise RuntimeError(f"this Comm's ranks {ranks} hold a different number of ranks on each node "
                               f"({topo}); node and cross-node groups need the same number on every node")
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
            raise ValueError(f"sub_comm({k!r}): the group size must be a whole number >= 1 that divides "
                             f"the world size {n}")
        if k == n:
            return self
        return self._child(("sub", k), [list(range(s, s + k)) for s in range(0, n, k)])

    def transport(self) -> str:
        """The backend this Comm's collectives run on ("gloo", "nccl", or "zshm": zerolab.shm)."""
        return dist.get_backend(self.group)

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @property
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
            raise ValueError(f"reduce_scatter: input has {inp.numel()} elements, expected "
                             f"{n} x {out.numel()} (pad the flat buffer to a multiple of the world size)")
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
            raise ValueError(f"all_gather: output has {out.numel()} elements, expected "
                             f"{n} x {inp.numel()}")
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
            raise ValueError(f"all_to_all: input of {inp.numel()} and output of {out.numel()} elements must be "
                             f"equal and cut into {self.world_size} chunks")
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


# torch >= 2.13 names them all_gather_single / reduce_scatter_single (the old names warn)
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


_DEFAULT: Comm | None = None


def default_comm() -> Comm:
    """A process-wide :class:`Comm` over the default group (what notebooks use)."""
    global _DEFAULT
    if _DEFAULT is None or not dist.is_initialized():
        _DEFAULT = Comm()
    return _DEFAULT


# ----------------------------------------------------------------------------- ring, from scratch

def _ring_step(send: torch.Tensor, recv: torch.Tensor, rank: int, n: int, ledger: Ledger | None,
               tag: str) -> None:
    """Send ``send`` to the right neighbour while receiving ``recv`` from the left one."""
    t0 = time.perf_counter()
    right, left = (rank + 1) % n, (rank - 1) % n
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send.contiguous(), right),
                                   dist.P2POp(dist.irecv, recv, left)])
    for r in reqs:
        r.wait()
    if ledger is not None:
        from .topology import current
        dt = time.perf_counter() - t0
        dtype = str(send.dtype).replace("torch.", "")
        topo = current()
        link = "intra" if topo.same_node([rank, right]) else "inter"       # (the sender's link)
        ledger.nodes = max(ledger.nodes, topo.nodes)
        ledger.add(CommRecord("send", send.numel(), send.numel() * send.element_size(), dtype, n, dt, tag,
                              link=link))
        ledger.add(CommRecord("recv", recv.numel(), recv.numel() * recv.element_size(), dtype, n, 0.0, tag,
                              link="intra" if topo.same_node([rank, left]) else "inter"))


def _trace_step(trace: list | None, phase: str, step: int, rank: int, n: int, sent: int,
                received: int, chunks: list[torch.Tensor]) -> None:
    """Note one ring step for a picture: who sent which chunk where, and what this rank holds after it."""
    if trace is not None:
        trace.append({"phase": phase, "step": step, "rank": rank, "sent": sent, "to": (rank + 1) % n,
                      "received": received, "from": (rank - 1) % n,
                      "chunks": [c.detach().clone().cpu() for c in chunks]})


def ring_reduce_scatter(x: torch.Tensor, *, ledger: Ledger | None = None,
                        trace: list | None = None) -> list[torch.Tensor]:
    """Ring reduce-scatter of a 1-D tensor, written with send/recv for teaching.

    ``x`` is cut into N chunks with ``tensor_split`` (sizes may differ by one, so any length
    works). In step s = 0 .. N-2, rank r sends its partial sum of chunk (r-s-1) mod N to the
    right and adds what arrives from the left into chunk (r-s-2) mod N. After N-1 steps chunk
    r on rank r holds the sum over all ranks. Returns all chunks (only chunk r is final).
    If ``trace`` is a list, one dict per step is appended to it (see ``_trace_step``).
    """
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = [c.clone() for c in x.reshape(-1).tensor_split(n)]
    for s in range(n - 1):
        send_i, recv_i = (r - s - 1) % n, (r - s - 2) % n
        buf = torch.empty_like(chunks[recv_i])
        _ring_step(chunks[send_i], buf, r, n, ledger, f"ring reduce-scatter step {s}")
        chunks[recv_i] += buf
        _trace_step(trace, "reduce-scatter", s, r, n, send_i, recv_i, chunks)
    return chunks


def ring_all_gather(chunks: list[torch.Tensor], *, ledger: Ledger | None = None,
                    trace: list | None = None) -> torch.Tensor:
    """Ring all-gather: rank r starts with a correct ``chunks[r]``; in step s it sends chunk
    (r-s) mod N to the right and receives chunk (r-s-1) mod N from the left."""
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = list(chunks)
    for s in range(n - 1):
        send_i, recv_i = (r - s) % n, (r - s - 1) % n
        buf = torch.empty_like(chunks[recv_i])
        _ring_step(chunks[send_i], buf, r, n, ledger, f"ring all-gather step {s}")
        chunks[recv_i] = buf
        _trace_step(trace, "all-gather", s, r, n, send_i, recv_i, chunks)
    return torch.cat(chunks)


def ring_all_reduce(x: torch.Tensor, *, ledger: Ledger | None = None,
                    trace: list | None = None) -> torch.Tensor:
    """Ring all-reduce (sum) = ring reduce-scatter + ring all-gather. Returns a new tensor
    shaped like ``x``; each rank sends 2(N-1) chunks, about 2(N-1)/N of the tensor."""
    chunks = ring_reduce_scatter(x, ledger=ledger, trace=trace)
    return ring_all_gather(chunks, ledger=ledger, trace=trace).reshape(x.shape)
