"""Switch 2 of a stage: where the parameters live. Stages 0-2: replicated on every rank.

Every rank holds every parameter (nothing is gathered for forward or backward). As in DeepSpeed, the trainable parameters are laid end to end in **one flat
buffer** (in the reverse of the model's order, roughly the order backward produces their
gradients), padded to a multiple of N and cut into N equal, contiguous **partitions**: rank r
owns partition r, and a parameter may straddle two. The model's parameters are views into the
buffer, so the optimizer's writes need no copy. Gradient buckets (``reduce.py``) are ranges of
this buffer, so a bucket touches one partition or a few.

    stage 0   the optimizer steps the whole buffer on every rank: nothing to publish
    stages 1-2  each rank steps only its partition; ``publish`` all-gathers the updated
              partitions in one call so that everyone has the full parameters again (Psi)

With ``"zerolab": {"ideal_reduce_scatter": true}`` (the ZeRO paper's layout, not DeepSpeed's)
each bucket is its own flat buffer, cut into N shards, so that a bucket can be reduce-scattered;
``publish`` then all-gathers every bucket's buffer.

Stage 3's parameters (sharded, gathered per unit just in time) are in ``gather.py``; both
classes answer the same lifecycle calls (see ``stage.py``).
"""
from __future__ import annotations

import torch

from ..comm import Comm
from ..memory.flat import FlatGroup, Part, bucket_params
from ..memory import Place, tensor_bytes
from .switches import Stage3Stats, checksum

__all__ = ["ReplicatedParams", "broadcast_"]


def broadcast_(comm: Comm, t: torch.Tensor) -> None:
    """Make rank 0's values everyone's (set-up traffic: not written to the ledger)."""
    if comm.world_size > 1:
        with comm.ledger.paused():
            comm.broadcast(t, 0)


