"""Switch 2 of a stage, stage 3: parameters sharded, gathered per unit just in time.

A :class:`GatheredParams` keeps only this rank's shard of each group (a module's own
parameters: one unit) and all-gathers a group when a module needs it (:meth:`~GatheredParams.unshard`),
releasing it after use (:meth:`~GatheredParams.reshard`). The shards live on the device, in host
memory or in files (``offload_param``).

    forward   before a module runs: unshard its units        (Psi on the wire, in total)
              after it: reshard them (``param.data`` becomes an empty tensor)
    backward  when the gradient reaches the module's outputs: unshard again    (Psi)
              when all its parameters have their gradient: reduce-scatter it  (Psi, reduce.py)
              and reshard
    step      each rank steps its shard; nothing is gathered until the next forward

A parameter of at most ``stage3_param_persistence_threshold`` elements is *persistent*
(DeepSpeed's per-parameter rule, the total capped by ``stage3_model_persistence_threshold``): all
persistent parameters share one group that is kept whole, refreshed by one all-gather after each
step (``publish``, one all-gather of every persistent parameter, as DeepSpeed's ``_post_step``),
and never gathered in forward or backward (many tiny all-gathers cost more in latency than the
memory they save). Parameters the engine does not train (frozen, or left out of the optimizer) are
partitioned and gathered like the others, as DeepSpeed does, in groups of their own after the
trained ones (no gradient, no optimizer state).

A module's *unit* is its own groups plus the groups tied to it: a parameter its forward reads by
attribute from another module (``nn.MultiheadAttention`` reading ``out_proj.weight``) is gathered on
the spot the first time and tied to the module for good (DeepSpeed's ``ZeROOrderedDict`` and
``register_external_parameter``). A unit is gathered in one all-gather (``unshard_unit``: DeepSpeed's
``fetch_sub_module`` gathers a module's parameters with one ``all_gather_coalesced``) before the
module's forward and before its backward, and released after each (``after_forward``,
``after_backward``: a tied weight is gathered again for each module that uses it, unless the reuse
distance keeps it). DeepSpeed pads each parameter to a multiple of the ranks, zerolab each group:
at world sizes that do not divide a parameter, a call moves a few elements fewer.

Each pass follows the order the previous pass of its kind recorded (``trace.py``). DeepSpeed's
prefetch rule (``fetch_sub_module``): at every module's fetch, one asynchronous all-gather of the
groups that come next, while fewer than min(``stage3_max_live_parameters`` - available,
``stage3_prefetch_bucket_size``) elements are taken; what is in flight is bounded only by
``stage3_max_live_parameters``. After a module's forward a group stays gathered if the order uses
it again within ``stage3_max_reuse_distance`` elements. zerolab's own safety, on by default and
switched off with ``"zerolab": {"order_checks": false}``: 16-byte headers make ranks that took
different paths raise :class:`ModuleOrderError` instead of hanging (filed in the ledger's checks,
never among ZeRO's calls). Gradients are reduced (``reduce.py``, in buckets of
``reduce_bucket_size``) in the reverse of the order groups were first gathered in forward (the
same on every rank), whatever order they complete in.

**qwZ** (``zero_quantized_weights``, ZeRO++; DeepSpeed 0.19.8's ``all_gather_coalesced(...,
quantize=True)`` in ``runtime/zero/partition_parameters.py``): every all-gather of a unit's
parameters, in forward and in backward, prefetched or not, carries int8 blocks plus their fp32
scales instead of model-dtype values. Each rank converts its shard to fp16, quantizes it (blocks
by DeepSpeed's adaptive rule, :func:`zerolab.quant.qwz_groups`; a prefetch batch is one tensor,
as DeepSpeed quantizes the concatenation of a coalesced fetch), and two all-gathers follow, as in
DeepSpeed: the int8 values, then the scales. Each rank dequantizes the whole buffer to fp16, then
to the model dtype. The shards (and the optimizer's fp32 masters) are never quantized: only the
gathered copies used in forward and backward are. Not quantized, as in DeepSpeed: the persistent
parameters' refresh after each step (``_post_step`` gathers them with ``all_gather``, which
quantizes only weights stored quantized) and the broadcast at initialization. DeepSpeed also
fetches the persistent parameters once in the first forward (quantized); zerolab keeps them whole
from initialization, so they are exact from the first step. Untrained parameters' fetches are
quantized too, as in DeepSpeed. Every gathered shard must
be a multiple of 8 elements (DeepSpeed's quantizer asserts it): checked at initialization.
The quantizer is :func:`zerolab.quant.qwz_codec`'s pair: zerolab's, unless
:func:`zerolab.quant.use_qwz_codec` swapped it (zerolab's own hook; exercise 13 plugs the
learner's quantizer in there).

**hpZ** (``zero_hpz_partition_size`` h > 1, ZeRO++; ``hpz.py`` has DeepSpeed 0.19.8's rules, file by
file): a unit released after a gather keeps this rank's 1/h of it (a secondary shard, over h
consecutive ranks: one node), until the next optimizer step drops it; while a unit has one, its
all-gathers (fetch or prefetch, quantized with qwZ) run inside that group. So a step's forward
gathers over all N ranks and its backward inside the node (the first step's forward inside the
node too: the secondary shards made at initialization).

When to unshard and reshard is decided by the hooks in ``hooks.py`` (module forward pre/post
hooks, output-gradient hooks, watched parameter dicts for parameters used outside their module).
"""
from __future__ import annotations

