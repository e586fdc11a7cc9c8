"""Loss scaling for fp16 training: the static and the dynamic scaler, as DeepSpeed 0.19.8 has them.

fp16 cannot hold gradients smaller than 2**-24: they round to zero. Multiplying the loss by a
scale S multiplies every gradient by S (the chain rule), which lifts the small ones into range;
the optimizer divides by S again before it uses them. Too large an S and a gradient overflows to
inf: that step is skipped and S is lowered.

Two scalers, chosen from the config's ``fp16`` block by :func:`make_loss_scaler`:

- :class:`LossScaler`, a fixed scale: 1.0 for bf16 and fp32 (they need none), or
  ``fp16.loss_scale`` when it is > 0.
- :class:`DynamicLossScaler` (``fp16.loss_scale == 0``, the default), whose rule for one
  ``update_scale(overflow)`` call per optimizer step is:

  * overflow, and the hysteresis is used up (``delayed_shift == 1`` or ``cur_hysteresis == 1``):
    the scale is halved, but not below ``min_scale``; if it already *is* ``min_scale``,
    :class:`LossScaleAtMinimum` is raised (the run cannot go on).
  * overflow, with hysteresis left: ``cur_hysteresis`` goes down by one, the scale stays.
  * either way an overflow restarts the clean-step count (``last_overflow_iter = cur_iter``).
  * a clean step: with ``consecutive_hysteresis`` the hysteresis is refilled to ``delayed_shift``.
    Then, with ``stable = cur_iter - last_overflow_iter - 1`` (clean steps before this one since
    the last overflow), if ``stable > 0`` and ``stable % scale_window == 0`` the scale doubles
    (and, without ``consecutive_hysteresis``, the hysteresis is refilled). So the doubling comes
    on the (window + 1)-th clean step in a row: with a window of 1000 and no overflow, at the
    update of iteration 1000 (iterations 0-1000 all ran at the first scale); after an overflow at
    iteration k, at k + 1001; then every 1000 clean steps more (k + 2001, ...).
  * ``cur_iter`` goes up by one.

Quirks kept on purpose, because DeepSpeed has them (``tests/data/ds_loss_scaler_traces.json``
records each from DeepSpeed itself):

- the hysteresis is not refilled when the scale is cut, only at a growth (or every clean step
  with ``consecutive_hysteresis``);
- a hysteresis of 0 or less (DeepSpeed's config accepts it) means the scale never drops;
- a start below ``min_scale`` (say ``initial_scale_power`` -2 with ``min_loss_scale`` 1) is
  *raised* to ``min_scale`` by the first overflow that cuts it.

The overflow test itself (:func:`has_inf_or_nan`) is local to one rank; the engine combines the
ranks' answers with an all-reduce(MAX), so that every rank skips the same steps.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..config.keys import FP16 as _FP16
from ..i18n import catalogue

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["LossScaler", "DynamicLossScaler", "LossScaleAtMinimum", "make_loss_scaler", "has_inf_or_nan",
           "FP16_DEFAULTS"]

# DeepSpeed's documented fp16 defaults, which 0.19.8 also uses in code when the block names no key:
# declared once, with what each means, in zerolab.config.keys (FP16).
FP16_DEFAULTS = {k: _FP16[k].default for k in ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                                             "consecutive_hysteresis", "min_loss_scale")}


class LossScaleAtMinimum(RuntimeError):
    """The gradients overflowed although the loss scale is already at its minimum."""

    def __init__(self, scale: float, iteration: int):
        self.scale, self.iteration = scale, iteration
        super().__init__(T(
            "iteration {iteration}: the gradients overflowed (inf/NaN) and the loss scale is already at its "
            "minimum, {scale}, so it cannot be lowered any further; stopping the run, as DeepSpeed does. "
            "Inf/NaN even at this scale usually means the model itself diverged (learning rate too high, a bad "
            "batch, an operation that overflows fp16), not that the scale is too big. Lower fp16.min_loss_scale "
            "only if you know the scale is the problem; bf16 avoids loss scaling altogether.",
            iteration=iteration, scale=_fmt(scale)))


def _fmt(x: float) -> str:
    """65536 rather than 65536.0; 0.25 stays 0.25."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2 ** 63 else repr(x)


