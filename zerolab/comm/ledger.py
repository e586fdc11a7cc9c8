"""The ledger: every collective the engine makes, written down.

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
headers that make ranks on different paths fail instead of hang, and the 4-byte flags with which the
ranks agree that a checkpoint's files were all written or read, :meth:`Comm.agree`; DeepSpeed sends
none) are kept
apart, in :attr:`Ledger.checks`, with totals of their own (:meth:`Ledger.check_totals`).
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict
from typing import Iterator

__all__ = ["CommRecord", "Ledger", "BoundedLog", "wire_factor"]


def wire_factor(op: str, world_size: int) -> float:
    """Bytes a rank puts on the wire per byte of the full tensor (see the module docstring)."""
    n = world_size
    if n <= 1:
        return 0.0
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0, "send": 1.0, "recv": 0.0}[op]


class BoundedLog:
    """Where a growing list of records stands: it keeps the newest ``limit`` items (a long run
    drops the oldest half at a time) and counts positions from the first item ever added, so a
    :meth:`mark` taken before items were dropped or cleared still slices the right ones.
    :class:`Ledger` (its records and its checks) and :class:`~zerolab.comm.timeline.Timeline` keep one
    per list; the list itself stays a plain, public ``list``."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self.dropped = 0              # items dropped from the front so far

    def append(self, items: list, item) -> None:
        items.append(item)
        if len(items) > self.limit:
            half = len(items) // 2
            del items[:half]
            self.dropped += half

    def clear(self, items: list) -> None:
        self.dropped += len(items)
        items.clear()

    def mark(self, items: list) -> int:
        return self.dropped + len(items)

    def since(self, items: list, mark: int) -> list:
        return items[max(mark - self.dropped, 0):]


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
    kind: str = "zero"   # "zero": what ZeRO moves; "check": zerolab's own safety calls (headers, agreements)
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
        self._log = BoundedLog(self.MAX_RECORDS)
        self._check_log = BoundedLog(self.MAX_RECORDS)

    def add(self, rec: CommRecord) -> None:
        if not self.enabled:
            return
        if rec.kind == "check":
            self._check_log.append(self.checks, rec)
        else:
            self._log.append(self.records, rec)

    def clear(self) -> None:
        self._log.clear(self.records)
        self._check_log.clear(self.checks)

    def __len__(self) -> int:
        return len(self.records)

    def mark(self) -> int:
        """A position to pass to :meth:`since` (e.g. at the start of a step)."""
        m = _Mark(self._log.mark(self.records))
        m.checks = self._check_log.mark(self.checks)
        return m

    def since(self, mark: int) -> "Ledger":
        out = Ledger()
        out.nodes = self.nodes
        out.records = self._log.since(self.records, mark)
        if isinstance(mark, _Mark):
            out.checks = self._check_log.since(self.checks, mark.checks)
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
        its group spans more than one node (:mod:`zerolab.crew.topology`). Checks excluded."""
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
