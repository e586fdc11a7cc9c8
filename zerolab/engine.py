"""The engine: ``zerolab.initialize(model, config)``, in the spirit of ``deepspeed.initialize``.

    engine = zerolab.initialize(model, ds_config)
    for batch in data:
        loss = loss_fn(engine(batch.x), batch.y)
        engine.backward(loss)       # scales the loss (1/gradient_accumulation_steps, loss scale)
        engine.step()               # steps the optimizer only at the accumulation boundary

The engine owns what does not depend on where tensors live: the loss scale and the overflow
check, gradient clipping (the norm is summed over every rank's shard), the optimizer, and
the counters. The stage object (``stage0.py`` .. ``stage3.py``) owns where parameters,
gradients and optimizer states live and which collectives move them.
"""
from __future__ import annotations

import math
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import crew
from .comm import Comm, Ledger
from .config import Config, load_config
from .loss_scaler import make_loss_scaler
from .memory import tensor_bytes
from .optim import build_optimizer
from .stage0 import Stage0
from .stage1 import Stage1
from .stage2 import Stage2
from .stage3 import Stage3

__all__ = ["initialize", "Engine"]

STAGES = {0: Stage0, 1: Stage1, 2: Stage2, 3: Stage3}
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def initialize(model: nn.Module, config, optimizer=None) -> "Engine":
    """Wrap ``model`` in a ZeRO engine configured by a DeepSpeed config (dict or JSON path)."""
    return Engine(model, config, optimizer)


def _current_device() -> torch.device:
    try:
        return crew.rank_info().device
    except RuntimeError:
        return torch.device("cpu")


