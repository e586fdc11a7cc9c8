"""DeepSpeed 0.19.8's offload against zerolab's, on the same model, data and config.

    python benchmarks/ds_reference/ds_offload_parity.py --ds-python /path/to/dsvenv/bin/python

Trains a small MLP for 4 steps (2 ranks, gloo, fp32, AdamW with weight decay, accumulation 2,
clipping 0.5) at ZeRO stage 2, with and without ``offload_optimizer: cpu``, once under DeepSpeed
(its ``DeepSpeedCPUAdam`` steps the offloaded states) and once under zerolab, and prints the
largest parameter difference between each pair. Measured here (torch 2.13.0 CPU, DeepSpeed
0.19.8): offload vs no offload is bit-identical in both (0.0), and zerolab vs DeepSpeed differs by
1.7e-07 after 4 steps at lr 1e-2, with or without offload (their Adam kernels round differently).

This file is both the DeepSpeed side (run by torchrun in the DeepSpeed venv, ``--ds-side``) and the
driver (run with zerolab's venv).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from torch import nn


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))


def config(stage, off, world):
    zero = {"stage": stage, "reduce_bucket_size": 3000}
    if off != "none":
        zero["offload_optimizer"] = {"device": off}
    return {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "train_batch_size": 8 * world,
            "gradient_clipping": 0.5, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.1}},
            "zero_optimization": zero}


def train(engine, rank, world):
    g = torch.Generator().manual_seed(7)
    for _ in range(4):
        x, y = torch.randn(8 * world, 32, generator=g), torch.randn(8 * world, 8, generator=g)
        for k in range(2):
            lo = (k * world + rank) * 4
            engine.backward((engine(x[lo:lo + 4]) - y[lo:lo + 4]).square().mean())
            engine.step()


def ds_side(stage, off, out):
    import torch.distributed as dist
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    m = model()
    engine, *_ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=config(stage, off, world))
    train(engine, rank, world)
    params = {n: safe_get_full_fp32_param(p).clone() for n, p in engine.module.named_parameters()}
    if rank == 0:
        torch.save(params, out)


def zerolab_side(stage, off):
    import zerolab
    engine = zerolab.initialize(model(), config(stage, off, zerolab.world_size()))
    train(engine, zerolab.rank(), zerolab.world_size())
    return engine.full_params()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-python")
    ap.add_argument("--ds-side", nargs=3, metavar=("STAGE", "OFFLOAD", "OUT"))
    ap.add_argument("--stage", type=int, default=2)
    a = ap.parse_args()
    if a.ds_side:
        ds_side(int(a.ds_side[0]), a.ds_side[1], a.ds_side[2])
        return
    import zerolab
    tmp = tempfile.mkdtemp()
    ds, zl = {}, {}
    for off in ("none", "cpu"):
        out = os.path.join(tmp, f"{off}.pt")
        subprocess.run([a.ds_python, "-m", "torch.distributed.run", "--nproc_per_node", "2", __file__,
                        "--ds-side", str(a.stage), off, out], check=True, capture_output=True,
                       env={**os.environ, "DS_ACCELERATOR": "cpu"})
        ds[off] = torch.load(out)
        zl[off] = zerolab.launch(zerolab_side, 2, a.stage, off, echo=False)[0]
    diff = lambda x, y: max(float((x[k] - y[k]).abs().max()) for k in x)  # noqa: E731
    for off in ("none", "cpu"):
        print(f"stage {a.stage}, offload_optimizer={off}: max |DeepSpeed - zerolab| = {diff(ds[off], zl[off]):.3g}")
    print(f"DeepSpeed: offload vs none {diff(ds['none'], ds['cpu']):.3g}; "
          f"zerolab: offload vs none {diff(zl['none'], zl['cpu']):.3g}")


if __name__ == "__main__":
    sys.exit(main())