import torch
from torch import nn

from .flat import FlatGroup, Part
from .hooks import ModuleHooks, module_hooks_class
from .inflight import GatherBatch, InFlight, TrainingState, QuantizedGather
from .hpz import secondary_shards
from .memory import tensor_bytes
from .params import broadcast_
from .quant import qwz_codec, qwz_groups
from .trace import FetchTrace, ModuleOrderError, agree, checksum

__all__ = ["GatheredParams", "ModuleOrderError"]


class GatheredParams:
    """Stage 3's parameters: one shard per group on each rank, gathered per unit."""
    ordered_per_pass = True                   # gradient buckets follow each forward's order

    def __init__(self, stage):
        self.stage = stage
        zero = stage.zero
        self.groups = self.make_groups(stage.model, stage.named, zero)
        self.shards: list[torch.Tensor] = []       # this rank's shard of each group (model dtype)
        self.full: dict[int, torch.Tensor] = {}    # group index -> gathered flat buffer, while alive
        self._live_gathered = 0                    # elements of non-persistent groups in self.full
        self._flight = 0                           # elements of all-gathers in flight
        # offload_param: where the shards of the gathered groups live between uses ("device",
        # "cpu": host memory, "nvme": files, beyond the first max_in_cpu elements kept on the host).
        # Persistent parameters stay whole on the device, as in DeepSpeed.
        po = zero.offload_param
        self.where = po.device if po.device in ("cpu", "nvme") else "device"
        pin = po.pin_memory and torch.cuda.is_available()
        self.hpz = secondary_shards(stage, self.where, pin)   # hpZ's (hpz.py); NoSecondaryShards when off
        for g in self.groups:
            flat = g.flatten([p.data for p in g.params], stage.dtype, stage.device)
            broadcast_(stage.comm, flat)           # everyone starts from rank 0's weights
            if self.persistent[g.index]:
                self.shards.append(g.shard_of(flat))       # a view: the whole buffer stays
                self.full[g.index] = flat
                g.bind(flat)
            else:
                shard = g.shard_of(flat)
                if self.where != "device":
                    host = torch.empty(shard.numel(), dtype=stage.dtype, pin_memory=pin)
                    self.shards.append(host.copy_(shard))
                else:
                    self.shards.append(shard.clone())
                self.hpz.keep(g, flat)            # DeepSpeed makes the secondary at initialization too
                self._release(g)
        self._param_files = None                   # NvmeStore of the shards swapped to files
        self._on_nvme: set[int] = set()
        self._staged: dict[int, torch.Tensor] = {} # nvme shards assembled from the step's values
        self._staged_covered: dict[int, int] = {}
        self.state = TrainingState.IDLE
        self._first_gathered: list[int] = []       # groups gathered in forward, in order
        self.fetches = 0                           # all-gathers issued for parameters
        self.prefetches = 0                        # ... of them issued ahead, from the trace
        self.peak_gathered_numel = 0               # most parameter elements gathered (or in flight) at once
        self.prefetch_numel = zero.stage3_prefetch_bucket_size
        self.order_checks = stage.zerolab.order_checks
        self.max_live = zero.stage3_max_live_parameters
        self.trace = FetchTrace([g.numel for g in self.groups], zero.stage3_max_reuse_distance)
        self._inflight: dict[int, InFlight] = {}   # group index -> its all-gather in flight
        self._following_pass = False               # this forward follows a trace: check it at its end
        self.reused = 0                            # releases skipped because of the reuse distance
        self.hooks: ModuleHooks | None = None
        # qwZ (see _all_gather); on one rank DeepSpeed gathers nothing, so quantizes nothing
        # (all_gather_coalesced: _no_gather_coalesced when the partition world size is 1)
        self.quantized_weights = bool(zero.zero_quantized_weights) and stage.world_size > 1
        if self.quantized_weights:
            self._check_qwz()

    def owned(self) -> list[torch.Tensor]:
        """The part of each trained group this rank's optimizer updates: its shard."""
        return self.shards[:self.n_trained]

    def start(self) -> None:
        """After the optimizer's home took its masters: swap shards to files, install the hooks."""
        if self.where == "nvme":
            self._swap_params_out(self.stage.zero.offload_param)
        self.hooks = module_hooks_class()(self)   # ModuleHooks, unless hooks.use_module_hooks swapped it

    # -- groups: one per module with parameters of its own, plus one of persistent params --
    # Parameters this engine does not train (requires_grad=False, or left out of the optimizer)
    # are partitioned and gathered too, as DeepSpeed's zero.Init converts every parameter: their
    # groups come after the trained ones (``trained_groups``), with no gradient and no optimizer
    # state. One whose dtype is not the model's stays whole.
    def make_groups(self, model: nn.Module, named, zero) -> list[FlatGroup]:
        trainable = {id(p): n for n, p in named}
        trainable_params = [p for _, p in named]
        names = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), n)
        threshold = zero.stage3_param_persistence_threshold
        budget = zero.stage3_model_persistence_threshold
        seen: set[int] = set()
        persistent: list[nn.Parameter] = []
        modules = []                               # (name, module, its params, its new non-persistent)
        for mname, m in model.named_modules():
            own = [p for p in m.parameters(recurse=False)
                   if id(p) in trainable or p.dtype == self.stage.dtype]
            new = []
            for p in own:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if p.numel() <= threshold and p.numel() <= budget:
                    persistent.append(p)
                    budget -= p.numel()
                else:
                    new.append(p)
            modules.append((mname, m, own, new))
        groups: list[FlatGroup] = []
        self.persistent: list[bool] = []
        owner: dict[int, int] = {}

        def add(params, label, keep, k):
            g = FlatGroup(len(groups), params, [names[id(p)] for p in params], self.stage.rank,
                          self.stage.world_size, label=label, opt_group=k)
            groups.append(g)
            self.persistent.append(keep)
            owner.update({id(p): g.index for p in params})

        opt = self.stage.opt_group_of
        ks = sorted({opt.get(id(p), 0) for p in trainable_params})
        for k in ks:                               # (one per optimizer parameter group)
            kept = [p for p in persistent if id(p) in trainable and opt.get(id(p), 0) == k]
            if kept:
                add(kept, f"persistent ({len(kept)} params)" + (f" [group {k}]" if len(ks) > 1 else ""), True, k)
        for mname, _, _, new in modules:
            for k in ks:
                mine = [p for p in new if id(p) in trainable and opt.get(id(p), 0) == k]
                if mine:
                    add(mine, (mname or "(root)") + (f" [group {k}]" if len(ks) > 1 else ""), False, k)
        self.n_trained = len(groups)
        kept = [p for p in persistent if id(p) not in trainable]
        if kept:
            add(kept, f"persistent ({len(kept)} untrained params)", True, -1)
        for mname, _, _, new in modules:
            mine = [p for p in new if id(p) not in trainable]
            if mine:
                add(mine, f"{mname or '(root)'} (untrained)", False, -1)
        self.module_groups: dict[nn.Module, list[int]] = {}
        for _, m, own, _ in modules:
            ids = sorted({owner[id(p)] for p in own if not self.persistent[owner[id(p)]]})
            if ids:
                self.module_groups[m] = ids
        self.unit_of = {id(p): g for g in groups for p in g.params}
        return groups

    @property
    def trained_groups(self) -> list[FlatGroup]:
        """The groups the optimizer steps (the first ``n_trained``); the rest are untrained."""
        return self.groups[:self.n_trained]

    # -- the lifecycle -----------------------------------------------------------------------
    def reduce_order(self) -> list[int]:
        """The reverse of the order groups were first gathered in forward: roughly the order
        backward finishes them, and identical on every rank (gathers are checked)."""
        first = [i for i in dict.fromkeys(self._first_gathered) if i < self.n_trained]
        return first[::-1]

    @property
    def in_backward(self) -> bool:
        return self.state is TrainingState.BACKWARD

    def pre_backward(self) -> None:
        """``engine.backward`` is about to run autograd (the hooks may already have begun
        backward, when the first gradient reached a module's output)."""
        self.hooks.pre_backward()
        self.state = TrainingState.BACKWARD
        self._start_pass("backward")

    def begin_backward(self) -> None:
        """The first gradient reached a module's output: autograd is in backward (the pass of the
        trace was started by :meth:`pre_backward`, before autograd ran)."""
        self.state = TrainingState.BACKWARD

    def grads_done(self, g: FlatGroup) -> None:
        self.reshard(g)                           # its gradient is in a bucket: the furniture goes back

    def reduce_units(self) -> list[Part]:
        """The groups in this backward's reduce order, each whole (padded: it is reduce-scattered
        into its N shards), for the gradient buckets."""
        return [Part(g, 0, g.padded_numel, list(range(len(g.params))), g.numel)
                for g in (self.groups[i] for i in self._full_reduce_order())]

    def _full_reduce_order(self) -> list[int]:
        order = self.reduce_order()
        seen = set(order)
        return order + [i for i in range(self.n_trained) if i not in seen]

    def post_backward(self) -> None:
        self.hooks.post_backward()
        self._finish_inflight()
        for g in self.groups:
            self.reshard(g)
        self.trace.end_backward()
        self.state = TrainingState.IDLE
        self._first_gathered.clear()

    def forward_failed(self) -> None:
        """The model's forward raised: forget its open frames, so the next forward starts a pass."""
        self.hooks.forward_failed()

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        self.hooks.register_external_parameter(module, param)

    def publish(self) -> None:
        # the step wrote each shard already (write); swapped shards go back to their files
        for i, buf in self._staged.items():
            if self._staged_covered.get(i, buf.numel()) < buf.numel():    # (not the case in a step)
                raise RuntimeError(f"stage 3: the step updated only part of group {i}'s shard")
        writes = [self._param_files.write(i, "param", buf) for i, buf in self._staged.items()]
        for w in writes:
            w.result()
        self._staged.clear()
        self.drop_secondary()                     # DeepSpeed's _post_step: invalidate_secondary_tensor
        self._refresh_persistent()

    def _refresh_persistent(self) -> None:
        """The persistent groups (kept whole) after a step: one all-gather of every persistent
        parameter, as DeepSpeed's ``_post_step`` gathers ``persistent_parameters`` in one
        ``all_gather_coalesced`` (untrained ones too). Never quantized (qwZ) nor inside hpZ's
        group, as there."""
        ids = [i for i in range(len(self.groups)) if self.persistent[i]]
        if not ids:
            return
        comm, n = self.stage.comm, self.stage.comm.world_size
        label = self.groups[ids[0]].label + (f" + {len(ids) - 1} more" if len(ids) > 1 else "")
        send = torch.cat([self.shards[i] for i in ids])
        out = self.full[ids[0]] if len(ids) == 1 else torch.empty(send.numel() * n, dtype=send.dtype,
                                                                   device=send.device)
        comm.all_gather(out, send, tag=f"params {label}")
        if len(ids) > 1:
            offset, rows = 0, out.view(n, -1)
            for i in ids:
                k = self.shards[i].numel()
                self.full[i].view(n, k).copy_(rows[:, offset:offset + k])
                offset += k

    def drop_secondary(self) -> None:
        """hpZ: the shards change (a step, a checkpoint): forget the trained groups' secondary
        shards (DeepSpeed's ``invalidate_secondary_tensor`` drops only its trained groups'; an
        untrained group's secondary stays for good)."""
        for i in range(self.n_trained):
            self.hpz.drop(i)

    def secondary_bytes(self, where: str = "device") -> int:
        """hpZ's secondary shards held now on the device, or in host memory ("host")."""
        return self.hpz.bytes_on(where)

    def write(self, i: int, start: int, values: torch.Tensor) -> None:
        if i in self._on_nvme:
            # the step writes every element of the shard (tile by tile), so the new file is
            # assembled in memory without reading the old one; publish() writes it
            buf = self._staged.get(i)
            if buf is None:
                buf = self._staged[i] = torch.empty(self.groups[i].shard_numel, dtype=self.stage.dtype)
                self._staged_covered[i] = 0
            buf[start:start + values.numel()].copy_(values)
            self._staged_covered[i] += values.numel()
        else:
            self.shards[i][start:start + values.numel()].copy_(values, non_blocking=True)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        self.reshard(g)                           # (a gathered copy kept by reuse is stale now)
        self.hpz.drop(g.index)                    # (and so is its secondary shard)
        if g.index in self._on_nvme:
            self._param_files.write(g.index, "param", g.shard_of(flat).to(self.stage.dtype).clone()).result()
        else:
            self.shards[g.index].copy_(g.shard_of(flat))
        if self.persistent[g.index]:
            self.full[g.index].copy_(flat)

    def device_bytes(self) -> int:
        persistent = [self.full[i] for i in self.full if self.persistent[i]]
        on_device = [s for g, s in zip(self.groups, self.shards)
                     if self.where == "device" and not self.persistent[g.index]]
        return tensor_bytes([*on_device, *persistent]) + self.secondary_bytes("device")

    def describe(self) -> str:
        """For ``engine.switches()`` (the ParamSwitch protocol, ``switches.py``)."""
        home = {"device": "on the device", "cpu": "in host memory", "nvme": "on NVMe"}[self.where]
        return f"sharded, shards {home}; gathered per module for its forward and backward"

    def memory(self) -> dict[str, dict[str, int]]:
        """Bytes by place, under ``engine.memory(where)``'s keys (the ParamSwitch protocol)."""
        m = {"device": {"params": self.device_bytes()}, "host": {"params": self.bytes_on("host")},
             "nvme": {"params": self.bytes_on("nvme")}}
        if self.hpz.on:                           # of "params", hpZ's secondary shards
            m["device"]["params_secondary"] = self.secondary_bytes("device")
            m["host"]["params_secondary"] = self.secondary_bytes("host")
        return m

    def remove_hooks(self) -> None:
        self._finish_inflight()
        if self.hooks is not None:
            self.hooks.remove()

    def untrained_values(self) -> dict[str, torch.Tensor]:
        """Every untrained parameter's full value by name, gathered (collective: every rank
        calls it), on the CPU: for checkpoints and for :meth:`close`."""
        out = {}
        for g in self.groups[self.n_trained:]:
            flat = self.full.get(g.index)
            if flat is None:
                flat = torch.empty(g.padded_numel, dtype=self.stage.dtype, device=self.stage.device)
                with self.stage.comm.ledger.paused():
                    self.stage.comm.all_gather(flat, self._shard_on_device(g.index).clone(), tag=f"params {g.label}")
            for n, v in zip(g.names, g.views(flat)):
                out[n] = v.detach().cpu().clone()
        return out

    def load_untrained(self, values: dict[str, torch.Tensor]) -> None:
        """Set untrained parameters from full values by name (a checkpoint's); others are left."""
        for g in self.groups[self.n_trained:]:
            if all(n in values for n in g.names):
                self.store_flat(g, g.flatten([values[n] for n in g.names], self.stage.dtype, self.stage.device))

    def restore_untrained(self) -> None:
        """Give every untrained parameter its full value as a tensor of its own (collective)."""
        values = self.untrained_values()
        for g in self.groups[self.n_trained:]:
            for p, n in zip(g.params, g.names):
                p.data = values[n].to(self.stage.device)

    def close(self) -> None:
        self.full.clear()
        self.hpz.drop_all()
        self._live_gathered = 0
        if self._param_files is not None:
            self._param_files.close()

    # -- gather and release ----------------------------------------------------------------
    # A pass that follows its trace (trace.py) *prefetches*: at each group's fetch it also issues
    # one asynchronous all-gather for the groups the trace says come next (DeepSpeed's budget, see
    # _next_prefetch). With order checks on, every unit of gathers (a group and/or its prefetches)
    # is preceded by one 16-byte header all-gather, and a forward that followed a trace ends with
    # one more, so ranks that disagree raise ModuleOrderError before any mismatched all-gather. If
    # a pass uses a group the trace did not predict, the prefetches in flight are completed and the
    # trace is dropped.
    def _phase(self) -> str:
        if self.in_backward:
            return "backward"
        return "forward" if torch.is_grad_enabled() else "eval"

    def start_forward_pass(self) -> None:
        """The outermost module's forward begins (not in backward's recomputation): a new pass
        of the trace, "forward" with grad, "eval" without."""
        self.state = TrainingState.FORWARD
        self._start_pass(self._phase())

    def check_forward_pass(self) -> None:
        """The outermost module's forward is returning: a pass that followed its trace ends with
        one order check (:meth:`_check_pass`)."""
        if self._following_pass:
            self._following_pass = False
            self._check_pass()

    def _start_pass(self, phase: str) -> None:
        # every rank on the same path makes the same choice here
        self._following_pass = self.trace.start(phase) and self.prefetch_numel > 0

    def after_forward(self, g: FlatGroup) -> None:
        """A module that uses group ``g`` finished its forward: release ``g`` unless the trace
        says it is used again within ``stage3_max_reuse_distance`` elements (DeepSpeed's rule:
        the last modules of forward, the first of backward, then stay gathered across the turn).
        The end of backward releases everything: the step is about to change the shards."""
        if g.index in self.full and self.trace.used_again_soon(g.index):
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
            if i in self.full and not self.persistent[i] and not self.trace.used_again_soon(i):
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
        self.unshard_unit([g.index])

    def unshard_unit(self, ids: list[int]) -> None:
        """A module is about to run (its forward, or its backward): groups ``ids`` (its own
        parameters and those tied to it) are about to be used. Note each use in the pass's record,
        gather in one call those that are neither gathered nor in flight (DeepSpeed's
        ``fetch_sub_module`` gathers a module's parameters with one ``all_gather_coalesced``; two
        with hpZ, the groups with a secondary shard inside their node), wait for those in flight,
        and, when the pass follows a recorded trace, top up the prefetch (DeepSpeed's rule: up to
        ``stage3_prefetch_bucket_size`` more elements of the groups the trace says come next,
        within ``stage3_max_live_parameters`` gathered or in flight)."""
        ids = sorted(set(ids))                     # DeepSpeed sorts a fetch by parameter id
        phase = self._phase()
        for i in ids:
            if not self.trace.note(phase, i):     # the path changed: follow the model, record anew
                self._finish_inflight()
        wanted = [i for i in ids if i not in self.full and i not in self._inflight]
        ahead = self._next_prefetch(phase, first=wanted)
        if wanted or ahead:
            self._issue(wanted, ahead)
        for i in ids:
            if i not in self.full:
                self._wait(i)

    def top_up(self) -> None:
        """A module with no parameters of its own is about to run (the root, a container):
        DeepSpeed's ``fetch_sub_module`` runs for it too, and tops up the prefetch."""
        ahead = self._next_prefetch(self._phase())
        if ahead:
            self._issue([], ahead)

    def _live_numel(self) -> int:
        """Elements of gathered (not persistent) groups alive now, kept as they change."""
        return self._live_gathered

    def _inflight_numel(self) -> int:
        return self._flight

    def _next_prefetch(self, phase: str, first: list[int] = ()) -> list[int]:
        """The groups to prefetch now: from the trace's upcoming uses, those not gathered or in
        flight, while fewer than min(max_live - available, prefetch_bucket_size) elements are
        taken (DeepSpeed's budget; the group that crosses it is taken too). ``first``: groups
        about to be gathered, counted as available."""
        upcoming = self.trace.upcoming(phase)
        if not upcoming or self.prefetch_numel <= 0:
            return []
        available = self._live_numel() + self._inflight_numel() + sum(
            self.groups[i].padded_numel for i in first)
        budget = min(self.max_live - available, self.prefetch_numel)
        out: list[int] = []
        taken = 0
        for j in upcoming:
            if taken >= budget:
                break
            if j in self.full or j in self._inflight or j in first or j in out:
                continue
            out.append(j)
            taken += self.groups[j].padded_numel
        return out

    def _issue(self, wanted: list[int], ahead: list[int]) -> None:
        """Check that every rank gathers the same unit, then start its all-gathers: ``wanted``
        (needed now) blocking, in one call; the prefetched ones ``ahead`` asynchronously,
        coalesced into one all-gather when there are several (as DeepSpeed gathers a prefetch
        batch). hpZ: the groups with a secondary shard are gathered apart, inside their group
        (as DeepSpeed's ``__all_gather_params`` splits a fetch), then the others over all ranks."""
        self._check_unit(wanted + ahead)
        for ids, async_op in ((wanted, False), (ahead, True)):
            secondary = [j for j in ids if j in self.hpz]
            for part in (secondary, [j for j in ids if j not in secondary]):
                self._start(part, async_op)
        self._flight += sum(self.groups[j].padded_numel for j in wanted + ahead)
        live = self._live_numel() + self._inflight_numel()
        self.peak_gathered_numel = max(self.peak_gathered_numel, live)
        self.prefetches += len(ahead)

    def _start(self, ids: list[int], async_op: bool) -> None:
        """All-gather groups ``ids`` (all with a secondary shard, or all without): one group
        alone, several coalesced into one all-gather; blocking, or asynchronously (a prefetch)."""
        st = self.stage
        if len(ids) == 1:
            g = self.groups[ids[0]]
            flat = torch.empty(g.padded_numel, dtype=st.dtype, device=st.device)
            shard, comm, tag = self._source(ids[0])
            work = self._all_gather(flat, shard, tag, async_op=async_op, comm=comm)
            self._inflight[ids[0]] = InFlight(work if async_op else None, flat)
            st.track(f"params {ids[0]}", flat)
        elif ids:
            # one all-gather of every group's shard; each group's flat buffer is copied out of it
            # when the group is first needed (DeepSpeed's AllGatherCoalescedHandle copies too)
            sources = [self._source(j) for j in ids]
            comm = sources[0][1]
            send = torch.cat([s for s, _, _ in sources])
            out = torch.empty(send.numel() * comm.world_size, dtype=st.dtype, device=st.device)
            label = f"{self.groups[ids[0]].label} + {len(ids) - 1} more" + (" (hpZ)" if ids[0] in self.hpz else "")
            work = self._all_gather(out, send, f"params {label}", async_op=async_op, comm=comm)
            batch = GatherBatch(work if async_op else None, out, [self.groups[j] for j in ids],
                                f"params batch {ids[0]}", comm.world_size, [s.numel() for s, _, _ in sources])
            for j in ids:
                self._inflight[j] = InFlight(batch, None)
            st.track(batch.key, out)

    def _source(self, i: int):
        """(this rank's part, the Comm that gathers it, the ledger's tag) for group ``i``: its
        hpZ secondary shard inside its group of h ranks while it has one, else its shard over all."""
        label = self.groups[i].label
        if i in self.hpz:
            return self.hpz.source(i, self.stage.device), self.hpz.comm, f"params {label} (hpZ)"
        return self._shard_on_device(i), self.stage.comm, f"params {label}"

    def _all_gather(self, out: torch.Tensor, shard: torch.Tensor, tag: str, async_op: bool = False, comm=None):
        """All-gather ``shard`` of every rank of ``comm`` (all ranks by default) into ``out``: in
        the model dtype, or with qwZ as int8 blocks and their scales (:meth:`_all_gather_quantized`)."""
        comm = self.stage.comm if comm is None else comm
        if not self.quantized_weights:
            return comm.all_gather(out, shard, tag=tag, async_op=async_op)
        return self._all_gather_quantized(out, shard, tag, async_op, comm)

    @staticmethod
    def _all_gather_quantized(out: torch.Tensor, shard: torch.Tensor, tag: str, async_op: bool, comm):
        """qwZ: quantize this rank's ``shard`` (fp16, then int8 in blocks, DeepSpeed's
        ``CUDAQuantizer``), all-gather the int8 values, then the fp32 scales (two calls, as
        DeepSpeed makes), and dequantize every rank's blocks into ``out`` (fp16, then ``out``'s
        dtype). Every rank quantizes a shard of the same size, so the gathered scales line up with
        the gathered blocks. Returns a :class:`QuantizedGather` (``async_op``) or ``out``."""
        n = comm.world_size
        quantize, dequantize = qwz_codec()         # quant.py's, unless use_qwz_codec replaced them
        q, scales = quantize(shard.to(torch.float16), qwz_groups(shard.numel()), bits=8)
        q, scales = q.reshape(-1), scales.reshape(-1)
        q_all = torch.empty(q.numel() * n, dtype=torch.int8, device=q.device)
        s_all = torch.empty(scales.numel() * n, dtype=torch.float32, device=q.device)
        pq = comm.all_gather(q_all, q, tag=tag, async_op=async_op)
        ps = comm.all_gather(s_all, scales, tag=f"{tag} scales", async_op=async_op)
        done = QuantizedGather([pq, ps] if async_op else [], q_all, s_all, out, dequantize)
        if not async_op:
            done.wait()
            return out
        return done

    def _check_qwz(self) -> None:
        """qwZ quantizes each gathered shard in blocks of a multiple of 8 elements (DeepSpeed's
        CUDAQuantizer asserts it): say which group's shard cannot be, and what to do."""
        for g in self.groups:
            if self.persistent[g.index] or g.shard_numel == 0:
                continue
            try:
                qwz_groups(g.shard_numel)
                qwz_groups(self.hpz.numel(g))     # hpZ's secondary (without hpZ: the shard again)
            except ValueError:
                raise ValueError(
                    f"zero_optimization.zero_quantized_weights: stage 3's shard of {g.label} has {g.shard_numel} "
                    f"elements on each of {g.world_size} ranks, not a multiple of 8, and DeepSpeed's qwZ quantizer "
                    "cuts a shard into blocks of a multiple of 8 (its CUDAQuantizer asserts it). Fix: a world size "
                    "or layer widths that make each module's shard a multiple of 8, make that module's parameters "
                    "persistent (stage3_param_persistence_threshold), or set zero_quantized_weights to false"
                ) from None

    def _wait(self, i: int) -> None:
        inflight = self._inflight.pop(i)
        pending, flat = inflight.work, inflight.flat
        if isinstance(pending, GatherBatch):
            flat = pending.unpack(i)
            if pending.left == 0:
                self.stage.track(pending.key, None)
            self.stage.track(f"params {i}", flat)
        elif pending is not None:
            pending.wait()
        g = self.groups[i]
        self._flight -= g.padded_numel
        self.full[i] = flat
        if not self.persistent[i]:
            self._live_gathered += g.padded_numel
        g.bind(flat)
        self.fetches += 1
        if not self.in_backward and torch.is_grad_enabled():
            self._first_gathered.append(i)

    def _finish_inflight(self) -> None:
        for i in list(self._inflight):
            self._wait(i)

    def _check_unit(self, ids: list[int]) -> None:
        """A 16-byte header for a unit of gathers (trace.agree): if the ranks took different
        paths through the model they would otherwise issue all-gathers of different sizes, which
        deadlocks or crashes the transport. zerolab's own safety (``zerolab.order_checks``;
        DeepSpeed sends none): filed in the ledger's checks, never among ZeRO's calls."""
        if not self.order_checks:
            return
        self._agree(ids[0], (len(ids) << 40) | checksum(ids), f"check {self.groups[ids[0]].label}")

    def _check_pass(self) -> None:
        """End of a forward that followed a trace (its prefetched gathers had no header of their
        own): one 16-byte all-gather of a checksum of the groups it used. A rank whose path
        left the trace is waiting in a header all-gather of the same size, so both raise."""
        if not self.order_checks:
            return
        rec = self.trace.record.get(self.trace.phase, [])
        self._agree(-1, (len(rec) << 40) | checksum(rec), "check forward pass")

    def _agree(self, first: int, code: int, tag: str) -> None:
        agree(self.stage.comm, self.groups, first, code, tag, self.stage.device)

    def _release(self, g: FlatGroup) -> None:
        if g.index in self.full and not self.persistent[g.index]:
            self.hpz.keep(g, self.full[g.index])  # DeepSpeed's _partition_param_sec, at every release
        for p in g.params:
            p.data = torch.empty(0, dtype=self.stage.dtype, device=self.stage.device)
        if self.full.pop(g.index, None) is not None and not self.persistent[g.index]:
            self._live_gathered -= g.padded_numel
        self.stage.track(f"params {g.index}", None)

    def reshard(self, g: FlatGroup) -> None:
        """Release group ``g``'s full parameters (persistent groups stay whole)."""
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
        need = sum(self.shards[i].numel() for i in out) * self.shards[0].element_size() * self.stage.world_size
        self._param_files = NvmeStore(po.nvme_path, self.stage.rank, need, what="parameter shards of every rank",
                                      timeline=getattr(self.stage.comm, "timeline", None))
        for i in out:
            self._param_files.write(i, "param", self.shards[i]).result()
            self._on_nvme.add(i)
            self.shards[i] = torch.empty(0, dtype=self.stage.dtype)

    def _read_shard(self, i: int) -> torch.Tensor:
        g = self.groups[i]
        buf = torch.empty(g.shard_numel, dtype=self.stage.dtype)
        self._param_files.read(i, "param", buf).result()
        return buf

    def _shard_on_device(self, i: int) -> torch.Tensor:
        """This rank's shard of group ``i`` on the compute device (copied up when offloaded)."""
        if i in self._on_nvme:
            shard = self._staged.get(i)
            shard = self._read_shard(i) if shard is None else shard
        else:
            shard = self.shards[i]
        return shard if shard.device == self.stage.device else shard.to(self.stage.device, non_blocking=True)

    def bytes_on(self, where: str) -> int:
        if where == "host" and self.where != "device":
            return tensor_bytes([self.shards[g.index] for g in self.groups
                                 if not self.persistent[g.index] and g.index not in self._on_nvme]
                                ) + self.secondary_bytes("host")
        if where == "nvme" and self._param_files is not None:
            return self._param_files.bytes_on_disk()
        return 0
