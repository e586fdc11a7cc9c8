"""Where stage 3's parameters live between uses, and how they are gathered: the parameter switch.

A :class:`GatheredParams` stage keeps only this rank's shard of each group (a module's own
parameters) and all-gathers a group when a module needs it (``_fetch``), releasing it after use
(``_release``). The shards live on the device, in host memory or in files (``offload_param``).

Each pass (forward with grad, forward without, backward) records the order in which it asked for
groups. The next pass of the same kind follows that trace and *prefetches*: when it gathers a
group it also issues asynchronous all-gathers for the groups the trace says come next, up to
``stage3_prefetch_bucket_size`` elements in flight and ``stage3_max_live_parameters`` gathered or
in flight. Every unit of gathers (one group, or a group and its prefetches) is preceded by one
16-byte header all-gather (the first group's id, and the count and a checksum of all the unit's
ids), and a forward that followed a trace ends with one more (a checksum of what it asked for),
so ranks that took different paths raise :class:`ModuleOrderError` before any mismatched
all-gather. A pass that asks for a group its trace did not predict (eval, another branch)
completes the prefetches in flight, drops the trace and records anew: no hang.

The hooks that call ``_fetch`` and ``_release`` (module forward pre/post hooks, output-gradient
hooks, watched parameter dicts) are in ``stage3.py``.
"""
from __future__ import annotations

import torch

from .flat import FlatGroup
from .memory import tensor_bytes

__all__ = ["GatheredParams", "ModuleOrderError"]


class ModuleOrderError(RuntimeError):
    """Ranks gathered different modules: their forward/backward took different paths."""


