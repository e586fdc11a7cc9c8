"""The mixed-precision chapter's tools: ranges, underflow and overflow counted by casting."""
from __future__ import annotations

import math

import pytest
import torch

from zerolab import precision as P
from zerolab.precision.loss_scaler import DynamicLossScaler
from zerolab.precision import dtype_range_table, grad_magnitudes, scaler_trace, underflow_report


def test_constants_match_finfo():
    f16, bf16 = torch.finfo(torch.float16), torch.finfo(torch.bfloat16)
    assert P.FP16_MAX == 65504 == f16.max
    assert P.FP16_MIN_NORMAL == 2 ** -14 == f16.tiny
    assert P.FP16_MIN_SUBNORMAL == 2 ** -24
    assert P.BF16_MAX == bf16.max and P.BF16_MIN_NORMAL == 2 ** -126 and P.BF16_MIN_SUBNORMAL == 2 ** -133
    assert P.FP32_MIN_SUBNORMAL == 2 ** -149
    # the smallest subnormal really is the smallest positive value of the format
    assert torch.tensor(P.FP16_MIN_SUBNORMAL).half().item() == P.FP16_MIN_SUBNORMAL
    assert torch.tensor(P.BF16_MIN_SUBNORMAL).bfloat16().float().item() == P.BF16_MIN_SUBNORMAL
    assert torch.tensor(P.FP16_MIN_SUBNORMAL / 2).half().item() == 0       # a tie rounds to even: 0


def test_1e8_in_fp16_and_bf16():
    v = torch.tensor([1e-8])
    r = underflow_report(v)                                   # fp16, unscaled: lost
    assert r["zero"] == 1 and r["zero_fraction"] == 1.0 and r["normal"] == 0
    r = underflow_report(v, scale=2.0 ** 16)                  # scaled by 2^16: 6.6e-4, a normal fp16
    assert r["zero"] == 0 and r["subnormal"] == 0 and r["normal"] == 1
    r = underflow_report(v, dtype=torch.bfloat16)             # bf16 has fp32's range
    assert r["zero"] == 0 and r["normal"] == 1 and r["dtype"] == "bfloat16"


def test_bins_by_hand():
    v = torch.tensor([0.0, 1e-9, -1e-8, 3e-6, -1e-3, 1.0, 6e4, 7e4, -1e5])
    r = underflow_report(v)
    assert (r["n"], r["exact_zero"], r["nonzero"]) == (9, 1, 8)
    assert (r["zero"], r["subnormal"], r["normal"], r["overflow"]) == (2, 1, 3, 2)
    assert r["overflow_fraction"] == 2 / 8 and r["zero_fraction"] == 2 / 8
    # scaled by 2^16: 1e-9 (-> 6.6e-5) and 1e-8 are saved, but 1.0 and 6e4 now overflow too
    r = underflow_report(v, scale=2.0 ** 16)
    assert (r["zero"], r["subnormal"], r["normal"], r["overflow"]) == (0, 0, 4, 4)
    # bf16 neither underflows nor overflows any of them
    r = underflow_report(v, dtype=torch.bfloat16)
    assert (r["zero"], r["subnormal"], r["overflow"], r["normal"]) == (0, 0, 0, 8)
    r = underflow_report(torch.tensor([1e-39, 1e-41]), dtype=torch.bfloat16)
    assert (r["subnormal"], r["zero"]) == (1, 1)


def test_rounding_at_the_edges():
    # the counts follow round-to-nearest, not the raw thresholds
    r = underflow_report(torch.tensor([2.0 ** -25]))          # exactly half the smallest subnormal: ties to 0
    assert r["zero"] == 1
    r = underflow_report(torch.tensor([2.0 ** -25 * 1.001]))  # a hair above: rounds up to 2^-24
    assert r["subnormal"] == 1
    r = underflow_report(torch.tensor([2.0 ** -14 - 2.0 ** -25]))   # rounds up to the smallest normal
    assert r["normal"] == 1
    r = underflow_report(torch.tensor([65519.0, 65520.0]))    # 65520 and up round to inf
    assert (r["normal"], r["overflow"]) == (1, 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 2.0 ** 8, 2.0 ** 16, 2.0 ** 24])
