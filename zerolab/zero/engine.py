"""The engine: ``zerolab.initialize(model, config)``, in the spirit of ``deepspeed.initialize``.

    engine = zerolab.initialize(model, ds_config)
    for batch in data:
        loss = loss_fn(engine(batch.x), batch.y)
        engine.backward(loss)       # scales the loss (1/gradient_accumulation_steps, loss scale)
        engine.step()               # steps the optimizer only at the accumulation boundary

The engine owns what does not depend on where tensors live: the loss scale and the overflow
check, gradient clipping (the norm is summed over every rank's shard), the optimizer, and
the counters. The stage object (``stage.py``: three switches, in ``reduce.py``, ``params.py`` or
``gather.py``, and ``offload.py``) owns where parameters, gradients and optimizer states live and
which collectives move them.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .attach import (Attached, as_groups, close_previous_engine, current_device, forget_live, only_the_optimizers,
                     refuse_compiled, register_live, sync_untrained_state, warn_ignored_settings)
from ..comm import Comm, Ledger
from ..config import Config, load_config
from ..i18n import catalogue
from ..precision.loss_scaler import make_loss_scaler
from ..memory import Place, tensor_bytes
from .norms import step_norms
from .optim import build_optimizer
from ..scheduler import build_scheduler
from .stage import Stage
from .stage_table import STAGES
from ..comm.timeline import Timeline

__all__ = ["initialize", "Engine"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def initialize(model: nn.Module, config, optimizer=None, *, broadcast_buffers: bool = False,
               lr_scheduler=None, device_budget=None, param_groups=None) -> "Engine":
    """Wrap ``model`` in a ZeRO engine configured by a DeepSpeed config (dict or JSON path).

    One live engine per model: if ``model`` already has one (a notebook cell run twice), that
    engine is closed first (its hooks removed, the model given back its full current weights)
    and a warning says so. ``broadcast_buffers=True`` re-broadcasts module buffers (BatchNorm
    statistics) from rank 0 before every forward in training mode, as torch DDP does; the default is
    DeepSpeed's behaviour: buffers are broadcast once, here, and then each rank keeps its own.
    ``lr_scheduler``: a scheduler (or a callable that takes the optimizer) instead of the config's
    ``scheduler`` block. DeepSpeed's own call and 4-tuple: :func:`zerolab.deepspeed.initialize`.
    ``device_budget`` (zerolab's, not a DeepSpeed key): this rank's device capacity, in bytes or
    as text ("2GB", "1.5GiB"); the engine counts what it puts on the device (model states,
    buffers, activations) and raises :class:`zerolab.memory.budget.DeviceOutOfMemoryError`, naming the
    biggest consumers and configs that would fit, the moment a step would pass it.

    Parameter groups (no weight decay on biases and norms, say) come with an optimizer built over
    them, or as ``param_groups`` (torch's list of ``{"params": [...], "weight_decay": 0.0, ...}``,
    DeepSpeed's ``model_parameters``) for the config's optimizer: each group keeps its own
    hyper-parameters, as in DeepSpeed, and is sharded as a flat buffer of its own. Only the
    parameters in the groups are trained.
    """
    return Engine(model, config, optimizer, broadcast_buffers=broadcast_buffers, lr_scheduler=lr_scheduler,
                  device_budget=device_budget, param_groups=param_groups)


class Engine:
    def __init__(self, model: nn.Module, config, optimizer=None, *, broadcast_buffers: bool = False,
                 lr_scheduler=None, device_budget=None, param_groups=None):
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(T("zerolab.initialize needs a torch.distributed process group: call it "
                                 "inside a function run by zerolab.launch / Crew.run, or under torchrun"))
        self.timeline = Timeline()               # forward / backward / step spans, every collective
        self.comm = Comm(timeline=self.timeline) # its ledger records every collective we issue
        self.config: Config = load_config(config, self.comm.world_size)
        close_previous_engine(model, self.comm.rank)
        warn_ignored_settings(self.config, self.comm.rank)
        zero = self.config.zero
        if STAGES[zero.stage].partitions_params:     # module hooks: torch.compile cannot trace them
            refuse_compiled(model)
        self.device = current_device()
        self.dtype = self.config.compute_dtype
        self.module = model.to(device=self.device, dtype=self.dtype)
        cdt = self.config.communication_data_type
        self.comm_dtype = _DTYPES[cdt] if cdt else self.dtype
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._untrained_hooks = []
        if isinstance(optimizer, torch.optim.Optimizer):
            if param_groups is not None:
                raise ValueError(T("pass either an optimizer built over the parameter groups or "
                                   "param_groups, not both"))
            param_groups = optimizer.param_groups
        group_of, group_hps = {}, [{}]
        if param_groups is not None:
            param_groups = as_groups(param_groups)
            named = only_the_optimizers(model, named, param_groups, self._untrained_hooks, self.comm.rank)
            group_of = {id(p): k for k, pg in enumerate(param_groups) for p in pg["params"]}
            group_hps = [{k: v for k, v in pg.items() if k != "params"} for pg in param_groups]
        if not named:
            raise ValueError(T("the model has no trainable parameters"))
        sync_untrained_state(self.module, named, self.comm)
        self.stage = Stage(model, named, self.comm, zero, self.dtype, self.comm_dtype,
                           self.device, zerolab=self.config.zerolab, opt_groups=(group_of, group_hps))
        self.optimizer = build_optimizer(optimizer, self.config.optimizer, self.stage.home.optimizer_params,
                                         self.config.zero_allow_untested_optimizer)
        self.stage.home.attach(self.optimizer)
        # DeepSpeed's scheduler block (or the caller's): stepped after each step that is not skipped
        self.lr_scheduler = build_scheduler(self.config.scheduler, self.optimizer, lr_scheduler)
        self.scaler = make_loss_scaler(self.config.fp16 if self.config.fp16.enabled else None)
        self.micro_steps = 0      # backward/step calls so far
        self.global_steps = 0     # accumulation boundaries reached (skipped steps included, as DeepSpeed)
        self.skipped_steps = 0    # boundaries whose step was skipped because of an fp16 overflow
        self._boundary: bool | None = None   # set_gradient_accumulation_boundary's override; None: the count
        self.last_grad_norm: float | None = None   # unscaled global norm of the last step
        self.log: list[str] = []  # readable lines: overflows, scale changes
        self.closed = False
        self._buffer_hook = (model.register_forward_pre_hook(self._broadcast_buffers)
                             if broadcast_buffers and any(True for _ in model.buffers()) else None)
        register_live(model, self, Attached(self.stage, self._untrained_hooks))
        self.budget = None
        if device_budget is not None:
            from ..memory.budget import Budget
            self.budget = Budget(self, device_budget)
            self.stage.budget_check = self.budget.check
            self.budget.check("set-up (model states)", fresh=True)

    def _broadcast_buffers(self, module, inputs) -> None:
        if module.training:
            with self.comm.ledger.paused():
                for b in module.buffers():
                    self.comm.broadcast(b.data, 0)

    # -- closing ----------------------------------------------------------------------
    def close(self) -> None:
        """Detach the engine from its model (every rank must call it: stage 3 gathers): every
        hook and buffer it attached is removed, and each parameter holds its full, current
        value again, so the model can be used on its own or given to a new engine."""
        if self.closed:
            return
        Attached(self.stage, self._untrained_hooks).close()
        if self._buffer_hook is not None:
            self._buffer_hook.remove()
        self.optimizer.state.clear()
        self.closed = True
        forget_live(self.module, self)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(T("this engine is closed (engine.close(), or a newer zerolab.initialize "
                                 "on the same model): use the new engine"))

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        """Stage 3: gather ``param`` whenever ``module``'s forward runs (DeepSpeed's call of the
        same name). Parameters read by attribute inside a forward need no registration."""
        self.stage.register_external_parameter(module, param)

    # -- the training step -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        self._check_open()
        try:
            with self.timeline.span("forward"):
                if self.budget is None:
                    return self.module(*args, **kwargs)
                self.budget.begin_forward()
                with torch.autograd.graph.saved_tensors_hooks(self.budget.pack, lambda t: t):
                    return self.module(*args, **kwargs)
        except BaseException:
            self.stage.forward_failed()
            raise

    def train(self, mode: bool = True) -> "Engine":
        self.module.train(mode)
        return self

    def eval(self) -> "Engine":
        return self.train(False)

    @property
    def gradient_accumulation_steps(self) -> int:
        """An int that can also be called, ``engine.gradient_accumulation_steps()``, as in DeepSpeed."""
        return _CallableInt(self.config.gradient_accumulation_steps)

    @property
    def loss_scale(self) -> float:
        return float(self.scaler.cur_scale)

    @property
    def ledger(self) -> Ledger:
        return self.comm.ledger

    def is_gradient_accumulation_boundary(self) -> bool:
        if self._boundary is not None:      # set_gradient_accumulation_boundary
            return self._boundary
        return (self.micro_steps + 1) % self.gradient_accumulation_steps == 0

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of ``loss * loss_scale / gradient_accumulation_steps``."""
        self._check_open()
        factor = self.loss_scale / self.gradient_accumulation_steps
        scaled = loss * factor if factor != 1.0 else loss
        with self.timeline.span("backward"):
            self.stage.pre_backward(self.is_gradient_accumulation_boundary())
            scaled.backward()
            self.stage.post_backward()
        if self.budget is not None:
            self.budget.backward_done()
        if not self.config.zero.ignore_unused_parameters:
            self.stage.check_unused()

    def step(self) -> None:
        """Count a micro-step; at the accumulation boundary, update the parameters."""
        self._check_open()
        if self.is_gradient_accumulation_boundary():
            with self.timeline.span("step"):
                self._optimizer_step()
        self.micro_steps += 1

    def _optimizer_step(self) -> None:
        stage, scale = self.stage, self.loss_scale
        stage.reduce_grads()
        grads = stage.grads_for_step()
        clip = self.config.gradient_clipping
        # What every step needs to know from all ranks, sent as DeepSpeed 0.19.8 sends it
        # (norms.py): did any rank see an inf/NaN (a 1-byte MAX), then, unless one did, the
        # global gradient norm (one small SUM per optimizer parameter group; stage 0: only when
        # clipping, as its clip_grad_norm_ does).
        check = self.config.fp16.enabled or (self.config.bf16.enabled and self.config.bf16.check_grad_overflow)
        got = step_norms(self.comm, stage, grads, self._grad_opt_groups(stage, grads),
                         check=check, clip=clip, fp16=self.config.fp16.enabled, scale=scale)
        message = self.scaler.update_scale(got.overflow)
        if message:
            self._say(message)
        self.global_steps += 1
        if got.overflow:                          # skip: params, optimizer state untouched
            self.skipped_steps += 1
            stage.zero_grads()
            return
        if clip > 0:
            self.last_grad_norm = got.norm
        if got.pre is not None:                   # stage 0 fp32: clip_grad_norm_'s coefficient
            for g in grads:
                g.mul_(got.pre)
        # the loss scale times the clipping factor, in DeepSpeed's dtype for this path (norms.py)
        combined = got.combined
        # sub-group by sub-group, wherever the states live (offload.py), then make it everyone's
        stage.home.step(self.optimizer, grads, combined)
        stage.publish()
        stage.zero_grads()
        if self.lr_scheduler is not None:        # after the step, and only when it was not skipped
            self.lr_scheduler.step()

    @staticmethod
    def _grad_opt_groups(stage, grads) -> list[int]:
        """The optimizer parameter group of each gradient tensor of the step (0 if unknown)."""
        groups = stage.params.groups
        if len(groups) >= len(grads):
            return [max(g.opt_group, 0) for g in groups[:len(grads)]]
        return [0] * len(grads)

    def _say(self, message: str) -> None:
        self.log.append(message)
        if self.comm.rank == 0:
            print(message)

    # -- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, save_dir, tag=None, client_state=None) -> str:
        """DeepSpeed's call: write this engine's state under ``save_dir/tag`` (default tag
        ``global_step<n>``) and point ``save_dir/latest`` at it. Every rank must call it.
        ``client_state``: a dict of tensors, numbers, strings, lists (loaded back safely)."""
        from ..checkpoint import save_checkpoint
        self._check_open()
        if self.micro_steps % self.gradient_accumulation_steps:
            raise RuntimeError(T("save_checkpoint in the middle of gradient accumulation: the accumulated "
                                 "gradients would be lost; save after the step at the boundary"))
        return save_checkpoint(self, save_dir, tag, client_state)

    def load_checkpoint(self, load_dir, tag=None, load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False):
        """DeepSpeed's call: load ``load_dir/tag`` (default: the tag in ``load_dir/latest``),
        written at any world size and stage. Returns ``(path, client_state)``. Every rank must
        call it; on any problem every rank raises ``CheckpointError`` and nothing is loaded."""
        from ..checkpoint import load_checkpoint
        self._check_open()
        return load_checkpoint(self, load_dir, tag, load_optimizer_states, load_module_only,
                               load_lr_scheduler_states=load_lr_scheduler_states)

    # -- what DeepSpeed scripts call on their engine -------------------------------------
    def get_lr(self) -> list[float]:
        """The lr of each optimizer param group now (what the next step uses), as DeepSpeed's."""
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def zero_optimization_stage(self) -> int:
        return self.config.zero.stage

    def train_micro_batch_size_per_gpu(self) -> int:
        return self.config.train_micro_batch_size_per_gpu

    def train_batch_size(self) -> int:
        return self.config.train_batch_size

    def set_gradient_accumulation_boundary(self, is_boundary: bool | None) -> None:
        """DeepSpeed's override of the boundary test: True makes the next ``step()`` update the
        parameters whatever the micro-step count (the loss is still divided by
        gradient_accumulation_steps); None gives the boundary back to the count."""
        self._boundary = is_boundary

    # -- looking inside ----------------------------------------------------------------
    def stage3_stats(self):
        """Stage 3's counts (a :class:`~zerolab.zero.stage3.lifecycle.Stage3Stats`): partitions gathered and
        prefetched so far, releases the reuse distance skipped, the most elements gathered at once
        since :meth:`reset_peaks`, the partitions (label, padded elements, persistent) and the
        trace's mode. At stages 0-2 nothing is gathered: zeros, and the layout "replicated"."""
        return self.stage.params.stats()

    def reset_peaks(self) -> None:
        """Count the most elements gathered at once (stage 3) and the peak of live buffers anew."""
        self.stage.params.reset_peaks()

    def observe_stage3(self, observer) -> None:
        """Tell ``observer`` (``on_gather(label, phase)``, ``on_release(label, phase)``) every stage-3
        gather and release, until :meth:`forget_stage3`."""
        self.stage.params.observe(observer)

    def forget_stage3(self, observer) -> None:
        self.stage.params.forget(observer)

    def full_params(self) -> dict[str, torch.Tensor]:
        """Every named parameter's full fp32 value (trained ones from the fp32 masters), the
        same on every rank: what DeepSpeed's zero_to_fp32 gives. A tied parameter appears
        once, under its first name."""
        values = self.stage.full_params()
        untrained = self.stage.untrained_values()   # (stage 3 partitions them too: gathered here)
        return {name: values[name] if name in values else untrained[name].float()
                for name, _ in self.module.named_parameters()}

    def optimizer_state_bytes(self) -> int:
        """Bytes of the optimizer's side held in memory (device or host): its state tensors,
        plus the fp32 masters when they are copies (mixed precision, offload)."""
        return self.stage.home.optimizer_bytes()

    def memory(self, where: str = "device") -> dict[str, int]:
        """Bytes this rank holds now, measured from its tensors.

        ``where="device"`` (the default): what is on the compute device (a GPU; on a machine
        without one, the CPU playing its part): ``params``, ``grads``, ``optimizer_states``
        (optimizer state + fp32 masters when they are copies), ``model_states`` (their sum),
        ``buffers`` (buckets and gathered parameters alive now), ``peak_buffers`` (the most seen
        at once), ``model_buffers`` (e.g. BatchNorm stats); with hpZ (``zero_hpz_partition_size``),
        ``params_secondary``: the secondary shards alive now, counted in ``params`` too.
        ``where="host"`` / ``"nvme"``: what offload put in host memory / in files, under the
        same keys (``buffers``: NVMe swap buffers alive now, ``peak_buffers`` their most)."""
        if where not in tuple(Place):
            raise ValueError(T("memory(where): 'device', 'host' or 'nvme', not {where}", where=repr(where)))
        where = Place(where)
        placed = self.stage.memory().get(where, {})
        keys = ("params", "grads", "optimizer_states", "buffers") + (() if where is Place.DEVICE else ("peak_buffers",))
        m = {k: placed.get(k, 0) for k in keys}
        if "params_secondary" in placed:          # stage 3 with hpZ: of "params", the secondary shards
            m["params_secondary"] = placed["params_secondary"]
        m["model_states"] = m["params"] + m["grads"] + m["optimizer_states"]
        if where is not Place.DEVICE:
            return m
        m["peak_buffers"] = self.stage.peak_buffer_bytes
        m["model_buffers"] = tensor_bytes(self.module.buffers())
        if self.device.type == "cuda":
            m["cuda_allocated"] = torch.cuda.memory_allocated(self.device)
            m["cuda_peak"] = torch.cuda.max_memory_allocated(self.device)
        return m

    def switches(self) -> dict[str, str]:
        """This engine's stage as three independent choices, each with the class (and module)
        that makes it: how gradients are reduced, where parameters live, where optimizer states
        live (``stage.py`` has the table for every stage)."""
        return self.stage.describe()

    def __repr__(self) -> str:
        return (f"Engine(stage={self.config.zero.stage}, world_size={self.comm.world_size}, "
                f"dtype={str(self.dtype).replace('torch.', '')}, groups={len(self.stage.groups)})")


class _CallableInt(int):
    """``engine.gradient_accumulation_steps`` is an int (zerolab's property) and, called, returns
    itself (DeepSpeed's method)."""

    def __call__(self) -> int:
        return int(self)
