"""Switch 2 of a stage, stage 3: parameters sharded, gathered per unit just in time.

A :class:`GatheredParams` keeps only this rank's shard of each group and all-gathers a module's
*unit* (its own groups plus the groups tied to it) when the module runs
(:meth:`~GatheredParams.unshard_unit`: one all-gather, as DeepSpeed's ``fetch_sub_module`` makes
one ``all_gather_coalesced``), releasing it after use (:meth:`~GatheredParams.reshard`).

    forward   before a module runs: gather its unit                 (Psi on the wire, in total)
              after it: release it (``param.data`` becomes an empty tensor)
    backward  when the gradient reaches the module's outputs: gather it again      (Psi)
              after its backward, or once its gradient is in a bucket (reduce-scatter: Psi,
              reduce.py): release it
    step      each rank steps its shard; nothing is gathered until the next forward

A parameter a module's forward reads from another module (``nn.MultiheadAttention`` reading
``out_proj.weight``) is gathered on the spot the first time and tied to the reader for good
(DeepSpeed's ``ZeROOrderedDict``); a tied weight is gathered again for each module that uses it,
unless ``stage3_max_reuse_distance`` keeps it. DeepSpeed pads each parameter to a multiple of the
ranks, zerolab each group: at world sizes that do not divide a parameter, a call moves fewer
elements. Neighbours: ``units.py`` (the groups, persistence, untrained parameters),
``param_shards.py`` (where the shards live: ``offload_param``), ``trace.py`` (the recorded order),
``fetch.py`` (prefetch, issuing, zerolab's order checks), ``hooks.py`` (when: module hooks),
``qwz_gather.py`` (qwZ) and ``hpz.py`` (hpZ). Gradients are reduced in DeepSpeed's gradient-hook
order, agreed across ranks (``grad_order.py``), whatever order they complete in.
"""
from __future__ import annotations

import torch
from torch import nn

from ...memory.flat import FlatGroup, Part
from .hooks import ModuleHooks, module_hooks_class
from .module_io import wrap_module_io
from . import linear as zero3_linear
from ...zeropp.hpz import secondary_shards
from .fetch import UnitFetch
from .grad_order import GradOrder
from .inflight import TrainingState
from .lifecycle import Lifecycle, ModuleEvent, PartitionState, Stage3Stats
from ...memory import Place, tensor_bytes
from .param_shards import ParamShards
from ..params import broadcast_
from .qwz_gather import check_qwz
from .trace import FetchTrace, ModuleOrderError, TraceMode
from .units import make_units

__all__ = ["GatheredParams", "ModuleOrderError"]


