"""Stage 3's fetch order: recorded in one pass, followed in the next, agreed across ranks.

Each kind of pass (``"forward"`` with grad, ``"eval"`` without, ``"backward"``) records the order
in which it uses groups (a :class:`FetchTrace`). The next pass of the same kind *follows* that
trace: ``gather.py`` prefetches the groups it says come next, and releases a group after a
module's forward or backward only if the trace does not use it again within ``stage3_max_reuse_distance``
elements. A pass that uses a group the trace did not predict (eval, another branch) drops the
trace and records anew.

Ranks must gather the same groups in the same order, or their all-gathers would not match
(a hang, or a crash of the transport). :func:`agree` all-gathers a 16-byte header (an id and a
count plus checksum of ids) and raises :class:`ModuleOrderError`, naming what each rank reached,
when the ranks differ.
"""
from __future__ import annotations

import torch

from .i18n import catalogue

T = catalogue("engine")        # the messages in the edition's language (zerolab/messages_zh.py)

__all__ = ["FetchTrace", "ModuleOrderError", "agree", "checksum"]


class ModuleOrderError(RuntimeError):
    """Ranks gathered different modules: their forward/backward took different paths."""


class FetchTrace:
    """The recorded and the followed order of group uses, per kind of pass."""

    def __init__(self, numel: list[int], reuse_distance: int):
        self.numel = numel                          # real elements of each group
        self.reuse_distance = reuse_distance
        self.traces: dict[str, list[int] | None] = {}   # last pass's order, per kind of pass
        self.record: dict[str, list[int]] = {}      # this pass's order so far
        self.pos: dict[str, int] = {}               # position reached in the followed trace
        self.phase = "forward"                      # the kind of pass running
        self.used_at: dict[int, int] = {}           # group -> its last use's position in the trace
        self.gaps: list | None = None               # see _reuse_gaps
        self.last_backward: list[int] = []          # the last backward's uses

    def start(self, phase: str) -> bool:
        """A pass of this kind begins: last pass's record becomes the trace to follow. Returns
        whether there is one (the same answer on every rank on the same path)."""
        rec = self.record.get(phase)
        if rec:
            self.traces[phase] = rec
        self.record[phase] = []
        self.pos[phase] = 0
        self.phase = phase
        self.used_at.clear()
        self.gaps = self._reuse_gaps(phase)
        return self.traces.get(phase) is not None

    def note(self, phase: str, i: int) -> bool:
        """Group ``i`` is used now. Returns False when this use leaves the trace being followed
        (the trace is dropped: the caller completes what it prefetched)."""
        self.record.setdefault(phase, []).append(i)
        trace, pos = self.traces.get(phase), self.pos.get(phase, 0)
        if trace is not None and pos < len(trace) and trace[pos] == i:
            self.pos[phase] = pos + 1
            self.used_at[i] = pos
            return True
        self.used_at.pop(i, None)
        if trace is None:
            return True
        self.traces[phase] = None
        self.gaps = None
        return False

    def upcoming(self, phase: str) -> list[int]:
        """The groups the followed trace says come next (empty when not following)."""
        trace = self.traces.get(phase)
        return [] if trace is None else trace[self.pos.get(phase, 0):]

    def used_again_soon(self, i: int) -> bool:
        """Is group ``i``, used at its last position, used again within the reuse distance?"""
        k = self.used_at.get(i)
        return (self.gaps is not None and k is not None and self.gaps[k] is not None
                and self.gaps[k] < self.reuse_distance)

    def end_backward(self) -> None:
        self.last_backward = list(self.record.get("backward", []))

    # When a module's forward (or backward) ends, each of its groups is released unless the trace
    # says it is used again soon: within stage3_max_reuse_distance elements of other groups' uses,
    # counted along the rest of this pass and (forward with grad) the backward that follows (the
    # last backward's record). DeepSpeed's rule (its __params_to_release). The obvious winners are
    # the last modules of forward, which are the first of backward, and, in backward, a tied weight
    # whose other module comes soon.
    def _reuse_gaps(self, phase: str) -> list | None:
        """For each position of this pass's trace: the elements used between it and the next use
        of the same group (None: not used again within the pass and the backward after it)."""
        trace = self.traces.get(phase)
        if trace is None or self.reuse_distance <= 0:
            return None
        seq = list(trace) + (list(self.last_backward) if phase == "forward" else [])
        prefix = [0]
        for j in seq:
            prefix.append(prefix[-1] + self.numel[j])
        gaps: list = [None] * len(trace)
        later: dict[int, int] = {}                # group -> its next position in seq
        for k in range(len(seq) - 1, -1, -1):
            j = seq[k]
            if k < len(trace) and j in later:
                gaps[k] = prefix[later[j]] - prefix[k + 1]
            later[j] = k
        return gaps


def checksum(ids) -> int:
    acc = 0
    for x in ids:
        acc = (acc * 1_000_003 + x + 1) % (1 << 40)
    return acc


def agree(comm, groups: list, first: int, code: int, tag: str, device) -> None:
    """All-gather ``(first, code)`` from every rank (16 bytes, written to the ledger under ``tag``)
    and raise :class:`ModuleOrderError` on every rank if they differ. ``first`` is a group index,
    or -1 for the end of a forward; ``code`` packs a count (above bit 40) and a checksum."""
    world, rank = comm.world_size, comm.rank
    header = torch.tensor([first, code], dtype=torch.int64, device=device)
    headers = torch.empty(2 * world, dtype=torch.int64, device=device)
    comm.all_gather(headers, header, tag=tag, kind="check")
    rows = headers.view(world, 2).tolist()
    if all(r == rows[rank] for r in rows):
        return
    sep = T(", ")
    if all(i == -1 for i, _ in rows):         # all at the end of a forward, by other paths
        what = T("ranks ran different modules in this forward: {ranks}{order}", ranks=sep.join(
            T("rank {rank} gathered {n} module groups", rank=r, n=c >> 40) for r, (_, c) in enumerate(rows)),
            order=T(" (or the same number in another order)") if len({c >> 40 for _, c in rows}) == 1 else "")
    else:
        names = {r: (None if i == -1 else repr(groups[i].label) if 0 <= i < len(groups) else f"#{i}")
                 for r, (i, _) in enumerate(rows)}
        what = T("ranks ran different modules: {ranks}", ranks=sep.join(
            T("rank {rank} reached the end of its forward", rank=r) if n is None else
            T("rank {rank} reached {where}", rank=r, where=n) for r, n in names.items()))
    raise ModuleOrderError(T("{what}. With ZeRO stage 3 every rank must run the same modules in the same order "
                             "(e.g. no rank-dependent branches, no forward on one rank only).", what=what))
