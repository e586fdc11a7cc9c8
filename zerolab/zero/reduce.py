"""Switch 1 of a stage: how gradients are reduced (the boxes of the story).

Gradients are packed into **buckets** (DeepSpeed's IPG buckets) of at most ``reduce_bucket_size``
elements, in the order backward produces them, and a bucket is sent as a whole once every
gradient in it has arrived. The collective per bucket is DeepSpeed 0.19.8's for the same keys:

    stage 0     one all-reduce per bucket of 5e8 elements, at the accumulation boundary
                (DeepSpeed's engine reduces stage 0 like DDP, whatever reduce_bucket_size says)
    stages 1-2  ``reduce_scatter`` and ``use_multi_rank_bucket_allreduce`` true (the defaults):
                the bucket is **all-reduced** and each rank keeps the slices of its partition
                (2 Psi on the wire, plus the Psi of the all-gather after the step);
                ``use_multi_rank_bucket_allreduce`` false: one **reduce** to each rank whose
                partition the bucket touches; ``reduce_scatter`` false: all-reduce
    stage 3     ``reduce_scatter`` true (the default): one **reduce-scatter** of the bucket (each
                module's gradient padded to a multiple of N and cut into N shards, every rank
                receiving its shard of each); false: all-reduce, each rank keeping its shards

**qgZ** (``zero_quantized_gradients``, stage 3, more than one node): :class:`QuantizedReduce`,
DeepSpeed 0.19.8's ``all_to_all_quant_reduce`` in place of the reduce-scatter (its docstring has
the steps, the fallbacks and where zerolab differs).

Where zerolab does what DeepSpeed does not, it is opt-in and named: ``"zerolab":
{"ideal_reduce_scatter": true}`` makes stages 1-2 reduce-scatter each bucket (the ZeRO paper's
Psi, each bucket then being its own partition; see ``params.py``).

Three classes, one per stage family:

    AllReduceAtBoundary       stage 0: every rank accumulates the full gradient over micro-steps
                              and all-reduces it at the accumulation boundary; every rank keeps all
    ReduceScatterAtBoundary   stage 1: the same, but each rank keeps only its partition's slices
    ReduceScatterInBackward   stages 2-3: each bucket is reduced the moment it is complete, during
                              every backward; the rank adds its slices to ``grad_shards`` and the
                              bucket is freed

Rules they share (:class:`GradReducer`, in ``bucket_order.py``):

* **One order on every rank.** A bucket that is complete early waits for the buckets before it;
  buckets still incomplete when backward ends (a parameter this rank did not use) are sent then,
  in the same order. So every rank issues the same collectives in the same order, whatever path
  its forward took (DDP's rule; the result is DDP's with ``find_unused_parameters=True``).
* **Overlap** (``overlap_comm``): a collective is issued asynchronously the moment its bucket is
  ready, and backward goes on computing the next buckets' gradients while it travels. Stages 1-2
  keep at most two in flight (DeepSpeed's two IPG buffers), stage 3 one (its single IPG buffer
  per dtype); the oldest is waited for before another is issued, and all of them when backward
  ends. Without overlap each call blocks. At stages 0-1 only the boundary micro-step's backward
  overlaps (as torch DDP does with ``no_sync``): the other micro-steps only accumulate.
"""
from __future__ import annotations

import torch

from .bucket_order import GradReducer
from ..memory.flat import Bucket, FlatGroup
from ..i18n import catalogue
from ..memory import Place, tensor_bytes
from ..zeropp.qgz import QuantizedReduce