class LossScaler:
    """A fixed loss scale. ``update_scale`` never changes it.

    On an overflow it still returns a line to log (the step is skipped all the same, as in
    DeepSpeed, whose ZeRO optimizers test fp16 gradients for inf/NaN whatever the scaler is).
    """

    dynamic = False

    def __init__(self, scale: float = 1.0):
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(T("a loss scale must be a finite number > 0, got {scale}", scale=repr(scale)))
        self.cur_scale = scale
        self.history: list[tuple[int, float, bool]] = []   # (iteration, scale after update, overflow)

    @property
    def loss_scale(self) -> float:
        return self.cur_scale

    def update_scale(self, overflow: bool) -> str | None:
        overflow = bool(overflow)
        self.history.append((len(self.history), self.cur_scale, overflow))
        if overflow:
            return T("overflow: skipping step, loss scale stays {scale} (static)", scale=_fmt(self.cur_scale))
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"cur_scale": self.cur_scale}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scale={_fmt(self.cur_scale)})"


class DynamicLossScaler(LossScaler):
    """The loss scale that follows the gradients: down on overflow, up after a clean window.

    Arguments are named as in DeepSpeed's class; the config keys that feed them are
    ``2**initial_scale_power``, ``loss_scale_window``, ``min_loss_scale``, ``hysteresis`` (this is
    ``delayed_shift``) and ``consecutive_hysteresis``. The rule is in the module docstring.
    """

    dynamic = True

    def __init__(self, init_scale: float = 2.0 ** 16, scale_factor: float = 2.0, scale_window: int = 1000,
                 min_scale: float = 1.0, delayed_shift: int = 2, consecutive_hysteresis: bool = False,
                 raise_error_at_min_scale: bool = True):
        super().__init__(init_scale)
        # DeepSpeed rejects these at config time (window 0 would divide by zero in the rule)
        if isinstance(scale_window, bool) or int(scale_window) != scale_window or scale_window <= 0:
            raise ValueError(T("scale_window (fp16.loss_scale_window) must be an integer > 0, got {value}",
                               value=repr(scale_window)))
        if not (math.isfinite(min_scale) and min_scale > 0):
            raise ValueError(T("min_scale (fp16.min_loss_scale) must be a finite number > 0, got {value}",
                               value=repr(min_scale)))
        if not (math.isfinite(scale_factor) and scale_factor > 1):
            raise ValueError(T("scale_factor must be a finite number > 1, got {value}", value=repr(scale_factor)))
        self.scale_factor = float(scale_factor)   # multiply/divide by this (DeepSpeed: always 2)
        self.scale_window = int(scale_window)     # clean steps between two doublings
        self.min_scale = float(min_scale)         # the floor; an overflow here raises
        self.delayed_shift = int(delayed_shift)   # overflows tolerated before a cut (config: hysteresis)
        self.consecutive_hysteresis = bool(consecutive_hysteresis)  # refill on every clean step
        self.raise_error_at_min_scale = bool(raise_error_at_min_scale)
        self.cur_iter = 0                          # update_scale calls so far (= optimizer steps taken or skipped)
        self.last_overflow_iter = -1               # iteration of the last overflow; -1: none yet
        self.cur_hysteresis = self.delayed_shift   # overflows still tolerated before the next cut

    def update_scale(self, overflow: bool) -> str | None:
        overflow = bool(overflow)
        old, it = self.cur_scale, self.cur_iter
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale and self.raise_error_at_min_scale:
                    raise LossScaleAtMinimum(self.cur_scale, it)   # nothing is changed
                self.cur_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
                msg = T("overflow: skipping step, loss scale {old} -> {new}", old=_fmt(old), new=_fmt(self.cur_scale))
            else:
                self.cur_hysteresis -= 1
                h = self.cur_hysteresis
                if h == 1:
                    left = T("the next overflow lowers it")
                elif h > 1:
                    left = T("it takes {h} more overflows to lower it", h=h)
                else:
                    left = T("a hysteresis below 1 never runs out: it will not drop")
                msg = T("overflow: skipping step, loss scale stays {scale} (hysteresis {was} -> {h}: {left})",
                        scale=_fmt(old), was=h + 1, h=h, left=left)
            self.last_overflow_iter = it
        else:
            msgs = []
            if self.consecutive_hysteresis and self.cur_hysteresis != self.delayed_shift:
                msgs.append(T("clean step: hysteresis refilled {was} -> {now}", was=self.cur_hysteresis,
                              now=self.delayed_shift))
                self.cur_hysteresis = self.delayed_shift
            stable = it - self.last_overflow_iter - 1
            if stable > 0 and stable % self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale = self.cur_scale * self.scale_factor
                msgs = [T("no overflow for {window} steps: loss scale {old} -> {new}", window=self.scale_window,
                          old=_fmt(old), new=_fmt(self.cur_scale))]
            msg = "; ".join(msgs) or None
        self.history.append((it, self.cur_scale, overflow))
        self.cur_iter += 1
        return msg

    def state_dict(self) -> dict[str, Any]:
        keys = ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis", "scale_factor", "scale_window",
                "min_scale", "delayed_shift", "consecutive_hysteresis", "raise_error_at_min_scale")
        return {k: getattr(self, k) for k in keys}

    def __repr__(self) -> str:
        return (f"DynamicLossScaler(scale={_fmt(self.cur_scale)}, iter={self.cur_iter}, "
                f"hysteresis={self.cur_hysteresis}/{self.delayed_shift}, window={self.scale_window}, "
                f"min={_fmt(self.min_scale)}, consecutive_hysteresis={self.consecutive_hysteresis})")


