"""Switch 1 of a stage: how gradients are reduced (the boxes of the story).

Gradients are packed into buckets (the stage's groups), and a bucket is sent (reduced) as a
whole once every parameter in it has its gradient. Three choices, one class each:

    AllReduceAtBoundary       stage 0: the full gradient is accumulated over micro-steps and
                              all-reduced at the accumulation boundary; every rank keeps all
    ReduceScatterAtBoundary   stage 1: the same, but each bucket is reduced to this rank's
                              shard, which is all its optimizer steps
    ReduceScatterInBackward   stages 2-3: each bucket is reduced the moment it is complete,
                              during every backward; the rank adds its shard to
                              ``grad_shards`` and the bucket is freed

Rules they share (:class:`GradReducer`):

* **One order on every rank.** A bucket that is complete early waits for the buckets before
  it in the parameters' ``reduce_order()``; buckets still incomplete when backward ends (a
  parameter this rank did not use) are reduced then, in the same order. So every rank issues
  the same collectives in the same order, whatever path its forward took (DDP's rule; the
  result is DDP's with ``find_unused_parameters=True``).
* **Reduce-scatter or all-reduce** (``reduce_scatter``): to end with only its shard a rank
  needs a reduce-scatter (Psi on the wire). DeepSpeed's stages 1-2 all-reduce each bucket and
  keep a shard of the result (2 Psi); ``"reduce_scatter": false`` does that here too.
* **Overlap** (``overlap_comm``): a collective is issued asynchronously the moment its bucket
  is ready, and backward goes on computing the next buckets' gradients while it travels. At
  most two are in flight (DeepSpeed double-buffers too); the oldest is waited for before a
  third is issued, and all of them when backward ends. Without overlap each call blocks. At
  stages 0-1 only the boundary micro-step's backward overlaps (as torch DDP does with
  ``no_sync``): the other micro-steps only accumulate.
"""
from __future__ import annotations

from collections import deque

import torch

from .flat import FlatGroup
from .memory import tensor_bytes

__all__ = ["GradReducer", "AllReduceAtBoundary", "ReduceScatterAtBoundary", "ReduceScatterInBackward"]

MAX_IN_FLIGHT = 2


