"""zerolab's loss scalers against DeepSpeed 0.19.8: each rule by hand, then recorded DeepSpeed traces.

The traces in tests/data/ds_loss_scaler_traces.json were recorded from DeepSpeed itself by
benchmarks/ds_reference/record_loss_scaler_traces.py; this file does not need DeepSpeed.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from zerolab.precision.loss_scaler import (FP16_DEFAULTS, DynamicLossScaler, LossScaleAtMinimum, LossScaler, has_inf_or_nan,
                                 make_loss_scaler)

FIXTURE = json.loads((Path(__file__).parent / "data" / "ds_loss_scaler_traces.json").read_text())


def run(scaler, overflows):
    """Feed a '0'/'1' string (or list of bools); return the scale after each call."""
    out = []
    for o in overflows:
        scaler.update_scale(o in ("1", True, 1))
        out.append(scaler.cur_scale)
    return out


def unrle(pairs):
    return [v for v, n in pairs for _ in range(n)]


# -- the rules, one by one ----------------------------------------------------------------------

def test_anchor_trace():
    # the trace quoted in research/deepspeed_anchor.md, run there on DeepSpeed 0.19.8
    s = DynamicLossScaler(init_scale=2.0 ** 16, scale_window=2, delayed_shift=1)
    assert run(s, "010000000") == [65536, 32768, 32768, 32768, 65536, 65536, 131072, 131072, 262144]


def test_window_without_overflow_doubles_on_the_window_plus_first_clean_step():
    s = DynamicLossScaler(scale_window=1000)
    scales = run(s, "0" * 2001)
    assert scales[999] == 65536          # 0.19.8: not yet after 1000 clean updates (older DeepSpeed: here)
    assert scales[1000] == 131072        # the update of iteration 1000 doubles
    assert scales[1999] == 131072 and scales[2000] == 262144   # then every 1000 more
    assert s.cur_iter == 2001 and s.last_overflow_iter == -1


def test_window_restarts_at_an_overflow():
    s = DynamicLossScaler(scale_window=5, delayed_shift=1)
    scales = run(s, "1" + "0" * 12)
    # overflow at 0 -> 32768; doubling when cur_iter - 0 - 1 is 5, 10: iterations 6 and 11
    assert scales == [32768] * 6 + [65536] * 5 + [131072] * 2
    # an overflow that the hysteresis absorbs also restarts the count
    s = DynamicLossScaler(scale_window=2, delayed_shift=2)
    assert run(s, "0010000") == [65536, 65536, 65536, 65536, 65536, 131072, 131072]
    assert s.last_overflow_iter == 2


def test_hysteresis_delays_the_cut_and_is_not_refilled_by_it():
    s = DynamicLossScaler(scale_window=100, delayed_shift=3)
    msg = s.update_scale(True)
    assert s.cur_scale == 65536 and s.cur_hysteresis == 2
    assert "stays 65536" in msg and "hysteresis 3 -> 2" in msg
    msg = s.update_scale(True)
    assert s.cur_scale == 65536 and s.cur_hysteresis == 1 and "next overflow" in msg
    msg = s.update_scale(True)
    assert s.cur_scale == 32768 and msg == "overflow: skipping step, loss scale 65536 -> 32768"
    # the cut does not refill: every further overflow cuts again, clean steps in between or not
    assert run(s, "0101") == [32768, 16384, 16384, 8192]
    assert s.cur_hysteresis == 1


def test_hysteresis_is_refilled_at_a_growth():
    s = DynamicLossScaler(scale_window=2, delayed_shift=2)
    run(s, "11")                                   # 65536 -> (absorbed) -> 32768
    assert (s.cur_scale, s.cur_hysteresis) == (32768, 1)
    msg = None
    for _ in range(3):                             # iterations 2, 3, 4: stable 0, 1, 2 -> grows at 4
        msg = s.update_scale(False)
    assert msg == "no overflow for 2 steps: loss scale 32768 -> 65536"
    assert (s.cur_scale, s.cur_hysteresis) == (65536, 2)
    run(s, "1")
    assert s.cur_scale == 65536                    # absorbed again


def test_consecutive_hysteresis_refills_on_every_clean_step():
    s = DynamicLossScaler(scale_window=100, delayed_shift=2, consecutive_hysteresis=True)
    # overflow, clean, overflow, clean ...: each overflow is absorbed, the scale never drops
    assert run(s, "10101010") == [65536] * 8
    msg = s.update_scale(True)
    assert s.cur_hysteresis == 1 and s.update_scale(False) == "clean step: hysteresis refilled 1 -> 2"
    assert msg.startswith("overflow: skipping step, loss scale stays 65536")
    # without it, the second overflow cuts
    s = DynamicLossScaler(scale_window=100, delayed_shift=2, consecutive_hysteresis=False)
    assert run(s, "1010") == [65536, 65536, 32768, 32768]


def test_minimum_raises_and_changes_nothing():
    s = DynamicLossScaler(init_scale=4.0, scale_window=2, min_scale=1, delayed_shift=1)
    assert run(s, "11") == [2, 1]
    before = s.state_dict()
    with pytest.raises(LossScaleAtMinimum) as e:
        s.update_scale(True)
    assert isinstance(e.value, RuntimeError)
    assert "minimum" in str(e.value) and "cannot be lowered" in str(e.value)
    assert e.value.scale == 1 and e.value.iteration == 2
    assert s.state_dict() == before and len(s.history) == 2
    # the failed call did not count as an iteration; clean steps at the minimum are fine and the
    # scale grows back (last overflow at 1: stable 0, 1, 2 at iterations 2, 3, 4)
    assert run(s, "000") == [1, 1, 2]


def test_minimum_clamps_and_raise_can_be_turned_off():
    s = DynamicLossScaler(init_scale=16.0, min_scale=3, delayed_shift=1)
    assert run(s, "111") == [8, 4, 3]              # max(scale / 2, min)
    with pytest.raises(LossScaleAtMinimum):
        s.update_scale(True)
    s = DynamicLossScaler(init_scale=2.0, min_scale=1, delayed_shift=1, raise_error_at_min_scale=False)
    assert run(s, "1111") == [1, 1, 1, 1]


def test_minimum_with_hysteresis_left_does_not_raise_yet():
    s = DynamicLossScaler(init_scale=1.0, min_scale=1, delayed_shift=2)
    s.update_scale(True)                           # absorbed by the hysteresis
    with pytest.raises(LossScaleAtMinimum):
        s.update_scale(True)


def test_hysteresis_below_one_never_drops_like_deepspeed():
    s = DynamicLossScaler(delayed_shift=0, scale_window=2)
    msgs = [s.update_scale(True) for _ in range(5)]
    assert s.cur_scale == 65536 and s.cur_hysteresis == -5
    assert "will not drop" in msgs[-1]


def test_start_below_minimum_is_raised_to_it_by_an_overflow():
    s = DynamicLossScaler(init_scale=0.25, min_scale=1, delayed_shift=1)
    assert run(s, "1") == [1]


def test_history_and_messages():
    s = DynamicLossScaler(scale_window=1, delayed_shift=1)
    assert s.update_scale(False) is None           # iteration 0: stable 0
    assert s.update_scale(False) == "no overflow for 1 steps: loss scale 65536 -> 131072"
    s.update_scale(True)
    assert s.history == [(0, 65536, False), (1, 131072, False), (2, 65536, True)]
    assert s.loss_scale == s.cur_scale == 65536


def test_argument_checks():
    with pytest.raises(ValueError, match="scale_window"):
        DynamicLossScaler(scale_window=0)
    with pytest.raises(ValueError, match="min_scale"):
        DynamicLossScaler(min_scale=0)
    with pytest.raises(ValueError, match="loss scale"):
        LossScaler(0.0)
    with pytest.raises(ValueError, match="loss_scale"):
        make_loss_scaler({"enabled": True, "loss_scale": -1})


def test_state_dict_round_trip():
    a = DynamicLossScaler(scale_window=3, delayed_shift=2)
    run(a, "1101000")
    b = DynamicLossScaler()
    b.load_state_dict(a.state_dict())
    seq = "0001011000000"
    assert run(a, seq) == run(b, seq)


# -- building from the config -------------------------------------------------------------------

def test_no_scaler_keys_gives_the_documented_defaults():
    for block in ({"enabled": True}, SimpleNamespace(enabled=True),
                  SimpleNamespace(enabled=True, loss_scale=0, initial_scale_power=16, loss_scale_window=1000,
                                  hysteresis=2, consecutive_hysteresis=False, min_loss_scale=1)):
        s = make_loss_scaler(block)
        assert type(s) is DynamicLossScaler and s.dynamic
        assert (s.cur_scale, s.scale_window, s.delayed_shift, s.cur_hysteresis, s.min_scale) == (65536, 1000, 2, 2, 1)
        assert s.consecutive_hysteresis is False and s.raise_error_at_min_scale is True
        assert (s.cur_iter, s.last_overflow_iter, s.scale_factor) == (0, -1, 2)
    assert FP16_DEFAULTS["initial_scale_power"] == 16


def test_static_and_disabled():
    for block in (None, {"enabled": False}, {}, SimpleNamespace(enabled=False, loss_scale=128)):
        s = make_loss_scaler(block)
        assert type(s) is LossScaler and not s.dynamic and s.cur_scale == 1.0
    s = make_loss_scaler(SimpleNamespace(enabled=True, loss_scale=128))
    assert type(s) is LossScaler and s.cur_scale == 128
    assert run(s, "0101") == [128] * 4
    assert s.update_scale(False) is None
    assert s.update_scale(True) == "overflow: skipping step, loss scale stays 128 (static)"
    assert [h[2] for h in s.history] == [False, True, False, True, False, True]


@pytest.mark.parametrize("case", FIXTURE["configs"], ids=lambda c: json.dumps(c["fp16"]))
def test_config_matches_deepspeed(case):
    s = make_loss_scaler(case["fp16"])
    assert type(s).__name__ == case["class"] and s.dynamic == case["dynamic"]
    assert s.cur_scale == case["cur_scale"]
    if case["dynamic"]:
        for k in ("scale_window", "min_scale", "delayed_shift", "cur_hysteresis", "consecutive_hysteresis",
                  "scale_factor", "cur_iter", "last_overflow_iter", "raise_error_at_min_scale"):
            assert getattr(s, k) == case[k], k


# -- recorded DeepSpeed traces --------------------------------------------------------------------

def test_fixture_is_from_the_reference_version():
    assert FIXTURE["deepspeed_version"] == "0.19.8"
    assert len(FIXTURE["traces"]) >= 40 and any(t["raised_at"] is not None for t in FIXTURE["traces"])


@pytest.mark.parametrize("trace", FIXTURE["traces"], ids=lambda t: t["name"])
def test_matches_recorded_deepspeed_trace(trace):
    s = DynamicLossScaler(**trace["params"])
    want_scales, want_hyst = unrle(trace["scales"]), unrle(trace["hysteresis"])
    got_scales, got_hyst = [], []
    raised_at = None
    for i, ch in enumerate(trace["overflows"]):
        before = s.state_dict()
        try:
            s.update_scale(ch == "1")
        except LossScaleAtMinimum:
            raised_at = i
            assert s.state_dict() == before
            break
        got_scales.append(s.cur_scale)
        got_hyst.append(s.cur_hysteresis)
    assert raised_at == trace["raised_at"]
    assert got_scales == want_scales
    assert got_hyst == want_hyst


# -- the overflow test --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_has_inf_or_nan(dtype):
    ok = torch.tensor([1.0, -2.0, 0.0], dtype=dtype)
    assert not has_inf_or_nan([ok, None, torch.zeros(0, dtype=dtype)])
    assert not has_inf_or_nan([])
    for bad in (float("inf"), float("-inf"), float("nan")):
        t = torch.tensor([1.0, bad, -3.0], dtype=dtype)
        assert has_inf_or_nan([ok, t]) and has_inf_or_nan(t)
    # a value that is finite in fp32 but overflows when it is cast to fp16
    assert has_inf_or_nan([torch.tensor([7e4]).to(torch.float16)])
    assert isinstance(has_inf_or_nan([ok]), bool)


def test_has_inf_or_nan_sparse():
    i = torch.tensor([[0, 2]])
    assert not has_inf_or_nan([torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (4,), check_invariants=True)])
    assert has_inf_or_nan([torch.sparse_coo_tensor(i, torch.tensor([1.0, float("nan")]), (4,), check_invariants=True)])
