"""The three switches of a stage, as interfaces: what ``stage.py`` calls on each.

    GradSwitch    how gradients are reduced        ``reduce.py``
    ParamSwitch   where parameters live            ``params.py`` (stages 0-2), ``gather.py`` (3)
    StateSwitch   where optimizer states live      ``offload.py`` (in a ``store.py`` shard store)

Each is built from what it needs (its slice of the config, the ``Comm``, the flat groups, a
shard store), never from the Stage, and each answers ``describe()`` (one line for
``engine.switches()``) and ``memory()`` (its bytes by place, ``{Place.DEVICE: {"grads": n}, ...}``,
under ``engine.memory(where)``'s keys). :class:`LiveBuffers` counts the transient buffers
(gradient buckets, gathered parameters) the switches allocate and free during a step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import nn

from ..memory.flat import FlatGroup, Part
from ..memory import Place, storage_held

__all__ = ["GradSwitch", "ParamSwitch", "StateSwitch", "ReduceSpec", "LiveBuffers", "add_memory"]

Memory = dict[Place, dict[str, int]]     # place -> engine.memory(where)'s key -> bytes


@dataclass
class Stage3Stats:
    """What the chapters and checks read of stage 3 (``engine.stage3_stats()``)."""
    fetches: int                   # partitions gathered (on use, or prefetched), since the engine began
    prefetches: int                # of those, gathered ahead of their use from the trace
    reused: int                    # releases skipped because the trace uses the partition again soon
    peak_gathered_numel: int       # most elements gathered or in flight at once (since reset_peaks)
    gathered_now: int              # partitions gathered now (persistent ones not counted)
    partitions: list[tuple[str, int, bool]]   # (label, padded elements, persistent) of each trained one
    persistent_numel: list[int]    # the elements of each persistent parameter
    layout: str                    # "parameter" (DeepSpeed's) or "module" (zerolab.module_groups)
    trace: str                     # the training trace: "invalid", "record" or "complete"



def checksum(ids) -> int:
    """The order checks' code of a sequence of indices (stage 3's trace checks, stages 0-2's gradient order)."""
    acc = 0
    for x in ids:
        acc = (acc * 1_000_003 + x + 1) % (1 << 40)
    return acc


@dataclass(frozen=True)
class ReduceSpec:
    """The gradient switch's slice of the config (DeepSpeed's choices for one stage and its keys)."""
    mode: str                 # "all_reduce", "reduce" (one per owner) or "reduce_scatter"
    bucket_numel: int         # elements per bucket
    overlap: bool             # overlap_comm: collectives issued asynchronously during backward
    max_in_flight: int        # async collectives in flight at most (DeepSpeed's IPG buffers)
    pack_after: bool = False  # stage 0's rule: a bucket closes once it reaches bucket_numel
    quantized: bool = False   # qgZ asked for (used with more than one node)
    post_scale: bool = False  # sum, then multiply by 1/N (DeepSpeed's stage-0 all-reduce), not pre-divide


class ParamSwitch(Protocol):
    """Both classes answer every call; a member that only one stage uses is a no-op (or empty) in
    the other, with a docstring saying why, so callers call it without probing."""
    groups: list[FlatGroup]                               # every flat group (stage 3: untrained too)
    full: dict[int, torch.Tensor]                         # gathered copies by group (stage 3)
    unit_of: dict[int, FlatGroup]                         # id(param) -> its partition unit (stage 3)

    @property
    def trained_groups(self) -> list[FlatGroup]: ...      # the groups the optimizer steps

    @property
    def prefetches(self) -> int: ...                      # groups gathered ahead of use (stage 3)

    def reduce_units(self) -> list[Part]: ...            # what gradient buckets are packed from

    def forward_grad_order(self) -> None: ...             # buckets in the model's order (stages 0-1)

    def observe_grad_order(self, arrived: list[tuple[int, int]]) -> bool: ...   # in hook order (1-2)

    def owned(self) -> list[torch.Tensor]: ...            # what this rank's optimizer updates

    def start(self) -> None: ...                          # after the state home took its masters

    def pre_backward(self) -> None: ...

    def grads_done(self, g: FlatGroup) -> None: ...       # g's gradients are all in a bucket

    def post_backward(self) -> None: ...

    def forward_failed(self) -> None: ...

    def publish(self) -> None: ...                        # after the step

    def drop_secondary(self) -> None: ...                 # after a checkpoint (stage 3's hpZ)

    def untrained_values(self) -> dict[str, torch.Tensor]: ...   # those it partitions (stage 3)

    def load_untrained(self, values: dict[str, torch.Tensor]) -> None: ...

    def restore_untrained(self) -> None: ...

    def stats(self): ...                                  # engine.stage3_stats()

    def reset_peaks(self) -> None: ...

    def observe(self, observer) -> None: ...              # each gather and release (stage 3)

    def forget(self, observer) -> None: ...

    def write(self, i: int, start: int, values: torch.Tensor) -> None: ...

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None: ...

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None: ...

    def remove_hooks(self) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...

    def memory(self) -> Memory: ...