__all__ = ["GradReducer", "AllReduceAtBoundary", "ReduceScatterAtBoundary", "ReduceScatterInBackward",
           "QuantizedReduce"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

class AllReduceAtBoundary(GradReducer):
    """Stage 0 (the old-style crew): every rank accumulates the full gradient over the
    micro-steps and all-reduces each bucket at the accumulation boundary. With ``overlap_comm``
    the boundary micro-step's backward sends each bucket as soon as it is complete, as torch DDP
    does (DeepSpeed's stage 0 reduces at the boundary only)."""

    def __init__(self, groups, comm, spec, **kw):
        super().__init__(groups, comm, spec, **kw)
        self.grad_flats = [torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
                           for g in self.groups]
        self._overlapping = False                # this backward sends buckets as they complete
        self._sent_in_backward = False           # ... and it has sent them all: skip the boundary's

    def pre_backward(self, boundary: bool) -> None:
        if self._sent_in_backward:
            raise RuntimeError(T("backward was called twice before engine.step() at an accumulation "
                                 "boundary with overlap_comm: call engine.step() after each backward, "
                                 "as DeepSpeed requires"))
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
        for b in self.buckets:
            self.issue(b)
        self._drain()

    def _views(self, b: Bucket) -> list[torch.Tensor]:
        return [self.grad_flats[p.group.index][p.start:p.end] for p in b.parts]

    def _bucket(self, b: Bucket):
        """The bucket's gradients in one buffer (a view of the accumulated gradient when it is one
        range of one buffer, else a copy of its ranges end to end), and the ranges' views."""
        views = self._views(b)
        return (views[0] if len(views) == 1 else torch.cat(views)), views

    def _copy_back(self, send: torch.Tensor, views: list[torch.Tensor]) -> None:
        if len(views) == 1 and send.data_ptr() == views[0].data_ptr():
            return
        at = 0
        for v in views:
            v.copy_(send[at:at + v.numel()])
            at += v.numel()

    def issue(self, b: Bucket) -> None:
        """All-reduce the bucket; every rank keeps the whole average."""
        buf, views = self._bucket(b)
        send = self._send_buffer(buf)
        p = self.comm.all_reduce(send, tag=f"grads {b.label}", async_op=self.overlap)
        self._after_send(p, lambda: self._copy_back(self._post_scaled(send), views))

    def for_step(self) -> list[torch.Tensor]:
        """This rank's part of each gradient: all of it (stage 0), its shard (stage 1)."""
        if not self.sharded:
            return list(self.grad_flats)
        return [g.shard_of(f) for g, f in zip(self.groups, self.grad_flats)]

    def zero(self) -> None:
        for buf in self.grad_flats:
            buf.zero_()

    def describe(self) -> str:
        return "all-reduce " + ("during the boundary's backward (overlap_comm)" if self.overlap
                                else "at the accumulation boundary") + "; every rank keeps all"

    def memory(self) -> dict[Place, dict[str, int]]:
        return {Place.DEVICE: {"grads": tensor_bytes(self.grad_flats)}}


class ReduceScatterAtBoundary(AllReduceAtBoundary):
    """Stage 1: as stage 0, but each rank keeps only the slices of its own partition (only
    that shard of ``grad_flats`` is valid afterwards: it is all this rank's optimizer steps)."""

    def issue(self, b: Bucket) -> None:
        buf, _ = self._bucket(b)
        send = self._send_buffer(buf)

        def deliver(g: FlatGroup, s: int, e: int, values: torch.Tensor) -> None:
            dst = self.grad_flats[g.index][s:e]
            if values.data_ptr() != dst.data_ptr():       # (in place when the bucket was a view)
                dst.copy_(values)
        self._reduce(b, send, deliver)

    def describe(self) -> str:
        return f"{self._how()} at the accumulation boundary; each rank keeps its shard"


class ReduceScatterInBackward(GradReducer):
    """Stages 2-3: no rank ever holds the full gradient.

    Each bucket's gradients are collected in a buffer of the bucket's size as backward produces
    them; when the bucket's turn comes it is reduced, this rank adds its slices to
    ``grad_shards`` (accumulating across micro-steps) and the buffer is freed. When every
    gradient of a group has arrived the parameters are told (``params.grads_done(g)``: stage 3
    releases the gathered unit then)."""

    def __init__(self, groups, comm, spec, *, home, **kw):
        super().__init__(groups, comm, spec, home=home, **kw)
        # the state home says where the reduced shards go: on the device in the model dtype, or,
        # with optimizer offload, straight down to host memory in fp32, where the host step reads
        # them (DeepSpeed's CPU gradient buffer)
        self.place, self.grad_shards = home.gradient_shards([g.shard_numel for g in groups], self.dtype)
        self._buffers: dict[int, torch.Tensor] = {}     # bucket index -> gradient buffer being filled
        # since zero(), no slice has reached the shards: the first backward's slices are copied in
        # (0 + x is x) rather than added; on the host that saves a pass, and from a GPU the copy
        # goes down asynchronously into pinned memory (waited for at the end of backward)
        self._fresh = True
        self._copies_in_flight: torch.device | None = None
        # qgZ: DeepSpeed's stage 3 reduces through all-to-alls only with more than one node
        # (__avg_scatter_grads: "all2all_process_group is not None and num_nodes > 1")
        self.qgz: QuantizedReduce | None = None
        if spec.quantized:
            from ..crew.topology import current
            if current().nodes > 1:
                self.qgz = QuantizedReduce(self.comm)

    def pre_backward(self, boundary: bool) -> None:
        self._start_order()

    def _buffer(self, b: Bucket) -> torch.Tensor:
        buf = self._buffers.get(b.index)
        if buf is None:
            buf = torch.zeros(b.numel, dtype=self.dtype, device=self.device)
            self._buffers[b.index] = buf
            self.track(f"grads {b.index}", buf)
        return buf

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        self._check_not_sent(g, i)
        b, off = self._where[(g.index, i)]
        self._buffer(b)[off:off + g.numels[i]].add_(grad.reshape(-1))
        self._arrive(g, i)

    def issue(self, b: Bucket) -> None:
        buf = self._buffers.pop(b.index, None)
        if buf is None:                           # no gradient reached this bucket here
            buf = torch.zeros(b.numel, dtype=self.dtype, device=self.device)
        if self.qgz is not None:
            self._issue_quantized(b, buf)
            return
        send = self._send_buffer(buf)
        self._reduce(b, send, self._add_to_shard, then=lambda: self.track(f"grads {b.index}", None))

    def _issue_quantized(self, b: Bucket, buf: torch.Tensor) -> None:
        """qgZ: each group of the bucket (a whole padded module) on its own, blocking, as DeepSpeed
        reduces each gradient of a bucket on its own: through the quantized all-to-alls, or, where
        DeepSpeed falls back, one reduce-scatter of that group (pre-divided by N, as
        ``reduce_scatter_coalesced`` does)."""
        self._drain()                              # (earlier buckets' results land first)
        for part, off in zip(b.parts, b.offsets):
            g = part.group
            grad = buf[off:off + g.padded_numel]
            lo, _ = g.shard_range()
            tag = f"grads {b.label} {g.label}"
            if self.qgz.per_partition_groups(g) is not None:
                values = self.qgz.reduce(grad.to(self.comm_dtype), self.qgz.per_partition_groups(g), tag)
            else:
                values = torch.empty(g.shard_numel, dtype=self.comm_dtype, device=self.device)
                self.comm.reduce_scatter(values, self._send_buffer(grad.clone()), tag=tag)
            self._add_to_shard(g, lo, lo + g.shard_numel, values.to(self.dtype))
        self.track(f"grads {b.index}", None)

    def _add_to_shard(self, g: FlatGroup, s: int, e: int, values: torch.Tensor) -> None:
        acc = self.grad_shards[g.index]
        lo, _ = g.shard_range()
        dst = acc[s - lo:e - lo]
        if self._fresh:
            down = values.is_cuda and not acc.is_cuda and acc.is_pinned()
            dst.copy_(values, non_blocking=down)
            if down:
                self._copies_in_flight = values.device
        elif values.device == acc.device:
            dst.add_(values)
        else:
            dst.add_(values.to(acc.dtype).to(acc.device))

    def post_backward(self) -> None:
        self._issue_rest()
        self._drain()
        if self._copies_in_flight is not None:       # the shards are read next (norm, step)
            torch.cuda.synchronize(self._copies_in_flight)
            self._copies_in_flight = None
        self._fresh = False

    def for_step(self) -> list[torch.Tensor]:
        return self.grad_shards

    def zero(self) -> None:
        for s in self.grad_shards:
            s.zero_()
        self._fresh = True

    def describe(self) -> str:
        return f"{self._how()} bucket by bucket during backward; each rank keeps its shard"

    def memory(self) -> dict[Place, dict[str, int]]:
        return {self.place: {"grads": tensor_bytes(self.grad_shards)}}
