"""Step time of zerolab stages 0-3 against torch DDP, ZeroRedundancyOptimizer and FSDP2.

One run, same model, same data, same ranks (2 by default, gloo on CPU or NCCL on GPUs):
prints the median step time of each, its ratio to DDP, and the bytes each rank put on the
wire per step (zerolab from its ledger; the torch baselines by the same ring convention).

    python benchmarks/step_time.py [--world 2] [--steps 20] [--width 512] [--layers 4]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

import zerolab


def make_model(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods, nn.Linear(width, 1))


def timed_steps(step, steps: int, device) -> float:
    for _ in range(5):                                   # warm-up
        step()
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(width, layers, batch, steps):
    info = zerolab.rank_info()
    dev = info.device
    torch.manual_seed(1 + info.rank)
    x = torch.randn(batch, width, device=dev)
    y = torch.randn(batch, 1, device=dev)
    loss_fn = nn.MSELoss()
    results = {}
    psi = sum(p.numel() for p in make_model(width, layers).parameters())

    # torch DDP
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(make_model(width, layers).to(dev))
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    def ddp_step():
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
    results["torch DDP *"] = (timed_steps(ddp_step, steps, dev), 2 * psi * 4)
    del ddp, opt

    # torch ZeroRedundancyOptimizer (stage 1 with DDP's all-reduce + a broadcast per param)
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ddp = DDP(make_model(width, layers).to(dev))
    zro = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    def zro_step():
        zro.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        zro.step()
    results["torch ZeroRedundancyOptimizer *"] = (timed_steps(zro_step, steps, dev), 3 * psi * 4)
    del ddp, zro

    # torch FSDP2
    try:
        from torch.distributed.fsdp import fully_shard
        model = make_model(width, layers).to(dev)
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        def fsdp_step():
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        results["torch FSDP2 (fully_shard) *"] = (timed_steps(fsdp_step, steps, dev), 3 * psi * 4)
        del model, opt
    except Exception as e:                               # report, don't hide
        results["torch FSDP2 (fully_shard) *"] = (float("nan"), f"failed: {type(e).__name__}: {e}"[:80])

    for stage in (0, 1, 2, 3):
        cfg = {"train_batch_size": batch * info.world_size, "gradient_clipping": 1.0,
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
               "zero_optimization": {"stage": stage}}
        engine = zerolab.initialize(make_model(width, layers), cfg)
        def z_step():
            engine.backward(loss_fn(engine(x), y))
            engine.step()
        t = timed_steps(z_step, steps, dev)
        mark = engine.ledger.mark()
        z_step()
        results[f"zerolab stage {stage}"] = (t, engine.ledger.since(mark).wire_bytes / ((info.world_size - 1) / info.world_size or 1))
    return psi, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args()
    out = zerolab.launch(bench, a.world, a.width, a.layers, a.batch, a.steps, backend=a.backend,
                         timeout=900, echo=False)
    psi, res = out[0]
    base = res["torch DDP *"][0]
    n = a.world
    print(f"{n} ranks, backend {zerolab.crew.resolve_backend(a.backend, n)}, model {psi:,} params "
          f"(fp32, AdamW), batch {a.batch} per rank, median of {a.steps} steps")
    print(f"bytes column: per-rank wire bytes / ring factor (N-1)/N, i.e. in units where DDP's all-reduce of Psi fp32 = 2 Psi x 4 B")
    print(f"{'':32}{'step ms':>9}{'x DDP':>8}{'wire (Psi units)':>18}")
    for name, (t, wire) in res.items():
        w = f"{wire / (psi * 4):.2f}" if isinstance(wire, (int, float)) else wire
        print(f"{name:32}{t * 1e3:>9.2f}{t / base:>8.2f}{w:>18}")
    print("* torch rows: wire bytes are the algorithm's nominal volume, not measured; zerolab rows "
          "come from its ledger")


if __name__ == "__main__":
    main()