class GradSwitch(Protocol):
    buckets: list

    def pre_backward(self, boundary: bool) -> None: ...

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None: ...

    def post_backward(self) -> None: ...

    def at_boundary(self) -> None: ...

    def for_step(self) -> list[torch.Tensor]: ...

    def zero(self) -> None: ...

    def describe(self) -> str: ...

    def memory(self) -> Memory: ...


class StateSwitch(Protocol):
    tiles: list[tuple[int, int, int]]
    sub_groups: list[list[int]]
    budget_check: Callable | None

    @property
    def optimizer_params(self) -> list: ...

    def attach(self, optimizer: torch.optim.Optimizer) -> None: ...

    def step(self, optimizer: torch.optim.Optimizer, grads: list[torch.Tensor], combined: float) -> None: ...

    def gradient_shards(self, numels: list[int], dtype: torch.dtype) -> tuple[Place, list[torch.Tensor]]: ...

    def group_master(self, i: int) -> torch.Tensor: ...

    def group_state(self, i: int) -> dict: ...

    def set_group(self, i: int, master: torch.Tensor | None = None, state: dict | None = None) -> None: ...

    def optimizer_bytes(self) -> int: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...

    def memory(self) -> Memory: ...


class LiveBuffers:
    """The transient buffers alive now (gradient buckets, gathered parameters), by key, and
    the most bytes seen at once; ``budget_check`` (the engine's device budget) is told when one
    is added.

    Bytes are counted as :func:`~zerolab.memory.tensor_bytes` counts them (each storage once and
    whole, however many keys hold views of it), kept as buffers come and go: a stage-3 step
    tracks thousands of buffers, and summing every live one at each change cost a tenth of a
    1-rank step (chapter 9's GPT)."""

    def __init__(self):
        self.live: dict[str, torch.Tensor] = {}
        self.peak_bytes = 0
        self.budget_check: Callable | None = None
        self._held: dict[str, tuple] = {}                 # key -> its storage (device, address)
        self._storages: dict[tuple, list[int]] = {}       # storage -> [bytes, keys holding it]
        self._bytes = 0

    def track(self, key: str, t: torch.Tensor | None) -> None:
        self._drop(key)
        if t is not None:
            self.live[key] = t
            self._hold(key, t)
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        if t is not None and self.budget_check is not None:
            self.budget_check("backward" if key.startswith("grads") else "a parameter gather")

    def _hold(self, key: str, t: torch.Tensor) -> None:
        held = storage_held(t)
        if held is None:
            return
        sk, nbytes = held
        entry = self._storages.get(sk)
        if entry is None:
            entry = self._storages[sk] = [nbytes, 0]
            self._bytes += nbytes
        entry[1] += 1
        self._held[key] = sk

    def _drop(self, key: str) -> None:
        self.live.pop(key, None)
        sk = self._held.pop(key, None)
        if sk is not None:
            entry = self._storages[sk]
            entry[1] -= 1
            if entry[1] == 0:
                del self._storages[sk]
                self._bytes -= entry[0]

    def bytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self.live.clear()
        self._held.clear()
        self._storages.clear()
        self._bytes = 0


def add_memory(*parts: Memory) -> dict[str, dict[str, int]]:
    """The switches' ``memory()`` answers added up, place by place, key by key, under the places'
    names (a :class:`Place` equals its name; the plain key prints the same whichever came first)."""
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for place, m in part.items():
            dst = out.setdefault(str(place), {})
            for k, v in m.items():
                dst[k] = dst.get(k, 0) + v
    return out
