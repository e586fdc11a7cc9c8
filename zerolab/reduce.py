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

Rules they share (:class:`GradReducer`):

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

import math
from collections import deque

import torch

from . import params as _params
from . import quant
from .comm import _All
from .flat import Bucket, FlatGroup, pack_after, pack_buckets
from .memory import tensor_bytes

__all__ = ["GradReducer", "AllReduceAtBoundary", "ReduceScatterAtBoundary", "ReduceScatterInBackward",
           "QuantizedReduce", "reduce_mode", "STAGE0_BUCKET"]

STAGE0_BUCKET = 500_000_000       # DeepSpeed's MEMORY_OPT_ALLREDUCE_SIZE: stage 0's all-reduce buckets


def reduce_mode(stage: int, zero, zerolab) -> str:
    """The collective that reduces one bucket, as DeepSpeed 0.19.8 picks it for these keys:
    "all_reduce", "reduce" (one per owner) or "reduce_scatter"."""
    if stage == 0:
        return "all_reduce"
    if stage == 3:
        return "reduce_scatter" if zero.reduce_scatter else "all_reduce"
    if zerolab.ideal_reduce_scatter:
        return "reduce_scatter"
    if zero.reduce_scatter and not zero.use_multi_rank_bucket_allreduce:
        return "reduce"
    return "all_reduce"


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
        self.mode = reduce_mode(stage.stage, stage.zero, stage.zerolab)
        self.max_in_flight = 1 if stage.stage == 3 else 2
        self.bucket_numel = STAGE0_BUCKET if stage.stage == 0 else stage.zero.reduce_bucket_size
        self.buckets: list[Bucket] = []           # the plan (fixed at stages 0-2, per backward at 3)
        self._where: dict[tuple[int, int], tuple[Bucket, int]] = {}   # (group, param) -> bucket, offset
        self._group_left: dict[int, int] = {}    # group index -> gradients still to arrive
        self._left: dict[int, int] = {}           # bucket index -> gradients still to arrive
        self._ready: set[int] = set()             # complete buckets waiting for their turn
        self._next = 0                            # index of the next bucket to send
        self._in_flight: deque = deque()          # (Pending, finish) of async collectives
        if not stage.params.ordered_per_pass:
            self._plan(stage.params.reduce_units())

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

    # -- the plan and the order of buckets -------------------------------------------------------
    def _plan(self, units) -> None:
        """Pack the units (params.reduce_units(): ranges of group buffers, in gradient order) into
        buckets: DeepSpeed's IPG rule at stages 1-3, its stage-0 rule at stage 0."""
        sizes = [u.numel for u in units]
        if self.stage.stage == 0:
            runs = pack_after(sizes, self.bucket_numel)
        else:                                     # (looked up here: exercise 6 plugs in its own)
            runs = _params.bucket_params([(f"unit {k}", _Sized(n)) for k, n in enumerate(sizes)],
                                         self.bucket_numel)
        self.buckets = pack_buckets(units, runs)
        self._where = {(part.group.index, i): (b, off)
                       for b in self.buckets for part, off in zip(b.parts, b.offsets)
                       for i, off in part.param_offsets(off)}

    def _start_order(self) -> None:
        """A backward begins: every bucket waits for all its gradients again."""
        if self.stage.params.ordered_per_pass:    # stage 3: the order of this pass's forward
            self._plan(self.stage.params.reduce_units())
        self._left = {b.index: len(b.members) for b in self.buckets}
        self._group_left = {g.index: len(g.params) for g in self.groups}
        self._ready.clear()
        self._next = 0

    def _check_not_sent(self, g: FlatGroup, i: int) -> None:
        b, _ = self._where[(g.index, i)]
        if b.index < self._next:
            raise RuntimeError(
                f"a second gradient for {g.names[i]!r} arrived in one backward, after its bucket "
                f"({b.label}) was sent: its gradient was accumulated twice in one backward "
                "(e.g. reentrant activation checkpointing), which zerolab does not support; use "
                "torch.utils.checkpoint with use_reentrant=False")

    def _arrive(self, g: FlatGroup, i: int) -> None:
        b, _ = self._where[(g.index, i)]
        self._group_left[g.index] -= 1
        if self._group_left[g.index] == 0:
            self.stage.params.grads_done(g)       # stage 3: its parameters can go back now
        self._left[b.index] -= 1
        if self._left[b.index] == 0:
            self._ready.add(b.index)
            while self._next < len(self.buckets) and self._next in self._ready:
                self._issue_next()

    def _issue_next(self) -> None:
        b = self.buckets[self._next]
        self._next += 1
        self.issue(b)

    def _issue_rest(self) -> None:
        """Send every bucket not sent yet, in order (end of backward)."""
        while self._next < len(self.buckets):
            self._issue_next()

    def issue(self, b: Bucket) -> None:
        raise NotImplementedError

    # -- the collectives --------------------------------------------------------------------
    def _send_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """The gradient as it travels: in the communication dtype, pre-divided by N so the
        SUM is an average (pre-dividing keeps fp16 sums from overflowing)."""
        send = buf.to(self.comm_dtype) if buf.dtype != self.comm_dtype else buf
        if self.world_size > 1:
            send.div_(self.world_size)
        return send

    def _owned(self, b: Bucket):
        """(part, start, end) of this rank's partition inside each part of bucket ``b``, in the
        part's group's numbering (empty ranges left out)."""
        out = []
        for part in b.parts:
            lo, hi = part.group.shard_range()
            s, e = max(lo, part.start), min(hi, part.end)
            if s < e:
                out.append((part, s, e))
        return out

    def _reduce(self, b: Bucket, send: torch.Tensor, deliver, then=None) -> None:
        """Sum ``send`` (bucket ``b``'s gradients, pre-divided by N) over ranks with this stage's
        collective and call ``deliver(group, start, end, values)`` for each range of this rank's
        partitions once the sum has arrived (``start``/``end`` in the group's numbering), then
        ``then()``."""
        tag = f"grads {b.label}"
        if self.mode == "reduce_scatter":
            out, inp = self._scatter_layout(b, send)
            p = self.comm.reduce_scatter(out, inp, tag=tag, async_op=self.overlap)

            def finish() -> None:
                at = 0
                for part in b.parts:
                    n = part.group.shard_numel
                    lo, _ = part.group.shard_range()
                    deliver(part.group, lo, lo + n, out[at:at + n])
                    at += n
                if then is not None:
                    then()
        else:
            if self.mode == "reduce":
                works, backs = [], []
                for r, ranges in b.owners(self.world_size):
                    if len(ranges) == 1:                  # one slice of the bucket: reduced in place
                        piece = send[ranges[0][0]:ranges[0][1]]
                    else:                                 # DeepSpeed flattens an owner's slices
                        piece = torch.cat([send[s:e] for s, e in ranges])
                        if r == self.rank:
                            backs.append((piece, ranges))
                    works.append(self.comm.reduce(piece, r, tag=f"{tag} to rank {r}", async_op=self.overlap))
                p = _All(works) if self.overlap else None
                if backs:
                    deliver = _unflatten_first(send, backs, deliver)
            else:
                p = self.comm.all_reduce(send, tag=tag, async_op=self.overlap)

            def finish() -> None:
                for (part, s, e), off in ((x, b.offset_of(x[0])) for x in self._owned(b)):
                    deliver(part.group, s, e, send[off + s - part.start:off + e - part.start])
                if then is not None:
                    then()
        self._after_send(p, finish)

    def _scatter_layout(self, b: Bucket, send: torch.Tensor):
        """For a reduce-scatter: (out, inp) with ``inp`` holding, rank after rank, that rank's shard
        of every group in the bucket (DeepSpeed's reduce_scatter_coalesced). Every part of a
        reduce-scattered bucket is a whole padded group."""
        n = self.world_size
        shard = sum(p.group.shard_numel for p in b.parts)
        out = torch.empty(shard, dtype=send.dtype, device=send.device)
        if len(b.parts) == 1:
            return out, send
        inp = torch.empty(n, shard, dtype=send.dtype, device=send.device)
        at = 0
        for part, off in zip(b.parts, b.offsets):
            k = part.group.shard_numel
            inp[:, at:at + k].copy_(send[off:off + part.group.padded_numel].view(n, k))
            at += k
        return out, inp.view(-1)

    def _after_send(self, pending, finish) -> None:
        if not self.overlap:                      # the call blocked: its result is here
            finish()
            return
        self._in_flight.append((pending, finish))
        while len(self._in_flight) > self.max_in_flight:
            self._finish_oldest()

    def _finish_oldest(self) -> None:
        pending, finish = self._in_flight.popleft()
        if pending is not None:
            pending.wait()
        finish()

    def _drain(self) -> None:
        while self._in_flight:
            self._finish_oldest()