class GatheredParams:
    """Mixed into :class:`~zerolab.stage3.Stage3`, which sets up ``shards``, ``full``, the trace
    state and the offload attributes in its ``__init__``."""

    # -- gather and release ----------------------------------------------------------------
    # Each pass (forward with grad, forward without, backward) records the order in which it
    # asked for groups. The next pass of the same kind follows that trace and *prefetches*: when
    # it gathers a group it also issues asynchronous all-gathers for the groups the trace says come
    # next, up to stage3_prefetch_bucket_size elements in flight and stage3_max_live_parameters
    # gathered or in flight. Every unit of gathers (one group, or a group and its prefetches) is
    # preceded by one 16-byte header all-gather (the first group's id, and the count and a checksum
    # of all the unit's ids), so ranks that disagree raise ModuleOrderError before any mismatched
    # all-gather. If a pass asks for a group the trace did not predict (eval, another branch), the
    # prefetches in flight are completed, the trace is dropped and recorded anew: no hang.
    def _phase(self) -> str:
        if self._in_backward:
            return "backward"
        return "forward" if torch.is_grad_enabled() else "eval"

    def _start_pass(self, phase: str) -> None:
        rec = self._record.get(phase)
        if rec:
            self._traces[phase] = rec
        self._record[phase] = []
        self._pos[phase] = 0
        self._pass_phase = phase
        # every rank on the same path makes the same choice here
        self._following_pass = self._traces.get(phase) is not None and self.prefetch_numel > 0

    def _fetch(self, g: FlatGroup) -> None:
        i = g.index
        if i in self.full:
            return
        phase = self._phase()
        self._record.setdefault(phase, []).append(i)
        trace, pos = self._traces.get(phase), self._pos.get(phase, 0)
        if trace is not None and pos < len(trace) and trace[pos] == i:
            self._pos[phase] = pos + 1
        elif trace is not None:                   # the path changed: follow the model, record anew
            self._traces[phase] = None
            self._finish_inflight()
        if i not in self._inflight:
            self._issue([i, *self._next_prefetch(phase, first=i)], wanted=i)
        self._wait(i)
        if self._inflight_numel() * 2 <= self.prefetch_numel:
            ids = self._next_prefetch(phase)
            if ids:
                self._issue(ids)

    def _live_numel(self) -> int:
        """Elements of gathered (not persistent) groups alive now, kept as they change."""
        return self._live_gathered

    def _inflight_numel(self) -> int:
        return self._flight

    def _next_prefetch(self, phase: str, first: int | None = None) -> list[int]:
        """The groups the trace says come next that fit the prefetch window."""
        trace = self._traces.get(phase)
        if trace is None or self.prefetch_numel <= 0:
            return []
        flight = self._inflight_numel() + (self.groups[first].padded_numel if first is not None else 0)
        live = self._live_numel()
        out: list[int] = []
        for j in trace[self._pos.get(phase, 0):]:
            if j in self.full or j in self._inflight or j == first or j in out:
                continue
            n = self.groups[j].padded_numel
            if flight + n > self.prefetch_numel or live + flight + n > self.max_live:
                break
            out.append(j)
            flight += n
        return out

    def _issue(self, ids: list[int], wanted: int | None = None) -> None:
        """Check that every rank gathers the same unit, then start its all-gathers: ``wanted``
        (needed now) blocking, the prefetched ones asynchronously."""
        self._check_unit(ids)
        for j in ids:
            g = self.groups[j]
            flat = torch.empty(g.padded_numel, dtype=self.dtype, device=self.device)
            pending = self.comm.all_gather(flat, self._shard_on_device(j), tag=f"params {g.label}",
                                           async_op=j != wanted)
            self._inflight[j] = (pending, flat)
            self._flight += g.padded_numel
            self._track(f"params {j}", flat)
        live = self._live_numel() + self._inflight_numel()
        self.peak_gathered_numel = max(self.peak_gathered_numel, live)
        self.prefetches += sum(1 for j in ids if j != wanted)

    def _wait(self, i: int) -> None:
        pending, flat = self._inflight.pop(i)
        if hasattr(pending, "wait"):
            pending.wait()
        g = self.groups[i]
        self._flight -= g.padded_numel
        self.full[i] = flat
        if not self.persistent[i]:
            self._live_gathered += g.padded_numel
        g.bind(flat)
        self.fetches += 1
        if not self._in_backward and torch.is_grad_enabled():
            self._trace.append(i)

    def _finish_inflight(self) -> None:
        for i in list(self._inflight):
            self._wait(i)

    def _check_unit(self, ids: list[int]) -> None:
        """All-gather a 16-byte header for a unit of gathers: if the ranks took different paths
        through the model they would otherwise issue all-gathers of different sizes, which
        deadlocks or crashes the transport. Recorded in the ledger under the tag 'check'."""
        self._agree(ids[0], (len(ids) << 40) | _checksum(ids), f"check {self.groups[ids[0]].label}")

    def _check_pass(self) -> None:
        """End of a forward that followed a trace (its prefetched gathers had no header of their
        own): one 16-byte all-gather of a checksum of the groups it asked for. A rank whose path
        left the trace is waiting in a header all-gather of the same size, so both raise."""
        rec = self._record.get(self._pass_phase, [])
        self._agree(-1, (len(rec) << 40) | _checksum(rec), "check forward pass")

    def _agree(self, first: int, code: int, tag: str) -> None:
        header = torch.tensor([first, code], dtype=torch.int64, device=self.device)
        headers = torch.empty(2 * self.world_size, dtype=torch.int64, device=self.device)
        self.comm.all_gather(headers, header, tag=tag)
        rows = headers.view(self.world_size, 2).tolist()
        if any(r != rows[self.rank] for r in rows):
            if all(i == -1 for i, _ in rows):         # all at the end of a forward, by other paths
                what = "ranks ran different modules in this forward: " + ", ".join(
                    f"rank {r} gathered {c >> 40} module groups" for r, (_, c) in enumerate(rows)) + (
                    " (or the same number in another order)" if len({c >> 40 for _, c in rows}) == 1 else "")
            else:
                names = {r: ("the end of its forward" if i == -1 else
                             repr(self.groups[i].label) if 0 <= i < len(self.groups) else f"#{i}")
                         for r, (i, _) in enumerate(rows)}
                what = "ranks ran different modules: " + ", ".join(f"rank {r} reached {n}" for r, n in names.items())
            raise ModuleOrderError(
                what
                + ". With ZeRO stage 3 every rank must run the same modules in the same order "
                  "(e.g. no rank-dependent branches, no forward on one rank only).")

    def _release(self, g: FlatGroup) -> None:
        for p in g.params:
            p.data = torch.empty(0, dtype=self.dtype, device=self.device)
        if self.full.pop(g.index, None) is not None and not self.persistent[g.index]:
            self._live_gathered -= g.padded_numel
        self._track(f"params {g.index}", None)

    def _maybe_release(self, g: FlatGroup) -> None:
        if not self.persistent[g.index] and g.index in self.full:
            self._release(g)

    # -- offload_param ------------------------------------------------------------------
    def _swap_params_out(self, po) -> None:
        """Keep the first ``max_in_cpu`` elements of gathered groups' shards in host memory and
        write the rest to files under ``nvme_path``."""
        from .nvme import NvmeStore
        kept = 0
        out = []
        for g in self.groups:
            if self.persistent[g.index]:
                continue
            n = self.shards[g.index].numel()
            if kept + n <= po.max_in_cpu:
                kept += n
            else:
                out.append(g.index)
        need = sum(self.shards[i].numel() for i in out) * self.shards[0].element_size() * self.world_size
        self._param_files = NvmeStore(po.nvme_path, self.rank, need, what="parameter shards of every rank",
                                      timeline=getattr(self.comm, "timeline", None))
        for i in out:
            self._param_files.write(i, "param", self.shards[i]).result()
            self._on_nvme.add(i)
            self.shards[i] = torch.empty(0, dtype=self.dtype)

    def _read_shard(self, i: int) -> torch.Tensor:
        g = self.groups[i]
        buf = torch.empty(g.shard_numel, dtype=self.dtype)
        self._param_files.read(i, "param", buf).result()
        return buf

    def _shard_on_device(self, i: int) -> torch.Tensor:
        """This rank's shard of group ``i`` on the compute device (copied up when offloaded)."""
        if i in self._on_nvme:
            shard = self._staged.get(i)
            shard = self._read_shard(i) if shard is None else shard
        else:
            shard = self.shards[i]
        return shard if shard.device == self.device else shard.to(self.device, non_blocking=True)

    def param_bytes_on(self, where: str) -> int:
        if where == "host" and self.param_where != "device":
            return tensor_bytes([self.shards[g.index] for g in self.groups
                                 if not self.persistent[g.index] and g.index not in self._on_nvme])
        if where == "nvme" and self._param_files is not None:
            return self._param_files.bytes_on_disk()
        return 0


def _checksum(ids) -> int:
    acc = 0
    for x in ids:
        acc = (acc * 1_000_003 + x + 1) % (1 << 40)
    return acc
