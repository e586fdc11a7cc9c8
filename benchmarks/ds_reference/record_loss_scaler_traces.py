"""Record DeepSpeed's dynamic loss scaler behaviour as a small JSON fixture.

zerolab's `zerolab/precision/loss_scaler.py` claims to behave exactly like the scaler that DeepSpeed's ZeRO
optimizers build (`deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler` via `CreateLossScaler`).
This script drives the real thing with many parameter combinations and overflow sequences and
writes what it did to `tests/data/ds_loss_scaler_traces.json`; `tests/test_loss_scaler.py` replays
the same sequences on zerolab's scaler and compares, without needing DeepSpeed.

It needs DeepSpeed, which zerolab does not depend on. Use a separate environment:

    python3 -m venv /work/dsvenv
    /work/dsvenv/bin/pip install torch==2.13.0          # CPU torch first, or pip pulls a CUDA build
    DS_BUILD_OPS=0 /work/dsvenv/bin/pip install deepspeed==0.19.8
    /work/dsvenv/bin/python benchmarks/ds_reference/record_loss_scaler_traces.py

Fixture format (one entry per case):
    params     the constructor arguments (init_scale, scale_window, min_scale, delayed_shift,
               consecutive_hysteresis)
    overflows  a string of '0'/'1', one character per update_scale call
    scales     the scale after each completed call, run-length encoded as [[value, count], ...]
    hysteresis the cur_hysteresis after each completed call, same encoding
    raised_at  index of the call that raised (state unchanged by it; the replay stops there), or None
    error      the exception message when it raised
The "configs" section records the scaler that CreateLossScaler builds from an fp16 config block, the
same way DeepSpeed's ZeRO stage 1/2/3 optimizers build theirs.
"""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "ds_loss_scaler_traces.json"


def _init_single_rank_group():
    # DeepSpeed's update_scale asks deepspeed.comm for the rank (to decide who logs), so a process
    # group must exist. A one-rank gloo group on CPU is enough.
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29547"),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def _rle(values):
    out = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def _num(x):
    # keep integers integral in the JSON, so the fixture reads like the scales people see
    x = float(x)
    return int(x) if x.is_integer() else x


def run_case(DynamicLossScaler, params, overflows):
    s = DynamicLossScaler(**params)
    scales, hyst = [], []
    raised_at, error = None, None
    for i, ch in enumerate(overflows):
        try:
            s.update_scale(ch == "1")
        except Exception as e:  # DeepSpeed raises a bare Exception at the minimum scale
            raised_at, error = i, str(e)
            break
        scales.append(_num(s.cur_scale))
        hyst.append(int(s.cur_hysteresis))
    return {"params": params, "overflows": overflows, "scales": _rle(scales), "hysteresis": _rle(hyst),
            "raised_at": raised_at, "error": error}


def make_cases():
    rng = random.Random(20240519)
    cases = []

    def add(name, overflows, init_scale=2.0**16, scale_window=2, min_scale=1, delayed_shift=2,
            consecutive_hysteresis=False):
        params = dict(init_scale=init_scale, scale_window=scale_window, min_scale=min_scale,
                      delayed_shift=delayed_shift, consecutive_hysteresis=consecutive_hysteresis)
        cases.append((name, params, overflows))

    def seq(n, p):
        return "".join("1" if rng.random() < p else "0" for _ in range(n))

    # the trace quoted in the anchor: 2^16, window 2, hysteresis 1, one overflow at iteration 1
    add("anchor", "010000000", delayed_shift=1)
    # DeepSpeed's fp16 defaults (2^16, window 1000, hysteresis 2, min 1): first doubling after
    # 1000 clean steps, then an overflow burst, then the window counted again from the overflow
    add("defaults_long", "0" * 1200 + "11" + "0" * 1100 + "1" + "0" * 1001, scale_window=1000)

    # the grid: hysteresis x consecutive x window, a mixed random sequence each
    for h in (0, 1, 2, 3):
        for cons in (False, True):
            for w in (1, 2, 5):
                add(f"grid_h{h}_c{int(cons)}_w{w}", seq(40, 0.3), scale_window=w, delayed_shift=h,
                    consecutive_hysteresis=cons)
    # bursts of overflows (runs) separated by clean stretches
    for h in (1, 2, 3):
        for cons in (False, True):
            bursts = "".join("1" * rng.randint(1, 4) + "0" * rng.randint(0, 7) for _ in range(6))
            add(f"bursts_h{h}_c{int(cons)}", bursts, scale_window=3, delayed_shift=h,
                consecutive_hysteresis=cons)
    # driving the scale down to the minimum: it raises at the floor
    for h in (1, 2, 3):
        for cons in (False, True):
            for mn in (1, 2):
                add(f"floor_h{h}_c{int(cons)}_min{mn}", seq(40, 0.75), init_scale=2.0**4, scale_window=2,
                    min_scale=mn, delayed_shift=h, consecutive_hysteresis=cons)
    add("floor_all_overflow", "1" * 20, init_scale=2.0**3, min_scale=1, delayed_shift=1)
    # a minimum that is not a power of two below the start: max(scale/2, min) clamps onto it
    add("floor_clamped_min3", "1" * 10, init_scale=2.0**4, min_scale=3, delayed_shift=1)
    # a start below the minimum (initial_scale_power -2, min 1): an overflow *raises* the scale to min
    add("start_below_min", "0011100", init_scale=0.25, min_scale=1, delayed_shift=1)
    # hysteresis 0 (DeepSpeed's config accepts it): cur_hysteresis never equals 1, the scale never drops
    add("hysteresis_zero_all_overflow", "1" * 12, delayed_shift=0)
    # a float start scale that is not a power of two
    add("odd_init", seq(30, 0.35), init_scale=1000.0, scale_window=2, min_scale=1, delayed_shift=2)
    return cases


