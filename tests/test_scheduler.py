"""DeepSpeed's scheduler block: the formulas against DeepSpeed 0.19.8 itself, the engine's stepping
rule, the config's checks, and exact resume from a checkpoint.

tests/data/ds_scheduler_traces.json was written by tools/ds_scheduler_traces.py with DeepSpeed
0.19.8 installed (not needed here)."""
import json
import math
import pathlib
import warnings
from types import SimpleNamespace

import pytest
import torch

import zerolab
from zerolab.config import ConfigError, SchedulerConfig, load_config
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine
from zerolab.scheduler import SCHEDULERS, WarmupCosineLR, WarmupDecayLR, WarmupLR, build_scheduler

TRACES = json.loads((pathlib.Path(__file__).parent / "data" / "ds_scheduler_traces.json").read_text())


def optimizer(kind, lr):
    p = [torch.nn.Parameter(torch.zeros(3))]
    if kind == "SGD":
        return torch.optim.SGD(p, lr=lr, momentum=0.9)
    return getattr(torch.optim, kind)(p, lr=lr, betas=(0.9, 0.999))


def test_the_traces_come_from_deepspeed_0_19_8():
    assert TRACES["deepspeed"] == "0.19.8"
    assert {c["scheduler"]["type"] for c in TRACES["schedules"]} >= set(SCHEDULERS)


@pytest.mark.parametrize("case", TRACES["schedules"], ids=[c["name"] for c in TRACES["schedules"]])
def test_every_schedule_equals_deepspeeds(case):
    """Built as DeepSpeed's engine builds it from the config block (through load_config), stepped
    after every optimizer step: the lr (and OneCycle's betas) each step runs with are DeepSpeed's,
    to the last bit."""
    o = case["optimizer"]
    opt = optimizer(o["type"], o["lr"])
    cfg = load_config({"train_batch_size": 2, "scheduler": case["scheduler"]}, 1).scheduler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # DeepSpeed warns too (unknown warmup_type, total < warmup)
        sched = build_scheduler(cfg, opt)
    lrs, betas = [], []
    for _ in range(case["steps"]):
        g = opt.param_groups[0]
        lrs.append(float(g["lr"]))
        if "betas" in g:
            betas.append([float(b) for b in g["betas"]])
        opt.step()
        sched.step()
    assert lrs == case["lr"]
    assert betas == case["betas"]
    state = sched.state_dict()
    assert {k: state[k] for k in case["state_dict"]} == case["state_dict"]


def test_documented_shapes():
    """The formulas in words, on one example each (the traces pin the digits)."""
    opt = optimizer("AdamW", 1.0)
    w = WarmupLR(opt, warmup_min_lr=0.0, warmup_max_lr=1.0, warmup_num_steps=10, warmup_type="linear")
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        w.step()
    assert seen[:3] == [0.0, 0.0, 0.1] and seen[-1] == 1.0      # first two steps at min_lr: DeepSpeed's order
    opt = optimizer("AdamW", 2.0)
    c = WarmupCosineLR(opt, total_num_steps=20, warmup_num_steps=5, cos_min_ratio=0.0)
    assert opt.param_groups[0]["lr"] == 0.0                    # built at 0, not at the optimizer's lr
    for _ in range(20):
        c.step()
    assert c.get_lr() == [0.0]
    d = WarmupDecayLR(optimizer("AdamW", 1.0), total_num_steps=20, warmup_num_steps=10)
    d.step(15)
    assert math.isclose(d.get_lr()[0], 0.001 * 5 / 10)


# ---- the engine ------------------------------------------------------------------------------

def engine_lrs(block, gas, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    engine = zerolab.initialize(model, {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
        "scheduler": block})
    lrs = []
    for _ in range(steps * gas):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        lrs.append(engine.get_lr()[0])
        engine.step()
    lrs.append(engine.get_lr()[0])
    return lrs, engine.global_steps, engine.lr_scheduler.state_dict()


def engine_cases():
    return [engine_lrs(c["scheduler"], c["gradient_accumulation_steps"], c["micro_steps"] //
                       c["gradient_accumulation_steps"]) for c in TRACES["engine"]]


def test_the_engine_steps_the_scheduler_as_deepspeeds_engine():
    """A real deepspeed.initialize run recorded engine.get_lr() before every micro-step: the
    scheduler moves once per accumulation boundary, after the optimizer step."""
    got = zerolab.launch(engine_cases, 1, echo=False, timeout=120)[0]
    for case, (lrs, steps, state) in zip(TRACES["engine"], got):
        want = case["lr_before_each_micro_step_and_after_the_last"]
        assert max(abs(a - b) for a, b in zip(lrs, want)) <= 1e-12 * max(want), case["name"]
        assert len(lrs) == len(want) and steps == case["global_steps"] and state == case["state_dict"]


def fp16_with_overflows():
    model = torch.nn.Linear(4, 2)
    engine = zerolab.initialize(model, {
        "train_batch_size": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
        "fp16": {"enabled": True, "initial_scale_power": 4, "hysteresis": 1},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.1,
                                                     "warmup_num_steps": 10, "warmup_type": "linear"}}})
    lrs = []
    for i in range(6):
        x = torch.randn(2, 4, dtype=torch.float16)
        loss = engine(x).float().pow(2).mean()
        if i in (2, 3):
            loss = loss * float("inf")                # an overflow: the step is skipped
        lrs.append(engine.get_lr()[0])
        engine.backward(loss)
        engine.step()
    return lrs, engine.skipped_steps, engine.global_steps, engine.lr_scheduler.last_batch_iteration