class GatheredParams:
    """Stage 3's parameters: one shard per group on each rank, gathered per unit."""
    ordered_per_pass = True                   # gradient buckets follow each forward's order

    def __init__(self, model: nn.Module, named, comm, zero, zerolab, *, dtype: torch.dtype, device: torch.device,
                 opt_group_of: dict[int, int], buffers):
        """``named``: the trained parameters; ``zero``: the ZeroConfig; ``zerolab``: zerolab's own
        options; ``buffers``: the stage's live-buffer accounting (``switches.LiveBuffers``)."""
        self.model, self.comm, self.dtype, self.device = model, comm, dtype, device
        self.rank, self.world_size = comm.rank, comm.world_size
        self._track = buffers.track
        self._offload = zero.offload_param
        self._mel = zero.memory_efficient_linear
        self._io_handles: list = []                # module_io.py's hooks, from start()
        self.linear = zero3_linear.LinearScope(None, False)   # linear.py's, from start()
        u = make_units(model, named, zero, dtype, self.rank, self.world_size, opt_group_of,
                       per_parameter=not zerolab.module_groups)
        self.per_parameter = not zerolab.module_groups
        self.groups, self.persistent, self.n_trained = u.groups, u.persistent, u.n_trained
        self.module_groups, self.unit_of = u.module_groups, u.unit_of
        self.full: dict[int, torch.Tensor] = {}    # group index -> gathered flat buffer, while alive
        self._live_gathered = 0                    # elements of non-persistent groups in self.full
        # offload_param: where the shards of the gathered groups live between uses (the device, host
        # memory, or files beyond the first max_in_cpu elements kept on the host).
        # Persistent parameters stay whole on the device, as in DeepSpeed.
        po = zero.offload_param
        self.where = Place.of(po.device)
        pin = po.pin_memory and torch.cuda.is_available()
        self.hpz = secondary_shards(comm, zero.zero_hpz_partition_size, dtype, self.where, pin)   # hpZ's (hpz.py); NoSecondaryShards when off
        self.shards = ParamShards(self.where, dtype, device, pin)   # this rank's shard of each group
        for g in self.groups:
            flat = g.flatten([p.data for p in g.params], dtype, device)
            broadcast_(comm, flat)           # everyone starts from rank 0's weights
            whole = self.persistent[g.index]
            self.shards.add(g.shard_of(flat), whole)   # persistent: a view, the whole buffer stays
            if whole:
                self.full[g.index] = flat
                g.bind(flat)
            else:
                self.hpz.keep(g, flat)            # DeepSpeed makes the secondary at initialization too
                self._release(g)
        self.state = TrainingState.IDLE
        # every partition's state and every module's events, with their transitions asserted
        self.life = Lifecycle([g.label for g in self.groups], self.persistent)
        self._module_names = {m: n or "(root)" for n, m in model.named_modules()}
        # the order backward produces gradients in, for the reduce buckets (grad_order.py)
        self.grad_order = GradOrder(model, self.unit_of, self.n_trained, self.per_parameter,
                                    in_backward=lambda: self.in_backward, agree=self._agree_on_grad_order)
        self.fetches = 0                           # groups gathered (fetched or prefetched)
        self.peak_gathered_numel = 0               # most parameter elements gathered (or in flight) at once
        self.trace = FetchTrace([g.numel for g in self.groups], zero.stage3_max_reuse_distance)
        self._following_pass = False               # this forward follows a trace: check it at its end
        self.reused = 0                            # releases skipped because of the reuse distance
        self.hooks: ModuleHooks | None = None
        # qwZ; on one rank DeepSpeed gathers nothing, so quantizes nothing (all_gather_coalesced:
        # _no_gather_coalesced when the partition world size is 1)
        self.quantized_weights = bool(zero.zero_quantized_weights) and self.world_size > 1
        if self.quantized_weights:
            check_qwz(self.groups, self.persistent, self.hpz)
        self.fetch = UnitFetch(self.groups, self._shard_on_device, self.hpz, comm, dtype, device,
                               self._track, quantized=self.quantized_weights, order_checks=zerolab.order_checks,
                               prefetch_numel=zero.stage3_prefetch_bucket_size,
                               max_live=zero.stage3_max_live_parameters)

    def stats(self) -> Stage3Stats:
        """What the chapters and checks read (``engine.stage3_stats()``)."""
        return Stage3Stats(
            fetches=self.fetches, prefetches=self.prefetches, reused=self.reused,
            peak_gathered_numel=self.peak_gathered_numel,
            gathered_now=sum(1 for i in self.full if not self.persistent[i]),
            partitions=[(g.label, g.padded_numel, self.persistent[g.index]) for g in self.trained_groups],
            persistent_numel=[p.numel() for g in self.groups if self.persistent[g.index] for p in g.params],
            layout="parameter" if self.per_parameter else "module",
            trace=self.trace.mode.get("train", TraceMode.INVALID).value)

    def reset_peaks(self) -> None:
        """Start counting the most elements gathered at once anew (``engine.reset_peaks()``)."""
        self.peak_gathered_numel = self._live_gathered + self.fetch.numel

    def observe(self, observer) -> None:
        """Tell ``observer`` every gather and release (``on_gather(label, phase)``,
        ``on_release(label, phase)``): how the checks and the lab watch stage 3."""
        self.life.observe(observer)

    def forget(self, observer) -> None:
        self.life.forget(observer)

    def module_event(self, module: nn.Module, event: ModuleEvent) -> None:
        """A module's forward or backward begins or ends: asserted against its earlier events."""
        self.life.module_event(module, event, self._module_names.get(module, ""))

    @property
    def prefetches(self) -> int:
        """Groups gathered ahead of their use, from the trace."""
        return self.fetch.prefetches

    @property
    def _inflight(self) -> dict:
        return self.fetch.inflight

    def owned(self) -> list[torch.Tensor]:
        """The part of each trained group this rank's optimizer updates: its shard."""
        return self.shards.shards[:self.n_trained]

    def start(self) -> None:
        """After the optimizer's home took its masters: swap shards to files, install the hooks."""
        if self.where is Place.NVME:
            po = self._offload
            self.shards.swap_out(self.groups, self.persistent, po.max_in_cpu, po.nvme_path, self.rank,
                                 self.world_size, timeline=self.comm.timeline)
        self.hooks = module_hooks_class()(self)   # ModuleHooks, unless hooks.use_module_hooks swapped it
        self._io_handles = wrap_module_io(self.model)   # DeepSpeed's identity functions on module I/O
        # DeepSpeed's F.linear while the model's forward and engine.backward run (memory_efficient_linear)
        self.linear = zero3_linear.LinearScope(self.model, self._mel)
        self.trace.ids_of = self.hooks.fetch_ids  # (use_module_hooks requires it of a class it swaps in)
        index = {m: k for k, m in enumerate(self.model.modules())}
        self.trace.key_code = lambda m: index.get(m, -1)
        # (part of zerolab's order checks: switched off with them)
        self.trace.agree = self._agree_on_trace if self.fetch.order_checks else None
        self.grad_order.install()

    def _agree_on_trace(self, seq: list[int], tag: str = "check trace") -> bool:
        """Do all ranks hold the same recorded trace? One 16-byte all-gather (zerolab's own check),
        once per recorded trace."""
        from .trace import checksum
        code = torch.tensor([len(seq), checksum(seq)], dtype=torch.int64, device=self.device)
        codes = torch.empty(2 * self.world_size, dtype=torch.int64, device=self.device)
        self.comm.all_gather(codes, code, tag=tag, kind="check")
        rows = codes.view(self.world_size, 2).tolist()
        return all(r == rows[0] for r in rows)

    @property
    def trained_groups(self) -> list[FlatGroup]:
        """The groups the optimizer steps (the first ``n_trained``); the rest are untrained."""
        return self.groups[:self.n_trained]

    # -- the lifecycle -----------------------------------------------------------------------
    def reduce_order(self) -> list[int]:
        """The trained groups in the order backward's gradients are expected: DeepSpeed's
        gradient-hook order, agreed across ranks once (``grad_order.py``)."""
        return self.grad_order.order()

    def _agree_on_grad_order(self, order: list[int]) -> bool:
        """Do all ranks share this gradient order? (Yes without the order checks, or on one rank.)"""
        return self.trace.agree is None or self.world_size == 1 or \
            self._agree_on_trace(order, tag="check gradient order")

    @property
    def in_backward(self) -> bool:
        return self.state is TrainingState.BACKWARD

    def pre_backward(self) -> None:
        """``engine.backward`` is about to run autograd (the hooks may already have begun
        backward, when the first gradient reached a module's output)."""
        self.linear.set(True)                     # (recomputed forwards in backward use it too)
        self.hooks.pre_backward()
        self.state = TrainingState.BACKWARD      # (backward goes on with the forward's step)

    def begin_backward(self) -> None:
        """The first gradient reached a module's output: autograd is in backward (the pass of the
        trace was started by :meth:`pre_backward`, before autograd ran)."""
        self.state = TrainingState.BACKWARD

    def grads_done(self, g: FlatGroup) -> None:
        self.reshard(g)                           # its gradient is in a bucket: release it

    def reduce_units(self) -> list[Part]:
        """The groups in this backward's reduce order, each whole (padded: it is reduce-scattered
        into its N shards), for the gradient buckets."""
        return [Part(g, 0, g.padded_numel, list(range(len(g.params))), g.numel)
                for g in (self.groups[i] for i in self.grad_order.full_order())]

    def forward_grad_order(self) -> None:
        """Stages 0-2's call (buckets in the model's order); stage 3's follow each pass's order
        (:meth:`reduce_order`): the stage table never asks for it here."""

    def observe_grad_order(self, arrived: list[tuple[int, int]]) -> bool:
        """Stages 0-2's call (buckets in the hook order); stage 3's follow each pass: no change."""
        return False

    def post_backward(self) -> None:
        self.linear.set(False)
        self.hooks.post_backward()
        self._finish_inflight()
        for g in self.groups:
            self.reshard(g)
        self.state = TrainingState.IDLE
        self.life.end_step()
        self.grad_order.end_step()

    def forward_failed(self) -> None:
        """The model's forward raised: forget its open frames, so the next forward starts a pass."""
        self.linear.set(False)
        self.hooks.forward_failed()
        self.life.end_step()

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        self.hooks.register_external_parameter(module, param)

    def publish(self) -> None:
        self.shards.flush()                       # the step wrote each shard; swapped ones go to their files
        self.drop_secondary()                     # DeepSpeed's _post_step: invalidate_secondary_tensor
        self._refresh_persistent()

    def _refresh_persistent(self) -> None:
        """The persistent groups (kept whole) after a step (``fetch.py``): DeepSpeed's ``_post_step``
        gathers each persistent parameter in an all-gather of its own; zerolab's module groups
        gather them in one."""
        ids = [i for i in range(len(self.groups)) if self.persistent[i]]
        if self.per_parameter:
            self.fetch.refresh_each(ids, self.shards, self.full)
        else:
            self.fetch.refresh(ids, self.shards, self.full)
        for i in ids:
            self.life.refreshed(i)

    def drop_secondary(self) -> None:
        """hpZ: the shards change (a step, a checkpoint): forget the trained groups' secondary
        shards (DeepSpeed's ``invalidate_secondary_tensor`` drops only its trained groups'; an
        untrained group's secondary stays for good)."""
        for i in range(self.n_trained):
            self.hpz.drop(i)

    def secondary_bytes(self, where: Place = Place.DEVICE) -> int:
        """hpZ's secondary shards held now on the device, or in host memory ("host")."""
        return self.hpz.bytes_on(where)

    def write(self, i: int, start: int, values: torch.Tensor) -> None:
        self.shards.write(i, start, values, self.groups[i].shard_numel)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        self.reshard(g)                           # (a gathered copy kept by reuse is stale now)
        self.hpz.drop(g.index)                    # (and so is its secondary shard)
        self.shards.replace(g.index, g.shard_of(flat))
        if self.persistent[g.index]:
            self.full[g.index].copy_(flat)

    def device_bytes(self) -> int:
        persistent = [self.full[i] for i in self.full if self.persistent[i]]
        return self.shards.device_bytes(self.persistent) + tensor_bytes(persistent) + self.secondary_bytes(Place.DEVICE)

    def describe(self) -> str:
        """For ``engine.switches()`` (the ParamSwitch protocol, ``switches.py``)."""
        home = {Place.DEVICE: "on the device", Place.HOST: "in host memory", Place.NVME: "on NVMe"}[self.where]
        return f"sharded, shards {home}; gathered per module for its forward and backward"

    def memory(self) -> dict[Place, dict[str, int]]:
        """Bytes by place, under ``engine.memory(where)``'s keys (the ParamSwitch protocol)."""
        m = {Place.DEVICE: {"params": self.device_bytes()}, Place.HOST: {"params": self.bytes_on(Place.HOST)},
             Place.NVME: {"params": self.bytes_on(Place.NVME)}}
        if self.hpz.on:                           # of "params", hpZ's secondary shards
            m[Place.DEVICE]["params_secondary"] = self.secondary_bytes(Place.DEVICE)
            m[Place.HOST]["params_secondary"] = self.secondary_bytes(Place.HOST)
        return m

    def remove_hooks(self) -> None:
        self._finish_inflight()
        self.grad_order.remove()
        if self.hooks is not None:
            self.hooks.remove()
        for h in self._io_handles:
            h.remove()
        self._io_handles = []
        self.linear.remove()

    def untrained_values(self) -> dict[str, torch.Tensor]:
        """Every untrained parameter's full value by name, gathered (collective: every rank
        calls it), on the CPU: for checkpoints and for :meth:`close`."""
        out = {}
        for g in self.groups[self.n_trained:]:
            flat = self.full.get(g.index)
            if flat is None:
                flat = self.fetch.copy(g.index)
            for n, v in zip(g.names, g.views(flat)):
                out[n] = v.detach().cpu().clone()
        return out

    def load_untrained(self, values: dict[str, torch.Tensor]) -> None:
        """Set untrained parameters from full values by name (a checkpoint's); others are left."""
        for g in self.groups[self.n_trained:]:
            if all(n in values for n in g.names):
                self.store_flat(g, g.flatten([values[n] for n in g.names], self.dtype, self.device))

    def restore_untrained(self) -> None:
        """Give every untrained parameter its full value as a tensor of its own (collective)."""
        values = self.untrained_values()
        for g in self.groups[self.n_trained:]:
            for p, n in zip(g.params, g.names):
                p.data = values[n].to(self.device)

    def close(self) -> None:
        self.full.clear()
        for g in self.groups:
            self.life.reset(g.index, self.persistent[g.index])
        self.hpz.drop_all()
        self._live_gathered = 0
        self.shards.close()

    # -- gather and release ----------------------------------------------------------------
    # A pass that follows its trace prefetches (fetch.py). If a pass uses a group the trace did
    # not predict, the prefetches in flight are completed and the trace is dropped.
    def _phase(self) -> str:
        if self.in_backward:
            return "backward"
        return "forward" if torch.is_grad_enabled() else "eval"

    def start_forward_pass(self) -> None:
        """The outermost module's forward begins (not in backward's recomputation): a new pass
        of the trace, "forward" with grad, "eval" without."""
        self.state = TrainingState.FORWARD
        self.life.end_step()                      # (every module's events start afresh)
        self._start_pass(self._phase())

    def check_forward_pass(self) -> None:
        """The outermost module's forward is returning: a pass that followed its trace ends with
        one order check (``UnitFetch.check_pass``)."""
        if self._following_pass:
            self._following_pass = False
            self.fetch.check_pass(self.trace.uses_so_far())

    def _start_pass(self, phase: str) -> None:
        # DeepSpeed's reset_step at the root's forward; every rank on the same path makes the same
        # choice here
        kind = "train" if phase == "forward" else "eval"
        # (a trace of persistent groups only gathers nothing: its end needs no check, fetch.py)
        self._following_pass = self.trace.start(kind) and self.fetch.prefetch_numel > 0 and \
            any(not self.persistent[i] for event in self.trace.order.get(kind, ()) for i in event)

    def after_forward(self, g: FlatGroup) -> None:
        """A module that uses group ``g`` finished its forward: release ``g`` unless the trace
        says it is used again within ``stage3_max_reuse_distance`` elements (DeepSpeed's rule:
        the last modules of forward, the first of backward, then stay gathered across the turn).
        The end of backward releases everything: the step is about to change the shards."""
        if g.index in self.full and self.trace.keep(g.index):
            self.reused += 1
            return
        self.reshard(g)

    def after_backward(self, ids: list[int]) -> None:
        """A module's backward is done (the gradients of its inputs are in): release groups ``ids``
        unless the trace uses them again within ``stage3_max_reuse_distance`` elements (DeepSpeed's
        ``post_sub_module_backward_function``). Most went already, when their gradient was
        reduced; what is left is a weight another module's backward uses too (a tied one: gathered
        again there, as in DeepSpeed, unless the reuse distance keeps it)."""
        for i in ids:
            if i in self.full and not self.persistent[i] and not self.trace.keep(i):
                self.reshard(self.groups[i])

    def end_forward_pass(self) -> None:
        """The outermost forward returned. Without grad no backward follows: release whatever
        reuse kept (a pass that left its trace may keep a group its trace promised)."""
        if self.state is TrainingState.FORWARD:
            self.state = TrainingState.IDLE
        if not torch.is_grad_enabled():
            for i in list(self.full):
                self.reshard(self.groups[i])

    def unshard(self, g: FlatGroup) -> None:
        """Group ``g`` is about to be used: :meth:`unshard_unit` of that group alone."""
        # (DeepSpeed gathers a parameter read this way on the spot, outside its coordinator:
        # no event of the trace)
        if g.index in self.full:
            return
        if g.index not in self.fetch.inflight:
            self._issue([g.index], [])
        self._wait(g.index)

    def unshard_unit(self, ids: list[int], module: nn.Module | None = None) -> None:
        """A module is about to run (its forward, or its backward): groups ``ids`` (its own
        parameters and those tied to it) are about to be used. Note each use in the pass's record,
        gather in one call those that are neither gathered nor in flight (DeepSpeed's
        ``fetch_sub_module`` gathers a module's parameters with one ``all_gather_coalesced``; two
        with hpZ, the groups with a secondary shard inside their node), wait for those in flight,
        and, when the pass follows a recorded trace, top up the prefetch (DeepSpeed's rule: up to
        ``stage3_prefetch_bucket_size`` more elements of the groups the trace says come next,
        within ``stage3_max_live_parameters`` gathered or in flight)."""
        ids = sorted(set(ids))                     # DeepSpeed sorts a fetch by parameter id
        event = tuple(ids)
        if ids and not self.in_backward and torch.is_grad_enabled():
            self.grad_order.unit_gathered(ids)
        if not self.trace.event(event, module):   # the path changed: follow the model, record anew
            self._drop_inflight(keep=ids)
        wanted = [i for i in ids if i not in self.full and i not in self.fetch.inflight]
        if wanted:
            self._issue(wanted, [])
            self.trace.available += sum(self.groups[i].numel for i in wanted)
        for i in ids:
            if i not in self.full:
                self._wait(i)
        if not self.trace.pop_own(event):
            self._drop_inflight(keep=ids)
        ahead = self.trace.prefetch(self.fetch.prefetch_numel, self.fetch.max_live,
                                    lambda i: i not in self.full and i not in self.fetch.inflight)
        if ahead:
            self._issue([], ahead)
            self.trace.available += sum(self.groups[i].numel for i in ahead)
        self.trace.done()

    def top_up(self, module: nn.Module | None = None) -> None:
        """A module with no parameters of its own is about to run (the root, a container), or its
        backward begins: DeepSpeed's ``fetch_sub_module`` runs for it too (an event of the trace),
        and tops up the prefetch."""
        self.unshard_unit([], module)

    def _drop_inflight(self, keep) -> None:
        """The trace was dropped: complete the prefetches in flight and release them (DeepSpeed's
        ``_clean_inflight_param_registry``), but for the groups ``keep`` about to be used."""
        ids = list(self._inflight)
        self._finish_inflight()
        for i in ids:
            if i not in keep:
                self.reshard(self.groups[i])

    def _live_numel(self) -> int:
        """Elements of gathered (not persistent) groups alive now, kept as they change."""
        return self._live_gathered

    def _inflight_numel(self) -> int:
        return self.fetch.numel

    def _issue(self, wanted: list[int], ahead: list[int]) -> None:
        """Start a unit's all-gathers (``fetch.py``): ``wanted`` now, ``ahead`` prefetched."""
        for i in (*wanted, *ahead):
            self.life.to(i, PartitionState.IN_FLIGHT)
        self.fetch.issue(wanted, ahead)
        self.peak_gathered_numel = max(self.peak_gathered_numel, self._live_gathered + self.fetch.numel)

    def _wait(self, i: int) -> None:
        """Group ``i``'s all-gather is done: bind its parameters to the gathered buffer."""
        flat = self.fetch.take(i)
        g = self.groups[i]
        self.full[i] = flat
        if not self.persistent[i]:
            self._live_gathered += g.padded_numel
        g.bind(flat)
        self.fetches += 1
        self.life.to(i, PartitionState.GATHERED, self._phase())
        if not self.in_backward and torch.is_grad_enabled():
            self.grad_order.group_gathered(i)

    def _finish_inflight(self) -> None:
        for i in list(self._inflight):
            self._wait(i)

    def _release(self, g: FlatGroup) -> None:
        if g.index in self.full and not self.persistent[g.index]:
            self.hpz.keep(g, self.full[g.index])  # DeepSpeed's _partition_param_sec, at every release
        for p in g.params:
            p.data = torch.empty(0, dtype=self.dtype, device=self.device)
        if self.full.pop(g.index, None) is not None and not self.persistent[g.index]:
            self._live_gathered -= g.padded_numel
            self.trace.available -= g.numel
            self.life.to(g.index, PartitionState.SHARDED, self._phase())
        self._track(f"params {g.index}", None)

    def reshard(self, g: FlatGroup) -> None:
        """Release group ``g``'s full parameters (persistent groups stay whole)."""
        if not self.persistent[g.index] and g.index in self.full:
            self._release(g)

    def _shard_on_device(self, i: int) -> torch.Tensor:
        """This rank's shard of group ``i`` on the compute device (copied up when offloaded)."""
        return self.shards.on_device(i, self.groups[i].shard_numel)

    def bytes_on(self, where: Place) -> int:
        return self.shards.offloaded_bytes(where, self.persistent) + (
            self.secondary_bytes(Place.HOST) if where == Place.HOST and self.where.offloaded else 0)
