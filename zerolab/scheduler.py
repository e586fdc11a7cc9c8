"""DeepSpeed's learning-rate schedulers (the config's ``scheduler`` block), with DeepSpeed 0.19.8's formulas.

    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"total_num_steps": 1000, "warmup_max_lr": 3e-4, "warmup_num_steps": 100}}

The engine builds the scheduler from that block (or takes ``lr_scheduler=`` from the caller: a
scheduler, or a callable that gets the optimizer) and steps it once per accumulation boundary,
*after* the optimizer step, and only if that step was not skipped (an fp16 overflow does not
advance the schedule), as DeepSpeed's engine does. So optimizer step ``k`` (counting from 0) runs
with the lr the scheduler set after ``k`` steps of its own; the first step runs with what the
constructor set: ``warmup_min_lr`` for WarmupLR / WarmupDecayLR (and, since ``log(1) = 0``, the
second step too), 0 for WarmupCosineLR, ``cycle_min_lr`` for OneCycle.

The classes below are DeepSpeed's, same names, same parameters and defaults, same quirks:

* ``WarmupLR``: ``lr = min + (max - min) * gamma``; during the first ``warmup_num_steps``
  (at least 2) ``gamma = log(i + 1) / log(warmup_num_steps)`` ("log", the default) or
  ``i / warmup_num_steps`` ("linear"), then 1. ``warmup_max_lr`` defaults to the optimizer's lr.
  An unknown ``warmup_type`` falls back to "log" with a warning.
* ``WarmupDecayLR``: the same warmup (``warmup_max_lr`` default 0.001), then linear decay
  ``(total_num_steps - i) / max(1, total_num_steps - warmup_num_steps)``, floored at 0.
* ``WarmupCosineLR``: a *ratio* of the optimizer's lr: warmup from ``warmup_min_ratio`` to 1,
  then ``cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * progress)) / 2``.
* ``OneCycle``: lr from ``cycle_min_lr`` up to ``cycle_max_lr`` in ``cycle_first_step_size``
  steps and back down in ``cycle_second_step_size``, optionally in stairs, then
  ``cycle_min_lr / (1 + decay_lr_rate * j / decay_step_size)``. With an optimizer that has betas
  (Adam, AdamW) it also cycles beta1 inversely between ``cycle_min_mom`` and ``cycle_max_mom``,
  and *sets beta2 to 0.99* (DeepSpeed's hard-coded value); in the decay phase beta1 is
  ``cycle_max_mom * (1 + decay_mom_rate * j / decay_step_size)``, which grows.
* ``LRRangeTest``: ``lr_range_test_min_lr * (1 + step_rate * interval)``.

Any ``torch.optim.lr_scheduler`` class name works too (``"StepLR"`` with its arguments as
params), as in DeepSpeed. tests/test_scheduler.py checks every class against sequences dumped
from DeepSpeed 0.19.8 itself (tests/data/ds_scheduler_traces.json).
"""
from __future__ import annotations

import inspect
import math
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# torch is imported where a scheduler meets an optimizer, not here: the config parser reads these
# classes' signatures, and the command line's config commands need no torch.

__all__ = ["LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "SCHEDULERS",
           "build_scheduler", "scheduler_signature"]

WARMUP_LOG_RATE, WARMUP_LINEAR_RATE = "log", "linear"


def _torch_optimizer(optimizer) -> torch.optim.Optimizer:
    import torch
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    inner = getattr(optimizer, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer):
        return inner
    raise TypeError(f"{type(optimizer).__name__} is not a subclass of torch.optim.Optimizer")


