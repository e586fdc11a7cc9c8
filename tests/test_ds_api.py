"""A DeepSpeed training script runs on zerolab with one line changed (issue 13).

The script below is written the way DeepSpeed's own examples are (argparse with
``deepspeed.add_config_arguments``, ``deepspeed.initialize(args=..., model=...,
model_parameters=..., training_data=...)``, the data loader it returns, ``engine.backward`` /
``engine.step``, ``save_checkpoint``). Its only change is the import line."""
import json
import os
import subprocess
import sys

import pytest
import torch

import zerolab
import zerolab.deepspeed as ds
from zerolab.models import MLP

DEEPSPEED_SCRIPT = '''
import argparse
import json

import torch
import torch.nn.functional as F
import deepspeed


class RandomRegression(torch.utils.data.Dataset):
    def __init__(self, n=48):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 13, generator=g)
        self.y = torch.randn(n, 7, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(13, 31)
        self.fc2 = torch.nn.Linear(31, 7)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def main():
    parser = argparse.ArgumentParser(description="a DeepSpeed example")
    parser.add_argument("--local_rank", type=int, default=-1, help="local rank passed from distributed launcher")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save_dir", type=str, default=None)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed()
    net = Net()
    parameters = filter(lambda p: p.requires_grad, net.parameters())
    model_engine, optimizer, trainloader, lr_scheduler = deepspeed.initialize(
        args=args, model=net, model_parameters=parameters, training_data=RandomRegression())

    losses, lrs = [], []
    for epoch in range(args.epochs):
        for i, (inputs, labels) in enumerate(trainloader):
            inputs, labels = inputs.to(model_engine.device), labels.to(model_engine.device)
            if model_engine.bfloat16_enabled():
                inputs = inputs.bfloat16()
            loss = F.mse_loss(model_engine(inputs).float(), labels)
            model_engine.backward(loss)
            model_engine.step()
            losses.append(loss.item())
            lrs.append(model_engine.get_lr()[0])
    if args.save_dir:
        model_engine.save_checkpoint(args.save_dir)
    if model_engine.global_rank == 0:
        print("RESULT " + json.dumps({
            "losses": losses, "lrs": lrs, "batches": len(trainloader), "steps": model_engine.global_steps,
            "stage": model_engine.zero_optimization_stage(), "world": model_engine.world_size,
            "gas": model_engine.gradient_accumulation_steps(),
            "micro": model_engine.train_micro_batch_size_per_gpu(),
            "scheduler": type(lr_scheduler).__name__, "optimizer": type(optimizer).__name__}))


if __name__ == "__main__":
    main()
'''

CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 2},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2,
                                                       "warmup_num_steps": 4, "warmup_type": "linear"}}}


def one_line_changed(script: str) -> str:
    out = script.replace("\nimport deepspeed\n", "\nimport zerolab.deepspeed as deepspeed\n")
    changed = [(a, b) for a, b in zip(script.splitlines(), out.splitlines()) if a != b]
    assert changed == [("import deepspeed", "import zerolab.deepspeed as deepspeed")]
    return out


