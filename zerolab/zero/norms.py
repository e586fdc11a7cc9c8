"""The step's small collectives: the overflow flag and the global gradient norm, as DeepSpeed
0.19.8 sends them (read in its source, measured by ``benchmarks/side_by_side.py``):

    stage 0     no overflow collective (every rank holds the whole averaged gradient; the fp16
                and bf16 optimizers check it locally); with ``gradient_clipping`` > 0 in fp32,
                ``clip_grad_norm_``: the local norm / N, all-reduced (one fp32, 4 bytes)
    stages 1-2  fp16 (or bf16 with ``check_grad_overflow``): a 1-byte uint8 MAX of "this rank saw
                an inf/NaN"; then, unless a rank did, the squared norm of this rank's partition,
                one fp32 SUM (4 bytes) per optimizer parameter group
    stage 3     fp16 only: the same 1-byte MAX; then one fp64 SUM (8 bytes) per parameter group

The sum of squares is taken in fp64 on each shard (no square can overflow there), so an inf or
NaN anywhere makes it non-finite: it is also the local overflow check.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

__all__ = ["step_norms"]


_HOST_CHUNK = 1 << 20


def _sumsq(g: torch.Tensor) -> torch.Tensor | float:
    """The sum of squares of ``g`` in fp64. On a GPU a 0-dim tensor there, read by the caller once
    for all gradients (each read waits for the device, and stage 3 has one gradient a parameter);
    on the host a float (reading costs no wait, and adding floats is cheaper than adding tensors),
    in chunks of 2^20 for a large tensor: torch's fp64 norm of a float32 tensor is several times
    slower in one piece there."""
    if not g.numel():
        return 0.0
    if g.device.type == "cpu" and g.numel() > _HOST_CHUNK:
        return sum(float(torch.linalg.vector_norm(c, dtype=torch.float64).square()) for c in g.split(_HOST_CHUNK))
    s = torch.linalg.vector_norm(g, dtype=torch.float64).square()
    return s if s.is_cuda else float(s)


def step_norms(comm, stage, grads: list[torch.Tensor], opt_groups: list[int], *, check: bool, clip: float,
               fp16: bool) -> tuple[bool, float]:
    """(overflow on any rank, the global sum of squared gradients). ``opt_groups``: the optimizer
    parameter group of each gradient tensor."""
    sharded = stage.shards_optimizer
    partitioned_params = stage.spec.partitions_params   # DeepSpeed's stage-3 optimizer and its norm
    need_norm = clip > 0 or sharded               # stages 1-3 always compute the norm (DeepSpeed logs it)
    per_group: dict[int, float] = {}
    if check or need_norm:
        sums: dict = {}
        for g, k in zip(grads, opt_groups):       # (the same fp64 additions, in the same order, as
            sums[k] = sums.get(k, 0.0) + _sumsq(g)   # on Python floats: the same bits)
        per_group = {k: float(v) for k, v in sums.items()}   # one wait for the device per group
    local = sum(per_group.values())
    if not sharded:                               # stage 0: every rank has the same gradient
        overflow = check and not math.isfinite(local)
        if overflow or clip <= 0:
            return overflow, 0.0
        if comm.world_size > 1 and not (check or stage.dtype != torch.float32):
            t = torch.tensor(math.sqrt(local) / comm.world_size, dtype=torch.float32, device=stage.device)
            comm.all_reduce(t, tag="grad norm")
            return False, float(t) ** 2
        return False, local
    overflow = False
    if check and (fp16 or not partitioned_params):
        flag = torch.tensor([0 if math.isfinite(local) else 1], dtype=torch.uint8, device=stage.device)
        comm.all_reduce(flag, op=dist.ReduceOp.MAX, tag="overflow check")
        overflow = bool(flag.item())
    if overflow:
        return True, 0.0
    dtype = torch.float64 if partitioned_params else torch.float32
    total = 0.0
    for k in sorted(per_group) or [0]:
        t = torch.tensor(per_group.get(k, 0.0), dtype=dtype, device=stage.device)
        comm.all_reduce(t, tag="grad norm")
        total += float(t)
    if not math.isfinite(total) and (partitioned_params or check or stage.dtype != torch.bfloat16):
        return True, 0.0                          # DeepSpeed: an invalid norm is an overflow
    return False, total
