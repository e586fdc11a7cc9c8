"""Exercise 13's check (zerolab/course/checks/ch13.py), both ways: DeepSpeed's block quantizer
(zerolab.zeropp.quant) passes, alone and as qwZ's quantizer in the engine on 4 ranks as 2 nodes of 2;
wrong quantizers a learner might write fail, each with a hint that names the mistake. And the
hook the check plugs into (zerolab.zeropp.quant.use_qwz_codec) really carries the engine's all-gathers."""
from __future__ import annotations

import pytest
import torch

from zerolab.zeropp import quant
from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch13 import check_alone, check_engine


def _blocks(x, groups):
    return x.reshape(-1).float().view(groups, -1)


def _symmetric(x, groups, bits, *, scale_of, to_int, clamp=True):
    """A symmetric quantizer with one ingredient swapped: scale_of(blocks, bits) -> step per block,
    to_int(t) -> rounded values."""
    b = _blocks(x, groups)
    step = scale_of(b, bits)
    t = b / step
    q = to_int(t)
    if clamp:
        q = q.clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return q.to(torch.int8).view(-1), step.view(-1).float()


def _ds_step(b, bits):
    m = b.abs().amax(1, keepdim=True)
    return torch.where(m == 0, torch.ones(()), 1 / ((2 ** bits) / (2 * m)))


# -- wrong quantize functions (each paired with zerolab's dequantize) ------------------------

def per_tensor(x, groups, bits=8):
    m = x.reshape(-1).float().abs().max()
    step = m / 2 ** (bits - 1)
    q = torch.round(x.reshape(-1).float() / step).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return q.to(torch.int8), step.repeat(groups)


def strided_blocks(x, groups, bits=8):
    cols = x.reshape(-1).float().view(-1, groups).t()             # block b = elements b, b + groups, ...
    q, s = quant.quantize(cols.contiguous(), groups, bits)
    return q.view(groups, -1).t().reshape(-1), s


def truncates(x, groups, bits=8):
    return _symmetric(x, groups, bits, scale_of=_ds_step, to_int=torch.trunc)


def no_clamp(x, groups, bits=8):
    return _symmetric(x, groups, bits, scale_of=_ds_step, to_int=torch.round, clamp=False)


def half_away(x, groups, bits=8):
    return _symmetric(x, groups, bits, scale_of=_ds_step, to_int=lambda t: torch.sign(t) * torch.floor(t.abs() + 0.5))


def textbook_127(x, groups, bits=8):
    scale = lambda b, bits: b.abs().amax(1, keepdim=True).clamp_min(1e-30) / (2 ** (bits - 1) - 1)  # noqa: E731
    return _symmetric(x, groups, bits, scale_of=scale, to_int=torch.round)


def asymmetric(x, groups, bits=8):
    b = _blocks(x, groups)
    lo, hi = b.amin(1, keepdim=True), b.amax(1, keepdim=True)
    step = (hi - lo).clamp_min(1e-30) / (2 ** bits - 1)
    q = torch.round((b - lo) / step) - 2 ** (bits - 1)
    return q.clamp(-128, 127).to(torch.int8).view(-1), step.view(-1)


def stores_q_scale(x, groups, bits=8):
    q, s = quant.quantize(x, groups, bits)
    return q, 1 / s


def zero_block_nan(x, groups, bits=8):
    scale = lambda b, bits: b.abs().amax(1, keepdim=True) / 2 ** (bits - 1)  # noqa: E731
    return _symmetric(x, groups, bits, scale_of=scale, to_int=torch.round)


def hard_coded_8_bits(x, groups, bits=8):
    return quant.quantize(x, groups, 8)


def fp16_arithmetic(x, groups, bits=8):
    b = x.reshape(-1).view(groups, -1)                            # stays in x's dtype (fp16 for a shard)
    m = b.abs().amax(1, keepdim=True)
    q_scale = (2 ** bits) / (2 * m)
    q = torch.round(b * q_scale).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return q.to(torch.int8).view(-1), (1 / q_scale).view(-1)


def int32_values(x, groups, bits=8):
    q, s = quant.quantize(x, groups, bits)
    return q.to(torch.int32), s


def one_scale(x, groups, bits=8):
    q, s = per_tensor(x, groups, bits)
    return q, s[:1]


# -- wrong dequantize functions (paired with zerolab's quantize) ------------------------------

def divides(q, scales):
    return (q.reshape(scales.numel(), -1).float() / scales.view(-1, 1)).view(-1)


def strided_dequantize(q, scales):
    return (q.reshape(-1, scales.numel()).float() * scales.view(1, -1)).view(-1)


WRONG_QUANTIZE = [
    (per_tensor, "one scale for the whole tensor"),
    (one_scale, "one scale per block"),
    (strided_blocks, "contiguous run"),
    (truncates, "truncated toward zero"),
    (no_clamp, "wraps"),
    (half_away, "half to even"),
    (textbook_127, "textbook"),
    (asymmetric, "symmetric"),
    (stores_q_scale, "inverse"),
    (zero_block_nan, "block of zeros"),
    (hard_coded_8_bits, "bits is a parameter"),
    (fp16_arithmetic, "float32"),
    (int32_values, "one int8 per element"),
]


