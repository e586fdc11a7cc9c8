"""A ZeRO stage is three independent switches and one lifecycle.

The engine (``engine.py``) owns what does not depend on *where* tensors live: loss scaling,
the overflow check, clipping, the optimizer. A :class:`Stage` owns where they live and which
collectives move them. It is made of three parts, each in its own module:

    =====  ==========================================  ==================================  =========
    stage  gradients (``reduce.py``)                   parameters                          optimizer
                                                                                               states
    =====  ==========================================  ==================================  =========
    0      all-reduced at the boundary (5e8 buckets)   replicated (``params.py``)          replicated
    1      each bucket reduced at the boundary:        replicated, one flat buffer;        sharded
           all-reduce (DeepSpeed's default), a         the partitions all-gathered
           reduce per owner, or the paper's            after the step
           reduce-scatter (``ideal_reduce_scatter``)
    2      the same, each bucket as soon as it is      replicated, as stage 1              sharded
           complete, during backward
    3      each bucket reduce-scattered during         gathered per module (``stage3/``)    sharded
           backward (qgZ: quantized all-to-all)
    =====  ==========================================  ==================================  =========

and where the optimizer states live (device, host, NVMe: ``zerolab/offload/``, in one of
its shard stores) is a fourth choice that any stage from 1 up (and stage 0 on the device) can make.
``engine.switches()`` prints the table for one engine (each switch's ``describe()``). The
table itself, with every per-stage constant and rule, is ``stage_table.py``'s ``STAGES``: the
Stage reads its row (``self.spec``) and never tests the stage number.

Each switch is typed by a ``Protocol`` in ``switches.py`` and built here from what it needs:
the parameter switch first (it makes the flat groups), then the state home over the part each
rank steps, then the gradient switch (its ``ReduceSpec``: ``spec.reduce_spec``; it asks the
home where the reduced shards go). Stage 3's ``GatheredParams`` still reads the Stage.

The lifecycle of one step, in the order the engine calls it (FSDP2's names where they fit):

    forward        params.unshard(unit) before a unit runs, params.reshard(unit) after it
                   (stage 3, driven by the module hooks in ``stage3/hooks.py``; nothing for 0-2)
    pre_backward   grads: start a new order of buckets; params: start the backward pass
    (backward)     each parameter's gradient arrives through its post-accumulate-grad hook:
                   grads.accept() puts it in a bucket; a full bucket is reduced (stages 2-3,
                   and 0-1 with overlap_comm at the boundary); when a unit's gradients are
                   all in, params.grads_done(unit) is told (stage 3 reshards the unit then)
    post_backward  grads: send what is left, wait for everything in flight; params: reshard all
    reduce_grads   at the accumulation boundary: stages 0-1 reduce their full gradients here
    (step)         home.step(...): the optimizer steps this rank's part, wherever it lives
    publish        params: make the model's parameters current again (stages 1-2 all-gather the
                   updated shards; stage 3 refreshes its persistent parameters)

Gradients arrive through ``register_post_accumulate_grad_hook``: as soon as autograd has
finished a parameter's gradient, the stage hands it to the gradient switch and sets
``param.grad = None``, so no stray full-size ``.grad`` tensors stay behind.

Where this module stands among the others (the engine above it, the stage table and the switches
below): docs/ARCHITECTURE.md, "Inside zero".
"""
from __future__ import annotations

import torch
from torch import nn

from ..comm import Comm
from ..config import ZerolabConfig
from ..memory.flat import FlatGroup
from ..i18n import catalogue
from ..memory import Place, largest_layer_params, tensor_bytes
from ..offload import ParamWriter, make_state_home
from .stage_table import STAGE0_BUCKET, STAGES, SWITCHES, StageSpec, reduce_mode, reduce_spec
from .switches import GradSwitch, LiveBuffers, ParamSwitch, StateSwitch, add_memory

__all__ = ["Stage", "STAGES", "StageSpec", "SWITCHES", "UnusedParameterError", "reduce_spec", "reduce_mode",
           "STAGE0_BUCKET"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)


class UnusedParameterError(RuntimeError):
    """``ignore_unused_parameters`` is false and a trainable parameter got no gradient."""