def test_skipped_fp16_steps_do_not_advance_the_schedule():
    lrs, skipped, steps, last = zerolab.launch(fp16_with_overflows, 1, echo=False, timeout=60)[0]
    assert skipped == 2 and steps == 6 and last == steps - skipped - 1
    assert lrs == pytest.approx([0.0, 0.0, 0.01, 0.01, 0.01, 0.02])


def passed_schedulers():
    out = []
    for how in ("object", "callable"):
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        if how == "object":
            sched = WarmupLR(opt, warmup_min_lr=0.0, warmup_max_lr=0.5, warmup_num_steps=4, warmup_type="linear")
        else:
            sched = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)  # noqa: E731
        engine = zerolab.initialize(model, {"train_batch_size": 1}, opt, lr_scheduler=sched)
        lrs = []
        for _ in range(3):
            lrs.append(engine.get_lr()[0])
            engine.backward(engine(torch.ones(1, 3)).sum())
            engine.step()
        out.append((lrs, engine.lr_scheduler.optimizer is engine.optimizer))
    return out


def test_a_scheduler_passed_to_initialize_steps_the_engines_optimizer():
    (warm, bound1), (step, bound2) = zerolab.launch(passed_schedulers, 1, echo=False, timeout=60)[0]
    assert warm == [0.0, 0.0, 0.125] and bound1
    assert step == [0.5, 0.25, 0.125] and bound2


# ---- the config ------------------------------------------------------------------------------

def error(cfg):
    with pytest.raises(ConfigError) as e:
        load_config({"train_batch_size": 2, **cfg}, 1)
    return str(e.value)


def test_the_scheduler_block_is_read():
    c = load_config({"train_batch_size": 2, "scheduler": {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 1e3, "warmup_max_lr": 3e-4}}}, 1)
    assert c.scheduler == SchedulerConfig("WarmupDecayLR", {"total_num_steps": 1000, "warmup_max_lr": 3e-4})
    for off in ({}, {"scheduler": None}, {"scheduler": {}}):
        assert load_config({"train_batch_size": 2, **off}, 1).scheduler is None
    assert load_config({"train_batch_size": 2, "scheduler": {"type": "StepLR", "params": {"step_size": 3}}},
                       1).scheduler.type == "StepLR"           # torch's, by name, as in DeepSpeed
    assert "WarmupDecayLR" in c.describe()


@pytest.mark.parametrize("cfg,message", [
    ({"scheduler": {"type": "WarmupDecay"}}, "unknown scheduler type 'WarmupDecay' in 'scheduler.type'; "
                                            "did you mean 'WarmupDecayLR'?"),
    ({"scheduler": {"type": "WarmupLR", "params": {"warmup_steps": 10}}},
     "unknown key 'warmup_steps' in 'scheduler.params' for WarmupLR; did you mean 'warmup_num_steps'?"),
    ({"scheduler": {"type": "WarmupCosineLR", "params": {}}},
     "'scheduler.params.total_num_steps' is missing: WarmupCosineLR needs it"),
    ({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}},
     "'scheduler.params.warmup_num_steps' must be an integer > 0, got 0"),
    ({"scheduler": {"params": {"warmup_num_steps": 10}}}, "'scheduler' has no 'type'"),
    ({"scheduler": {"type": "WarmupLR", "parms": {}}}, "unknown key 'parms' in 'scheduler'"),
])
def test_scheduler_errors(cfg, message):
    assert message in error(cfg)


# ---- checkpoints -----------------------------------------------------------------------------

CFG = {"train_batch_size": 12, "gradient_accumulation_steps": 2,
       "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}, "zero_optimization": {"stage": 2},
       "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 3e-3,
                                                    "cycle_first_step_size": 2, "decay_lr_rate": 0.5,
                                                    "decay_step_size": 1}}}


def resume_with_scheduler(ckpt):
    batches = lm_batches(6, 12)
    whole = zerolab.initialize(TinyLM(), CFG)
    train_engine(whole, batches[:3], lm_loss)
    whole.save_checkpoint(ckpt)
    train_engine(whole, batches[3:], lm_loss)
    want, want_lr, want_it = whole.full_params(), whole.get_lr(), whole.lr_scheduler.last_batch_iteration
    want_betas = whole.optimizer.param_groups[0]["betas"]
    whole.close()
    resumed = zerolab.initialize(TinyLM(seed=1), CFG)
    resumed.load_checkpoint(ckpt)
    train_engine(resumed, batches[3:], lm_loss)
    got = resumed.full_params()
    return (all(torch.equal(got[k], want[k]) for k in want), (resumed.get_lr(), want_lr),
            (resumed.lr_scheduler.last_batch_iteration, want_it),
            (resumed.optimizer.param_groups[0]["betas"], want_betas))


def test_resume_with_a_scheduler_is_exact(tmp_path):
    for equal, lr, it, betas in zerolab.launch(resume_with_scheduler, 2, str(tmp_path / "ckpt"), echo=False,
                                               timeout=120):
        assert equal and lr[0] == lr[1] and it == (5, 5) and tuple(betas[0]) == tuple(betas[1])