def run(cmd, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env["PET_LOG_DIR"] = str(tmp_path / "torchrun-logs")     # torchrun's --log-dir: not a folder in /tmp a run
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout[-2000:]
    return json.loads(lines[0][len("RESULT "):])


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(one_line_changed(DEEPSPEED_SCRIPT))
    (tmp_path / "ds_config.json").write_text(json.dumps(CONFIG))
    return path


def test_a_deepspeed_example_runs_under_torchrun_on_two_ranks(script, tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    got = run([torchrun, "--standalone", "--nproc_per_node", "2", str(script), "--deepspeed",
               "--deepspeed_config", "ds_config.json", "--save_dir", "ckpt"], tmp_path)
    # 48 samples, 2 ranks, micro-batch 4: 6 micro-batches per rank per epoch, 3 optimizer steps
    assert got["batches"] == 6 and got["steps"] == 6 and got["world"] == 2
    assert (got["stage"], got["gas"], got["micro"]) == (2, 2, 4)
    assert got["scheduler"] == "WarmupLR" and got["optimizer"] == "AdamW"
    # read after each micro-step: the scheduler moves once per optimizer step (every 2 micro-batches);
    # linear warmup over 4 steps from 0, and DeepSpeed's first step leaves it at warmup_min_lr
    assert got["lrs"][:8] == pytest.approx([0.0, 0.0, 0.0, 0.0025, 0.0025, 0.005, 0.005, 0.0075])
    assert got["lrs"][-1] == pytest.approx(1e-2)
    assert sum(got["losses"][-4:]) < sum(got["losses"][:4])
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step6"


def test_the_same_script_runs_with_plain_python_on_one_rank(script, tmp_path):
    got = run([sys.executable, str(script), "--deepspeed_config", "ds_config.json", "--epochs", "1"], tmp_path)
    assert got["batches"] == 12 and got["steps"] == 6 and got["world"] == 1


# ---- the call itself, in a crew -------------------------------------------------------------

def call_forms(config):
    model = MLP()
    out = {}
    engine, opt, loader, sched = ds.initialize(model=model, model_parameters=model.parameters(), config=config)
    out["tuple"] = (type(engine).__name__, opt is engine.optimizer, loader, sched)
    engine.close()
    args = type("Args", (), {"deepspeed_config": config})()
    engine, *_ = ds.initialize(args=args, model=model)
    out["args"] = engine.train_batch_size()
    engine.close()
    engine, *_ = ds.initialize(model=model, config_params=config)
    out["config_params"] = engine.zero_optimization_stage()
    engine.close()
    errors = []
    for kwargs in ({"args": args, "config": config}, {}):
        try:
            ds.initialize(model=model, **kwargs)
        except (ValueError, NotImplementedError) as e:
            errors.append(str(e))
    out["errors"] = errors
    # DeepSpeed trains model_parameters, in their groups with their own settings
    first = list(model.parameters())[:1]
    engine, opt, *_ = ds.initialize(model=model, model_parameters=first, config=config)
    out["subset"] = [len(pg["params"]) for pg in opt.param_groups], len(engine.stage.named)
    engine.close()
    ps = list(model.parameters())
    engine, opt, *_ = ds.initialize(model=model, config=config, model_parameters=[
        {"params": ps[:2], "weight_decay": 0.0}, {"params": ps[2:], "lr": 0.05}])
    out["groups"] = [(pg["lr"], pg["weight_decay"]) for pg in opt.param_groups]
    engine.close()
    plain = zerolab.initialize(model, config)          # zerolab's own call is unchanged: the engine alone
    out["plain"] = (type(plain).__name__, plain.gradient_accumulation_steps, plain.gradient_accumulation_steps())
    return out


def test_deepspeeds_call_forms_and_errors():
    config = {"train_batch_size": 8, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 1},
              "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
    got = zerolab.launch(call_forms, 2, config, echo=False, timeout=60)[0]
    assert got["tuple"] == ("DeepSpeedEngine", True, None, None)
    assert got["args"] == 8 and got["config_params"] == 1
    e = got["errors"]
    assert len(e) == 2
    assert "given deepspeed configs in the deepspeed arguments and deepspeed.initialize() function call" in e[0]
    assert "DeepSpeed requires --deepspeed_config" in e[1]
    assert got["subset"] == ([1], 1)
    assert got["groups"] == [(0.1, 0.0), (0.05, 0)]
    assert got["plain"] == ("Engine", 2, 2)


def test_gradient_accumulation_steps_is_still_an_int():
    from zerolab.zero.engine import _CallableInt
    n = _CallableInt(3)
    assert n == 3 and n() == 3 and 6 // n == 2 and isinstance(n(), int)
    assert torch.zeros(6).view(n, -1).shape == (3, 2)
