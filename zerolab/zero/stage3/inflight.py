"""Stage 3's gathers in flight, as named records: where the parameters are in a step
(:class:`TrainingState`), an all-gather issued and not yet waited for (:class:`InFlight`),
several groups gathered in one call (:class:`GatherBatch`) and a quantized gather's dequantize
on wait (qwZ). ``gather.py`` issues and waits for them.
"""
from __future__ import annotations

import dataclasses
import enum

import torch

from ...memory.flat import FlatGroup

__all__ = ["TrainingState", "InFlight", "GatherBatch", "QuantizedGather"]


class QuantizedGather:
    """A quantized all-gather in flight (qwZ): :meth:`wait` waits for the values' and the
    scales' all-gathers, then writes the dequantized parameters into ``out``."""

    def __init__(self, pendings, q_all: torch.Tensor, s_all: torch.Tensor, out: torch.Tensor, dequantize):
        self.pendings, self.q_all, self.s_all, self.out = pendings, q_all, s_all, out
        self.dequantize = dequantize

    def wait(self) -> None:
        if self.q_all is None:
            return
        for p in self.pendings:
            p.wait()
        self.out.view(-1).copy_(self.dequantize(self.q_all, self.s_all).reshape(-1).to(torch.float16))
        self.q_all = self.s_all = None


class TrainingState(enum.Enum):
    """Where stage 3's parameters are in a step (FSDP2 names its own the same way):
    ``IDLE`` between passes, ``FORWARD`` from the outermost module's forward pre-hook to its
    return, ``BACKWARD`` from the first gradient reaching a module's output (or
    ``engine.backward``) to the end of backward. Backward's recomputation (activation
    checkpointing) runs forwards inside ``BACKWARD`` and does not start a pass."""
    IDLE = "idle"
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclasses.dataclass
class InFlight:
    """An all-gather issued for a group and not waited for yet: ``work`` is what to wait for
    (a :class:`~zerolab.comm.Pending`, a :class:`GatherBatch` shared with other groups, or None
    when nothing is pending: one rank) and ``flat`` the buffer it fills (None in a batch: the
    group's buffer is cut out of the batch when it is waited for)."""
    work: object
    flat: torch.Tensor | None


class GatherBatch:
    """Several groups' shards all-gathered in one call. ``out`` holds, rank after rank, each
    rank's shards of the groups in order; a group's full flat buffer is copied out of it when the
    group is first needed, and ``out`` is dropped once every group has been."""

    def __init__(self, pending, out: torch.Tensor, groups: list[FlatGroup], key: str, world: int,
                 sizes: list[int]):
        self.pending, self.out, self.key = pending, out, key
        self.world = world                             # ranks gathered (all, or hpZ's group)
        self.at: dict[int, tuple[int, int]] = {}       # group index -> (offset in a rank's part, its size)
        offset = 0
        for g, n in zip(groups, sizes):
            self.at[g.index] = (offset, n)
            offset += n
        self.left = len(groups)

    def unpack(self, i: int) -> torch.Tensor:
        if self.pending is not None:
            self.pending.wait()
            self.pending = None
        offset, n = self.at[i]
        flat = torch.empty(n * self.world, dtype=self.out.dtype, device=self.out.device)
        flat.view(self.world, n).copy_(self.out.view(self.world, -1)[:, offset:offset + n])
        self.left -= 1
        if self.left == 0:
            self.out = None
        return flat
