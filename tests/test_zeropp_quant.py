"""zerolab.zeropp.quant: ZeRO++'s block quantizer against its own exact arithmetic, and qwZ's group-size
rule against DeepSpeed 0.19.8's (whose CUDA kernels cannot run here)."""
import math

import pytest
import torch

from zerolab.zeropp import quant


def deepspeed_groups(numel: int) -> int:
    """DeepSpeed 0.19.8's rule, transcribed from ``CUDAQuantizer.quantize``
    (deepspeed/runtime/zero/partition_parameters.py, target_group_size = 8000)."""
    groups = math.ceil(numel / 8000)
    while groups < numel:
        if numel % (8 * groups) == 0:
            break
        groups += 1
    while True:
        if numel % (8 * groups * 2) == 0 and numel / groups > 8000:
            groups *= 2
        else:
            break
    assert numel % (8 * groups) == 0 and numel / groups < 16000 and numel > groups
    return groups


SIZES = [8, 16, 96, 1000, 4096, 7200, 8000, 8008, 9312, 16000, 16008, 24576, 65536, 110592, 294912,
         1_000_000, 4_194_304, 12_582_912]


@pytest.mark.parametrize("numel", SIZES)
def test_group_rule_is_deepspeeds(numel):
    assert quant.qwz_groups(numel) == deepspeed_groups(numel)
    g = quant.qwz_groups(numel)
    assert (numel // g) % 8 == 0 and numel // g <= 16000


@pytest.mark.parametrize("numel", [7, 50, 1001, 8001])
def test_a_size_deepspeed_cannot_split_is_refused(numel):
    with pytest.raises(AssertionError):
        deepspeed_groups(numel)                      # DeepSpeed's assertion fails...
    with pytest.raises(ValueError, match="multiple of 8"):
        quant.qwz_groups(numel)                      # ...and zerolab says why


@pytest.mark.parametrize("bits", [8, 4])
def test_round_trip_within_half_a_step(bits):
    torch.manual_seed(0)
    x = torch.randn(64 * 96) * torch.linspace(0.01, 3, 64).repeat_interleave(96)   # blocks of different ranges
    groups = 64
    q, s = quant.quantize(x, groups, bits)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and s.numel() == groups
    lim = 2 ** (bits - 1)
    assert int(q.min()) >= -lim and int(q.max()) <= lim - 1
    m = x.view(groups, -1).abs().amax(1)
    torch.testing.assert_close(s, m / lim, rtol=1e-6, atol=0)           # scale = max / 2^(bits-1)
    err = (quant.dequantize(q, s) - x).view(groups, -1).abs()
    step = s.view(-1, 1)
    top = x.view(groups, -1) > (lim - 0.5) * step                       # clamped to lim - 1 steps
    # (1e-4: float32 rounding of x * q_scale and of q * scale, a few ulps of 2^(bits-1) steps)
    assert bool((err[~top] <= step.expand_as(err)[~top] / 2 * (1 + 1e-4)).all())
    assert bool((err[top] <= step.expand_as(err)[top] * (1 + 1e-4)).all())
    assert bool(top.any())                                              # (the clamp was exercised)


def test_representable_values_are_exact():
    s = torch.tensor([0.5, 0.03125, 2.0])                               # three blocks
    k = torch.tensor([[-128, 127, 3, 0], [-5, 128, 0, 64], [1, -1, -128, 127]])
    k[1, 1] = -128                                                      # the max magnitude sets the scale
    x = (k.float() * s.view(-1, 1)).view(-1)
    q, scales = quant.quantize(x, 3, 8)
    assert torch.equal(scales, s)
    assert torch.equal(quant.dequantize(q, scales), x)
    assert torch.equal(q, k.view(-1).to(torch.int8))


def test_zero_block_and_rounding_half_to_even():
    q, s = quant.quantize(torch.zeros(8), 1, 8)
    assert torch.equal(q, torch.zeros(8, dtype=torch.int8)) and float(s) == 1.0
    x = torch.tensor([128.0, 0.5, 1.5, 2.5, -0.5, -2.5, 0.0, 3.0])      # scale 1: x * 1 rounded, half to even
    q, s = quant.quantize(x, 1, 8)
    assert float(s) == 1.0 and q.tolist() == [127, 0, 2, 2, 0, -2, 0, 3]


def test_int4_packing_round_trip():
    v = torch.arange(-8, 8, dtype=torch.int8).repeat(3)
    b = quant.pack_int4(v)
    assert b.numel() == v.numel() // 2 and b.dtype == torch.int8
    assert torch.equal(quant.unpack_int4(b), v)
    assert int(quant.pack_int4(torch.tensor([1, 2], dtype=torch.int8)).view(torch.uint8)) == 0x12   # first: high nibble


def test_fp16_round_trip_is_deepspeeds_path():
    x = (torch.randn(4096) * 0.02).to(torch.bfloat16)
    y = quant.fp16_round_trip(x, 4, 8)
    assert y.dtype == torch.bfloat16
    q, s = quant.quantize(x.to(torch.float16), 4, 8)
    assert torch.equal(y, quant.dequantize(q, s).to(torch.float16).to(torch.bfloat16))
    assert float((y.float() - x.float()).abs().max()) <= float(s.max()) * 1.01 + 2 ** -8 * float(x.abs().max())
