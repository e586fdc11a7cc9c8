"""zerolab's stage-3 parameter all-gathers per step, at two reuse distances, beside DeepSpeed's.

Six Linear(64, 64) layers, biases persistent (threshold 64), prefetch off, 2 ranks, 5 steps; for
stage3_max_reuse_distance 0 and 10^9 the (calls, elements) of the parameter all-gathers of each
step, from the ledger. ``benchmarks/ds_reference/ds_stage3_gathers.py`` counts the same for
DeepSpeed 0.19.8 (run it in a DeepSpeed venv). Measured again on 2026-12-04 (zerolab's per-parameter
schedule): from step 2 on, calls 18 (distance 0) and 12 (10^9), elements 49,536 and 24,960, in both
(on 2026-11-30, before that schedule, zerolab made 13 and 7 calls). Step 1 differs: DeepSpeed's first
forward gathers each module's persistent bias with its weight (768 elements more, the same 18 calls);
zerolab's biases are whole from initialize on.

    python benchmarks/stage3_gathers.py
"""
from __future__ import annotations

import torch
from torch import nn

import zerolab


def per_step(distance: int, steps: int = 5) -> list[tuple[int, int]]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    engine = zerolab.initialize(model, {
        "train_batch_size": 4 * zerolab.world_size(), "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 64,
                              "stage3_max_reuse_distance": distance, "stage3_prefetch_bucket_size": 0}})
    x = torch.randn(4, 64)
    out = []
    for _ in range(steps):
        mark = engine.ledger.mark()
        engine.backward(engine(x).pow(2).mean())
        engine.step()
        recs = [r for r in engine.ledger.since(mark).records if r.op == "all_gather" and r.tag.startswith("params")]
        out.append((len(recs), sum(r.numel for r in recs)))
    engine.close()
    return out


def main() -> dict:
    return {d: per_step(d) for d in (0, 10 ** 9)}


if __name__ == "__main__":
    for d, steps in zerolab.launch(main, 2, echo=False)[0].items():
        print(f"zerolab stage3_max_reuse_distance {d:,}: (calls, elements) per step {steps}")
