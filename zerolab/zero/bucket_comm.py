"""The collectives of the gradient switch (``reduce.py``): one bucket sent, in flight, landed.

:class:`BucketCollectives` is the part of :class:`zerolab.zero.bucket_order.GradReducer` that talks to the
``Comm``: the send buffer (communication dtype, pre-divided by N), the collective DeepSpeed picks
for the bucket (``mode``: all-reduce, one reduce per owner, reduce-scatter), and the bounded
queue of asynchronous calls in flight (``overlap_comm``).
"""
from __future__ import annotations

import torch

from ..comm.comm import _All
from ..memory.flat import Bucket

__all__ = ["BucketCollectives"]


class BucketCollectives:
    """Needs, from its subclass: ``comm``, ``mode``, ``overlap``, ``max_in_flight``, ``post_scale``,
    ``rank``, ``world_size``, ``comm_dtype`` and ``_in_flight`` (a deque)."""

    # -- the collectives --------------------------------------------------------------------
    def _send_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """The gradient as it travels: in the communication dtype, pre-divided by N so the
        SUM is an average, as DeepSpeed's ZeRO optimizers do (pre-dividing keeps fp16 sums from
        overflowing); at stage 0 (``post_scale``) as it is: DeepSpeed's engine multiplies the sum
        by 1/N after the all-reduce (``postscale_gradients``), which rounds otherwise at odd N."""
        send = buf.to(self.comm_dtype) if buf.dtype != self.comm_dtype else buf
        if self.world_size > 1 and not self.post_scale:
            send.div_(self.world_size)
        return send

    def _post_scaled(self, summed: torch.Tensor) -> torch.Tensor:
        """The all-reduced sum made an average where it was not pre-divided (``post_scale``)."""
        if self.post_scale and self.world_size > 1:
            summed.mul_(1.0 / self.world_size)
        return summed

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
