"""hpZ (``zero_hpz_partition_size`` h, ZeRO++'s hierarchical partitioning): stage 3 keeps, besides
each unit's primary shard over all N ranks, a *secondary* shard over a group of h consecutive
ranks (one node when h is the ranks per node), and gathers from it while it is valid, so the
backward's re-gathers never leave the group.

What DeepSpeed 0.19.8 does (files under ``site-packages/deepspeed/``; measured on CPU, 4 ranks,
gloo, by ``benchmarks/ds_reference/ds_hpz.py``):

* **The group**: ``utils/groups.py`` ``_create_zero_param_parallel_group(h)``: ranks
  ``[i*h, (i+1)*h)``, contiguous, with h = min(h, world size), which must divide the world size
  (``_ensure_divisibility`` asserts "N is not divisible by h"). Nothing checks the node: with h
  not fitting a node the group spans nodes (zerolab warns). 0 and 1 are off
  (``runtime/zero/config.py``: ``Field(1, ge=0)``; the group is made only for h > 1, and only on
  the stage-3 path, ``runtime/engine.py``).
* **The secondary shard**: ``runtime/zero/partition_parameters.py`` ``_partition_param_sec``, run
  by every ``param.partition()`` while the parameter is whole (AVAILABLE) and has no secondary yet:
  this rank's 1/h of the padded parameter (padded to a multiple of N: ``padded/h`` elements, in
  the parameter's dtype), *copied from the gathered full parameter*, on the ``offload_param``
  device (the GPU without offload, host memory with ``cpu``, pinned with ``pin_memory``). So it is
  made at initialization (the first partition of each parameter) and at the first release after
  each later gather (a module's forward), and never refreshed until it is dropped.
* **Dropped**: ``runtime/zero/stage3.py`` ``invalidate_secondary_tensor``, in ``_post_step`` (after
  every optimizer step that is not skipped for an overflow) and in ``checkpoint_event_epilogue``
  (after ``save_checkpoint`` and ``load_checkpoint``).
* **Which all-gathers use it**: every one of a parameter that has it (``all_gather_coalesced``:
  ``use_secondary_tensor = params[0].ds_secondary_tensor is not None`` picks the secondary group;
  ``partitioned_param_coordinator.py`` ``__all_gather_params`` splits a fetch or prefetch into the
  parameters with a secondary, gathered first, and those without). Measured: the first step's
  forward gathers inside the groups (the secondary from initialization); every later step's
  forward gathers over all N (the step dropped it), its backward inside the groups; with
  gradient accumulation, the forward of every micro-step but the first of a step gathers inside
  the groups too. The persistent parameters' refresh after the step (``_post_step``'s blocking
  ``all_gather``) never uses it.
* **qwZ together**: the secondary all-gathers are quantized too (``_all_gather_coalesced`` /
  ``_all_gather_sequential`` with ``quantize``): int8 values, then the fp32 scales, inside the
  group. The secondary is copied from the *dequantized* forward gather, so a backward under
  qwZ + hpZ quantizes already-quantized values once more (zerolab does the same).
* **offload_param nvme**: ``_partition_param_sec`` allocates the secondary with
  ``torch.empty(..., device=self.remote_device)``, "nvme": not a device, so DeepSpeed fails;
  zerolab refuses the combination by name.
* **Memory**: padded/h elements per unit per rank in the model dtype, from a unit's first release
  to the step (all units at once after a backward).

zerolab's differences: persistent parameters are kept whole from initialization (gather.py), so
they have no secondary (DeepSpeed makes one at initialization and uses it once, in the first
forward's fetch); frozen parameters too are kept whole (DeepSpeed partitions them, and their
secondary, never dropped by a step that does not touch them, serves every gather). On one rank hpZ is off (DeepSpeed keeps a secondary of the whole parameter
there, and gathers nothing).
"""
from __future__ import annotations

import warnings

import torch

from ..i18n import catalogue
from ..memory import Place, tensor_bytes

T = catalogue("engine")        # the warnings in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["SecondaryShards", "hpz_group_size", "secondary_shards"]


