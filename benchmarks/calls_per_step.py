"""Collective calls and bytes per training step against the bucket size (stages 0-2), the
stage-3 persistence threshold and the stage-3 prefetch bucket size, measured from the ledger, with the alpha-beta model's
prediction of the communication time beside them (the box-packing trade-off of chapter 6).

    python benchmarks/calls_per_step.py [--world 2] [--out benchmarks/results/calls_per_step.png]

Each row: one step of TinyLM (d=64, 4 layers: about 230k parameters) after a warm-up step; calls
and wire bytes of the gradient and parameter collectives; predicted seconds from a fit made in
the same run (zerolab.tools.bench).
"""
from __future__ import annotations

import argparse
import os

import zerolab
from zerolab.tools import bench
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine

BUCKETS = [1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000]
THRESHOLDS = [0, 300, 5_000, 20_000, 100_000]
PREFETCH = [0, 10_000, 40_000, 160_000, 50_000_000]      # stage3_prefetch_bucket_size (elements)


def prefetch_one(prefetch):
    """Stage 3, persistence 0: per step, the 16-byte 'check' headers, the parameter gathers, how
    many were prefetched, and the most parameter elements gathered or in flight at once."""
    world = zerolab.world_size()
    engine = zerolab.initialize(TinyLM(d=64, hidden=256, layers=4), {
        "train_batch_size": 2 * world, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                              "stage3_prefetch_bucket_size": prefetch}})
    train_engine(engine, lm_batches(1, 2 * world), lm_loss)     # records the trace
    before = engine.stage.prefetches
    engine.stage.params.peak_gathered_numel = 0
    mark = engine.ledger.mark()
    train_engine(engine, lm_batches(1, 2 * world, seed=1), lm_loss)
    recs = engine.ledger.since(mark).records
    checks = sum(1 for r in recs if r.tag.startswith("check "))
    gathers = sum(1 for r in recs if r.op == "all_gather" and r.tag.startswith("params"))
    out = (prefetch, checks, gathers, engine.stage.prefetches - before, engine.stage.params.peak_gathered_numel)
    engine.close()
    return out


def one(stage, zero):
    world = zerolab.world_size()
    engine = zerolab.initialize(TinyLM(d=64, hidden=256, layers=4), {
        "train_batch_size": 2 * world, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": stage, "overlap_comm": False, **zero}})
    train_engine(engine, lm_batches(1, 2 * world), lm_loss)
    mark = engine.ledger.mark()
    train_engine(engine, lm_batches(1, 2 * world, seed=1), lm_loss)
    recs = [r for r in engine.ledger.since(mark).records if r.tag.split(" ")[0] in ("grads", "params")]
    led = engine.ledger.since(mark)
    led.records = recs
    psi = sum(p.numel() for p in engine.module.parameters() if p.requires_grad) if stage < 3 else \
        sum(g.numel for g in engine.stage.groups)
    return len(recs), led.wire_bytes, psi, led


def sweep():
    rows = []
    for stage in (0, 1, 2):
        for b in BUCKETS:
            calls, wire, psi, led = one(stage, {"reduce_bucket_size": b})
            rows.append((f"stage {stage}", "reduce_bucket_size", b, calls, wire, psi, led))
    for t in THRESHOLDS:
        calls, wire, psi, led = one(3, {"stage3_param_persistence_threshold": t})
        rows.append(("stage 3", "persistence threshold", t, calls, wire, psi, led))
    return rows, [prefetch_one(p) for p in PREFETCH]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/calls_per_step.png")
    a = ap.parse_args()
    fit = bench.run(a.world)
    print(fit.describe())
    rows, pre = zerolab.launch(sweep, a.world, echo=False, timeout=900)[0]
    psi = rows[0][5]
    print(f"\nTinyLM, {psi:,} trained parameters, {a.world} ranks, one step (gradient + parameter collectives)")
    print(f"{'':10}{'knob':>24}{'value':>11}{'calls':>7}{'wire (Psi x 4 B)':>18}{'predicted ms':>14}")
    for name, knob, value, calls, wire, p, led in rows:
        print(f"{name:10}{knob:>24}{value:>11,}{calls:>7}{wire / (p * 4) / ((a.world - 1) / a.world):>18.2f}"
              f"{fit.predict(led) * 1e3:>14.2f}")
    print("\nstage 3 prefetch (persistence 0), one step after the trace was recorded:")
    print(f"{'stage3_prefetch_bucket_size':>28}{'check headers':>15}{'param gathers':>15}{'prefetched':>12}"
          f"{'peak gathered or in flight (elements)':>40}")
    for p, checks, gathers, fetched, peak in pre:
        print(f"{p:>28,}{checks:>15}{gathers:>15}{fetched:>12}{peak:>40,}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for stage in ("stage 0", "stage 1", "stage 2"):
        pts = [(v, c, fit.predict(led) * 1e3) for n, _, v, c, _, _, led in rows if n == stage]
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{stage}: calls")
        ax2.plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=stage)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("reduce_bucket_size (elements)")
    ax1.set_yscale("log")
    ax1.set_ylabel("collective calls per step")
    ax2.set_ylabel("predicted communication (ms)")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle("Bigger boxes, fewer shouts: calls and alpha-beta time per step against the bucket size")
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"\nsaved {a.out}")


if __name__ == "__main__":
    main()
