"""Block quantization, as ZeRO++ does it (DeepSpeed 0.19.8's quantizer kernels, in plain torch).

In the story the crew sends notes in shorthand: instead of every number in full, a number per
block (its *scale*) and, for each value, a small integer. DeepSpeed's ZeRO++ uses it twice:

* **qwZ** (``zero_quantized_weights``): stage 3's parameter all-gathers carry int8 blocks plus one
  fp32 scale per block instead of fp16/bf16 values: about half the bytes.
* **qgZ** (``zero_quantized_gradients``): gradients travel as int4 (two values per byte) with one
  fp32 scale per block: about a quarter of fp16's bytes.

**The quantizer** (DeepSpeed's ``csrc/quantization`` kernels, symmetric type; see
``csrc/includes/quantization_utils.h``, ``Params<Symmetric>``). A tensor of ``numel`` elements is
cut into ``groups`` equal, contiguous blocks. For each block with largest magnitude ``m``::

    q_scale = 2**bits / (2 m)                 (1.0 when m == 0), in fp32
    q       = clamp(round(x * q_scale), -2**(bits-1), 2**(bits-1) - 1)     round half to even
    scale   = 1 / q_scale                     what is stored and sent (fp32): m / 2**(bits-1)
    x'      = q * scale                       dequantized

So an element comes back within ``scale / 2`` of its value, except the largest positive one of a
block, which lands on ``2**(bits-1)`` steps and is clamped to one step less: it comes back within
one ``scale`` (``m/128`` at int8, ``m/8`` at int4). Values that are already ``k * scale`` for an
integer ``k`` in range come back exactly. DeepSpeed's kernels read their input as fp16 (qwZ's
``CUDAQuantizer.quantize`` converts to fp16 first) and write fp16; :func:`quantize` and
:func:`dequantize` compute in fp32 and leave the fp16 round trip to the caller
(:func:`fp16_round_trip` does DeepSpeed's whole path).

**How many groups** (qwZ, ``CUDAQuantizer.quantize`` in ``runtime/zero/partition_parameters.py``):
:func:`qwz_groups`, DeepSpeed's adaptive rule, in which every block is a multiple of 8 elements
and close to (at most 2x) a target of 8,000. A size with no such split (not a multiple of 8)
makes DeepSpeed's assertion fail; :func:`qwz_groups` raises ``ValueError`` then.

DeepSpeed's kernels are CUDA only; on this CPU nothing of DeepSpeed's quantizer can run, so these
functions follow its source and are tested against their own exact arithmetic
(``tests/test_zeropp_quant.py``).

**Another quantizer for qwZ** (zerolab's own hook, for exercise 13's check and for experiments):
inside ``with use_qwz_codec(my_quantize, my_dequantize):`` stage 3's quantized all-gathers
(``gather.py``) call ``my_quantize(shard_fp16, groups, bits=8) -> (q, scales)`` and
``my_dequantize(q_all, scales_all) -> values`` instead of :func:`quantize` and :func:`dequantize`.
It acts in the process that enters it (on a crew: inside the function each rank runs), for the
all-gathers issued inside the block; qgZ's reduction always uses this module's functions.
:func:`qwz_codec` is the pair in use.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch

from ..i18n import catalogue

__all__ = ["quantize", "dequantize", "qwz_groups", "fp16_round_trip", "pack_int4", "unpack_int4",
           "QWZ_TARGET_GROUP_SIZE", "qwz_codec", "use_qwz_codec"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

QWZ_TARGET_GROUP_SIZE = 8000     # CUDAQuantizer.target_group_size ("the optimal size is 4k")


def qwz_groups(numel: int, target: int = QWZ_TARGET_GROUP_SIZE) -> int:
    """DeepSpeed's group count for qwZ (``CUDAQuantizer.quantize``, DeepSpeed 0.19.8):

    1. start at ``ceil(numel / target)`` groups;
    2. add groups until ``numel`` is a multiple of ``8 * groups`` (blocks of a multiple of 8);
    3. double the groups while ``numel`` stays a multiple of ``16 * groups`` and the blocks are
       still larger than ``target`` (a hard limit of 16k elements per block).
    """
    if numel <= 0:
        raise ValueError(T("nothing to quantize: {numel} elements", numel=numel))
    groups = math.ceil(numel / target)
    while groups < numel:
        if numel % (8 * groups) == 0:
            break
        groups += 1
    while numel % (8 * groups * 2) == 0 and numel / groups > target:
        groups *= 2
    if numel % (8 * groups) != 0 or not numel / groups < 16000 or not numel > groups:
        # (DeepSpeed's assertion is quoted in its own words, in English)
        raise ValueError(T("DeepSpeed's qwZ quantizer cannot cut {numel} elements into blocks of a multiple "
                           "of 8 (its CUDAQuantizer asserts 'Quantized weight requires the number of weights "
                           "be a multiple of 8')", numel=numel))
    return groups


def quantize(x: torch.Tensor, groups: int, bits: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric block quantization of ``x`` (any shape; read flat) into ``groups`` equal blocks.

    Returns ``(q, scales)``: ``q`` int8 values in ``[-2**(bits-1), 2**(bits-1) - 1]``, flat, one
    per element (see :func:`pack_int4` for two per byte), and ``scales`` fp32, one per block
    (``m / 2**(bits-1)`` for a block of largest magnitude ``m``: DeepSpeed stores ``1 / q_scale``)."""
    flat = x.reshape(-1).float()
    if flat.numel() % groups:
        raise ValueError(T("{numel} elements do not cut into {groups} equal blocks", numel=flat.numel(),
                           groups=groups))
    blocks = flat.view(groups, -1)
    m = blocks.abs().amax(dim=1, keepdim=True)
    one = torch.ones((), dtype=torch.float32)
    q_scale = torch.where(m == 0, one, (2 ** bits) / (2 * m))          # fp32, as the kernel
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    q = torch.round(blocks * q_scale).clamp_(lo, hi).to(torch.int8)   # __float2int_rn: half to even
    return q.view(-1), (1 / q_scale).view(-1)


def dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``q * scale`` block by block, in fp32 (the number of blocks is ``scales.numel()``)."""
    return (q.reshape(scales.numel(), -1).float() * scales.view(-1, 1).float()).view(-1)


def fp16_round_trip(x: torch.Tensor, groups: int, bits: int = 8) -> torch.Tensor:
    """What DeepSpeed's quantizer hands back for ``x``: converted to fp16, quantized, dequantized
    to fp16, then to ``x``'s dtype (``CUDAQuantizer.quantize`` / ``dequantize``)."""
    q, s = quantize(x.to(torch.float16), groups, bits)
    return dequantize(q, s).to(torch.float16).to(x.dtype).view(x.shape)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two int4 values per byte (DeepSpeed's ``PackedInt4``: the first value in the high nibble)."""
    q = q.reshape(-1, 2).to(torch.int16)
    return (((q[:, 0] & 0xF) << 4) | (q[:, 1] & 0xF)).to(torch.uint8).view(torch.int8)


def unpack_int4(b: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_int4`: signed int4 values, two per byte, as int8."""
    u = b.view(torch.uint8).to(torch.int16)
    hi, lo = u >> 4, u & 0xF
    both = torch.stack([hi, lo], dim=1).view(-1)
    return torch.where(both >= 8, both - 16, both).to(torch.int8)


_QWZ_CODEC: list[tuple[Callable, Callable]] = []      # pairs entered by use_qwz_codec, innermost last


def qwz_codec() -> tuple[Callable, Callable]:
    """The ``(quantize, dequantize)`` pair qwZ's all-gathers call now: this module's, unless a
    :func:`use_qwz_codec` block replaced them."""
    return _QWZ_CODEC[-1] if _QWZ_CODEC else (quantize, dequantize)


@contextlib.contextmanager
def use_qwz_codec(quantize_fn: Callable, dequantize_fn: Callable) -> Iterator[None]:
    """Inside the block, qwZ's all-gathers quantize with ``quantize_fn(x, groups, bits=8) ->
    (q int8, scales fp32)`` and dequantize with ``dequantize_fn(q, scales) -> values`` (the
    signatures of :func:`quantize` and :func:`dequantize`). The group count stays DeepSpeed's
    (:func:`qwz_groups`); ``q`` and ``scales`` are read flat."""
    if not (callable(quantize_fn) and callable(dequantize_fn)):
        raise TypeError(T("use_qwz_codec(quantize_fn, dequantize_fn): both must be functions"))
    _QWZ_CODEC.append((quantize_fn, dequantize_fn))
    try:
        yield
    finally:
        _QWZ_CODEC.remove((quantize_fn, dequantize_fn))
