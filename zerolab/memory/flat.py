"""Flat buffers and partitions: the packing plan every ZeRO stage shares.

A :class:`FlatGroup` is a list of parameters laid end to end in one 1-D buffer, padded with
zeros to a multiple of the world size N, so that the buffer cuts into N equal, contiguous
shards. Rank r owns shard r: the elements ``[r * shard_numel, (r + 1) * shard_numel)``.

Why equal shards: the two collectives ZeRO lives on, reduce-scatter and all-gather, move
equal pieces (and gloo insists on it). A parameter may straddle two shards; that is fine,
because Adam, AdamW and SGD update every element on its own, so stepping a shard of the flat
buffer is the same as stepping the parameters inside it.

Why groups, not one buffer for the whole model: a group is also the unit of communication.
Stages 0-2 form groups of at most ``reduce_bucket_size`` elements in the order gradients are
produced (roughly the reverse of ``model.parameters()``), so a group's gradient can be
reduced as soon as backward has produced it. Stage 3 forms one group per module, so a
module's parameters are gathered together just before it runs.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

__all__ = ["FlatGroup", "Part", "Bucket", "bucket_params", "pack_sizes", "pack_buckets", "pack_after"]


class FlatGroup:
    """Parameters packed into one padded flat buffer, cut into ``world_size`` equal shards."""

    def __init__(self, index: int, params: list[nn.Parameter], names: list[str], rank: int,
                 world_size: int, label: str = "", opt_group: int = 0):
        self.index = index                           # position in the engine's list of groups
        self.opt_group = opt_group                   # the optimizer's parameter group it belongs to
        self.params = params                         # the nn.Parameters packed here, in order
        self.names = names                           # their names (model.named_parameters())
        self.label = label or f"group {index}"       # what logs and errors call this group
        self.rank, self.world_size = rank, world_size
        self.shapes = [p.shape for p in params]
        self.numels = [p.numel() for p in params]
        self.offsets = [0]
        for n in self.numels[:-1]:
            self.offsets.append(self.offsets[-1] + n)
        self.numel = sum(self.numels)                # real elements
        self.padded_numel = math.ceil(self.numel / world_size) * world_size if self.numel else 0
        self.shard_numel = self.padded_numel // world_size
        self.index_of = {id(p): i for i, p in enumerate(params)}

    def __repr__(self) -> str:
        return (f"FlatGroup({self.label!r}, params={len(self.params)}, numel={self.numel}, "
                f"padded={self.padded_numel}, shard={self.shard_numel})")

    @property
    def padding(self) -> int:
        return self.padded_numel - self.numel

    def shard_range(self, rank: int | None = None) -> tuple[int, int]:
        r = self.rank if rank is None else rank
        return r * self.shard_numel, (r + 1) * self.shard_numel

    def shard_of(self, flat: torch.Tensor, rank: int | None = None) -> torch.Tensor:
        """The view of ``flat`` that ``rank`` owns."""
        a, b = self.shard_range(rank)
        return flat[a:b]

    def param_slice(self, i: int) -> slice:
        return slice(self.offsets[i], self.offsets[i] + self.numels[i])

    def flatten(self, tensors: list[torch.Tensor], dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
        """A new padded flat buffer holding ``tensors`` (one per parameter), padding zeroed."""
        flat = torch.zeros(self.padded_numel, dtype=dtype, device=device)
        for i, t in enumerate(tensors):
            flat[self.param_slice(i)].copy_(t.reshape(-1))
        return flat

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views of ``flat`` shaped like each parameter."""
        return [flat[self.param_slice(i)].view(s) for i, s in enumerate(self.shapes)]

    def bind(self, flat: torch.Tensor) -> None:
        """Make every parameter's ``.data`` a view into ``flat`` (no copy)."""
        for p, v in zip(self.params, self.views(flat)):
            p.data = v

    def owner_ranges(self, i: int) -> list[tuple[int, int, int]]:
        """Which ranks own parameter i: (rank, start, end) in the parameter's own numbering."""
        lo, hi = self.offsets[i], self.offsets[i] + self.numels[i]
        out = []
        for r in range(self.world_size):
            a, b = self.shard_range(r)
            s, e = max(a, lo), min(b, hi)
            if s < e:
                out.append((r, s - lo, e - lo))
        return out


