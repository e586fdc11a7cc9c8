"""Switch 2 of a stage: where the parameters live. Stages 0-2: replicated on every rank.

Every rank holds every parameter (the whole household: no one hands furniture to anyone
during the step). Parameters are packed in buckets of at most ``reduce_bucket_size`` elements,
cut in the reverse of the model's order (roughly the order backward produces their gradients),
one flat buffer per bucket; the model's parameters are views into those buffers, so the
optimizer's writes need no copy.

    stage 0   the optimizer steps the whole of every buffer on every rank: nothing to publish
    stages 1-2  each rank steps only its shard of each buffer; ``publish`` all-gathers the
              updated shards so that everyone has the full parameters again (Psi on the wire)

Stage 3's parameters (sharded, gathered per unit just in time) are in ``gather.py``; both
classes answer the same lifecycle calls (see ``stage.py``).
"""
from __future__ import annotations

import torch

from .comm import Comm
from .flat import FlatGroup, bucket_params
from .memory import tensor_bytes

__all__ = ["ReplicatedParams", "broadcast_"]


def broadcast_(comm: Comm, t: torch.Tensor) -> None:
    """Make rank 0's values everyone's (set-up traffic: not written to the ledger)."""
    if comm.world_size > 1:
        with comm.ledger.paused():
            comm.broadcast(t, 0)


class ReplicatedParams:
    where = "device"                         # parameters never leave the device

    def __init__(self, stage):
        self.stage = stage
        self.groups = self.make_groups(stage.named, stage.zero.reduce_bucket_size)
        self.param_flats = [g.flatten([p.data for p in g.params], stage.dtype, stage.device)
                            for g in self.groups]
        for g, flat in zip(self.groups, self.param_flats):
            broadcast_(stage.comm, flat)     # everyone starts from rank 0's weights
            g.bind(flat)
        # stage 3's counters (gather.py), which nothing here changes: no group is ever gathered
        self.persistent = [False] * len(self.groups)
        self.fetches = self.prefetches = self.peak_gathered_numel = 0

    def make_groups(self, named, bucket_numel: int) -> list[FlatGroup]:
        st = self.stage
        order = list(reversed(named))        # gradients appear roughly in reverse order
        buckets = bucket_params(order, bucket_numel)
        return [FlatGroup(k, [order[i][1] for i in b], [order[i][0] for i in b], st.rank,
                          st.world_size, label=f"bucket {k}") for k, b in enumerate(buckets)]

    def owned(self) -> list[torch.Tensor]:
        """The part of each buffer this rank's optimizer updates (all of it at stage 0)."""
        return self.stage.owned_part(self.param_flats)

    def start(self) -> None:
        pass

    # -- the lifecycle: nothing to gather or release ------------------------------------------
    def reduce_order(self) -> list[int]:
        """Buckets are reduced in bucket order (they are cut in gradient order)."""
        return list(range(len(self.groups)))

    def pre_backward(self) -> None:
        pass

    def reduced(self, g: FlatGroup) -> None:
        pass

    def post_backward(self) -> None:
        pass

    def forward_failed(self) -> None:
        pass

    def publish(self) -> None:
        """After the step: all-gather every bucket's updated shard into the full buffers
        (stages 1-2; at stage 0 every rank stepped the whole buffer already)."""
        st = self.stage
        if not st.shards_optimizer:
            return
        for g, flat, own in zip(self.groups, self.param_flats, st.owned_params):
            st.comm.all_gather(flat, own, tag=f"params {g.label}")   # own: a view of flat

    def write(self, i: int, start: int, values: torch.Tensor) -> None:
        self.stage.owned_params[i][start:start + values.numel()].copy_(values, non_blocking=True)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        self.param_flats[g.index].copy_(flat)

    def register_external_parameter(self, module, param) -> None:
        pass                                  # every parameter is always whole here

    # -- bytes ---------------------------------------------------------------------------------
    def device_bytes(self) -> int:
        return tensor_bytes(self.param_flats)

    def bytes_on(self, where: str) -> int:
        return 0

    def remove_hooks(self) -> None:
        pass

    def close(self) -> None:
        pass