def hpz_group_size(h: int, world_size: int, topology=None, *, offload: Place = Place.DEVICE) -> int:
    """The size of hpZ's groups for ``zero_hpz_partition_size`` = ``h`` on ``world_size`` ranks:
    1 when hpZ is off (h of 0 or 1, or one rank), else min(h, world_size) (DeepSpeed's rule).
    Raises, naming the fix, where DeepSpeed fails; warns where its groups would not save what
    hpZ is for (groups that span nodes of ``topology``, or one group of every rank). ``offload``:
    where the primary shards live (``Place.of(offload_param.device)``)."""
    key = "zero_optimization.zero_hpz_partition_size"
    if h <= 1 or world_size == 1:
        return 1
    if offload == Place.NVME:
        raise ValueError(T(
            "{key}={h} with offload_param on nvme: DeepSpeed 0.19.8 allocates hpZ's secondary shard on the "
            "offload device (partition_parameters.py, _partition_param_sec: torch.empty(..., device='nvme')) "
            "and fails. Fix: offload_param device 'cpu' or 'none', or zero_hpz_partition_size 1", key=key, h=h))
    size = min(h, world_size)
    if world_size % size:
        divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
        per_node = (T(" (the ranks per node here: {n})", n=topology.ranks_per_node) if topology is not None
                    else "")
        # (DeepSpeed's assertion is quoted in its own words, in English)
        raise ValueError(T(
            "{key}={h} does not divide the {world_size} ranks: hpZ's groups are h consecutive ranks and DeepSpeed "
            "0.19.8 asserts that they tile the world (utils/groups.py, _ensure_divisibility: '{world_size} is not "
            "divisible by {size}'). Fix: a divisor of {world_size} ({divisors}), usually the "
            "ranks per node{per_node}", key=key, h=h, world_size=world_size, size=size,
            divisors=", ".join(map(str, divisors)), per_node=per_node))
    if size < h:
        warnings.warn(T("{key}={h} is more than the {world_size} ranks: DeepSpeed 0.19.8 takes min({h}, {world_size}) "
                        "= {size}, one group of every rank: the backward's gathers stay as wide as the forward's and "
                        "each rank keeps a second shard for nothing. Set it to the ranks per node",
                        key=key, h=h, world_size=world_size, size=size), stacklevel=3)
    elif topology is not None and topology.nodes > 1 and not (
            size <= topology.ranks_per_node and topology.ranks_per_node % size == 0):
        warnings.warn(T("{key}={h}: hpZ's groups of {size} consecutive ranks span nodes ({topology}), so the "
                        "backward's gathers cross nodes (the ledger files them 'inter'); DeepSpeed 0.19.8 allows it. "
                        "For backward gathers inside a node, set it to the ranks per node ({per_node}) or a divisor "
                        "of it", key=key, h=h, size=size, topology=topology, per_node=topology.ranks_per_node),
                      stacklevel=3)
    return size


class SecondaryShards:
    """hpZ's secondary shards of stage 3's units on this rank: unit index -> this rank's 1/h of the
    unit's padded flat buffer (``padded_numel / h`` elements, model dtype), kept from a unit's
    first release after a gather to the next optimizer step; ``comm`` is this rank's group of h
    consecutive ranks (``Comm.sub_comm``), which gathers them."""
    on = True

    def __init__(self, comm, size: int, where: Place, dtype: torch.dtype, pin: bool = False):
        self.comm = comm.sub_comm(size)          # collective: every rank makes the groups, in order
        self.size = size
        self.rank = self.comm.rank                # this rank's place in its group
        self.where, self.dtype, self.pin = where, dtype, pin   # Place.DEVICE or Place.HOST
        self.shards: dict[int, torch.Tensor] = {}
        self.made = 0                             # secondary shards made so far (for readers and tests)
        self.dropped = 0                          # ... and dropped

    def numel(self, g) -> int:
        """Elements of group ``g``'s secondary shard: its padded size over h."""
        return g.padded_numel // self.size

    def __contains__(self, i: int) -> bool:
        return i in self.shards

    def keep(self, g, flat: torch.Tensor) -> None:
        """Group ``g`` is whole in ``flat`` and is being released: keep this rank's part of it,
        unless a secondary is kept already (DeepSpeed refreshes it only at the next step)."""
        if g.index in self.shards:
            return
        n = self.numel(g)
        part = flat.reshape(-1)[self.rank * n:(self.rank + 1) * n]
        if self.where is Place.DEVICE:
            self.shards[g.index] = part.clone()
        else:
            self.shards[g.index] = torch.empty(n, dtype=self.dtype, pin_memory=self.pin).copy_(part)
        self.made += 1

    def source(self, i: int, device: torch.device) -> torch.Tensor:
        """Group ``i``'s secondary shard on the compute device, for its all-gather."""
        s = self.shards[i]
        return s if s.device == device else s.to(device, non_blocking=True)

    def drop(self, i: int) -> None:
        if self.shards.pop(i, None) is not None:
            self.dropped += 1

    def drop_all(self) -> None:
        """The shards are about to change (an optimizer step, a checkpoint): forget every
        secondary, as DeepSpeed's ``invalidate_secondary_tensor``."""
        self.dropped += len(self.shards)
        self.shards.clear()

    def bytes_on(self, where: Place) -> int:
        """Bytes of the secondary shards held on the compute device or in host memory."""
        return tensor_bytes(list(self.shards.values())) if where == self.where else 0


class NoSecondaryShards:
    """hpZ off: no unit ever has a secondary shard (every gather runs over all ranks)."""
    on = False
    made = dropped = 0

    def numel(self, g) -> int:
        return g.shard_numel

    def __contains__(self, i: int) -> bool:
        return False

    def keep(self, g, flat: torch.Tensor) -> None:
        pass

    def drop(self, i: int) -> None:
        pass

    def drop_all(self) -> None:
        pass

    def bytes_on(self, where: Place) -> int:
        return 0


def secondary_shards(comm, h: int, dtype: torch.dtype, where: Place, pin: bool) -> SecondaryShards | NoSecondaryShards:
    """Stage 3's hpZ secondary shards over groups of ``h`` ranks of ``comm`` (``zero_hpz_partition_size``), or
    :class:`NoSecondaryShards` when hpZ is off: the checks (:func:`hpz_group_size`), then the groups of h consecutive ranks, made
    collectively (every rank calls this at the same point of its initialization). ``where``: where
    the primary shards live (``Place.of(offload_param.device)``)."""
    from ..crew.topology import current
    try:
        topo = current()
    except (RuntimeError, ValueError):
        topo = None
    size = hpz_group_size(h, comm.world_size, topo, offload=where)
    if size <= 1:
        return NoSecondaryShards()
    return SecondaryShards(comm, size, Place.HOST if where is Place.HOST else Place.DEVICE, dtype, pin)
