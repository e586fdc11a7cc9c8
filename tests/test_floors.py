"""The floors of benchmarks/step_time.py: DeepSpeed's calls for ResMLP written by hand with plain
torch.distributed (``step_models.hand_zero``). A floor is only a floor if it trains what the engines
train: each gives torch DDP's losses, step by step, at 2 and 3 ranks. And the kit that takes
DeepSpeed to a lent device machine (tools/device_deepspeed.sh) refuses clearly without its wheels."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

import zerolab

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from step_models import ResMLP, hand_zero  # noqa: E402

KIT = ROOT / "tools" / "device_deepspeed.sh"


def _losses(steps: int):
    torch.manual_seed(1 + dist.get_rank())
    x, y = torch.randn(8, ResMLP.WIDTH), torch.randn(8, ResMLP.WIDTH)
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp, loss_fn = DDP(ResMLP()), nn.MSELoss()
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    ticks = {stage: [] for stage in (0, 1, 3)}
    floors = {stage: hand_zero(x, y, stage, lr=1e-3, tick=ticks[stage].append) for stage in (0, 1, 3)}
    rows = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        rows.append((loss.item(), *(f().item() for f in floors.values())))
    return rows, ticks


@pytest.mark.parametrize("world", [2, 3])
def test_the_floors_train_what_ddp_trains(world):
    rows, ticks = zerolab.launch(_losses, world, 4, backend="gloo", echo=False, timeout=120)[0]
    for ddp, *floors in rows:
        # the same sums in another order (one flat all-reduce or reduce-scatter against DDP's buckets):
        # within a few fp32 ulps of the loss, over 4 clipped Adam steps at lr 1e-3
        for floor in floors:
            assert floor == pytest.approx(ddp, rel=2e-6, abs=0)
    assert rows[-1][0] < rows[0][0]            # and they train: the loss went down
    # the phases step_phases.py times, in order, once a step
    phases = ["forward", "backward", "reduce", "norm", "step"]
    assert ticks[0] == phases * 4
    assert ticks[1] == ticks[3] == (phases + ["publish"]) * 4


def test_hand_zero_takes_stage_0_1_or_3():
    with pytest.raises(ValueError, match="stage 0, 1 or 3, not 2"):
        hand_zero(torch.zeros(1, ResMLP.WIDTH), torch.zeros(1, ResMLP.WIDTH), 2)


def test_device_kit_explains_itself_and_refuses_without_its_wheels(tmp_path):
    run = subprocess.run(["bash", str(KIT), "--help"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "device_deepspeed.sh wheels" in run.stdout and "carry" in run.stdout
    run = subprocess.run(["bash", str(KIT), "run", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "WHEELS": str(tmp_path / "none")})
    assert run.returncode == 2
    assert "run '" in run.stderr and "wheels' here first, and carry .whl" in run.stderr
    run = subprocess.run(["bash", str(KIT), "fly"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