class AllReduceAtBoundary(GradReducer):
    """Stage 0 (the old-style crew): every rank accumulates the full gradient over the
    micro-steps and all-reduces each bucket at the accumulation boundary. With ``overlap_comm``
    the boundary micro-step's backward sends each bucket as soon as it is complete, as torch DDP
    does (DeepSpeed's stage 0 reduces at the boundary only)."""

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
        self._after_send(p, lambda: self._copy_back(send, views))

    def for_step(self) -> list[torch.Tensor]:
        return self.stage.owned_part(self.grad_flats)

    def zero(self) -> None:
        for buf in self.grad_flats:
            buf.zero_()

    def device_bytes(self) -> int:
        return tensor_bytes(self.grad_flats)


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


class ReduceScatterInBackward(GradReducer):
    """Stages 2-3: no rank ever holds the full gradient.

    Each bucket's gradients are collected in a buffer of the bucket's size as backward produces
    them; when the bucket's turn comes it is reduced, this rank adds its slices to
    ``grad_shards`` (accumulating across micro-steps) and the buffer is freed. When every
    gradient of a group has arrived the parameters are told (``params.grads_done(g)``: stage 3
    releases the gathered unit then)."""

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
        self._buffers: dict[int, torch.Tensor] = {}     # bucket index -> gradient buffer being filled
        # qgZ: DeepSpeed's stage 3 reduces through all-to-alls only with more than one node
        # (__avg_scatter_grads: "all2all_process_group is not None and num_nodes > 1")
        self.qgz: QuantizedReduce | None = None
        if stage.stage == 3 and stage.zero.zero_quantized_gradients:
            from .topology import current
            if current().nodes > 1:
                self.qgz = QuantizedReduce(self.comm)

    def pre_backward(self, boundary: bool) -> None:
        self._start_order()

    def _buffer(self, b: Bucket) -> torch.Tensor:
        buf = self._buffers.get(b.index)
        if buf is None:
            buf = torch.zeros(b.numel, dtype=self.dtype, device=self.device)
            self._buffers[b.index] = buf
            self.stage.track(f"grads {b.index}", buf)
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
        self._reduce(b, send, self._add_to_shard, then=lambda: self.stage.track(f"grads {b.index}", None))

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
        self.stage.track(f"grads {b.index}", None)

    def _add_to_shard(self, g: FlatGroup, s: int, e: int, values: torch.Tensor) -> None:
        acc = self.grad_shards[g.index]
        lo, _ = g.shard_range()
        dst = acc[s - lo:e - lo]
        dst.add_(values if values.device == acc.device else values.to(acc.device))

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



