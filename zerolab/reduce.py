"""How gradients are reduced: buckets in one fixed order, optionally overlapped with backward.

The boxes of the story: gradients are packed into buckets, and a bucket is sent (reduced) as
a whole once every parameter in it has its gradient. Three rules, shared by every stage:

* **One order on every rank.** A bucket that is complete early waits for the buckets before
  it in :meth:`OrderedBuckets.reduce_order`; buckets still incomplete when backward ends (a
  parameter this rank did not use) are reduced then, in the same order. So every rank issues
  the same collectives in the same order, whatever path its forward took (DDP's rule; the
  result is DDP's with ``find_unused_parameters=True``).
* **Reduce-scatter or all-reduce** (``reduce_scatter``): to end with only its shard a rank
  needs a reduce-scatter (Psi on the wire). DeepSpeed's stage 1/2 all-reduce each bucket and
  keep a shard of the result (2 Psi); ``"reduce_scatter": false`` does that here too.
* **Overlap** (``overlap_comm``): a collective is issued asynchronously the moment its bucket
  is ready, and backward goes on computing the next buckets' gradients while it travels. At
  most two are in flight (DeepSpeed double-buffers too); the oldest is waited for before a
  third is issued, and all of them when backward ends. Without overlap each call blocks.
"""
from __future__ import annotations

from collections import deque

import torch

from .flat import FlatGroup

__all__ = ["OrderedBuckets", "ReduceScatterGrads"]

MAX_IN_FLIGHT = 2


class OrderedBuckets:
    """Bucket bookkeeping for a stage (mixed into :class:`~zerolab.stage_base.StageBase`).
    A stage defines :meth:`issue` (send one bucket) and feeds :meth:`_arrive`."""

    def _init_order(self) -> None:
        self.overlap = bool(self.zero.overlap_comm)             # async collectives during backward
        self.use_reduce_scatter = bool(self.zero.reduce_scatter)
        self._arrived: dict[int, set[int]] = {}   # group index -> params whose gradient arrived
        self._ready: set[int] = set()             # complete groups waiting for their turn
        self._issued: set[int] = set()            # groups sent in this backward
        self._order: list[int] = []               # this backward's order of groups
        self._next = 0                            # position in _order of the next to send
        self._in_flight: deque = deque()          # (Pending, finish) of async collectives

    def reduce_order(self) -> list[int]:
        """Group indices in the order their gradients are sent: identical on every rank.
        Stages 0-2: bucket order (buckets are cut in gradient order)."""
        return list(range(len(self.groups)))

    def _start_order(self) -> None:
        order = self.reduce_order()
        seen = set(order)
        self._order = order + [i for i in range(len(self.groups)) if i not in seen]
        self._next = 0
        self._ready.clear()
        self._issued.clear()
        self._arrived.clear()

    def _check_not_sent(self, g: FlatGroup, i: int) -> None:
        if g.index in self._issued:
            raise RuntimeError(
                f"a second gradient for {g.names[i]!r} arrived in one backward, after its bucket "
                f"({g.label}) was sent: its gradient was accumulated twice in one backward "
                "(e.g. reentrant activation checkpointing), which zerolab does not support; use "
                "torch.utils.checkpoint with use_reentrant=False")

    def _arrive(self, g: FlatGroup, i: int) -> None:
        got = self._arrived.setdefault(g.index, set())
        got.add(i)
        if len(got) == len(g.params):
            self._ready.add(g.index)
            while self._next < len(self._order) and self._order[self._next] in self._ready:
                self._issue_next()

    def _issue_next(self) -> None:
        gi = self._order[self._next]
        self._next += 1
        self._issued.add(gi)
        self.issue(self.groups[gi])

    def _issue_rest(self) -> None:
        """Send every group not sent yet, in order (end of backward)."""
        while self._next < len(self._order):
            self._issue_next()

    def issue(self, g: FlatGroup) -> None:
        raise NotImplementedError

    # -- the collectives --------------------------------------------------------------------
    def _reduce_to_shard(self, g: FlatGroup, send: torch.Tensor, on_shard) -> None:
        """Sum ``send`` (group ``g``'s padded bucket, pre-divided by N) over ranks and call
        ``on_shard(this rank's shard of the sum)`` when it has arrived."""
        tag = f"grads {g.label}"
        if self.use_reduce_scatter:
            out = torch.empty(g.shard_numel, dtype=send.dtype, device=send.device)
            p = self.comm.reduce_scatter(out, send, tag=tag, async_op=self.overlap)
            self._after_send(p, lambda: on_shard(out))
        else:
            p = self.comm.all_reduce(send, tag=tag, async_op=self.overlap)
            self._after_send(p, lambda: on_shard(g.shard_of(send)))

    def _all_reduce(self, g: FlatGroup, send: torch.Tensor, on_done) -> None:
        p = self.comm.all_reduce(send, tag=f"grads {g.label}", async_op=self.overlap)
        self._after_send(p, on_done)

    def _after_send(self, pending, finish) -> None:
        if not self.overlap:                      # the call blocked: its result is here
            finish()
            return
        self._in_flight.append((pending, finish))
        while len(self._in_flight) > MAX_IN_FLIGHT:
            self._finish_oldest()

    def _finish_oldest(self) -> None:
        pending, finish = self._in_flight.popleft()
        pending.wait()
        finish()

    def _drain(self) -> None:
        while self._in_flight:
            self._finish_oldest()


