"""Stage 3's life cycle in one place: the state of every partition, the events of every module,
the legal transitions between them, and who is told (FSDP2's ``TrainingState`` /
``FSDPParamGroup`` style; DeepSpeed keeps the same facts in ``ds_status`` and its coordinator).

Each partition (a parameter, or with ``"zerolab": {"module_groups": true}`` a module's group) is in
one :class:`PartitionState`:

    SHARDED ──issue──▶ IN_FLIGHT ──wait──▶ GATHERED ──release──▶ SHARDED
    PERSISTENT (kept whole; refreshed after each step, never released)

Each module sees four :class:`ModuleEvent` s, whose order is asserted per module:

    PRE_FORWARD ─▶ POST_FORWARD ─▶ PRE_BACKWARD ─▶ POST_BACKWARD
    (a module used twice in a forward sees each pair twice; backward's recomputation under
    activation checkpointing runs PRE_FORWARD / POST_FORWARD again inside BACKWARD)

A transition that is not in the table raises :class:`IllegalTransition`, naming the partition or
the module: a bug in zerolab, or in a learner's hook class (exercise 8c), never a silent wrong
result. Observers (:meth:`Lifecycle.observe`) are told every gather and release: the exercise
checks and the lab listen there, instead of patching the engine.
"""
from __future__ import annotations

import enum
from typing import Protocol

from ..switches import Stage3Stats   # what a ParamSwitch's stats() answers

__all__ = ["PartitionState", "ModuleEvent", "IllegalTransition", "Lifecycle", "Observer", "Stage3Stats"]


class PartitionState(enum.Enum):
    SHARDED = "sharded"            # this rank's shard only; the parameters' .data is empty
    IN_FLIGHT = "in flight"        # an all-gather is running
    GATHERED = "gathered"          # whole, the parameters bound to it
    PERSISTENT = "persistent"      # whole for good (refreshed after every step)


class ModuleEvent(enum.Enum):
    PRE_FORWARD = "pre_forward"
    POST_FORWARD = "post_forward"
    PRE_BACKWARD = "pre_backward"
    POST_BACKWARD = "post_backward"


S = PartitionState
LEGAL: dict[PartitionState, set[PartitionState]] = {
    S.SHARDED: {S.IN_FLIGHT},
    S.IN_FLIGHT: {S.GATHERED},
    S.GATHERED: {S.SHARDED},
    S.PERSISTENT: set(),
}


class IllegalTransition(RuntimeError):
    """A partition or a module went somewhere its life cycle does not allow."""


class Observer(Protocol):
    def on_gather(self, label: str, phase: str) -> None: ...
    def on_release(self, label: str, phase: str) -> None: ...


class Lifecycle:
    """The state of each of ``n`` partitions (``persistent[i]``: kept whole) and the open
    module events; every change goes through :meth:`to` or :meth:`module_event`."""

    def __init__(self, labels: list[str], persistent: list[bool]):
        self.labels = labels
        self.state = [S.PERSISTENT if p else S.SHARDED for p in persistent]
        self.observers: list[Observer] = []
        self._open: dict[int, list[ModuleEvent]] = {}     # id(module) -> its events since its last POST_BACKWARD
        self._names: dict[int, str] = {}

    # -- partitions --------------------------------------------------------------------------
    def to(self, i: int, new: PartitionState, phase: str = "") -> None:
        old = self.state[i]
        if new not in LEGAL[old]:
            raise IllegalTransition(f"stage 3: partition {self.labels[i]!r} cannot go from {old.value} to "
                                    f"{new.value}")
        self.state[i] = new
        if new is S.GATHERED:
            for o in self.observers:
                o.on_gather(self.labels[i], phase)
        elif new is S.SHARDED:
            for o in self.observers:
                o.on_release(self.labels[i], phase)

    def refreshed(self, i: int, phase: str = "step") -> None:
        """A persistent partition was gathered again (after a step)."""
        if self.state[i] is not S.PERSISTENT:
            raise IllegalTransition(f"stage 3: partition {self.labels[i]!r} is {self.state[i].value}, "
                                    "not persistent, and cannot be refreshed")
        for o in self.observers:
            o.on_gather(self.labels[i], phase)

    def reset(self, i: int, persistent: bool) -> None:
        """Back to the start (the engine closes, or a checkpoint replaces the partition)."""
        self.state[i] = S.PERSISTENT if persistent else S.SHARDED

    def observe(self, observer: Observer) -> None:
        self.observers.append(observer)

    def forget(self, observer: Observer) -> None:
        self.observers = [o for o in self.observers if o is not observer]

    # -- modules -----------------------------------------------------------------------------
    def module_event(self, module, event: ModuleEvent, name: str = "") -> None:
        """Assert that ``event`` may follow the module's earlier ones: a POST_FORWARD needs an open
        PRE_FORWARD, a PRE_BACKWARD a finished forward, a POST_BACKWARD a PRE_BACKWARD."""
        key = id(module)
        if name:
            self._names[key] = name
        seen = self._open.setdefault(key, [])
        E = ModuleEvent
        ok = {
            E.PRE_FORWARD: True,
            E.POST_FORWARD: seen.count(E.PRE_FORWARD) > seen.count(E.POST_FORWARD),
            E.PRE_BACKWARD: E.POST_FORWARD in seen,
            E.POST_BACKWARD: E.PRE_BACKWARD in seen,
        }[event]
        if not ok:
            who = self._names.get(key) or type(module).__name__
            raise IllegalTransition(f"stage 3: module {who!r} got {event.value} after "
                                    f"{[e.value for e in seen] or 'nothing'}")
        seen.append(event)

    def end_step(self) -> None:
        """Backward is over: every module starts afresh (a module whose backward never ran, with
        no gradient reaching it, is closed here, as DeepSpeed's release_backward_leftovers does)."""
        self._open.clear()

    def gathered(self) -> list[int]:
        return [i for i, s in enumerate(self.state) if s is S.GATHERED]
