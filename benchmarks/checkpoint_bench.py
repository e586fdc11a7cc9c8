"""Checkpoint save and load: time and bytes on disk against the model-state formula.

For N ranks at a given stage: the bytes zerolab writes (all rank files plus meta and model
states) beside 12 Psi (fp32 masters 4 Psi + Adam's two moments 8 Psi: what any ZeRO checkpoint
must hold), the save and load time, and, measured in the same run, torch's baseline: one
process calling ``torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()})``
and ``torch.load`` on the same model (fp32 training, so 4 Psi weights + 8 Psi moments, too).

    python benchmarks/checkpoint_bench.py [--width 512] [--layers 4] [--worlds 1 2 4] [--stage 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

import zerolab
from step_models import make_model          # the same MLP as before (this folder)


def ds_config(stage: int, world: int) -> dict:
    return {"train_batch_size": 4 * world, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage}}


def one_step(engine, width):
    x = torch.randn(4, width)
    engine.backward(engine(x).pow(2).mean())
    engine.step()


def zerolab_run(width, layers, stage, root, repeats):
    engine = zerolab.initialize(make_model(width, layers), ds_config(stage, zerolab.world_size()))
    one_step(engine, width)                              # Adam's moments exist
    save, load = [], []
    for k in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        engine.save_checkpoint(root, tag=f"t{k}")
        save.append(time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        engine.load_checkpoint(root, tag=f"t{k}")
        load.append(time.perf_counter() - t0)
    psi = sum(p.numel() for p in engine.module.parameters())
    return psi, statistics.median(save), statistics.median(load)


def torch_baseline(width, layers, root, repeats):
    model = make_model(width, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, width)).pow(2).mean().backward()
    opt.step()
    path = Path(root) / "torch.pt"
    save, load = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
        save.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sd = torch.load(path, weights_only=True)
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optimizer"])
        load.append(time.perf_counter() - t0)
    return path.stat().st_size, statistics.median(save), statistics.median(load)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t_bytes, t_save, t_load = torch_baseline(a.width, a.layers, tmp, a.repeats)
        print(f"torch.save/load baseline (1 process): {t_bytes:,} B, save {t_save * 1e3:.1f} ms, "
              f"load {t_load * 1e3:.1f} ms")
        print(f"{'N':>3} {'bytes':>12} {'12 Psi':>12} {'bytes/12Psi':>12} {'save ms':>9} {'x torch':>8} "
              f"{'load ms':>9} {'x torch':>8}")
        for n in a.worlds:
            root = os.path.join(tmp, f"n{n}")
            psi, save, load = zerolab.launch(zerolab_run, n, a.width, a.layers, a.stage, root, a.repeats,
                                             echo=False)[0]
            nbytes = folder_bytes(Path(root) / f"t{a.repeats - 1}")
            print(f"{n:>3} {nbytes:>12,} {12 * psi:>12,} {nbytes / (12 * psi):>12.3f} {save * 1e3:>9.1f} "
                  f"{save / t_save:>8.2f} {load * 1e3:>9.1f} {load / t_load:>8.2f}")


if __name__ == "__main__":
    main()
