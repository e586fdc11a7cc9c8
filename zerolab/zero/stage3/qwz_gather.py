"""qwZ (``zero_quantized_weights``, ZeRO++): stage 3's parameter all-gathers as int8 blocks plus
their fp32 scales, as DeepSpeed 0.19.8's ``all_gather_coalesced(..., quantize=True)``
(``runtime/zero/partition_parameters.py``).

Every all-gather of a unit's parameters, in forward and in backward, prefetched or not, carries
int8 blocks plus their scales instead of model-dtype values. Each rank converts its shard to fp16,
quantizes it (blocks by DeepSpeed's adaptive rule, :func:`zerolab.zeropp.quant.qwz_groups`; a coalesced
fetch is one tensor, as DeepSpeed quantizes the concatenation), and two all-gathers follow, as in
DeepSpeed: the int8 values, then the scales. Each rank dequantizes the whole buffer to fp16, then
to the model dtype. The shards (and the optimizer's fp32 masters) are never quantized: only the
gathered copies used in forward and backward are. Not quantized, as in DeepSpeed: the persistent
parameters' refresh after each step (``_post_step`` gathers them with ``all_gather``, which
quantizes only weights stored quantized) and the broadcast at initialization. DeepSpeed also
fetches the persistent parameters once in the first forward (quantized); zerolab keeps them whole
from initialization, so they are exact from the first step. Untrained parameters' fetches are
quantized too, as in DeepSpeed. Every gathered shard must be a multiple of 8 elements
(DeepSpeed's quantizer asserts it): checked at initialization (:func:`check_qwz`). The quantizer
is :func:`zerolab.zeropp.quant.qwz_codec`'s pair: zerolab's, unless :func:`zerolab.zeropp.quant.use_qwz_codec`
swapped it (zerolab's own hook; exercise 13 plugs the learner's quantizer in there).
"""
from __future__ import annotations

import torch

from .inflight import QuantizedGather
from ...zeropp.quant import qwz_codec, qwz_groups

__all__ = ["all_gather_quantized", "check_qwz"]


def all_gather_quantized(out: torch.Tensor, shard: torch.Tensor, tag: str, async_op: bool, comm):
    """Quantize this rank's ``shard`` (fp16, then int8 in blocks, DeepSpeed's ``CUDAQuantizer``),
    all-gather the int8 values, then the fp32 scales (two calls, as DeepSpeed makes), and
    dequantize every rank's blocks into ``out`` (fp16, then ``out``'s dtype). Every rank quantizes
    a shard of the same size, so the gathered scales line up with the gathered blocks. Returns a
    :class:`~zerolab.zero.stage3.inflight.QuantizedGather` (``async_op``) or ``out``."""
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


def check_qwz(groups, persistent: list[bool], hpz) -> None:
    """qwZ quantizes each gathered shard in blocks of a multiple of 8 elements (DeepSpeed's
    CUDAQuantizer asserts it): say which group's shard cannot be, and what to do."""
    for g in groups:
        if persistent[g.index] or g.shard_numel == 0:
            continue
        try:
            qwz_groups(g.shard_numel)
            qwz_groups(hpz.numel(g))          # hpZ's secondary (without hpZ: the shard again)
        except ValueError:
            raise ValueError(
                f"zero_optimization.zero_quantized_weights: stage 3's shard of {g.label} has {g.shard_numel} "
                f"elements on each of {g.world_size} ranks, not a multiple of 8, and DeepSpeed's qwZ quantizer "
                "cuts a shard into blocks of a multiple of 8 (its CUDAQuantizer asserts it). Fix: a world size "
                "or layer widths that make each module's shard a multiple of 8, make that module's parameters "
                "persistent (stage3_param_persistence_threshold), or set zero_quantized_weights to false"
            ) from None