class ReduceScatterGrads:
    """Sharded gradients, shared by stages 2 and 3 (a mixin for :class:`StageBase`).

    A group's gradient is collected in a bucket as backward produces it; when the bucket's turn
    comes it is reduced (see the module docstring), this rank adds its shard to
    ``grad_shards`` (accumulating across micro-steps) and the bucket is freed. Stages hook in
    through :meth:`_after_reduce` (stage 3 releases the gathered parameters there)."""

    def _init_grad_shards(self) -> None:
        # With optimizer offload the reduced shards go straight down to host memory, in fp32,
        # where the host step reads them (DeepSpeed's CPU gradient buffer); otherwise they stay
        # on the device in the model dtype.
        self.grads_on_host = self.zero.offload_optimizer.device in ("cpu", "nvme")
        if self.grads_on_host:
            pin = self.zero.offload_optimizer.pin_memory and torch.cuda.is_available()
            self.grad_shards = [torch.zeros(g.shard_numel, dtype=torch.float32, pin_memory=pin)
                                for g in self.groups]
        else:
            self.grad_shards = [torch.zeros(g.shard_numel, dtype=self.dtype, device=self.device)
                                for g in self.groups]
        self._buckets: dict[int, torch.Tensor] = {}     # group index -> gradient bucket being filled

    def begin_backward(self, boundary: bool = True) -> None:
        super().begin_backward(boundary)
        self._start_order()

    def accept_grad(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        self._check_not_sent(g, i)
        bucket = self._buckets.get(g.index)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
            self._buckets[g.index] = bucket
            self._track(f"grads {g.index}", bucket)
        bucket[g.param_slice(i)].add_(grad.reshape(-1))
        self._arrive(g, i)

    def issue(self, g: FlatGroup) -> None:
        bucket = self._buckets.pop(g.index, None)
        if bucket is None:                        # no gradient reached this group here
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
        send = self._send_buffer(bucket)

        def done(shard: torch.Tensor) -> None:
            acc = self.grad_shards[g.index]
            acc.add_(shard if shard.device == acc.device else shard.to(acc.device))
            self._track(f"grads {g.index}", None)
        self._reduce_to_shard(g, send, done)
        self._after_reduce(g)

    def _after_reduce(self, g: FlatGroup) -> None:
        pass

    def end_backward(self) -> None:
        self._issue_rest()
        self._drain()

    def boundary_reduce(self) -> None:
        pass                                      # already reduced during backward

    def grads_for_step(self):
        return self.grad_shards

    def zero_grads(self) -> None:
        for s in self.grad_shards:
            s.zero_()
