"""Stage 0: data parallelism from scratch (the old-style crew: everyone carries everything).

Every rank holds the full parameters, the full gradients and the full optimizer states:
16 bytes per parameter in mixed precision, on *every* rank. The only collective is the
gradient all-reduce, done bucket by bucket at the accumulation boundary; each rank then
runs the same optimizer step on the same averaged gradient and stays in sync.

This is the baseline the chapter on "the pain of data parallelism" measures: memory per
rank does not shrink as ranks are added, and each step all-reduces Psi elements, which in a
ring costs every rank 2 (N-1)/N Psi on the wire.
"""
from __future__ import annotations

import torch

from .flat import FlatGroup, bucket_params
from .memory import tensor_bytes
from .stage_base import StageBase, broadcast_

__all__ = ["Stage0"]


class Stage0(StageBase):
    stage = 0
    shards_optimizer = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._overlapping = False                # this backward sends buckets as they complete
        self._sent_in_backward = False           # ... and it has sent them all: skip the boundary's
        # Parameters live in one flat buffer per bucket; the model's params are views of it.
        self.param_flats = [g.flatten([p.data for p in g.params], self.dtype, self.device)
                            for g in self.groups]
        for g, flat in zip(self.groups, self.param_flats):
            broadcast_(self.comm, flat)          # everyone starts from rank 0's weights
            g.bind(flat)
        self._init_grads()
        self._make_home(self._owned(self.param_flats))

    def make_groups(self, named):
        order = list(reversed(named))            # gradients appear roughly in reverse order
        buckets = bucket_params(order, self.zero.reduce_bucket_size)
        return [FlatGroup(k, [order[i][1] for i in b], [order[i][0] for i in b], self.rank,
                          self.world_size, label=f"bucket {k}") for k, b in enumerate(buckets)]

    def _init_grads(self) -> None:
        # The full gradient, accumulated over micro-steps, one flat buffer per bucket.
        self.grad_flats = [torch.zeros_like(f) for f in self.param_flats]

    def _owned(self, flats: list[torch.Tensor]) -> list[torch.Tensor]:
        """The part of each flat buffer this rank's optimizer steps: all of it in stage 0."""
        return list(flats)

    # With overlap_comm, the boundary micro-step's backward sends each bucket as soon as it is
    # complete (as torch DDP does); otherwise every bucket is sent at the boundary, in order.
    def begin_backward(self, boundary: bool = True) -> None:
        super().begin_backward(boundary)
        if self._sent_in_backward:
            raise RuntimeError("backward was called twice before engine.step() at an accumulation "
                               "boundary with overlap_comm: call engine.step() after each backward, "
                               "as DeepSpeed requires")
        self._overlapping = self.overlap and boundary
        if self._overlapping:
            self._start_order()

    def accept_grad(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        if self._overlapping:
            self._check_not_sent(g, i)
        self.grad_flats[g.index][g.param_slice(i)].add_(grad.reshape(-1))
        if self._overlapping:
            self._arrive(g, i)

    def end_backward(self) -> None:
        if self._overlapping:
            self._issue_rest()
            self._drain()
            self._overlapping = False
            self._sent_in_backward = True

    def boundary_reduce(self) -> None:
        if self._sent_in_backward:
            self._sent_in_backward = False
            return
        for g in self.groups:
            self.issue(g)
        self._drain()

    def issue(self, g: FlatGroup) -> None:
        """Stage 0: all-reduce the bucket; every rank keeps the whole average."""
        buf = self.grad_flats[g.index]
        send = self._send_buffer(buf)
        self._all_reduce(g, send, lambda: buf.copy_(send) if send is not buf else None)

    def grads_for_step(self):
        return self._owned(self.grad_flats)

    def zero_grads(self) -> None:
        for buf in self.grad_flats:
            buf.zero_()

    def publish(self) -> None:
        pass                                     # the step wrote every rank's full copy already

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        self.param_flats[g.index].copy_(flat)

    def memory(self) -> dict[str, int]:
        return {"params": tensor_bytes(self.param_flats) + self._frozen_bytes(),
                "grads": tensor_bytes(self.grad_flats),
                "optimizer_states": 0,          # the engine adds the masters and optimizer state
                "buffers": self.buffer_bytes()}