def pack_sizes(sizes: list[int], limit: int) -> list[list[int]]:
    """Cut consecutive items of the given sizes into runs of at most ``limit`` in total: a run
    is closed when the next item would overflow it, and an item bigger than ``limit`` gets a run
    of its own (DeepSpeed's rule for buckets). Returns index lists."""
    runs: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(sizes):
        if current and size + n > limit:
            runs.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        runs.append(current)
    return runs


def bucket_params(named: list[tuple[str, nn.Parameter]], bucket_numel: int) -> list[list[int]]:
    """Cut parameters (already in gradient order) into buckets of at most ``bucket_numel``
    elements (:func:`pack_sizes`). Returns index lists."""
    return pack_sizes([p.numel() for _, p in named], bucket_numel)


# ----------------------------------------------------------------------------- gradient buckets

@dataclasses.dataclass
class Part:
    """A range ``[start, end)`` of one group's flat buffer whose gradients travel together:
    the parameters ``params`` (indices in the group) and, for a whole group, its padding."""
    group: FlatGroup
    start: int
    end: int
    params: list[int]
    numel: int                     # real elements (what counts against a bucket's size)

    def param_offsets(self, at: int):
        """(parameter index, its offset in a buffer where this part begins at ``at``)."""
        return [(i, at + self.group.offsets[i] - self.start) for i in self.params]


@dataclasses.dataclass
class Bucket:
    """One reduction: parts laid end to end in one buffer (DeepSpeed's IPG bucket)."""
    index: int
    parts: list[Part]

    def __post_init__(self) -> None:
        self.offsets, at = [], 0
        for p in self.parts:
            self.offsets.append(at)
            at += p.end - p.start
        self.numel = at                                  # elements of the buffer (with padding)
        self.members = [(p.group.index, i) for p in self.parts for i in p.params]
        self.label = f"bucket {self.index}"

    def offset_of(self, part: Part) -> int:
        return self.offsets[self.parts.index(part)]

    def owners(self, world_size: int) -> list[tuple[int, list[tuple[int, int]]]]:
        """(rank, [(start, end), ...]) of each rank's partition slices inside the buffer, for the
        ranks whose partitions it touches, in the order owners first appear (DeepSpeed's per-owner
        reduce of stages 1-2: one call per owner, its slices flattened together)."""
        found: dict[int, list[tuple[int, int]]] = {}
        for p, at in zip(self.parts, self.offsets):
            for r in range(world_size):
                lo, hi = p.group.shard_range(r)
                s, e = max(lo, p.start), min(hi, p.end)
                if s < e:
                    ranges = found.setdefault(r, [])
                    a, b = at + s - p.start, at + e - p.start
                    if ranges and ranges[-1][1] == a:
                        ranges[-1] = (ranges[-1][0], b)
                    else:
                        ranges.append((a, b))
        first = sorted(found, key=lambda r: found[r][0][0])
        return [(r, found[r]) for r in first]


def pack_buckets(units: list[Part], runs: list[list[int]]) -> list[Bucket]:
    """Buckets from units (in the order their gradients arrive) and ``runs``, the indices of the
    units each bucket takes (:func:`bucket_params` or :func:`pack_after`). Adjacent units of the
    same group merge into one part."""
    out = []
    for run in runs:
        parts: list[Part] = []
        for u in (units[k] for k in run):
            if parts and parts[-1].group is u.group and parts[-1].end == u.start:
                last = parts[-1]
                parts[-1] = Part(u.group, last.start, u.end, last.params + u.params, last.numel + u.numel)
            else:
                parts.append(u)
        out.append(Bucket(len(out), parts))
    return out


def pack_after(sizes: list[int], limit: int) -> list[list[int]]:
    """DeepSpeed's stage-0 rule (``allreduce_no_retain``): items join the bucket, which is sent
    once it holds *more* than ``limit``. Returns index lists."""
    runs: list[list[int]] = [[]]
    size = 0
    for i, n in enumerate(sizes):
        runs[-1].append(i)
        size += n
        if size > limit:
            runs.append([])
            size = 0
    return [r for r in runs if r]