@pytest.mark.parametrize("fn,hint", WRONG_QUANTIZE, ids=[f.__name__ for f, _ in WRONG_QUANTIZE])
def test_a_wrong_quantize_fails_with_its_hint(fn, hint):
    with pytest.raises(ExerciseCheckFailed, match="hint") as e:
        check_alone(fn, quant.dequantize)
    assert hint in str(e.value), str(e.value)


@pytest.mark.parametrize("fn,hint", [(divides, "divide"), (strided_dequantize, "strided blocks")])
def test_a_wrong_dequantize_fails_with_its_hint(fn, hint):
    with pytest.raises(ExerciseCheckFailed) as e:
        check_alone(quant.quantize, fn)
    assert hint in str(e.value), str(e.value)


def test_the_unwritten_exercise_raises_not_implemented():
    def todo(*a, **k):
        raise NotImplementedError("Exercise: write quantize")
    with pytest.raises(NotImplementedError):
        check_alone(todo, todo)


def test_dividing_by_the_scale_is_an_equally_good_quantizer():
    """x / (max / 128) instead of x * (128 / max): the same values except, at most, one step at a
    value a rounding error away from a half step; the check accepts it."""
    def by_division(x, groups, bits=8):
        b = _blocks(x, groups)
        m = b.abs().amax(1, keepdim=True)
        step = torch.where(m == 0, torch.ones(()), m / 2 ** (bits - 1))
        q = torch.round(b / step).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
        return q.to(torch.int8).view(-1), step.view(-1)
    assert check_alone(by_division, quant.dequantize) >= 8


def test_use_qwz_codec_is_scoped():
    calls = []

    def mine(x, groups, bits=8):
        calls.append(groups)
        return quant.quantize(x, groups, bits)
    assert quant.qwz_codec() == (quant.quantize, quant.dequantize)
    with quant.use_qwz_codec(mine, quant.dequantize):
        assert quant.qwz_codec()[0] is mine
        quant.qwz_codec()[0](torch.ones(16), 2)
    assert quant.qwz_codec() == (quant.quantize, quant.dequantize) and calls == [2]
    with pytest.raises(TypeError):
        with quant.use_qwz_codec(None, quant.dequantize):
            pass


# That the solution passes is not run here: nbval runs solutions/13_block_quantizer.ipynb (its cell
# `check_block_quantizer(quantize, dequantize)`) in each of run_tests.sh's three passes and compares its
# output with the stored one, which has "PASSED", "inter-node", "0.50", "the same gathered weights as
# zerolab's quantizer: True".


@pytest.mark.timeout(240)
def test_the_engine_part_fails_a_per_tensor_scale():
    """Part 2 on its own (part 1 would stop it first): a per-tensor scale sends other bytes."""
    with pytest.raises(ExerciseCheckFailed, match="all-gathers differ"):
        check_engine(one_scale, quant.dequantize)


@pytest.mark.timeout(240)
def test_the_engine_part_fails_a_wrong_dequantize():
    with pytest.raises(ExerciseCheckFailed, match="forward pass saw"):
        check_engine(quant.quantize, divides)


# -- quantizers that write into what they are given (each passed while the check quantized copies only) --

def scales_in_place(x, groups, bits=8):
    """Saves memory by scaling its input: x.float() is x itself when x is float32."""
    b = x.float().view(groups, -1)
    m = b.abs().amax(1, keepdim=True)
    q_scale = torch.where(m == 0, torch.ones(()), (2 ** bits) / (2 * m))
    b.mul_(q_scale).round_().clamp_(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return b.to(torch.int8).view(-1), (1 / q_scale).view(-1)


def snaps_input(x, groups, bits=8):
    """Right values, then 'keeps x consistent' by writing the round trip back into it (any dtype)."""
    q, s = quant.quantize(x, groups, bits)
    x.copy_(quant.dequantize(q, s).view_as(x).to(x.dtype))
    return q, s


def zeroes_scales(q, scales):
    out = q.float().view(scales.numel(), -1) * scales.view(-1, 1)
    scales.zero_()                                  # "frees" the scales after use
    return out.view(-1)


@pytest.mark.parametrize("pair,what", [((scales_in_place, quant.dequantize), "quantize changed its input x"),
                                       ((snaps_input, quant.dequantize), "quantize changed its input x"),
                                       ((quant.quantize, zeroes_scales), "dequantize changed its input scales")],
                         ids=["scales x in place", "writes the round trip into x", "zeroes its scales"])
def test_a_quantizer_that_writes_into_its_input_fails(pair, what):
    with pytest.raises(ExerciseCheckFailed) as e:
        check_alone(*pair)
    assert what in str(e.value) and "in place" in str(e.value) and "hint" in str(e.value), str(e.value)


@pytest.mark.timeout(240)
def test_the_engine_part_fails_a_quantizer_that_writes_into_the_shard():
    """Part 2 on its own: inside qwZ the input is the rank's bf16 parameter shard."""
    with pytest.raises(ExerciseCheckFailed, match="quantize changed its input x in place"):
        check_engine(snaps_input, quant.dequantize)