def test_counts_agree_with_thresholds(dtype, scale):
    g = torch.Generator().manual_seed(0)
    fi = torch.finfo(dtype)
    min_sub, min_normal = fi.tiny * fi.eps, fi.tiny
    lo, hi = (-14.0, 6.0) if dtype == torch.float16 else (-44.0, 39.0)
    v = (10.0 ** (torch.rand(20000, generator=g, dtype=torch.float64) * (hi - lo) + lo)).float()
    v = v[torch.isfinite(v) & (v > 0)]
    x = v.double() * scale                                     # exact: scale is a power of two
    ulp_max = 2.0 ** (math.floor(math.log2(fi.max)) - round(-math.log2(fi.eps)))   # spacing just below max
    inf_edge = fi.max + ulp_max / 2
    edges = torch.tensor([min_sub / 2, min_normal, fi.max, inf_edge], dtype=torch.float64)
    far = ((x[:, None] / edges[None, :]).log().abs() > 1e-3).all(dim=1) & ((x < fi.max) | (x > inf_edge))
    x, v = x[far], v[far]
    r = underflow_report(v, scale=scale, dtype=dtype)
    assert r["zero"] == int((x < min_sub / 2).sum())
    assert r["subnormal"] == int(((x > min_sub / 2) & (x < min_normal)).sum())
    assert r["normal"] == int(((x > min_normal) & (x < fi.max)).sum())
    assert r["overflow"] == int((x > inf_edge).sum())
    assert r["zero"] + r["subnormal"] + r["normal"] + r["overflow"] == r["nonzero"] == v.numel()
    assert v.numel() > 19000 and r["normal"] > 100 and r["zero"] + r["subnormal"] + r["overflow"] > 100


def test_report_checks_its_input():
    with pytest.raises(ValueError, match="finite"):
        underflow_report(torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="scale"):
        underflow_report(torch.tensor([1.0]), scale=0)
    r = underflow_report(torch.zeros(3))
    assert r["nonzero"] == 0 and r["zero_fraction"] == 0.0


def test_grad_magnitudes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[1].bias.requires_grad_(False)                       # a None grad is skipped
    model(torch.randn(5, 3)).sum().backward()
    m = grad_magnitudes(model)
    assert m.dtype == torch.float32 and m.dim() == 1
    assert m.numel() == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert (m >= 0).all()
    expected = torch.cat([p.grad.reshape(-1).abs() for p in model.parameters() if p.grad is not None])
    assert torch.equal(m, expected)
    assert torch.equal(grad_magnitudes(list(model.parameters())), m)
    assert grad_magnitudes(torch.nn.Linear(2, 2)).numel() == 0   # no backward yet
    half = torch.nn.Linear(2, 2).half()
    half(torch.ones(1, 2, dtype=torch.half)).sum().backward()
    assert grad_magnitudes(half).dtype == torch.float32


def test_scaler_trace():
    s = DynamicLossScaler(init_scale=8.0, scale_window=1, delayed_shift=1)
    for o in (False, True, False, False):
        s.update_scale(o)
    iters, scales, overflows = scaler_trace(s)
    assert iters == [0, 1, 2, 3]
    assert scales == [8.0, 4.0, 4.0, 8.0]
    assert overflows == [False, True, False, False]
    assert scaler_trace(DynamicLossScaler()) == ([], [], [])


def test_dtype_range_table():
    rows = {r["dtype"]: r for r in dtype_range_table()}
    assert list(rows) == ["fp32", "fp16", "bf16"]
    assert [(rows[k]["exponent_bits"], rows[k]["mantissa_bits"]) for k in rows] == [(8, 23), (5, 10), (8, 7)]
    assert rows["fp16"]["max"] == P.FP16_MAX and rows["fp16"]["min_normal"] == P.FP16_MIN_NORMAL
    assert rows["fp16"]["min_subnormal"] == P.FP16_MIN_SUBNORMAL
    assert rows["bf16"]["min_subnormal"] == P.BF16_MIN_SUBNORMAL and rows["bf16"]["max"] == P.BF16_MAX
    assert rows["bf16"]["eps"] == 2 ** -7 and rows["fp32"]["min_normal"] == rows["bf16"]["min_normal"]
    for r in rows.values():
        assert r["bits"] == 1 + r["exponent_bits"] + r["mantissa_bits"]