class GradReducer:
    """Bucket order and the collectives, shared by the three switches. A switch defines
    :meth:`accept` (a parameter's gradient arrived) and :meth:`issue` (send one bucket)."""

    on_host = False              # are the reduced gradients kept in host memory (offload)?
    grad_flats: list[torch.Tensor] = ()      # stages 0-1: full gradient buffers
    grad_shards: list[torch.Tensor] = ()     # stages 2-3: this rank's gradient shards

    def __init__(self, stage):
        self.stage = stage
        self.groups: list[FlatGroup] = stage.groups
        self.comm = stage.comm
        self.dtype, self.device = stage.dtype, stage.device
        self.rank, self.world_size = stage.rank, stage.world_size
        self.comm_dtype = stage.comm_dtype       # the dtype gradients travel in
        self.overlap = bool(stage.zero.overlap_comm)             # async collectives during backward
        self.use_reduce_scatter = bool(stage.zero.reduce_scatter)
        self._arrived: dict[int, set[int]] = {}   # group index -> params whose gradient arrived
        self._ready: set[int] = set()             # complete groups waiting for their turn
        self._issued: set[int] = set()            # groups sent in this backward
        self._order: list[int] = []               # this backward's order of groups
        self._next = 0                            # position in _order of the next to send
        self._in_flight: deque = deque()          # (Pending, finish) of async collectives

    # -- the lifecycle (called by the Stage) -----------------------------------------------
    def pre_backward(self, boundary: bool) -> None:
        pass

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        raise NotImplementedError

    def post_backward(self) -> None:
        pass

    def at_boundary(self) -> None:
        pass

    def for_step(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def zero(self) -> None:
        raise NotImplementedError

    def device_bytes(self) -> int:
        raise NotImplementedError

    # -- the order of buckets ----------------------------------------------------------------
    def _start_order(self) -> None:
        order = self.stage.params.reduce_order()
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
    def _send_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """The gradient as it travels: in the communication dtype, pre-divided by N so the
        SUM is an average (pre-dividing keeps fp16 sums from overflowing)."""
        send = buf.to(self.comm_dtype) if buf.dtype != self.comm_dtype else buf
        if self.world_size > 1:
            send.div_(self.world_size)
        return send

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


class AllReduceAtBoundary(GradReducer):
    """Stage 0 (the old-style crew): every rank accumulates the full gradient of each bucket
    over the micro-steps and all-reduces it at the accumulation boundary. With
    ``overlap_comm`` the boundary micro-step's backward sends each bucket as soon as it is
    complete, as torch DDP does."""

    def __init__(self, stage):
        super().__init__(stage)
        self.grad_flats = [torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
                           for g in self.groups]
        self._overlapping = False                # this backward sends buckets as they complete
        self._sent_in_backward = False           # ... and it has sent them all: skip the boundary's

    def pre_backward(self, boundary: bool) -> None:
        if self._sent_in_backward:
            raise RuntimeError("backward was called twice before engine.step() at an accumulation "
                               "boundary with overlap_comm: call engine.step() after each backward, "
                               "as DeepSpeed requires")
        self._overlapping = self.overlap and boundary
        if self._overlapping:
            self._start_order()

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        if self._overlapping:
            self._check_not_sent(g, i)
        self.grad_flats[g.index][g.param_slice(i)].add_(grad.reshape(-1))
        if self._overlapping:
            self._arrive(g, i)

    def post_backward(self) -> None:
        if self._overlapping:
            self._issue_rest()
            self._drain()
            self._overlapping = False
            self._sent_in_backward = True

    def at_boundary(self) -> None:
        if self._sent_in_backward:
            self._sent_in_backward = False
            return
        for g in self.groups:
            self.issue(g)
        self._drain()

    def issue(self, g: FlatGroup) -> None:
        """All-reduce the bucket; every rank keeps the whole average."""
        buf = self.grad_flats[g.index]
        send = self._send_buffer(buf)
        self._all_reduce(g, send, lambda: buf.copy_(send) if send is not buf else None)

    def for_step(self) -> list[torch.Tensor]:
        return self.stage.owned_part(self.grad_flats)

    def zero(self) -> None:
        for buf in self.grad_flats:
            buf.zero_()

    def device_bytes(self) -> int:
        return tensor_bytes(self.grad_flats)


class ReduceScatterAtBoundary(AllReduceAtBoundary):
    """Stage 1: as stage 0, but each bucket is reduced to this rank's shard (only that shard
    of ``grad_flats`` is valid afterwards: it is all this rank's optimizer steps)."""

    def issue(self, g: FlatGroup) -> None:
        buf = self.grad_flats[g.index]
        send = self._send_buffer(buf)
        self._reduce_to_shard(g, send, lambda shard: g.shard_of(buf).copy_(shard))


class ReduceScatterInBackward(GradReducer):
    """Stages 2-3: no rank ever holds the full gradient.

    A group's gradient is collected in a bucket as backward produces it; when the bucket's turn
    comes it is reduced, this rank adds its shard to ``grad_shards`` (accumulating across
    micro-steps) and the bucket is freed; the parameters are told (``params.reduced(g)``: stage 3
    reshards the unit then)."""

    def __init__(self, stage):
        super().__init__(stage)
        # With optimizer offload the reduced shards go straight down to host memory, in fp32,
        # where the host step reads them (DeepSpeed's CPU gradient buffer); otherwise they stay
        # on the device in the model dtype.
        self.on_host = stage.zero.offload_optimizer.device in ("cpu", "nvme")
        if self.on_host:
            pin = stage.zero.offload_optimizer.pin_memory and torch.cuda.is_available()
            self.grad_shards = [torch.zeros(g.shard_numel, dtype=torch.float32, pin_memory=pin)
                                for g in self.groups]
        else:
            self.grad_shards = [torch.zeros(g.shard_numel, dtype=self.dtype, device=self.device)
                                for g in self.groups]
        self._buckets: dict[int, torch.Tensor] = {}     # group index -> gradient bucket being filled

    def pre_backward(self, boundary: bool) -> None:
        self._start_order()

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        self._check_not_sent(g, i)
        bucket = self._buckets.get(g.index)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
            self._buckets[g.index] = bucket
            self.stage.track(f"grads {g.index}", bucket)
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
            self.stage.track(f"grads {g.index}", None)
        self._reduce_to_shard(g, send, done)
        self.stage.params.reduced(g)

    def post_backward(self) -> None:
        self._issue_rest()
        self._drain()

    def for_step(self) -> list[torch.Tensor]:
        return self.grad_shards

    def zero(self) -> None:
        for s in self.grad_shards:
            s.zero_()

    def device_bytes(self) -> int:
        return 0 if self.on_host else tensor_bytes(self.grad_shards)
