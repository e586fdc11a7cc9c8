"""Stage 3's fetch order: DeepSpeed 0.19.8's coordinator trace (:class:`FetchTrace`: recorded in one
step, followed from the next, prefetch and release by its rules), agreed across ranks.

Ranks must gather the same groups in the same order, or their all-gathers would not match
(a hang, or a crash of the transport). :func:`agree` all-gathers a 16-byte header (an id and a
count plus checksum of ids) and raises :class:`ModuleOrderError`, naming what each rank reached,
when the ranks differ.
"""
from __future__ import annotations

import enum
from collections import deque

import torch

from ...i18n import catalogue
from ..switches import checksum

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["FetchTrace", "TraceMode", "ModuleOrderError", "agree", "checksum"]


class ModuleOrderError(RuntimeError):
    """Ranks gathered different modules: their forward/backward took different paths."""


class TraceMode(enum.Enum):
    """DeepSpeed's ``ZeRoTraceMode``: no trace yet, recording this step, or following one."""
    INVALID = "invalid"
    RECORD = "record"
    COMPLETE = "complete"


class FetchTrace:
    """DeepSpeed 0.19.8's ``PartitionedParameterCoordinator`` trace, per kind of step.

    A *step* runs from the outermost forward to the next (DeepSpeed's ``reset_step`` at the root's
    forward pre-hook): the forward and, with grad, its backward. Every module fetch (a module's
    forward, its backward, a recomputation; modules without parameters too) is one *event*
    (``step_id``). The first step of a kind only turns recording on, the next records its events,
    the step after that follows them (``COMPLETE``):

    * its fetch queue holds every use of every group, in event order, with the event it is used at;
    * each fetch pops the module's own entries, then prefetches from the queue while fewer than
      min(max_live - available, prefetch_bucket_size) elements are taken, and every entry it pops,
      gathered or not, marks its group as *fetched for* that entry's event;
    * when a module ends, a group is released unless it is fetched for an event after the next one,
      or the events within ``stage3_max_reuse_distance`` elements from the next use it;
    * an event that is not the one recorded (another branch, eval) drops the trace: the step goes on
      without it and the next one records anew.

    zerolab keeps one trace per kind of step (``"train"``, forward with grad plus its backward, and
    ``"eval"``) where DeepSpeed keeps one, so that an evaluation between training steps does not
    drop the training trace (zerolab's own; both follow DeepSpeed's rules inside a step)."""

    def __init__(self, numel: list[int], reuse_distance: int):
        self.numel = numel                          # real elements of each group
        self.reuse_distance = reuse_distance
        self.kind = "train"
        self.mode: dict[str, TraceMode] = {}
        self.recording: dict[str, list[tuple[int, ...]]] = {}
        self.order: dict[str, tuple[tuple[int, ...], ...]] = {}
        self.events: list[tuple[int, ...]] = []     # this step's events so far
        self.step_id = 0
        self.queue: deque = deque()                 # (group, event it is used at)
        self.fetched_for: dict[int, int] = {}       # group -> the latest event it was fetched for
        self.available = 0                          # DeepSpeed's n_available_params (reset each step)
        self.keys: list = []                        # this step's events, by module (or by ids)
        self.recorded_keys: dict[str, list] = {}
        self.order_keys: dict[str, tuple] = {}
        # ids_of(module) -> the groups a module's fetch gathers now (its own and its external
        # parameters): DeepSpeed builds its parameter trace from the recorded *modules* when the
        # trace completes, so an external parameter tied to a module during the recorded step is
        # in that module's entries
        self.ids_of = None
        # agree(sequence) -> bool: do all ranks hold this recorded sequence? (DeepSpeed asserts it,
        # assert_ints_same_as_other_ranks; zerolab, where they differ, follows no trace on any rank:
        # no prefetch, every parameter released after use, the same calls everywhere)
        self.agree = None
        self.key_code = None                       # key -> an int that is the same on every rank
        self.disagreed = 0                         # recorded traces the ranks did not share

    # -- the step ----------------------------------------------------------------------------------
    def start(self, kind: str) -> bool:
        """A step of this kind begins (``reset_step``). Returns whether it follows a trace."""
        self.kind = kind
        mode = self.mode.get(kind, TraceMode.INVALID)
        if mode is TraceMode.RECORD and not self._shared(kind):
            self.disagreed += 1
            mode = TraceMode.INVALID               # (the next step records again)
        if mode is TraceMode.RECORD:
            keys = tuple(self.recorded_keys.get(kind, ()))
            self.order_keys[kind] = keys
            self.order[kind] = tuple(self._resolve(k, ids) for k, ids in zip(keys, self.recording.get(kind, ())))
            mode = TraceMode.COMPLETE
        elif mode is TraceMode.INVALID:
            mode = TraceMode.RECORD
        self.mode[kind] = mode
        self.recording[kind] = []
        self.recorded_keys[kind] = []
        self.events = []
        self.keys = []
        self.step_id = 0
        self.fetched_for = {}
        self.available = 0
        self.queue = deque((i, k) for k, ev in enumerate(self.order.get(kind, ())) for i in ev) \
            if mode is TraceMode.COMPLETE else deque()
        return mode is TraceMode.COMPLETE

    @property
    def complete(self) -> bool:
        return self.mode.get(self.kind) is TraceMode.COMPLETE

    def invalidate(self) -> None:
        self.mode[self.kind] = TraceMode.INVALID
        self.order.pop(self.kind, None)
        self.order_keys.pop(self.kind, None)
        self.queue.clear()
        self.fetched_for = {}

    def _shared(self, kind: str) -> bool:
        if self.agree is None:
            return True
        code = self.key_code or (lambda k: -1)
        seq = [x for k, ids in zip(self.recorded_keys.get(kind, ()), self.recording.get(kind, ()))
               for x in (code(k) if not isinstance(k, tuple) else -2, len(ids), *ids)]
        return self.agree(seq)

    def _resolve(self, key, ids: tuple[int, ...]) -> tuple[int, ...]:
        if self.ids_of is None or isinstance(key, tuple):
            return ids
        return tuple(sorted(set(self.ids_of(key))))

    def event(self, ids: tuple[int, ...], module=None) -> bool:
        """A module is fetched (before its gathers; ``trace_prologue`` and ``record_module``).
        Events are compared by module (as DeepSpeed does) when one is given, else by groups.
        Returns False when it leaves the trace being followed (which is then dropped)."""
        key = ids if module is None else module
        self.events.append(ids)
        self.keys.append(key)
        left = False
        if self.complete:
            order = self.order_keys[self.kind]
            if self.step_id >= len(order) or order[self.step_id] is not key and order[self.step_id] != key:
                self.invalidate()
                left = True
        if self.mode.get(self.kind) is TraceMode.RECORD:
            self.recording[self.kind].append(ids)
            self.recorded_keys[self.kind].append(key)
        return not left

    def pop_own(self, ids: tuple[int, ...]) -> bool:
        """After the module's gathers: pop its own uses off the queue (those no prefetch popped
        already). False when the queue does not hold them next (the trace is dropped)."""
        if not self.complete:
            return True
        want = {i for i in ids if self.fetched_for.get(i, -10 ** 10) < self.step_id}
        got = set()
        while self.queue and len(got) < len(want):
            i, k = self.queue.popleft()
            self.fetched_for[i] = k
            got.add(i)
        if got != want:
            self.invalidate()
            return False
        return True

    def prefetch(self, budget_numel: int, max_live: int, unavailable) -> list[int]:
        """The groups to prefetch now: entries popped while fewer than min(max_live - available,
        budget) elements are taken; each popped entry marks its group fetched for its event;
        ``unavailable(i)``: neither gathered nor in flight."""
        if not self.complete or budget_numel <= 0:
            return []
        budget = min(max_live - self.available, budget_numel)
        out: list[int] = []
        taken = 0
        while self.queue and taken < budget:
            i, k = self.queue.popleft()
            self.fetched_for[i] = max(self.fetched_for.get(i, -10 ** 10), k)
            if unavailable(i) and i not in out:
                out.append(i)
                taken += self.numel[i]
        return out

    def done(self) -> None:
        """The module fetch is complete: the next event begins."""
        self.step_id += 1

    def keep(self, i: int) -> bool:
        """Does group ``i`` stay gathered when a module that uses it ends (``__params_to_release``)?
        Without a complete trace, nothing stays."""
        if not self.complete:
            return False
        if self.fetched_for.get(i, -10 ** 10) > self.step_id:
            return True
        traversed = 0
        for ev in self.order[self.kind][self.step_id:]:
            if traversed >= self.reuse_distance:
                break
            for j in ev:
                if j == i:
                    return True
                traversed += self.numel[j]
        return False

    def uses_so_far(self) -> list[int]:
        """The groups this step used so far, in order (for zerolab's order check)."""
        return [i for ev in self.events for i in ev]


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