def _per_group(optimizer, value, name: str) -> list:
    """A scalar for every param group, or a list with one value per group."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"expected {len(optimizer.param_groups)} value for {name}, got {len(value)}")
        return list(value)
    return [value] * len(optimizer.param_groups)


def _update_lr(param_groups, lrs) -> list:
    import torch
    for group, lr in zip(param_groups, lrs):
        if torch.is_tensor(group["lr"]):
            group["lr"].fill_(lr.squeeze() if torch.is_tensor(lr) else lr)
        else:
            group["lr"] = lr
    return [group["lr"] for group in param_groups]


def _check_warmup_type(warmup_type: str) -> str:
    if warmup_type not in (WARMUP_LOG_RATE, WARMUP_LINEAR_RATE):
        warnings.warn(f"Using unknown warmup_type: {warmup_type}. The increasing function is set to default (log)",
                      stacklevel=3)
        return WARMUP_LOG_RATE
    return warmup_type


class _Schedule:
    """What every DeepSpeed scheduler has: ``step``, ``get_last_lr``, ``state_dict``."""
    last_batch_iteration: int
    optimizer: torch.optim.Optimizer

    def get_lr(self) -> list:
        raise NotImplementedError

    def get_last_lr(self) -> list:
        assert getattr(self, "_last_lr", None) is not None, "need to call step() first"
        return self._last_lr

    def step(self, last_batch_iteration: int | None = None) -> None:
        if last_batch_iteration is None:
            last_batch_iteration = self.last_batch_iteration + 1
        self.last_batch_iteration = last_batch_iteration
        self._last_lr = _update_lr(self.optimizer.param_groups, self.get_lr())

    def state_dict(self) -> dict:
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, sd: dict) -> None:
        self.last_batch_iteration = sd["last_batch_iteration"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_batch_iteration={self.last_batch_iteration})"


class LRRangeTest(_Schedule):
    def __init__(self, optimizer, lr_range_test_min_lr: float = 1e-3, lr_range_test_step_size: int = 2000,
                 lr_range_test_step_rate: float = 1.0, lr_range_test_staircase: bool = False,
                 last_batch_iteration: int = -1):
        self.optimizer = _torch_optimizer(optimizer)
        self.min_lr = _per_group(self.optimizer, lr_range_test_min_lr, "lr_range_test_min_lr")
        if isinstance(lr_range_test_step_size, bool) or not isinstance(lr_range_test_step_size, int) \
                or lr_range_test_step_size <= 0:
            raise ValueError(f"lr_range_test_step_size must be a positive integer, got {lr_range_test_step_size}")
        self.step_size = lr_range_test_step_size
        self.step_rate = lr_range_test_step_rate
        self.staircase = lr_range_test_staircase
        self.last_batch_iteration = last_batch_iteration
        if last_batch_iteration == -1:
            self._last_lr = _update_lr(self.optimizer.param_groups, self.min_lr)

    def _interval(self) -> float:
        x = float(self.last_batch_iteration + 1) / self.step_size
        return math.floor(x) if self.staircase else x

    def get_lr(self) -> list:
        increase = 1 + self.step_rate * self._interval()
        return [lr * increase for lr in self.min_lr]


class OneCycle(_Schedule):
    def __init__(self, optimizer, cycle_min_lr, cycle_max_lr, decay_lr_rate: float = 0.,
                 cycle_first_step_size: int = 2000, cycle_second_step_size: int | None = None,
                 cycle_first_stair_count: int = 0, cycle_second_stair_count: int | None = None,
                 decay_step_size: int = 0, cycle_momentum: bool = True, cycle_min_mom: float = 0.8,
                 cycle_max_mom: float = 0.9, decay_mom_rate: float = 0., last_batch_iteration: int = -1):
        self.optimizer = opt = _torch_optimizer(optimizer)
        first = float(cycle_first_step_size)
        second = float(cycle_second_step_size) if cycle_second_step_size is not None else first
        if first <= 0:
            raise ValueError(f"cycle_first_step_size must be positive, got {first}")
        if second < 0:
            raise ValueError(f"cycle_second_step_size must be non-negative, got {second}")
        self.total_size = first + second
        self.step_ratio = first / self.total_size
        self.first_step_size, self.second_step_size = first, second
        self.first_stair_count = cycle_first_stair_count
        self.second_stair_count = cycle_first_stair_count if cycle_second_stair_count is None \
            else cycle_second_stair_count
        self.decay_step_size = decay_step_size
        self.skip_lr_decay = self.skip_mom_decay = math.isclose(decay_step_size, 0)
        # learning rate
        self.min_lrs = _per_group(opt, cycle_min_lr, "cycle_min_lr")
        self.max_lrs = _per_group(opt, cycle_max_lr, "cycle_max_lr")
        if last_batch_iteration == -1:
            _update_lr(opt.param_groups, self.min_lrs)
        self.decay_lr_rate = decay_lr_rate
        if math.isclose(decay_lr_rate, 0):
            self.skip_lr_decay = True
        # momentum (Adam's beta1), only for optimizers with betas
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "betas" not in opt.defaults:
                warnings.warn(f"cycle_momentum is disabled because optimizer {type(opt).__name__} does not "
                              "support momentum, no betas attribute in defaults", stacklevel=2)
                self.cycle_momentum = False
            else:
                self.decay_mom_rate = decay_mom_rate
                self.min_moms = [(m, 0.99) for m in _per_group(opt, cycle_min_mom, "cycle_min_mom")]
                self.max_moms = [(m, 0.99) for m in _per_group(opt, cycle_max_mom, "cycle_max_mom")]
                if last_batch_iteration == -1:
                    for mom, group in zip(self.min_moms, opt.param_groups):
                        group["betas"] = mom
                if math.isclose(decay_mom_rate, 0):
                    self.skip_mom_decay = True
        self.last_batch_iteration = last_batch_iteration

    def _scale_factor(self) -> float:
        it = self.last_batch_iteration + 1
        cycle = math.floor(1 + it / self.total_size)
        x = 1. + it / self.total_size - cycle
        if x <= self.step_ratio:
            scale, stairs = x / self.step_ratio, self.first_stair_count
        else:
            scale, stairs = (x - 1) / (self.step_ratio - 1), self.second_stair_count
        if stairs > 0:
            ci = it % self.total_size
            pos = (ci * stairs / self.first_step_size if ci <= self.first_step_size
                   else (self.total_size - ci) * stairs / self.second_step_size)
            scale = math.floor(pos) / stairs
        return scale

    def get_lr(self) -> list:
        if self.last_batch_iteration < self.total_size:
            s = self._scale_factor()
            return [lo + (hi - lo) * s for lo, hi in zip(self.min_lrs, self.max_lrs)]
        if self.skip_lr_decay:
            return self.min_lrs
        j = self.last_batch_iteration - self.total_size + 1
        factor = 1 + self.decay_lr_rate * (j / self.decay_step_size)
        return [lo / factor for lo in self.min_lrs]

    def get_mom(self) -> list | None:
        if not self.cycle_momentum:
            return None
        if self.last_batch_iteration < self.total_size:
            s = self._scale_factor()
            return [(hi[0] - (hi[0] - lo[0]) * s, lo[1]) for lo, hi in zip(self.min_moms, self.max_moms)]
        if self.skip_mom_decay:
            return self.max_moms
        j = self.last_batch_iteration - self.total_size + 1
        factor = 1 + self.decay_mom_rate * (j / self.decay_step_size)
        return [(b0 * factor, b1) for b0, b1 in self.max_moms]

    def step(self, batch_iteration: int | None = None) -> None:
        super().step(batch_iteration)
        if self.cycle_momentum:
            for group, mom in zip(self.optimizer.param_groups, self.get_mom()):
                group["betas"] = mom


class WarmupLR(_Schedule):
    def __init__(self, optimizer, warmup_min_lr: float = 0.0, warmup_max_lr: float | None = None,
                 warmup_num_steps: int = 1000, warmup_type: str = WARMUP_LOG_RATE, last_batch_iteration: int = -1):
        if isinstance(warmup_num_steps, bool) or not isinstance(warmup_num_steps, int) or warmup_num_steps <= 0:
            raise ValueError(f"warmup_num_steps must be a positive integer, got {warmup_num_steps}")
        self.optimizer = _torch_optimizer(optimizer)
        if warmup_max_lr is None:
            warmup_max_lr = [group["lr"] for group in self.optimizer.param_groups]
        self.min_lrs = _per_group(self.optimizer, warmup_min_lr, "min_lr")
        self.max_lrs = _per_group(self.optimizer, warmup_max_lr, "max_lr")
        self.delta_lrs = [hi - lo for hi, lo in zip(self.max_lrs, self.min_lrs)]
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.warmup_type = _check_warmup_type(warmup_type)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.last_batch_iteration = last_batch_iteration
        if last_batch_iteration == -1:
            self._last_lr = _update_lr(self.optimizer.param_groups, self.get_lr())

    def get_lr(self) -> list:
        if self.last_batch_iteration < 0:
            return self.min_lrs
        gamma = self._get_gamma()
        return [lo + d * gamma for lo, d in zip(self.min_lrs, self.delta_lrs)]

    def _warmup_gamma(self) -> float:
        if self.warmup_type == WARMUP_LOG_RATE:
            return self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
        return self.last_batch_iteration / self.warmup_num_steps

    def _get_gamma(self) -> float:
        return self._warmup_gamma() if self.last_batch_iteration < self.warmup_num_steps else 1.0


class WarmupDecayLR(WarmupLR):
    def __init__(self, optimizer, total_num_steps: int, warmup_min_lr: float = 0.0, warmup_max_lr: float = 0.001,
                 warmup_num_steps: int = 1000, warmup_type: str = WARMUP_LOG_RATE, last_batch_iteration: int = -1):
        self.total_num_steps = total_num_steps
        super().__init__(optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, last_batch_iteration)
        if self.total_num_steps < self.warmup_num_steps:
            warnings.warn(f"total_num_steps {total_num_steps} is less than warmup_num_steps {warmup_num_steps}",
                          stacklevel=2)

    def _get_gamma(self) -> float:
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_gamma()
        return max(0.0, float(self.total_num_steps - self.last_batch_iteration) /
                   float(max(1.0, self.total_num_steps - self.warmup_num_steps)))


class WarmupCosineLR(_Schedule):
    def __init__(self, optimizer, total_num_steps: int, warmup_min_ratio: float = 0.0, warmup_num_steps: int = 1000,
                 cos_min_ratio: float = 0.0001, warmup_type: str = WARMUP_LOG_RATE, last_batch_iteration: int = -1):
        if isinstance(warmup_num_steps, bool) or not isinstance(warmup_num_steps, int) or warmup_num_steps <= 0:
            raise ValueError(f"warmup_num_steps must be a positive integer, got {warmup_num_steps}")
        self.optimizer = _torch_optimizer(optimizer)
        self.total_num_steps = total_num_steps
        self.last_batch_iteration = last_batch_iteration
        self.cos_min_ratio = cos_min_ratio
        self.warmup_type = _check_warmup_type(warmup_type)
        self.warmup_min_ratio = warmup_min_ratio
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        if self.total_num_steps < self.warmup_num_steps:
            warnings.warn(f"total_num_steps {total_num_steps} is less than warmup_num_steps {warmup_num_steps}",
                          stacklevel=2)
        import torch
        self.org_lrs = [g["lr"].clone() if torch.is_tensor(g["lr"]) else g["lr"] for g in self.optimizer.param_groups]
        if last_batch_iteration == -1:
            self._last_lr = _update_lr(self.optimizer.param_groups, self.get_lr())

    def get_lr_ratio(self) -> float:
        if self.last_batch_iteration < 0:
            return 0.0
        if self.last_batch_iteration < self.warmup_num_steps:
            if self.warmup_type == WARMUP_LOG_RATE:
                ratio = self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
            else:
                ratio = self.last_batch_iteration / self.warmup_num_steps
            return self.warmup_min_ratio + ratio * (1. - self.warmup_min_ratio)
        real_last_step = self.last_batch_iteration - self.warmup_num_steps + 1
        real_total_steps = max(1, self.total_num_steps - self.warmup_num_steps)
        progress = min(1.0, real_last_step / real_total_steps)
        ratio = (1 + math.cos(math.pi * progress)) / 2
        return max(0.0, self.cos_min_ratio + (1. - self.cos_min_ratio) * ratio)

    def get_lr(self) -> list:
        if self.last_batch_iteration < 0:
            return [0.0 for _ in self.org_lrs]
        r = self.get_lr_ratio()
        return [lr * r for lr in self.org_lrs]


SCHEDULERS = {c.__name__: c for c in (LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR)}


def scheduler_class(name: str):
    """DeepSpeed's lookup: its own schedulers first, then ``torch.optim.lr_scheduler``; None if neither."""
    if name in SCHEDULERS:
        return SCHEDULERS[name]
    import torch
    cls = getattr(torch.optim.lr_scheduler, name, None)
    if isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler) \
            and cls is not torch.optim.lr_scheduler.LRScheduler:
        return cls
    return None