class Engine:
    def __init__(self, model: nn.Module, config, optimizer=None):
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("zerolab.initialize needs a torch.distributed process group: call it "
                               "inside a function run by zerolab.launch / Crew.run, or under torchrun")
        self.comm = Comm()                       # its ledger records every collective we issue
        self.config: Config = load_config(config, self.comm.world_size)
        zero = self.config.zero
        if zero.offload_optimizer.device != "none" or zero.offload_param.device != "none":
            raise NotImplementedError("offload is not implemented yet in zerolab")
        self.device = _current_device()
        self.dtype = self.config.compute_dtype
        self.module = model.to(device=self.device, dtype=self.dtype)
        cdt = self.config.communication_data_type
        self.comm_dtype = _DTYPES[cdt] if cdt else self.dtype
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("the model has no trainable parameters")
        self._sync_untrained_state(named)
        self.stage = STAGES[zero.stage](model, named, self.comm, zero, self.dtype, self.comm_dtype,
                                        self.device)
        self.optimizer = build_optimizer(optimizer, self.config.optimizer, self.stage.masters,
                                         self.config.zero_allow_untested_optimizer)
        self.scaler = make_loss_scaler(self.config.fp16 if self.config.fp16.enabled else None)
        self.micro_steps = 0      # backward/step calls so far
        self.global_steps = 0     # accumulation boundaries reached (skipped steps included, as DeepSpeed)
        self.skipped_steps = 0    # boundaries whose step was skipped because of an fp16 overflow
        self.last_grad_norm: float | None = None   # unscaled global norm of the last step
        self.log: list[str] = []  # readable lines: overflows, scale changes

    # -- set-up -----------------------------------------------------------------------
    def _sync_untrained_state(self, named) -> None:
        """Frozen parameters and module buffers start equal on every rank (rank 0's)."""
        trainable = {id(p) for _, p in named}
        with self.comm.ledger.paused():
            for p in self.module.parameters():
                if id(p) not in trainable:
                    self.comm.broadcast(p.data, 0)
            for b in self.module.buffers():
                self.comm.broadcast(b.data, 0)

    # -- the training step -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def train(self, mode: bool = True) -> "Engine":
        self.module.train(mode)
        return self

    def eval(self) -> "Engine":
        return self.train(False)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.config.gradient_accumulation_steps

    @property
    def loss_scale(self) -> float:
        return float(self.scaler.cur_scale)

    @property
    def ledger(self) -> Ledger:
        return self.comm.ledger

    def is_gradient_accumulation_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.gradient_accumulation_steps == 0

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of ``loss * loss_scale / gradient_accumulation_steps``."""
        factor = self.loss_scale / self.gradient_accumulation_steps
        scaled = loss * factor if factor != 1.0 else loss
        self.stage.begin_backward()
        scaled.backward()
        self.stage.end_backward()

    def step(self) -> None:
        """Count a micro-step; at the accumulation boundary, update the parameters."""
        if self.is_gradient_accumulation_boundary():
            self._optimizer_step()
        self.micro_steps += 1

    def _optimizer_step(self) -> None:
        stage, scale = self.stage, self.loss_scale
        stage.boundary_reduce()
        grads = stage.grads_for_step()
        clip = self.config.gradient_clipping
        # One small all-reduce carries both what every step needs to know from all ranks:
        # did any rank see an inf/NaN (fp16 always, bf16 unless check_grad_overflow is off),
        # and the sum of squares of every shard's gradient (for the global clipping norm).
        check = self.config.fp16.enabled or (self.config.bf16.enabled and self.config.bf16.check_grad_overflow)
        stats = torch.zeros(2, dtype=torch.float64, device=self.device)
        if check:
            stats[0] = float(any(bool(torch.isinf(g).any() or torch.isnan(g).any()) for g in grads))
        if clip > 0:
            stats[1] = sum(g.double().pow(2).sum() for g in grads)
        if check or (clip > 0 and stage.shards_optimizer):
            self.comm.all_reduce(stats, tag="overflow check + grad norm")
        overflow = bool(stats[0] > 0) or (clip > 0 and not math.isfinite(float(stats[1])))
        message = self.scaler.update_scale(overflow)
        if message:
            self._say(message)
        self.global_steps += 1
        if overflow:                              # skip: params, optimizer state untouched
            self.skipped_steps += 1
            stage.zero_grads()
            return
        combined = scale
        if clip > 0:
            norm = math.sqrt(float(stats[1])) / scale
            self.last_grad_norm = norm
            combined = scale * max(1.0, (norm + 1e-6) / clip)
        for m, g in zip(stage.masters, grads):
            m.grad = g.float() * (1.0 / combined) if combined != 1.0 else g.float().clone()
        self.optimizer.step()
        for m in stage.masters:
            m.grad = None
        stage.publish()
        stage.zero_grads()

    def _say(self, message: str) -> None:
        self.log.append(message)
        if self.comm.rank == 0:
            print(message)

    # -- looking inside ----------------------------------------------------------------
    def full_params(self) -> dict[str, torch.Tensor]:
        """Every named parameter's full fp32 value (trained ones from the fp32 masters), the
        same on every rank: what DeepSpeed's zero_to_fp32 gives. A tied parameter appears
        once, under its first name."""
        values = self.stage.full_params()
        out = {}
        for name, p in self.module.named_parameters():
            out[name] = values[name] if name in values else p.detach().float().cpu().clone()
        return out

    def optimizer_state_bytes(self) -> int:
        masters = {m.untyped_storage().data_ptr() for m in self.stage.masters}
        tensors = [v for st in self.optimizer.state.values() for v in st.values()
                   if torch.is_tensor(v) and v.untyped_storage().data_ptr() not in masters]
        return tensor_bytes(tensors)

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds now, measured from its tensors: ``params``, ``grads``,
        ``optimizer_states`` (optimizer state + fp32 masters in mixed precision),
        ``model_states`` (their sum), ``buffers`` (buckets and gathered parameters alive now),
        ``peak_buffers`` (the most seen at once), ``model_buffers`` (e.g. BatchNorm stats)."""
        m = self.stage.memory()
        m["optimizer_states"] += self.optimizer_state_bytes()
        m["model_states"] = m["params"] + m["grads"] + m["optimizer_states"]
        m["peak_buffers"] = self.stage.peak_buffer_bytes
        m["model_buffers"] = tensor_bytes(self.module.buffers())
        if self.device.type == "cuda":
            m["cuda_allocated"] = torch.cuda.memory_allocated(self.device)
            m["cuda_peak"] = torch.cuda.max_memory_allocated(self.device)
        return m

    def __repr__(self) -> str:
        return (f"Engine(stage={self.config.zero.stage}, world_size={self.comm.world_size}, "
                f"dtype={str(self.dtype).replace('torch.', '')}, groups={len(self.stage.groups)})")
