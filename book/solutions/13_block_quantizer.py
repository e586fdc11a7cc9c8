# %% [markdown] id="ex13-00"
# # Exercise 13 · The shorthand: qwZ's block quantizer
#
# *One number per box, one small integer per item: and every worker must read it the same way.*
#
# In chapter 13 the crew sent its furniture lists in shorthand: qwZ's all-gathers carry int8
# values and one fp32 scale per block. Here **you write that quantizer**, the two functions
# DeepSpeed 0.19.8's CUDA kernels compute (`csrc/quantization/quantize.cu`, `dequantize.cu`, the
# symmetric type of `csrc/includes/quantization_utils.h`). The check compares yours with
# zerolab's copy (`zerolab.zeropp.quant`) on tensors chosen to expose the usual mistakes, then plugs yours
# into the engine (`zerolab.zeropp.quant.use_qwz_codec`) as the quantizer of qwZ's all-gathers on 4 ranks
# as 2 nodes of 2, and compares the bytes, the weights the forward pass sees and the losses.
#
# **When a check fails** it says what it expected, what you gave, and a hint that names the likely
# mistake. To see the full traceback as well, run `import zerolab.course.checks;
# zerolab.course.checks.full_tracebacks()` and run the check cell again.

# %% id="ex13-01"
import torch

from zerolab.course.checks.ch13 import check_block_quantizer

# %% [markdown] id="ex13-02"
# ## 1. Quantize
#
#     quantize(x, groups, bits=8) -> (q, scales)
#
# - Read `x` flat (any shape, any float dtype: the engine hands you an fp16 shard) and cut it into
#   `groups` equal **contiguous** blocks (`x.numel()` is a multiple of `groups`).
# - Compute in **float32**. For each block, `m` = its largest magnitude, and
#   `q_scale = 2**bits / (2 * m)`, or 1.0 when `m == 0`.
# - `q = clamp(round(x * q_scale), -2**(bits-1), 2**(bits-1) - 1)`, rounding half to even, as
#   `torch.round` does (the kernel's float-to-int conversion), stored as **int8**, flat, one per
#   element.
# - `scales` = `1 / q_scale` per block, **float32**, one per block: what DeepSpeed stores and sends.
#
# DeepSpeed's qwZ calls it with `bits=8`; qgZ calls the same kernel with `bits=4` (the check tries both).

# %% id="ex13-03"
def quantize(x, groups, bits=8):
    # BEGIN SOLUTION: blocks -> max |x| -> q_scale -> round, clamp, int8; scales = 1 / q_scale
    blocks = x.reshape(-1).float().view(groups, -1)
    m = blocks.abs().amax(dim=1, keepdim=True)
    q_scale = torch.where(m == 0, torch.ones(()), 2 ** bits / (2 * m))
    lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    q = torch.round(blocks * q_scale).clamp(lo, hi).to(torch.int8)
    return q.view(-1), (1 / q_scale).view(-1)
    # END SOLUTION

# %% [markdown] id="ex13-04"
# **Predict, then run.** One block, `bits=8`: `[1.0, -0.5, 0.25, 0.0, -1.0, 0.3, 0.7, 0.999]`. What is
# its scale, which `q` does 1.0 get, and which does -1.0 get? Write your guesses down, then run.

# %% id="ex13-05"
q, s = quantize(torch.tensor([1.0, -0.5, 0.25, 0.0, -1.0, 0.3, 0.7, 0.999]), 1)
print("q =", q.tolist(), " scale =", s.tolist())

# %% [markdown] id="ex13-06"
# The block's largest magnitude is 1.0, so a step is 1/128. −1.0 is −128 steps, which int8 holds;
# +1.0 is +128, which it does not: clamped to 127. That is why one value per block can come back a
# whole step off.
#
# ## 2. Dequantize
#
#     dequantize(q, scales) -> values
#
# `q * scale`, block by block (block *b* of `q` is the *b*-th run of `q.numel() // len(scales)`
# values), as a float tensor, flat.

# %% id="ex13-07"
def dequantize(q, scales):
    # BEGIN SOLUTION: each block's integers times its scale
    return (q.reshape(scales.numel(), -1).float() * scales.reshape(-1, 1).float()).view(-1)
    # END SOLUTION

# %% [markdown] id="ex13-08"
# **Predict, then run.** Round trip a weight-like tensor (1,024 values, 4 blocks): how large is the
# largest error, in units of each block's scale?

# %% id="ex13-09"
w = torch.randn(1024, generator=torch.Generator().manual_seed(0)) * 0.02
q, s = quantize(w, 4)
err = (dequantize(q, s) - w).abs().view(4, -1) / s.view(-1, 1)
print(f"int8 values: {q.numel()} bytes, scales: {4 * s.numel()} bytes, instead of {2 * w.numel()} in bf16")
print(f"largest error within one step (+ fp32 rounding, 1e-5): {bool(err.max() <= 1 + 1e-5)}")
print(f"within half a step but for at most one value per block: {bool((err > 0.5 + 1e-5).sum(dim=1).max() <= 1)}")

# %% [markdown] id="ex13-10"
# ## 3. The check
#
# First your two functions alone, on eight tensors: an fp16 shard, blocks whose magnitudes differ by
# powers of ten, a 2-D tensor, blocks whose largest value is positive, values exactly halfway between
# two steps, a block of zeros, int4, many small blocks. Then inside the engine: a small GPT at stage 3
# in bf16 with `zero_quantized_weights` on 4 ranks as 2 nodes of 2, your quantizer in qwZ's
# all-gathers for 3 steps, beside the same run with zerolab's quantizer and without qwZ. About half
# a minute.

# %% id="ex13-11" tags=["check"]
check_block_quantizer(quantize, dequantize)

# %% [markdown] id="ex13-12"
# ## Where this lives in zerolab
#
# `zerolab/zeropp/quant.py` holds the quantizer (`quantize`, `dequantize`), DeepSpeed's rule for the number
# of blocks (`qwz_groups`) and the int4 packing qgZ uses (`pack_int4`); `zerolab/zero/stage3/qwz_gather.py`'s
# `all_gather_quantized` calls them for every stage-3 all-gather when `zero_quantized_weights` is
# on, and `zerolab/zeropp/qgz.py`'s `QuantizedReduce` for qgZ. `quant.use_qwz_codec` is zerolab's own
# hook that lets the check put yours there.
#
# Questions:
#
# 1. Your `quantize` never looks at the dtype it will be sent in. Where does the "half the bytes"
#    come from, and what would qwZ send if the model were kept in fp32?
# 2. The block count comes from DeepSpeed's `qwz_groups`: blocks of a multiple of 8, near 8,000
#    elements. What would blocks of 64 elements cost in scales, and what would they gain in error?
