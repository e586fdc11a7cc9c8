"""Stage 3's parameter all-gathers: what to prefetch, how a fetch is issued, and waiting for it.

Each pass follows the order the previous pass of its kind recorded (``trace.py``). DeepSpeed's
prefetch rule (``fetch_sub_module`` in ``partitioned_param_coordinator.py``): at every module's
fetch, one asynchronous all-gather of the groups that come next, while fewer than
min(``stage3_max_live_parameters`` - available, ``stage3_prefetch_bucket_size``) elements are taken
(the group that crosses it is taken too); what is in flight is bounded only by
``stage3_max_live_parameters``. A fetch needed now is one blocking all-gather of the unit's groups
(one ``all_gather_coalesced``); prefetched groups come in one asynchronous all-gather; with hpZ the
groups that have a secondary shard are gathered apart, inside their group (``__all_gather_params``
splits a fetch so). Several groups in one call are cut out of the batch when each is first needed
(:class:`~zerolab.zero.stage3.inflight.GatherBatch`; DeepSpeed's ``AllGatherCoalescedHandle`` copies too).

zerolab's own safety, on by default and switched off with ``"zerolab": {"order_checks": false}``:
every unit of gathers (a fetch and/or its prefetches) is preceded by a 16-byte header all-gather
(:meth:`UnitFetch.check_unit`), and a forward that followed a trace ends with one more
(:meth:`UnitFetch.check_pass`; not when every group of the trace is persistent: such a pass
gathers nothing), so ranks that took different paths raise
:class:`~zerolab.zero.stage3.trace.ModuleOrderError` instead of hanging. Filed in the ledger's checks, never
among ZeRO's calls (DeepSpeed sends none).
"""
from __future__ import annotations

import torch

from .inflight import GatherBatch, InFlight
from .qwz_gather import all_gather_quantized
from .trace import agree, checksum

__all__ = ["UnitFetch"]