def scheduler_signature(name: str) -> tuple[dict[str, Any], set[str]] | None:
    """``({param: default}, {required params})`` of the scheduler ``name`` (without the optimizer
    and ``last_batch_iteration`` / ``last_epoch``, which the engine owns), or None if unknown."""
    cls = scheduler_class(name)
    if cls is None:
        return None
    params, required = {}, set()
    for i, (n, p) in enumerate(inspect.signature(cls.__init__).parameters.items()):
        if i < 2 or n in ("last_batch_iteration", "last_epoch", "verbose") or p.kind in (p.VAR_POSITIONAL,
                                                                                          p.VAR_KEYWORD):
            continue
        params[n] = None if p.default is inspect.Parameter.empty else p.default
        if p.default is inspect.Parameter.empty:
            required.add(n)
    return params, required


def build_scheduler(config, optimizer, lr_scheduler=None):
    """The engine's scheduler: ``lr_scheduler`` if given (a scheduler, or a callable that takes the
    optimizer and returns one, as DeepSpeed accepts), else the config's ``scheduler`` block
    (:class:`zerolab.config.SchedulerConfig`), else None."""
    if lr_scheduler is not None:
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            return lr_scheduler(optimizer)
        if getattr(lr_scheduler, "optimizer", optimizer) is not optimizer:
            # built on the caller's optimizer; the engine steps its own, over the shards (whose
            # hyperparameters, the lr the scheduler set included, were copied from the caller's)
            lr_scheduler.optimizer = optimizer
        return lr_scheduler
    if config is None:
        return None
    cls = scheduler_class(config.type)
    if cls is None:                         # the config reader refuses it first; kept for a hand-made Config
        raise ValueError(f"unknown scheduler type {config.type!r}")
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.params.items()}
    return cls(optimizer, **params)