class QuantizedReduce:
    """qgZ: DeepSpeed 0.19.8's ``all_to_all_quant_reduce`` (``runtime/comm/coalesced_collectives.py``;
    kernels ``swizzle_quant``, ``quantized_reduction`` and ``dequantize`` in ``csrc/quantization``),
    for a crew of K nodes of L ranks (N = K L). Each rank's gradient of M elements is cut into N
    partitions of P = M / N (rank r's partition r: what a reduce-scatter would give it):

    1. convert to fp16 and quantize to int4 in N g blocks (g per partition), one fp32 scale each;
    2. *swizzle*: order the partitions so that those bound for local rank j (j, j + L, j + 2L, ...,
       one per node) lie together (DeepSpeed's ``swizzled_quant_kernel``; 2 nodes of 4:
       0 4 1 5 2 6 3 7);
    3. all-to-all inside the node (int4 values, two per byte, then the scales): local rank j
       receives its K partitions from each of the L ranks of its node;
    4. *quantized reduction*: dequantize the L copies, add them in fp16, quantize the sum again to
       int4 (K g blocks);
    5. all-to-all across nodes (values, then scales): rank r receives partition r, summed within
       each node, from every node;
    6. dequantize (fp16), add the K pieces and divide by K.

    The result is the sum over all N ranks divided by K, the number of nodes: DeepSpeed 0.19.8 does
    not pre-divide here (its reduce-scatter path divides by N), so its qgZ gradient is L times the
    mean the reduce-scatter gives; zerolab does the same. Adam's update barely changes with a
    constant gradient scale; gradient clipping and SGD see it.

    Bytes a rank sends (M elements, g blocks per partition): inside the node (L-1)/L of M/2 bytes
    of int4 plus 4 N g of scales; across nodes (K-1)/K of M/(2L) plus 4 K g. A reduce-scatter of
    fp16/bf16 sends (N-1)/N of 2 M, all of it across nodes when the group spans them.

    Fallbacks, as DeepSpeed: a gradient of 1-D parameters only (DeepSpeed reduce-scatters 1-D
    tensors) or whose size is not a multiple of 2N is reduce-scattered, pre-divided by N. With
    one node DeepSpeed does not use qgZ at all (plain reduce-scatter).

    Where zerolab differs (its stage 3 partitions each module's flat buffer, DeepSpeed each
    parameter): the tensor is a module's padded flat gradient, not one parameter's, so there are
    fewer, larger calls; and the blocks: DeepSpeed cuts a parameter of shape (s0, s1, ...) into
    max(s0, s1, N) blocks, zerolab cuts each partition into the fewest equal blocks no larger than
    that block size for the module's 2-D parameters (:meth:`per_partition_groups`). DeepSpeed's
    kernels read the gradient as fp16 without converting it (correct for fp16 gradients only);
    zerolab converts to fp16 first, as DeepSpeed's qwZ quantizer does. Its kernels are CUDA only:
    this runs their arithmetic in torch, on gloo's ``all_to_all_single``. The calls block (DeepSpeed
    issues them on its reduction stream, which a GPU overlaps with backward; on a CPU rank nothing
    would run beside them)."""

    BITS = 4

    def __init__(self, comm):
        self.comm = comm
        self.node, self.cross = comm.node_comm(), comm.cross_comm()     # (collective: made on every rank)
        self.n, self.local, self.nodes = comm.world_size, self.node.world_size, self.cross.world_size
        if self.nodes > 1 and self.local > 1 and comm.rank == 0:
            import warnings
            warnings.warn(f"zero_quantized_gradients: as in DeepSpeed 0.19.8, qgZ's gradients come out "
                          f"{self.local}x the mean (ranks per node): its all-to-all path sums inside each node "
                          f"and divides only by the number of nodes ({self.nodes}), while its reduce-scatter "
                          f"fallback (1-D parameters) divides by all {self.n} ranks. Adam barely notices a "
                          f"constant scale; gradient clipping and the reported gradient norm see it", stacklevel=2)

    def per_partition_groups(self, g: FlatGroup) -> int | None:
        """Blocks per partition for group ``g``'s gradient, or None where DeepSpeed falls back to a
        reduce-scatter (only 1-D parameters; a size not a multiple of 2N)."""
        dims = [s for s in g.shapes if len(s) >= 2]
        if not dims or g.padded_numel % (2 * self.n):
            return None
        block = min(max(1, math.prod(s) // max(s[0], s[1], self.n)) for s in dims)
        part = g.padded_numel // self.n
        k = math.ceil(part / block)
        while part % k:
            k += 1
        return k

    def reduce(self, grad: torch.Tensor, per_part: int, tag: str) -> torch.Tensor:
        """This rank's partition of (sum over ranks of ``grad``) / nodes, in fp16 (steps 1-6)."""
        n, local, nodes, bits = self.n, self.local, self.nodes, self.BITS
        part = grad.numel() // n
        q, s = quant.quantize(grad.to(torch.float16), n * per_part, bits)
        # 2. swizzle: partition p = node * L + j goes to place j * K + node
        q = q.view(nodes, local, part).transpose(0, 1).reshape(-1)
        s = s.view(nodes, local, per_part).transpose(0, 1).reshape(-1)
        # 3. all-to-all inside the node: from each local rank, the K partitions bound for this one
        packed = quant.pack_int4(q)
        got, got_s = torch.empty_like(packed), torch.empty_like(s)
        self.node.all_to_all(got, packed, tag=f"{tag} intra")
        self.node.all_to_all(got_s, s, tag=f"{tag} intra scales")
        # 4. quantized reduction: dequantize the L copies, add them in fp16, quantize the sum again
        parts = quant.dequantize(quant.unpack_int4(got), got_s).to(torch.float16).view(local, nodes * part)
        total = torch.zeros(nodes * part, dtype=torch.float16, device=grad.device)
        for j in range(local):
            total += parts[j]
        q2, s2 = quant.quantize(total, nodes * per_part, bits)
        # 5. all-to-all across nodes: from every node, its sum of this rank's partition
        packed2 = quant.pack_int4(q2)
        got2, got2_s = torch.empty_like(packed2), torch.empty_like(s2)
        self.cross.all_to_all(got2, packed2, tag=f"{tag} inter")
        self.cross.all_to_all(got2_s, s2, tag=f"{tag} inter scales")
        # 6. dequantize, add the nodes' sums, divide by the number of nodes
        final = quant.dequantize(quant.unpack_int4(got2), got2_s).to(torch.float16)
        return sum(list(final.chunk(nodes))) / nodes


class _Sized:
    """What ``bucket_params`` reads of a parameter: its number of elements."""

    def __init__(self, n: int):
        self.n = n

    def numel(self) -> int:
        return self.n


def _unflatten_first(send: torch.Tensor, backs, deliver):
    """Copy this rank's reduced slices from the flat piece they travelled in back into the
    bucket's buffer, then deliver as usual."""
    done = [False]

    def then(g, s, e, values):
        if not done[0]:
            done[0] = True
            for piece, ranges in backs:
                at = 0
                for a, b in ranges:
                    send[a:b].copy_(piece[at:at + b - a])
                    at += b - a
        deliver(g, s, e, values)
    return then
