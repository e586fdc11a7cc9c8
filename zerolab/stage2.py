"""Stage 2: shard the gradients too (each worker keeps only his own door stickers).

As in stage 1 each rank steps only its shard, but now no rank ever holds the full
gradient. Gradients are packed into buckets of at most ``reduce_bucket_size`` elements in
the order backward produces them; the moment a bucket is complete it is reduce-scattered,
the rank keeps (and accumulates, across micro-steps) only its shard of it, and the bucket
is freed. The largest transient cost is the buckets in flight, reported as ``buffers``.

Per rank (mixed precision, Adam): 2 Psi params + (2 + 12) Psi / N.
On the wire: reduce-scatter Psi per micro-step + all-gather Psi after the step.
"""
from __future__ import annotations

import torch

from .flat import FlatGroup
from .memory import tensor_bytes
from .stage0 import Stage0
from .stage1 import gather_shards

__all__ = ["Stage2"]


class Stage2(Stage0):
    stage = 2
    shards_optimizer = True

    def _init_grads(self) -> None:
        # Only our shard of each bucket's gradient, accumulated across micro-steps.
        self.grad_shards = [torch.zeros(g.shard_numel, dtype=self.dtype, device=self.device)
                            for g in self.groups]
        self._buckets: dict[int, torch.Tensor] = {}     # group index -> gradient bucket in flight
        self._arrived: dict[int, set[int]] = {}         # group index -> params whose grad arrived
        self._reduced: set[int] = set()                 # groups reduced in this backward pass

    def _owned(self, flats):
        return [g.shard_of(f) for g, f in zip(self.groups, flats)]

    def accept_grad(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        bucket = self._buckets.get(g.index)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
            self._buckets[g.index] = bucket
            self._arrived[g.index] = set()
            self._track(f"bucket {g.index}", bucket)
        bucket[g.param_slice(i)].add_(grad.reshape(-1))
        self._arrived[g.index].add(i)
        if len(self._arrived[g.index]) == len(g.params):
            self._reduce_bucket(g)

    def _reduce_bucket(self, g: FlatGroup) -> None:
        bucket = self._buckets.pop(g.index, None)
        if bucket is None:                        # no gradient reached this bucket here
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
        self._arrived.pop(g.index, None)
        self._reduced.add(g.index)
        send = self._send_buffer(bucket)
        out = torch.empty(g.shard_numel, dtype=send.dtype, device=send.device)
        self.comm.reduce_scatter(out, send, tag=f"grads {g.label}")
        self.grad_shards[g.index].add_(out)
        self._track(f"bucket {g.index}", None)

    def end_backward(self) -> None:
        # Buckets whose parameters got no (or not every) gradient this pass, e.g. a parameter
        # unused in forward, are still reduced, in group order, so every rank makes the same
        # calls and the averages stay right.
        for g in self.groups:
            if g.index not in self._reduced:
                self._reduce_bucket(g)
        self._reduced.clear()

    def boundary_reduce(self) -> None:
        pass                                      # already reduced during backward

    def grads_for_step(self):
        return self.grad_shards

    def zero_grads(self) -> None:
        for s in self.grad_shards:
            s.zero_()

    def publish(self) -> None:
        gather_shards(self, self.param_flats)

    def memory(self) -> dict[str, int]:
        return {"params": tensor_bytes(self.param_flats) + self._frozen_bytes(),
                "grads": tensor_bytes(self.grad_shards),
                "optimizer_states": tensor_bytes(self.masters) if self.mixed else 0,
                "buffers": self.buffer_bytes()}
