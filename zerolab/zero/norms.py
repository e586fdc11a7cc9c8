"""The step's small collectives (the overflow flag, the global gradient norm) and the clipping
factor, as DeepSpeed 0.19.8 sends and computes them (read in its source, measured by
``benchmarks/side_by_side.py`` and ``zerolab compare``):

    stage 0     no overflow collective (every rank holds the whole averaged gradient; the fp16
                and bf16 optimizers check it locally); with ``gradient_clipping`` > 0 in fp32,
                ``clip_grad_norm_``: the local norm / N, all-reduced (one fp32, 4 bytes)
    stages 1-2  fp16 (or bf16 with ``check_grad_overflow``): a 1-byte uint8 MAX of "this rank saw
                an inf/NaN"; then, unless a rank did, the squared norm of this rank's partition,
                one fp32 SUM (4 bytes) per optimizer parameter group
    stage 3     fp16 only: the same 1-byte MAX; then one fp64 SUM (8 bytes) per parameter group
                (fp32, 4 bytes, with ``offload_optimizer``)

The clipping factor is computed with DeepSpeed's operations in DeepSpeed's dtypes, path by path,
because one ulp in it is enough to round a 16-bit copy the other way:

    stage 0 fp32       ``runtime.utils.clip_grad_norm_``: per-parameter fp32 norms, stacked,
                       squared and summed in fp32, rooted, / N, all-reduced; the gradients are
                       multiplied by min(1, clip / (norm + 1e-6)) (an fp32 tensor)
    stage 0 fp16/bf16  ``FP16_Optimizer.step``: each group's flat fp32 gradient's fp32 norm,
                       squared and summed as Python floats, rounded to fp32, rooted; the factor
                       in Python floats
    stages 1-2         ``get_grad_norm_direct``: per-piece fp64 norms, squared and summed, one fp32
                       per group all-reduced and rooted in fp32; the groups' L2 and
                       ``unscale_and_clip_grads`` in fp32 tensors (so ``combined`` is a tensor)
    stage 3            the same in fp64 throughout (the fp32 all-reduce's with offload)

An inf or NaN anywhere makes the local sum non-finite: it is also the local overflow check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["step_norms", "StepNorm"]


_HOST_CHUNK = 1 << 20
_NORM = 2.0                    # DeepSpeed's norm_type, a float: its pow() calls take it as given


@dataclass
class StepNorm:
    """What a step needs from the norm. ``combined``: the loss scale times the clipping factor,
    which the step divides the gradients by (a Python float, or a 0-dim tensor where DeepSpeed's
    is one); ``pre``: stage 0 fp32's clipping coefficient, multiplied into the gradients first;
    ``norm``: the unscaled global norm (None when not computed)."""
    overflow: bool
    combined: float | torch.Tensor = 1.0
    norm: float | None = None
    pre: torch.Tensor | None = None


def _sumsq(g: torch.Tensor) -> torch.Tensor | float:
    """The sum of squares of ``g`` in fp64 (the overflow check at stage 0). On a GPU a 0-dim
    tensor there, read by the caller once for all gradients (each read waits for the device); on
    the host a float, in chunks of 2^20 for a large tensor: torch's fp64 norm of a float32 tensor
    is several times slower in one piece there."""
    if not g.numel():
        return 0.0
    if g.device.type == "cpu" and g.numel() > _HOST_CHUNK:
        return sum(float(torch.linalg.vector_norm(c, dtype=torch.float64).square()) for c in g.split(_HOST_CHUNK))
    s = torch.linalg.vector_norm(g, dtype=torch.float64).square()
    return s if s.is_cuda else float(s)


def _pieces(group, t: torch.Tensor, start: int) -> list[torch.Tensor]:
    """The views of ``t`` (``group``'s flat buffer from element ``start`` on) that are one
    parameter each: DeepSpeed's ``averaged_gradients`` pieces of a partition."""
    end = start + t.numel()
    out = []
    for off, n in zip(group.offsets, group.numels):
        a, b = max(off, start), min(off + n, end)
        if a < b:
            out.append(t[a - start:b - start])
    return out


def _piece_sumsq(pieces: list[torch.Tensor], device) -> torch.Tensor:
    """DeepSpeed's ``get_grad_norm_direct`` before its all-reduce: each piece's fp64 norm,
    stacked, raised to the norm type and summed (fp64, 0-dim)."""
    if not pieces:
        return torch.tensor(0.0, dtype=torch.float64, device=device)
    # (DeepSpeed converts each piece with .to(torch.double) first; the dtype argument gives the
    # same bits without the fp64 copy)
    norms = [torch.linalg.vector_norm(p.detach(), ord=_NORM, dtype=torch.float64) for p in pieces]
    return torch.stack(norms).pow(_NORM).sum()


def _invalid_to_minus_one(t: torch.Tensor) -> torch.Tensor:
    """DeepSpeed's mask: an inf/NaN norm becomes -1 (which the groups' L2 turns into inf)."""
    return torch.where(t.isinf() | t.isnan(), torch.tensor(-1.0, dtype=torch.float32, device=t.device), t)


def _combine_groups(norms: list[torch.Tensor]) -> torch.Tensor:
    """``combine_grad_norm_groups``: the L2 of the groups' norms; inf if any is invalid."""
    stacked = torch.stack(norms)
    invalid = (~torch.isfinite(stacked) | (stacked < 0)).any()
    combined = torch.linalg.vector_norm(stacked, ord=_NORM)
    return torch.where(invalid, torch.full_like(combined, float("inf")), combined)


def _tensor_combined(total: torch.Tensor, scale: float, clip: float) -> torch.Tensor | float:
    """``unscale_and_clip_grads`` (stages 1-3): the factor in the norm's dtype."""
    if clip <= 0:
        return scale
    c = ((total / scale) + 1e-6) / clip
    c = torch.clamp(c, min=1.0)
    return c * scale


def _stage0_fp32(comm, stage, grads, clip: float, device) -> StepNorm:
    """``clip_grad_norm_`` over the model's parameters in the model's order (stage 0, fp32)."""
    norms = []
    for _, p in stage.named:
        g = stage.group_of[id(p)]
        norms.append(grads[g.index][g.param_slice(g.index_of[id(p)])].detach().float().norm(_NORM))
    total = torch.stack(norms).pow(_NORM).sum().float() if norms else torch.zeros((), device=device)
    total = total.pow(1. / _NORM)
    scaled = total * 1.0 / float(comm.world_size)
    if comm.world_size > 1:
        comm.all_reduce(scaled, tag="grad norm")
    coef = torch.tensor([float(clip)], device=device) / (scaled + 1e-6)
    coef = torch.min(torch.tensor([1.0], device=device), coef)
    return StepNorm(False, 1.0, float(scaled), pre=coef)


def _stage0_low_precision(stage, grads, scale: float, clip: float) -> StepNorm:
    """``FP16_Optimizer.step`` (fp16 and bf16 at stage 0, FusedAdam's path): the norm of each
    group's flat gradient in fp32, summed as Python floats, through one fp32, rooted."""
    total = 0.
    for g, flat in zip(stage.groups, grads):
        total += flat[:g.numel].float().norm(_NORM).item() ** _NORM
    total = torch.tensor([float(total)], dtype=torch.float32).item() ** (1. / _NORM)
    if not math.isfinite(total):                  # (DeepSpeed: -1, then a skipped step)
        return StepNorm(True)
    scaled = math.sqrt(0.0 + total ** 2.0)               # get_global_norm([total])
    combined = scale
    c = ((scaled / scale) + 1e-6) / clip
    if c > 1:
        combined = c * scale
    return StepNorm(False, combined, scaled / scale)


def step_norms(comm, stage, grads: list[torch.Tensor], opt_groups: list[int], *, check: bool, clip: float,
               fp16: bool, scale: float = 1.0) -> StepNorm:
    """Overflow on any rank, the global norm and the clipping factor. ``opt_groups``: the
    optimizer parameter group of each gradient tensor; ``scale``: the loss scale."""
    sharded = stage.shards_optimizer
    partitioned_params = stage.spec.partitions_params   # DeepSpeed's stage-3 optimizer and its norm
    device = stage.device
    if not sharded:                               # stage 0: every rank has the same gradient
        overflow = False
        if check:
            sums = [_sumsq(g) for g in grads]
            overflow = not math.isfinite(float(sum(sums)))
        if overflow or clip <= 0:
            return StepNorm(overflow, scale)
        if not (check or stage.dtype != torch.float32):
            return _stage0_fp32(comm, stage, grads, clip, device)
        return _stage0_low_precision(stage, grads, scale, clip)

    # stages 1-3: this rank's pieces, summed per optimizer group as DeepSpeed's get_grad_norm_direct
    pieces: dict[int, list[torch.Tensor]] = {}
    for g, t, k in zip(stage.groups, grads, opt_groups):
        pieces.setdefault(k, []).extend(_pieces(g, t, g.shard_range(stage.rank)[0]))
    per_group = {k: _piece_sumsq(v, device) for k, v in pieces.items()}
    local_finite = all(math.isfinite(float(v)) for v in per_group.values())
    overflow = False
    if check and (fp16 or not partitioned_params):
        flag = torch.tensor([0 if local_finite else 1], dtype=torch.uint8, device=device)
        comm.all_reduce(flag, op=dist.ReduceOp.MAX, tag="overflow check")
        overflow = bool(flag.item())
    if overflow:
        return StepNorm(True)
    offload = stage.zero.offload_optimizer.device != "none"
    dtype = torch.float64 if partitioned_params and not offload else torch.float32
    norms = []
    for k in sorted(per_group) or [0]:
        t = per_group.get(k, torch.tensor(0.0, dtype=torch.float64)).to(device=device, dtype=dtype)
        comm.all_reduce(t, tag="grad norm")
        norms.append(_invalid_to_minus_one(t ** (1. / _NORM)))
    total = _combine_groups(norms)
    if not torch.isfinite(total) and (partitioned_params or check or stage.dtype != torch.bfloat16):
        return StepNorm(True)                     # DeepSpeed: an invalid norm is an overflow
    return StepNorm(False, _tensor_combined(total, scale, clip), float(total) / scale)