class Stage:
    """One ZeRO stage: ``self.grads`` (how gradients are reduced), ``self.params`` (where
    parameters live), ``self.home`` (where the optimizer states live, and the step). The Stage
    builds each from its slice of the config and calls them in the order of a step; the
    switches never see the Stage."""

    def __init__(self, model: nn.Module, named: list[tuple[str, nn.Parameter]], comm: Comm,
                 zero, dtype: torch.dtype, comm_dtype: torch.dtype, device: torch.device,
                 zerolab=None, opt_groups=None):
        self.stage = zero.stage
        self.spec: StageSpec = STAGES[zero.stage]   # every per-stage choice (stage_table.py)
        self.shards_optimizer = self.spec.shards_optimizer
        self.model = model
        self.comm = comm
        self.zero = zero                         # the ZeroConfig
        self.zerolab = zerolab or ZerolabConfig()   # zerolab's own opt-in options
        # the optimizer's parameter groups: param id -> group index, and each group's own settings
        self.opt_group_of, self.opt_group_hps = opt_groups or ({}, [{}])
        self.dtype = dtype                       # compute dtype of the model (fp32/fp16/bf16)
        self.comm_dtype = comm_dtype             # dtype gradients travel in
        self.mixed = dtype != torch.float32      # keep separate fp32 master weights?
        self.device = device
        self.rank, self.world_size = comm.rank, comm.world_size
        self.named = named
        self.buffers = LiveBuffers()             # buckets and gathered parameters alive now
        self._got_grad: set[int] = set()         # ids of params that got a gradient this backward
        self.closed = False
        # the switches, each from what it needs
        self.params: ParamSwitch
        self.params, params_on_device, self.largest_unit = self._make_params(model)
        # the groups the optimizer steps (stage 3 partitions untrained parameters too, in groups after these)
        self.groups: list[FlatGroup] = list(self.params.trained_groups)
        self.group_of = {id(p): g for g in self.groups for p in g.params}
        self.owned_params = self.params.owned()  # the part of each group this rank's step updates
        self.home: StateSwitch = make_state_home(
            self.owned_params, self.groups, zero, ParamWriter(self.params, dtype), device=device, rank=self.rank,
            world_size=self.world_size, sharded=self.shards_optimizer, copies_needed=self.mixed or not params_on_device,
            opt_group_hps=self.opt_group_hps, timeline=comm.timeline)
        # buckets fill as DeepSpeed's do (the spec's bucket_order): stage 3 in each forward's order,
        # stage 2 in the last backward's hook order (planned again before each backward), stages 0
        # and 1 in the model's order (stage 1 with overlap_comm too: its hooks reduce during backward)
        order = self.spec.bucket_order(zero, self.zerolab)
        per_pass = order == "pass"
        if order == "model":
            self.params.forward_grad_order()
        self.grads: GradSwitch = self.spec.grads(
            self.groups, comm, self.spec.reduce_spec(zero, self.zerolab), dtype=dtype, comm_dtype=comm_dtype,
            device=device, units=self.params.reduce_units, per_pass=per_pass,
            on_group_done=self.params.grads_done if per_pass else None, buffers=self.buffers,
            sharded=self.shards_optimizer, home=self.home)
        if order == "hook":
            self.grads.observe = self.params.observe_grad_order
        self.params.start()                      # stage 3: shards to NVMe, module hooks
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for _, p in named]

    def _make_params(self, model: nn.Module):
        """(the parameter switch, do its shards stay on the device?, the most elements one unit
        gathers: a module's own parameters, what the device budget's estimates use)."""
        if self.spec.partitions_params:
            params = self.spec.params(model, self.named, self.comm, self.zero, self.zerolab, dtype=self.dtype,
                                      device=self.device, opt_group_of=self.opt_group_of, buffers=self.buffers)
            on_device = not Place.of(self.zero.offload_param.device).offloaded
            return params, on_device, max((g.numel for g in params.groups), default=0)
        largest = largest_layer_params(model)
        params = self.spec.params(self.named, self.comm, dtype=self.dtype, device=self.device,
                                  sharded=self.shards_optimizer, bucket_numel=self.zero.reduce_bucket_size,
                                  per_bucket=bool(self.zerolab.ideal_reduce_scatter) and self.spec.ideal_layout,
                                  opt_group_of=self.opt_group_of)
        return params, True, largest

    # -- for readers ---------------------------------------------------------------------------
    @property
    def masters(self) -> list[torch.Tensor]:
        """Each group's fp32 master shard (read back from the files under NVMe offload)."""
        return [self.home.group_master(i) for i in range(len(self.groups))]

    @property
    def grad_flats(self) -> list[torch.Tensor]:
        """Stages 0-1: the full gradient of each group, accumulated over micro-steps."""
        return self.grads.grad_flats

    @property
    def grad_shards(self) -> list[torch.Tensor]:
        """Stages 2-3: this rank's shard of each group's gradient."""
        return self.grads.grad_shards

    @property
    def prefetches(self) -> int:
        """Stage 3: the all-gathers issued ahead of use, from the trace (``params.prefetches``)."""
        return self.params.prefetches

    @property
    def budget_check(self):
        return self.buffers.budget_check

    @budget_check.setter
    def budget_check(self, check) -> None:
        """The engine's device budget: told when a buffer appears and after each step."""
        self.buffers.budget_check = check
        self.home.budget_check = check

    @property
    def peak_buffer_bytes(self) -> int:
        """The most bytes of transient buffers (buckets, gathered parameters) alive at once."""
        return self.buffers.peak_bytes

    def describe(self) -> dict[str, str]:
        """The three switches in words, each with the class (and module) that makes it."""
        def made_by(obj) -> str:
            return f" [{type(obj).__name__}, {type(obj).__module__.split('.')[-1]}.py]"
        return {"gradients": self.grads.describe() + made_by(self.grads),
                "parameters": self.params.describe() + made_by(self.params),
                "optimizer states": self.home.describe() + made_by(self.home)}

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        """Put the step's ``values`` (fp32) of group ``i``'s owned part from ``start`` into this
        rank's parameters, in the model dtype."""
        self.params.write(i, start, values)

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        self.params.register_external_parameter(module, param)

    # -- the lifecycle -----------------------------------------------------------------------
    def _on_grad(self, p: nn.Parameter) -> None:
        if p.grad is None:
            return
        g = self.group_of[id(p)]
        self._got_grad.add(id(p))
        self.grads.accept(g, g.index_of[id(p)], p.grad)
        p.grad = None

    def pre_backward(self, boundary: bool = True) -> None:
        """Before every ``loss.backward()``; ``boundary``: this micro-step ends with an
        optimizer step."""
        self._got_grad.clear()
        self.params.pre_backward()
        self.grads.pre_backward(boundary)

    def post_backward(self) -> None:
        """After every ``loss.backward()``."""
        self.grads.post_backward()
        self.params.post_backward()

    def reduce_grads(self) -> None:
        """Once per optimizer step, before it."""
        self.grads.at_boundary()

    def grads_for_step(self) -> list[torch.Tensor]:
        """Averaged gradients aligned with ``self.masters`` (any float dtype)."""
        return self.grads.for_step()

    def zero_grads(self) -> None:
        self.grads.zero()

    def publish(self) -> None:
        """After the optimizer stepped: make the model's parameters current."""
        self.params.publish()

    def forward_failed(self) -> None:
        """The model's forward raised (stage 3 forgets the modules it had open)."""
        self.params.forward_failed()

    def check_unused(self) -> None:
        """``ignore_unused_parameters: false``: a trainable parameter that got no gradient in
        this backward, on any rank, is an error on every rank (one small all-reduce)."""
        missing = [n for n, p in self.named if id(p) not in self._got_grad]
        flags = torch.zeros(self.world_size, dtype=torch.int64, device=self.device)
        flags[self.rank] = len(missing)
        self.comm.all_reduce(flags, tag="unused-parameter check")
        if int(flags.sum()) == 0:
            return
        ranks = [r for r in range(self.world_size) if int(flags[r])]
        more = T(" and {n} more", n=len(missing) - 8) if len(missing) > 8 else ""
        mine = T("; on this rank (rank {rank}): {names}{more}", rank=self.rank, names=", ".join(missing[:8]),
                 more=more) if missing else ""
        raise UnusedParameterError(T(
            "trainable parameters got no gradient in this backward on rank(s) {ranks}{mine}. "
            "zero_optimization.ignore_unused_parameters is false, so this is an error (DeepSpeed's "
            "rule); set it to true (the default) to treat a missing gradient as zero, as DDP with "
            "find_unused_parameters=True does, or freeze the parameter (requires_grad=False).",
            ranks=ranks, mine=mine))

    # -- transient buffers (buckets, gathered parameters) -----------------------------------
    def track(self, key: str, t: torch.Tensor | None) -> None:
        """Remember a transient buffer (bucket, gathered params) for the memory report."""
        self.buffers.track(key, t)

    def buffer_bytes(self) -> int:
        return self.buffers.bytes()

    # -- views for users ------------------------------------------------------------------
    def full_master_flats(self) -> list[torch.Tensor]:
        """Every group's full fp32 master values (gathers the shards when sharded)."""
        out = []
        for g, m in zip(self.groups, self.masters):
            if not self.shards_optimizer:
                out.append(m.detach().float().clone())
                continue
            full = torch.empty(g.padded_numel, dtype=torch.float32, device=self.device)
            with self.comm.ledger.paused():
                self.comm.all_gather(full, m.detach().float().contiguous())
            out.append(full)
        return out

    def full_params(self) -> dict[str, torch.Tensor]:
        values: dict[str, torch.Tensor] = {}
        for g, flat in zip(self.groups, self.full_master_flats()):
            for name, v in zip(g.names, g.views(flat)):
                values[name] = v.clone().cpu()
        return values

    def memory(self) -> dict[str, dict[str, int]]:
        """Bytes this rank holds, by place ("device", "host", "nvme"), as the switches count them
        (plus the frozen parameters and the transient buffers on the device)."""
        m = add_memory({Place.DEVICE: {"params": self._frozen_bytes(), "buffers": self.buffer_bytes()}},
                       self.params.memory(), self.grads.memory(), self.home.memory())
        return m

    def _frozen_bytes(self) -> int:
        kept = {id(p) for _, p in self.named} | set(self.params.unit_of)
        return tensor_bytes(p for p in self.model.parameters() if id(p) not in kept)

    def close(self) -> None:
        """Detach from the model: remove every hook, leave each parameter holding its full,
        current value (a plain tensor), and drop buckets and gathered buffers."""
        if self.closed:
            return
        self.params.remove_hooks()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.restore_params()
        self.params.restore_untrained()        # stage 3 gathers the untrained parameters it partitions
        for p in self.model.parameters():
            p.grad = None
        self.buffers.clear()
        self.home.close()
        self.params.close()
        self.closed = True

    def untrained_values(self) -> dict[str, torch.Tensor]:
        """Every parameter this engine does not train, by name, full, on the CPU (stage 3
        gathers those it partitions: every rank calls it)."""
        trained = {id(p) for _, p in self.named}
        units = self.params.unit_of
        gathered = self.params.untrained_values()   # (collective at stage 3; {} at stages 0-2)
        return {n: gathered[n] if id(p) in units else p.detach().cpu().clone()
                for n, p in self.model.named_parameters() if id(p) not in trained}

    def load_untrained(self, values: dict[str, torch.Tensor]) -> None:
        """Set the untrained parameters named in ``values`` (the rest are left as they are)."""
        units = self.params.unit_of
        self.params.load_untrained(values)      # the ones stage 3 partitions (nothing at stages 0-2)
        named = dict(self.model.named_parameters())
        for n, v in values.items():
            if id(named[n]) not in units:
                named[n].data.copy_(v)

    def param_shapes(self) -> dict[str, tuple]:
        """Every parameter's full shape by name (stage 3's released parameters hold empty data)."""
        units = self.params.unit_of
        out = {}
        for n, p in self.model.named_parameters():
            g = units.get(id(p)) or self.group_of.get(id(p))
            out[n] = tuple(g.shapes[g.index_of[id(p)]]) if g is not None else tuple(p.shape)
        return out

    def load_full_values(self, values: dict[str, torch.Tensor]) -> None:
        """Set every trained parameter (masters and the model's copy) from full fp32 values by
        name, cut the way this stage shards (a checkpoint from any world size or stage)."""
        for g in self.groups:
            flat = g.flatten([values[n] for n in g.names], torch.float32, self.device)
            self.params.store_flat(g, flat)
            self.home.set_group(g.index, master=(g.shard_of(flat) if self.shards_optimizer else flat))

    def restore_params(self) -> None:
        """Give every trained parameter its full value as a tensor of its own."""
        for g, flat in zip(self.groups, self.full_master_flats()):
            for p, v in zip(g.params, g.views(flat)):
                p.data = v.to(self.dtype).clone()

