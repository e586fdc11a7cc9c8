"""Write tests/data/ds_scheduler_traces.json: DeepSpeed 0.19.8's own learning-rate sequences.

Run with a Python that has DeepSpeed 0.19.8 installed (not the project's venv; CPU is enough):

    python3 -m venv /tmp/dsvenv && /tmp/dsvenv/bin/pip install torch==2.13.0
    DS_BUILD_OPS=0 /tmp/dsvenv/bin/pip install deepspeed==0.19.8
    DS_ACCELERATOR=cpu /tmp/dsvenv/bin/python tools/ds_scheduler_traces.py

Two kinds of trace:

* ``schedules``: each scheduler built the way DeepSpeed's engine builds it from the config's
  ``scheduler`` block (``_scheduler_from_config``: ``getattr(lr_schedules, type)(optimizer,
  **params)``, or a ``torch.optim.lr_scheduler`` class by name) on a torch optimizer with the
  config's lr, then stepped once per optimizer step as the engine steps it. Recorded: the lr
  (and Adam's betas) in the optimizer's param group *when each optimizer step runs*, and the
  scheduler's ``state_dict()`` at the end.
* ``engine``: a real ``deepspeed.initialize`` (one rank, gloo on CPU, ZeRO stage 1) trained for
  a few steps with gradient accumulation; recorded: ``engine.get_lr()`` before each
  ``engine.step()`` and after the last. This pins when the engine steps the scheduler (once per
  accumulation boundary, after the optimizer step).

tests/test_scheduler.py checks zerolab's schedulers and engine against this file.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "ds_scheduler_traces.json"

# (name, optimizer (type, lr), scheduler block, steps)
CASES = [
    ("warmup_log", ("AdamW", 3e-3), {"type": "WarmupLR", "params": {
        "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}}, 30),
    ("warmup_linear", ("AdamW", 3e-3), {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 12, "warmup_type": "linear"}}, 30),
    ("warmup_max_from_optimizer", ("AdamW", 3e-3), {"type": "WarmupLR", "params": {"warmup_num_steps": 8}}, 20),
    ("warmup_defaults", ("Adam", 2e-3), {"type": "WarmupLR", "params": {}}, 25),
    ("warmup_one_step", ("AdamW", 3e-3), {"type": "WarmupLR", "params": {
        "warmup_max_lr": 1e-3, "warmup_num_steps": 1}}, 6),
    ("warmup_unknown_type", ("AdamW", 3e-3), {"type": "WarmupLR", "params": {
        "warmup_max_lr": 1e-3, "warmup_num_steps": 10, "warmup_type": "cosine"}}, 15),
    ("warmup_sgd", ("SGD", 0.1), {"type": "WarmupLR", "params": {
        "warmup_min_lr": 0.01, "warmup_max_lr": 0.1, "warmup_num_steps": 5, "warmup_type": "linear"}}, 10),
    ("decay_log", ("AdamW", 3e-3), {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 40, "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}}, 50),
    ("decay_linear", ("AdamW", 3e-3), {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 30, "warmup_max_lr": 2e-3, "warmup_num_steps": 6, "warmup_type": "linear"}}, 35),
    ("decay_default_max", ("AdamW", 3e-3), {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 20, "warmup_num_steps": 5}}, 25),
    ("decay_total_below_warmup", ("AdamW", 3e-3), {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 5, "warmup_max_lr": 1e-3, "warmup_num_steps": 10}}, 15),
    ("cosine_log", ("AdamW", 3e-3), {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 40, "warmup_num_steps": 10}}, 50),
    ("cosine_linear_min_ratio", ("AdamW", 1e-3), {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 30, "warmup_num_steps": 8, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05,
        "warmup_type": "linear"}}, 36),
    ("cosine_total_equals_warmup", ("AdamW", 1e-3), {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 6, "warmup_num_steps": 6}}, 10),
    ("onecycle_adam", ("AdamW", 3e-3), {"type": "OneCycle", "params": {
        "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 8, "cycle_momentum": True,
        "cycle_min_mom": 0.85, "cycle_max_mom": 0.95, "decay_lr_rate": 0.5, "decay_step_size": 4,
        "decay_mom_rate": 0.01}}, 40),
    ("onecycle_asymmetric_no_decay", ("AdamW", 3e-3), {"type": "OneCycle", "params": {
        "cycle_min_lr": 2e-4, "cycle_max_lr": 2e-3, "cycle_first_step_size": 5, "cycle_second_step_size": 9}}, 30),
    ("onecycle_stairs", ("Adam", 3e-3), {"type": "OneCycle", "params": {
        "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 10, "cycle_first_stair_count": 3,
        "cycle_second_stair_count": 2, "decay_lr_rate": 0.1, "decay_step_size": 3}}, 35),
    ("onecycle_sgd_no_betas", ("SGD", 0.1), {"type": "OneCycle", "params": {
        "cycle_min_lr": 0.01, "cycle_max_lr": 0.1, "cycle_first_step_size": 4, "decay_lr_rate": 0.2,
        "decay_step_size": 2}}, 16),
    ("onecycle_no_momentum", ("AdamW", 3e-3), {"type": "OneCycle", "params": {
        "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 6, "cycle_momentum": False}}, 20),
    ("lr_range_test", ("AdamW", 3e-3), {"type": "LRRangeTest", "params": {
        "lr_range_test_min_lr": 1e-5, "lr_range_test_step_size": 5, "lr_range_test_step_rate": 2.0}}, 20),
    ("lr_range_test_staircase", ("SGD", 0.1), {"type": "LRRangeTest", "params": {
        "lr_range_test_min_lr": 1e-3, "lr_range_test_step_size": 4, "lr_range_test_staircase": True}}, 20),
    ("torch_steplr", ("AdamW", 1e-3), {"type": "StepLR", "params": {"step_size": 5, "gamma": 0.5}}, 20),
]

ENGINE_CASES = [
    ("engine_warmup_decay_gas2", {"type": "WarmupDecayLR", "params": {
        "total_num_steps": 12, "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 4,
        "warmup_type": "linear"}}, 2, 10),
    ("engine_cosine_gas1", {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 10, "warmup_num_steps": 3}}, 1, 12),
    ("engine_onecycle_gas3", {"type": "OneCycle", "params": {
        "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 3, "decay_lr_rate": 0.5,
        "decay_step_size": 2}}, 3, 8),
]


def make_optimizer(kind: str, lr: float):
    p = [torch.nn.Parameter(torch.zeros(3))]
    if kind == "SGD":
        return torch.optim.SGD(p, lr=lr, momentum=0.9)
    return getattr(torch.optim, kind)(p, lr=lr, betas=(0.9, 0.999))


def scheduler_from_config(block, optimizer):
    """DeepSpeed 0.19.8's engine._scheduler_from_config, with the config's block."""
    name = block["type"]
    cls = getattr(lr_schedules, name) if hasattr(lr_schedules, name) else getattr(torch.optim.lr_scheduler, name)
    return cls(optimizer, **block["params"])


def trace_schedule(name, opt_spec, block, steps):
    opt = make_optimizer(*opt_spec)
    sched = scheduler_from_config(block, opt)
    lrs, betas = [], []
    for _ in range(steps):
        g = opt.param_groups[0]
        lrs.append(float(g["lr"]))
        if "betas" in g:
            betas.append([float(b) for b in g["betas"]])
        opt.step()            # what the engine does at a boundary: the optimizer step, then the scheduler
        sched.step()
    state = {k: v for k, v in sched.state_dict().items() if isinstance(v, (int, float, bool, str))}
    return {"name": name, "optimizer": {"type": opt_spec[0], "lr": opt_spec[1]}, "scheduler": block,
            "steps": steps, "lr": lrs, "betas": betas, "state_dict": state,
            "final_lr": float(opt.param_groups[0]["lr"])}


def trace_engine(name, block, gas, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": 1}, "scheduler": block}
    engine, _, _, sched = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    lrs = []
    for _ in range(steps * gas):
        x = torch.randn(2, 4)
        loss = engine(x).pow(2).mean()
        engine.backward(loss)
        lrs.append(float(engine.get_lr()[0]))
        engine.step()
    lrs.append(float(engine.get_lr()[0]))
    return {"name": name, "scheduler": block, "gradient_accumulation_steps": gas, "optimizer_lr": 1e-3,
            "micro_steps": steps * gas, "lr_before_each_micro_step_and_after_the_last": lrs,
            "global_steps": engine.global_steps, "state_dict": sched.state_dict()}


def main() -> int:
    assert deepspeed.__version__ == "0.19.8", deepspeed.__version__
    out = {"deepspeed": deepspeed.__version__, "torch": torch.__version__,
           "schedules": [trace_schedule(*c) for c in CASES]}
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
    deepspeed.init_distributed(dist_backend="gloo")
    out["engine"] = [trace_engine(*c) for c in ENGINE_CASES]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    n = sum(c["steps"] for c in out["schedules"]) + sum(len(c["lr_before_each_micro_step_and_after_the_last"])
                                                        for c in out["engine"])
    print(f"wrote {OUT}: {len(out['schedules'])} schedules, {len(out['engine'])} engine runs, {n} lr values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