def _get(block: Any, key: str) -> Any:
    if isinstance(block, Mapping):
        value = block.get(key)
    else:
        value = getattr(block, key, None)
    return FP16_DEFAULTS[key] if value is None else value


def make_loss_scaler(fp16: Any = None) -> LossScaler:
    """The scaler DeepSpeed's ZeRO optimizers build for this ``fp16`` config block.

    ``fp16`` is any object with the block's fields as attributes (zerolab's ``FP16Config``) or a
    dict (the JSON block). ``None`` or ``enabled`` false (bf16 and fp32 training) gives
    ``LossScaler(1.0)``; ``loss_scale > 0`` a static ``LossScaler(loss_scale)``; ``loss_scale == 0``
    a :class:`DynamicLossScaler` from the block, every key missing taking DeepSpeed's documented
    default (2**16, window 1000, hysteresis 2, not consecutive, minimum 1), as 0.19.8 does.
    """
    if fp16 is None or not (fp16.get("enabled", False) if isinstance(fp16, Mapping)
                            else getattr(fp16, "enabled", False)):
        return LossScaler(1.0)
    loss_scale = float(_get(fp16, "loss_scale"))
    if not math.isfinite(loss_scale) or loss_scale < 0:
        raise ValueError(T("fp16.loss_scale must be >= 0 (0 = dynamic), got {value}", value=repr(loss_scale)))
    if loss_scale > 0:
        return LossScaler(loss_scale)
    return DynamicLossScaler(init_scale=2.0 ** _get(fp16, "initial_scale_power"),
                             scale_window=_get(fp16, "loss_scale_window"),
                             min_scale=_get(fp16, "min_loss_scale"),
                             delayed_shift=_get(fp16, "hysteresis"),
                             consecutive_hysteresis=_get(fp16, "consecutive_hysteresis"))


def has_inf_or_nan(tensors: torch.Tensor | Iterable[torch.Tensor | None]) -> bool:
    """Whether any of these tensors (``None`` entries skipped) holds an inf or a NaN. Local to this rank.

    Like DeepSpeed 0.19.8 it reduces each tensor to its max and min and tests those two numbers
    (a NaN survives max, +inf shows in max, -inf in min), so no fp32 copy or mask of the whole
    gradient is made; the flags stay on the device and are read once, at the end.
    """
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    flags = []
    for t in tensors:
        if t is None:
            continue
        if t.is_sparse:
            t = t.coalesce().values()
        if t.numel() == 0:
            continue
        flags.append(~(torch.isfinite(t.amax()) & torch.isfinite(t.amin())))
    if not flags:
        return False
    if len(flags) == 1:
        return bool(flags[0])
    return bool(torch.stack([f.to(flags[0].device) for f in flags]).any())