def config_cases(CreateLossScaler, DeepSpeedFP16Config, torch):
    """The scaler DeepSpeed's ZeRO optimizers build from an fp16 block (same call as stage_1_and_2.py)."""
    blocks = [
        {"enabled": True},
        {"enabled": True, "loss_scale": 0},
        {"enabled": True, "loss_scale": 128},
        {"enabled": True, "loss_scale": 0.5},
        {"enabled": True, "initial_scale_power": 8, "hysteresis": 3},
        {"enabled": True, "loss_scale_window": 50, "min_loss_scale": 4, "consecutive_hysteresis": True},
        {"enabled": False},
        {},
    ]
    out = []
    for block in blocks:
        cfg = DeepSpeedFP16Config(**block)
        dtype = torch.float16 if cfg.enabled else torch.float32  # bf16/fp32 models take the non-fp16 branch
        s = CreateLossScaler(dtype=dtype, static_loss_scale=cfg.loss_scale,
                             dynamic_scaling=cfg.loss_scale == 0, dynamic_loss_args=cfg.dynamic_loss_scale_args())
        rec = {"fp16": block, "class": type(s).__name__, "dynamic": bool(s.dynamic), "cur_scale": _num(s.cur_scale)}
        if s.dynamic:
            rec.update(scale_window=s.scale_window, min_scale=_num(s.min_scale), delayed_shift=s.delayed_shift,
                       cur_hysteresis=s.cur_hysteresis, consecutive_hysteresis=s.consecutive_hysteresis,
                       scale_factor=_num(s.scale_factor), cur_iter=s.cur_iter,
                       last_overflow_iter=s.last_overflow_iter,
                       raise_error_at_min_scale=s.raise_error_at_min_scale)
        out.append(rec)
    return out


def main():
    deepspeed = _init_single_rank_group()
    import logging

    import torch
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler, DynamicLossScaler
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    from deepspeed.utils import logger
    logger.setLevel(logging.ERROR)  # the per-overflow log lines are not what we record

    traces = []
    for name, params, overflows in make_cases():
        rec = run_case(DynamicLossScaler, params, overflows)
        rec["params"] = {k: (_num(v) if k in ("init_scale", "min_scale") else v) for k, v in params.items()}
        traces.append({"name": name, **rec})
    data = {
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "source": "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler / CreateLossScaler",
        "traces": traces,
        "configs": config_cases(CreateLossScaler, DeepSpeedFP16Config, torch),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as f:
        # one case per line: small, and diffs stay readable when DeepSpeed changes
        f.write("{\n")
        head = [k for k in data if k not in ("traces", "configs")]
        for k in head:
            f.write(f"  {json.dumps(k)}: {json.dumps(data[k])},\n")
        for key in ("traces", "configs"):
            f.write(f"  {json.dumps(key)}: [\n")
            f.write(",\n".join("    " + json.dumps(r) for r in data[key]))
            f.write("\n  ]" + (",\n" if key == "traces" else "\n"))
        f.write("}\n")
    n_raise = sum(t["raised_at"] is not None for t in traces)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(traces)} traces ({n_raise} hit the minimum), "
          f"{len(data['configs'])} configs, DeepSpeed {deepspeed.__version__}")


if __name__ == "__main__":
    sys.exit(main())
