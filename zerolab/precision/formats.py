"""What fp16 and bf16 can hold, measured: the tools of the mixed-precision chapter.

A number format is a range (how large, how small) and a precision (how many mantissa bits).
fp16 has 10 mantissa bits and 5 exponent bits: fine steps, but it stops at 65504 and anything
below 2**-24 becomes 0 (between 2**-24 and 2**-14 it is "subnormal": fewer significant bits).
bf16 keeps fp32's 8 exponent bits (the same range, down to about 1e-38) with only 7 mantissa bits.
That is why fp16 needs loss scaling and bf16 does not.

Everything here measures by casting real tensors; the thresholds are there to explain the result.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from ..i18n import catalogue

__all__ = ["FP16_MAX", "FP16_MIN_NORMAL", "FP16_MIN_SUBNORMAL", "BF16_MAX", "BF16_MIN_NORMAL",
           "BF16_MIN_SUBNORMAL", "FP32_MAX", "FP32_MIN_NORMAL", "FP32_MIN_SUBNORMAL", "grad_magnitudes",
           "underflow_report", "scaler_trace", "dtype_range_table"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

_F16, _BF16, _F32 = torch.finfo(torch.float16), torch.finfo(torch.bfloat16), torch.finfo(torch.float32)

FP16_MAX = 65504.0                    # largest finite fp16; from 65520 up a cast rounds to inf
FP16_MIN_NORMAL = 2.0 ** -14          # ~6.1e-5: below it, fp16 loses significant bits
FP16_MIN_SUBNORMAL = 2.0 ** -24       # ~6.0e-8: below half of it, a cast gives exactly 0
BF16_MAX = float(_BF16.max)           # ~3.39e38
BF16_MIN_NORMAL = float(_BF16.tiny)   # 2**-126 ~1.2e-38, as fp32
BF16_MIN_SUBNORMAL = float(_BF16.smallest_normal * _BF16.eps)   # 2**-133 ~9.2e-41
FP32_MAX = float(_F32.max)
FP32_MIN_NORMAL = float(_F32.tiny)    # 2**-126
FP32_MIN_SUBNORMAL = float(_F32.smallest_normal * _F32.eps)     # 2**-149

assert FP16_MAX == _F16.max and FP16_MIN_NORMAL == _F16.tiny


def grad_magnitudes(model_or_params: torch.nn.Module | Iterable[torch.Tensor]) -> torch.Tensor:
    """|g| for every entry of every current ``.grad``, flattened into one fp32 tensor (on the CPU).

    Takes a module or an iterable of parameters; parameters whose ``.grad`` is None are skipped.
    """
    params = model_or_params.parameters() if isinstance(model_or_params, torch.nn.Module) else model_or_params
    parts = [p.grad.detach().reshape(-1).float().abs().cpu() for p in params if p.grad is not None]
    return torch.cat(parts) if parts else torch.zeros(0)


def underflow_report(values: torch.Tensor, scale: float = 1.0, dtype: torch.dtype = torch.float16) -> dict[str, Any]:
    """What happens to these true (fp32) gradient magnitudes when ``values * scale`` is cast to ``dtype``.

    Measured by doing the cast. Every entry that is not 0 to begin with lands in exactly one bin:
    ``zero`` (it became exactly 0: the gradient is lost), ``subnormal`` (non-zero but below the
    format's smallest normal number: it keeps fewer significant bits), ``normal``, or ``overflow``
    (it became inf: the step would be skipped). Entries that are 0 to begin with are counted as
    ``exact_zero`` and in no bin. Fractions are of the ``nonzero`` count (0 when there are none).
    Signs do not matter (absolute values are used); NaN or inf inputs are an error.
    """
    v = values.detach().reshape(-1).float().abs().cpu()
    if not torch.isfinite(v).all():
        raise ValueError(T("underflow_report expects finite magnitudes; these contain inf or NaN"))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(T("scale must be a finite number > 0, got {scale}", scale=repr(scale)))
    cast = (v * scale).to(dtype)
    tiny = torch.finfo(dtype).tiny
    nonzero = v != 0
    zero = nonzero & (cast == 0)
    overflow = nonzero & torch.isinf(cast)
    subnormal = nonzero & (cast != 0) & (cast.abs() < tiny)
    normal = nonzero & ~zero & ~overflow & ~subnormal
    n_nonzero = int(nonzero.sum())
    counts = {"zero": int(zero.sum()), "subnormal": int(subnormal.sum()), "normal": int(normal.sum()),
              "overflow": int(overflow.sum())}
    report: dict[str, Any] = {"dtype": str(dtype).replace("torch.", ""), "scale": float(scale), "n": v.numel(),
                              "exact_zero": v.numel() - n_nonzero, "nonzero": n_nonzero}
    for k, c in counts.items():
        report[k] = c
        report[f"{k}_fraction"] = c / n_nonzero if n_nonzero else 0.0
    report.update(min_normal=float(tiny), min_subnormal=float(tiny * torch.finfo(dtype).eps),
                  max=float(torch.finfo(dtype).max))
    return report


def scaler_trace(scaler: Any) -> tuple[list[int], list[float], list[bool]]:
    """(iterations, scale after each update, overflow or not) from a loss scaler's history, for a plot."""
    history = getattr(scaler, "history", [])
    return [h[0] for h in history], [float(h[1]) for h in history], [bool(h[2]) for h in history]


def dtype_range_table() -> list[dict[str, Any]]:
    """fp32, fp16 and bf16 side by side: bits, range and precision (from ``torch.finfo``)."""
    rows = []
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        fi = torch.finfo(dtype)
        mantissa = round(-math.log2(fi.eps))
        rows.append({
            "dtype": name,
            "bits": fi.bits,
            "exponent_bits": fi.bits - 1 - mantissa,
            "mantissa_bits": mantissa,          # stored fraction bits; eps = 2**-mantissa_bits
            "eps": float(fi.eps),               # gap between 1 and the next number
            "max": float(fi.max),
            "min_normal": float(fi.tiny),
            "min_subnormal": float(fi.tiny * fi.eps),
        })
    return rows