class ReplicatedParams:
    """Stages 0-2's parameters: every rank holds them all, in one flat buffer per group.

    Built from what it needs: the trained parameters (``named``, in the model's order) and their
    optimizer groups (``opt_group_of``: parameter id -> group index), the ``comm``, the model
    dtype and device, ``per_bucket`` (ideal_reduce_scatter's layout, with ``bucket_numel``) and
    ``sharded`` (each rank's optimizer steps only its partition: stages 1-2)."""

    def __init__(self, named, comm: Comm, *, dtype: torch.dtype, device: torch.device, sharded: bool,
                 per_bucket: bool = False, bucket_numel: int = 0, opt_group_of=None):
        self.named, self.comm = named, comm
        self.rank, self.world_size = comm.rank, comm.world_size
        self.sharded, self.per_bucket = sharded, per_bucket
        self.opt_group_of = opt_group_of or {}
        self.groups = self.make_groups(named, bucket_numel)
        # the order gradient buckets are filled in (indices into ``named``): the model's order
        # where DeepSpeed reduces after backward (stage 0, stage 1 without overlap_comm), else the
        # order the last backward's gradient hooks fired in (DeepSpeed fills its buckets in hook
        # order), the reverse of the model's until one backward has run (observe_grad_order)
        self.grad_order: list[int] | None = None
        self._order_settled = False
        self.param_flats = [g.flatten([p.data for p in g.params], dtype, device) for g in self.groups]
        for g, flat in zip(self.groups, self.param_flats):
            broadcast_(comm, flat)           # everyone starts from rank 0's weights
            g.bind(flat)
        # the part of each buffer this rank's optimizer updates (all of it at stage 0): views
        self.owned_params = ([g.shard_of(f) for g, f in zip(self.groups, self.param_flats)] if sharded
                             else list(self.param_flats))
        # stage 3's members, empty here (the ParamSwitch interface is the same for both classes,
        # so callers never probe for them): no gathered copies (``full``, which budget.py checks
        # activations against: every parameter is a view of ``param_flats``), no parameter cut
        # into a partition unit (``unit_of``: every parameter here is trained and whole)
        self.full: dict[int, torch.Tensor] = {}
        self.unit_of: dict[int, FlatGroup] = {}

    def make_groups(self, named, bucket_numel: int) -> list[FlatGroup]:
        """One flat buffer per parameter group of the optimizer (DeepSpeed's bit16 groups), or,
        with ideal_reduce_scatter, one per bucket within each parameter group."""
        opt = self.opt_group_of
        # DeepSpeed's flat buffer holds the parameters in the model's order (its partitions are
        # contiguous ranges of it); ideal_reduce_scatter's buckets, each its own partition, follow
        # the order gradients appear in, roughly the reverse
        order = list(reversed(named)) if self.per_bucket else list(named)
        ks = sorted({opt.get(id(p), 0) for _, p in order})
        groups: list[FlatGroup] = []
        for k in ks:
            mine = [(n, p) for n, p in order if opt.get(id(p), 0) == k]
            name = "flat buffer" if len(ks) == 1 else f"flat buffer {k}"
            if not self.per_bucket:          # DeepSpeed: one buffer, N contiguous partitions
                groups.append(FlatGroup(len(groups), [p for _, p in mine], [n for n, _ in mine], self.rank,
                                        self.world_size, label=name, opt_group=k))
                continue
            for b in bucket_params(mine, bucket_numel):
                groups.append(FlatGroup(len(groups), [mine[i][1] for i in b], [mine[i][0] for i in b],
                                        self.rank, self.world_size, label=f"bucket {len(groups)}", opt_group=k))
        return groups

    def reduce_units(self) -> list[Part]:
        """What the gradient buckets are packed from, in gradient order: each parameter's range
        of its flat buffer (DeepSpeed), or each bucket's whole buffer (ideal_reduce_scatter)."""
        if self.per_bucket:
            return [Part(g, 0, g.padded_numel, list(range(len(g.params))), g.numel) for g in self.groups]
        where = {id(p): (g, i) for g in self.groups for i, p in enumerate(g.params)}
        units = []
        order = self.grad_order if self.grad_order is not None else range(len(self.named) - 1, -1, -1)
        for k in order:
            g, i = where[id(self.named[k][1])]
            units.append(Part(g, g.offsets[i], g.offsets[i] + g.numels[i], [i], g.numels[i]))
        return units

    def observe_grad_order(self, arrived: list[tuple[int, int]]) -> bool:
        """The first backward's gradients arrived in this order ((group, index) pairs): fill every
        later backward's buckets in it, as DeepSpeed's hooks do. Called once, at the second
        backward, on every rank; the ranks agree on it first (a 16-byte all-gather filed as
        zerolab's own check). Where they differ (ranks on different paths), every rank keeps the
        reverse of the model's order: the same buckets everywhere, never a mismatched call.
        Returns whether the buckets change."""
        if self._order_settled:
            return False
        self._order_settled = True
        index = {id(p): k for k, (_, p) in enumerate(self.named)}
        seen = [index[id(self.groups[g].params[i])] for g, i in arrived]
        order = list(dict.fromkeys(seen))
        order += [k for k in range(len(self.named) - 1, -1, -1) if k not in set(order)]
        code = torch.tensor([len(order), checksum(order)], dtype=torch.int64)
        codes = torch.empty(2 * self.world_size, dtype=torch.int64)
        self.comm.all_gather(codes, code, tag="check gradient order", kind="check")
        rows = codes.view(self.world_size, 2).tolist()
        if all(r == rows[0] for r in rows) and order != self.grad_order:
            self.grad_order = order
            return True
        return False

    def forward_grad_order(self) -> None:
        """Fill buckets in the model's order (where DeepSpeed reduces after backward)."""
        self.grad_order = list(range(len(self.named)))

    def owned(self) -> list[torch.Tensor]:
        """The part of each buffer this rank's optimizer updates (all of it at stage 0)."""
        return self.owned_params

    @property
    def trained_groups(self) -> list[FlatGroup]:
        """The groups the optimizer steps: all of them (stage 3 also partitions untrained
        parameters, in groups after its trained ones; here untrained parameters stay out)."""
        return self.groups

    # -- the lifecycle: nothing to gather or release ------------------------------------------
    def start(self) -> None:
        pass

    def pre_backward(self) -> None:
        pass

    def post_backward(self) -> None:
        pass

    def forward_failed(self) -> None:
        pass

    def grads_done(self, g: FlatGroup) -> None:
        pass                                  # stage 3 releases a unit here; nothing is gathered

    def drop_secondary(self) -> None:
        """Stage 3's hpZ forgets its secondary shards after a checkpoint: there are none here."""

    def register_external_parameter(self, module, param) -> None:
        pass                                  # every parameter is always whole here

    def remove_hooks(self) -> None:
        pass

    def close(self) -> None:
        pass

    def publish(self) -> None:
        """After the step: all-gather the updated partitions into the full buffer (stages 1-2;
        at stage 0 every rank stepped the whole buffer already). One call, as DeepSpeed's
        ``all_gather_into_tensor`` per parameter group (one per bucket with ideal_reduce_scatter)."""
        if not self.sharded:
            return
        for g, flat, own in zip(self.groups, self.param_flats, self.owned_params):
            self.comm.all_gather(flat, own, tag=f"params {g.label}")   # own: a view of flat

    def write(self, i: int, start: int, values: torch.Tensor) -> None:
        self.owned_params[i][start:start + values.numel()].copy_(values, non_blocking=True)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        self.param_flats[g.index].copy_(flat)

    # -- untrained parameters: stage 3 partitions them; here each module keeps its own ----------
    def untrained_values(self) -> dict[str, torch.Tensor]:
        """None of the untrained parameters is held here (the Stage reads them from the model)."""
        return {}

    def load_untrained(self, values: dict[str, torch.Tensor]) -> None:
        """Nothing to load: the Stage sets untrained parameters in the model directly."""

    def restore_untrained(self) -> None:
        """Nothing to restore: untrained parameters were never taken from the model."""

    # -- for readers ---------------------------------------------------------------------------
    @property
    def prefetches(self) -> int:
        """Groups gathered ahead of use: none, nothing is gathered at stages 0-2."""
        return 0

    def stats(self) -> Stage3Stats:
        """``engine.stage3_stats()`` at stages 0-2: nothing gathered (zeros), each flat buffer a
        partition that is never persistent, the layout "replicated" and no trace."""
        return Stage3Stats(0, 0, 0, 0, 0, [(g.label, g.padded_numel, False) for g in self.groups], [],
                           "replicated", "invalid")

    def reset_peaks(self) -> None:
        """Stage 3 counts its most elements gathered at once anew; nothing is gathered here."""

    def observe(self, observer) -> None:
        """Stage 3 tells ``observer`` each gather and release; there are none here to tell."""

    def forget(self, observer) -> None:
        """Nothing was told to ``observer`` (see :meth:`observe`)."""

    def describe(self) -> str:
        return "replicated: every rank holds them all"

    def memory(self) -> dict[Place, dict[str, int]]:
        return {Place.DEVICE: {"params": tensor_bytes(self.param_flats)}}