class UnitFetch:
    """Issues stage 3's parameter all-gathers and keeps those in flight, by group index.

    ``groups``: the flat groups; ``shard_on_device(i)``: group ``i``'s shard on the compute device;
    ``hpz``: hpZ's secondary shards (a null object when off); ``comm``: all ranks; ``track(key,
    tensor)``: the stage's live-buffer accounting; ``quantized``: qwZ."""

    def __init__(self, groups, shard_on_device, hpz, comm, dtype: torch.dtype, device: torch.device, track,
                 *, quantized: bool, order_checks: bool, prefetch_numel: int, max_live: int):
        self.groups, self.shard_on_device, self.hpz, self.comm = groups, shard_on_device, hpz, comm
        self.dtype, self.device, self.track = dtype, device, track
        self.quantized, self.order_checks = quantized, order_checks
        self.prefetch_numel, self.max_live = prefetch_numel, max_live
        self.inflight: dict[int, InFlight] = {}    # group index -> its all-gather in flight
        self.numel = 0                              # elements of the all-gathers in flight
        self.prefetches = 0                         # groups gathered ahead, from the trace

    def issue(self, wanted: list[int], ahead: list[int]) -> None:
        """Check that every rank gathers the same unit, then start its all-gathers: ``wanted``
        (needed now) blocking, in one call; ``ahead`` (prefetched) asynchronously, in one call
        (hpZ: the groups with a secondary shard apart, inside their group, first)."""
        self.check_unit(wanted + ahead)
        for ids, async_op in ((wanted, False), (ahead, True)):
            secondary = [j for j in ids if j in self.hpz]
            for part in (secondary, [j for j in ids if j not in secondary]):
                self._start(part, async_op)
        self.numel += sum(self.groups[j].padded_numel for j in wanted + ahead)
        self.prefetches += len(ahead)

    def take(self, i: int) -> torch.Tensor:
        """Group ``i``'s gathered flat buffer, once its all-gather is done."""
        inflight = self.inflight.pop(i)
        pending, flat = inflight.work, inflight.flat
        if isinstance(pending, GatherBatch):
            flat = pending.unpack(i)
            if pending.left == 0:
                self.track(pending.key, None)
            self.track(f"params {i}", flat)
        elif pending is not None:
            pending.wait()
        self.numel -= self.groups[i].padded_numel
        return flat

    def _start(self, ids: list[int], async_op: bool) -> None:
        """All-gather groups ``ids`` (all with a secondary shard, or all without): one group
        alone, several coalesced into one all-gather; blocking, or asynchronously (a prefetch)."""
        if len(ids) == 1:
            g = self.groups[ids[0]]
            flat = torch.empty(g.padded_numel, dtype=self.dtype, device=self.device)
            shard, comm, tag = self._source(ids[0])
            work = self._all_gather(flat, shard, tag, async_op, comm)
            self.inflight[ids[0]] = InFlight(work if async_op else None, flat)
            self.track(f"params {ids[0]}", flat)
        elif ids:
            sources = [self._source(j) for j in ids]
            comm = sources[0][1]
            send = torch.cat([s for s, _, _ in sources])
            out = torch.empty(send.numel() * comm.world_size, dtype=self.dtype, device=self.device)
            label = f"{self.groups[ids[0]].label} + {len(ids) - 1} more" + (" (hpZ)" if ids[0] in self.hpz else "")
            work = self._all_gather(out, send, f"params {label}", async_op, comm)
            batch = GatherBatch(work if async_op else None, out, [self.groups[j] for j in ids],
                                f"params batch {ids[0]}", comm.world_size, [s.numel() for s, _, _ in sources])
            for j in ids:
                self.inflight[j] = InFlight(batch, None)
            self.track(batch.key, out)

    def _source(self, i: int):
        """(this rank's part, the Comm that gathers it, the ledger's tag) for group ``i``: its
        hpZ secondary shard inside its group of h ranks while it has one, else its shard over all."""
        label = self.groups[i].label
        if i in self.hpz:
            return self.hpz.source(i, self.device), self.hpz.comm, f"params {label} (hpZ)"
        return self.shard_on_device(i), self.comm, f"params {label}"

    def _all_gather(self, out: torch.Tensor, shard: torch.Tensor, tag: str, async_op: bool, comm):
        """All-gather ``shard`` of every rank of ``comm`` into ``out``: in the model dtype, or with
        qwZ as int8 blocks and their scales (``qwz_gather.py``)."""
        if not self.quantized:
            return comm.all_gather(out, shard, tag=tag, async_op=async_op)
        return all_gather_quantized(out, shard, tag, async_op, comm)

    def refresh_each(self, ids: list[int], shards, full: dict) -> None:
        """The persistent parameters ``ids`` after a step, DeepSpeed's way (``_post_step`` ->
        ``_allgather_params_coalesced``): one all-gather per parameter, every one issued before
        any is waited on."""
        # (a persistent group's shard is a view of its gathered buffer: sent from a copy)
        pending = [self.comm.all_gather(full[i], shards[i].clone(), tag=f"params {self.groups[i].label}",
                                        async_op=True) for i in ids]
        for work in pending:
            work.wait()

    def refresh(self, ids: list[int], shards, full: dict) -> None:
        """The persistent groups ``ids`` (kept whole in ``full``) after a step, in one all-gather
        (zerolab's module groups; per parameter it is ``refresh_each``). Never quantized (qwZ) nor
        inside hpZ's group, as in DeepSpeed."""
        if not ids:
            return
        n = self.comm.world_size
        label = self.groups[ids[0]].label + (f" + {len(ids) - 1} more" if len(ids) > 1 else "")
        send = torch.cat([shards[i] for i in ids])
        out = full[ids[0]] if len(ids) == 1 else torch.empty(send.numel() * n, dtype=send.dtype, device=send.device)
        self.comm.all_gather(out, send, tag=f"params {label}")
        if len(ids) > 1:
            offset, rows = 0, out.view(n, -1)
            for i in ids:
                k = shards[i].numel()
                full[i].view(n, k).copy_(rows[:, offset:offset + k])
                offset += k

    def copy(self, i: int) -> torch.Tensor:
        """Group ``i`` gathered whole into a buffer of its own, outside the ledger (for a
        checkpoint, or to give the model its parameters back): every rank calls it."""
        flat = torch.empty(self.groups[i].padded_numel, dtype=self.dtype, device=self.device)
        with self.comm.ledger.paused():
            self.comm.all_gather(flat, self.shard_on_device(i).clone(), tag=f"params {self.groups[i].label}")
        return flat

    # -- zerolab's order checks ---------------------------------------------------------------
    def check_unit(self, ids: list[int]) -> None:
        """A 16-byte header for a unit of gathers (trace.agree): if the ranks took different
        paths through the model they would otherwise issue all-gathers of different sizes, which
        deadlocks or crashes the transport."""
        if self.order_checks:
            self._agree(ids[0], (len(ids) << 40) | checksum(ids), f"check {self.groups[ids[0]].label}")

    def check_pass(self, record: list[int]) -> None:
        """End of a forward that followed a trace (its prefetched gathers had no header of their
        own): one 16-byte all-gather of a checksum of the groups it used (``record``). A rank whose
        path left the trace is waiting in a header all-gather of the same size, so both raise."""
        if self.order_checks:
            self._agree(-1, (len(record) << 40) | checksum(record), "check forward pass")

    def _agree(self, first: int, code: int, tag: str) -> None:
        agree(self.comm, self.groups, first, code, tag, self.device)
