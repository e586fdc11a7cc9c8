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

from .memory import tensor_bytes
from .stage0 import Stage0
from .stage1 import gather_shards
from .reduce import ReduceScatterGrads

__all__ = ["Stage2"]

class Stage2(ReduceScatterGrads, Stage0):
    stage = 2
    shards_optimizer = True

    def _init_grads(self) -> None:
        # Only our shard of each bucket's gradient, accumulated across micro-steps.
        self._init_grad_shards()

    def _owned(self, flats):
        return [g.shard_of(f) for g, f in zip(self.groups, flats)]

    def publish(self) -> None:
        gather_shards(self, self.param_flats)

    def memory(self) -> dict[str, int]:
        return {"params": tensor_bytes(self.param_flats) + self._frozen_bytes(),
                "grads": 0 if self.grads_on_host else tensor_bytes(self.grad_shards),
                "optimizer_states": 0,          # the engine adds the masters and optimizer state
                "buffers": self.buffer_bytes()}
