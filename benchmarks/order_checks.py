"""What zerolab's stage-3 order checks cost: calls, bytes and step time, with and without.

The order checks (``"zerolab": {"order_checks": true}``, the default) are zerolab's own safety:
a 16-byte all-gather before each unit of parameter gathers, so that ranks taking different paths
through the model fail with the modules named instead of hanging. DeepSpeed sends none. The
ledger files them apart from ZeRO's calls (``ledger.checks``); this benchmark counts them and
times a stage-3 step with and without them, the two engines taking turns in the same processes
(``step_models.round_robin``), over the crew's backend (gloo by default).

    python benchmarks/order_checks.py [--world 2] [--rounds 20] [--steps 5] [--backend gloo]

Model: the ResMLP of step_time.py (325,464 parameters; stage3_param_persistence_threshold 0 so
that every module is gathered), fp32 Adam, batch 32 per rank, prefetch on and off.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from torch import nn

import zerolab

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import ResMLP, round_robin  # noqa: E402


def bench(rounds: int, per_round: int, prefetch: int) -> dict:
    info = zerolab.rank_info()
    torch.manual_seed(1 + info.rank)
    x = torch.randn(32, ResMLP.WIDTH, device=info.device)
    y = torch.randn(32, ResMLP.WIDTH, device=info.device)
    loss_fn = nn.MSELoss()
    engines, steps = {}, {}
    for checks in (True, False):
        engine = zerolab.initialize(ResMLP(), {
            "train_micro_batch_size_per_gpu": 32, "gradient_clipping": 1.0,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": prefetch},
            "zerolab": {"order_checks": checks}})

        def step(e=engine):
            e.backward(loss_fn(e(x), y))
            e.step()
        name = "checks on" if checks else "checks off"
        engines[name], steps[name] = engine, step
    times = round_robin(steps, rounds, per_round, info.device)
    out = {}
    for name, engine in engines.items():
        mark = engine.ledger.mark()
        steps[name]()
        one = engine.ledger.since(mark)
        zero = {op: (int(t["calls"]), int(t["bytes"])) for op, t in one.totals().items()}
        checks = {op: (int(t["calls"]), int(t["bytes"])) for op, t in one.check_totals().items()}
        out[name] = {"zero": zero, "checks": checks, "median_s": statistics.median(times[name])}
        engine.close()
    out["ratio"] = statistics.median(a / b for a, b in zip(times["checks on"], times["checks off"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--backend", default="gloo")
    args = ap.parse_args()
    for prefetch in (0, 50_000_000):
        r = zerolab.launch(bench, args.world, args.rounds, args.steps, prefetch, backend=args.backend,
                           echo=False, timeout=600)[0]
        print(f"stage 3, {args.world} ranks on {args.backend}, stage3_prefetch_bucket_size {prefetch:,}:")
        for name in ("checks on", "checks off"):
            z, c = r[name]["zero"], r[name]["checks"]
            zs = ", ".join(f"{op} {n} calls {b:,} B" for op, (n, b) in sorted(z.items()))
            cs = ", ".join(f"{op} {n} calls {b:,} B" for op, (n, b) in sorted(c.items())) or "none"
            print(f"  {name:<10}  ZeRO's calls: {zs}")
            print(f"  {'':<10}  order checks: {cs};  median step {r[name]['median_s'] * 1e3:.2f} ms")
        print(f"  step time with checks / without (median of per-round ratios): {r['ratio']:.3f}")


if __name__ == "__main__":
    main()
