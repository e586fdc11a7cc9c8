"""The scale simulator held against this machine: :func:`calibrate` trains a bf16 MLP at each ZeRO
stage on real ranks, reads its gradient and parameter traffic from the ledger, and sets it beside
what :func:`zerolab.tools.simulate.simulate` predicts with this machine's α-β fit (``zerolab.tools.bench``) as
the link; :func:`comm_factor` is the ratio to pass back to ``simulate``. ``zerolab.tools.simulate``
re-exports these names (``zerolab simulate --calibrate``).
"""
from __future__ import annotations

from ..i18n import catalogue

__all__ = ["calibrate", "format_calibration", "comm_factor"]

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)


def _measure_stage(stage: int, layers: int, hidden: int, steps: int, bucket: int) -> dict:
    """On each rank: one bf16 MLP of ``layers`` Linear(hidden, hidden), trained at ``stage`` (every
    parameter sharded at stage 3, no prefetch); per step, the gradient and parameter collectives'
    wire bytes, calls and seconds from the ledger (the median step)."""
    import statistics

    import torch
    from torch import nn

    from ..crew import crew
    from ..zero.engine import initialize
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(hidden, hidden) for _ in range(layers)])
    psi = sum(p.numel() for p in model.parameters())    # (before stage 3 releases them)
    world = crew.world_size()
    engine = initialize(model, {
        "train_micro_batch_size_per_gpu": 4, "train_batch_size": 4 * world, "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "bf16": {"enabled": True, "check_grad_overflow": False},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": bucket, "overlap_comm": False,
                              "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0,
                              # the simulator's stage 3 gathers every layer again for backward (3 Psi)
                              "stage3_max_reuse_distance": 0}})
    x = torch.randn(4, hidden, dtype=torch.bfloat16)
    rows = []
    for i in range(steps + 1):
        mark = engine.ledger.mark()
        engine.backward(engine(x).float().square().mean())
        engine.step()
        recs = [r for r in engine.ledger.since(mark).records if r.tag.split(" ")[0] in ("grads", "params")]
        if i:                                        # the first step is a warm-up
            rows.append((sum(r.wire_bytes for r in recs), len(recs), sum(r.seconds for r in recs)))
    engine.close()
    mid = sorted(rows, key=lambda r: r[2])[len(rows) // 2]
    return {"psi": psi, "wire_bytes": mid[0], "calls": mid[1], "seconds": mid[2],
            "seconds_all": statistics.median(r[2] for r in rows)}


def calibrate(world_size: int = 2, *, layers: int = 8, hidden: int = 256, steps: int = 5,
              reduce_bucket_size: int = 200_000, fit=None, stages=(0, 1, 2, 3), predict=None) -> list[dict]:
    """Hold the simulator against what is measured here: for stages 0-3, a bf16 MLP trained on
    ``world_size`` real ranks (gloo on CPU), its gradient and parameter traffic from the ledger
    (wire bytes, calls, seconds) beside what :func:`simulate` predicts for the same Ψ, layers,
    ranks and bucket size with ``link`` = the α-β ``fit`` of this machine (``zerolab.tools.bench``;
    measured now when not given). ``stages``: which of them. Returns one dict per stage: ``wire_bytes`` / ``sim_wire_bytes``,
    ``calls`` / ``sim_calls``, ``seconds`` / ``sim_seconds``. ``predict``: the simulator
    (``zerolab.tools.simulate.simulate``; ``simulate.calibrate`` passes it, so that this module needs
    nothing of the simulator's)."""
    from . import bench
    from ..crew import launch
    if predict is None:
        raise TypeError(T("calibrate(..., predict=simulate): call zerolab.tools.simulate.calibrate, which passes it"))
    fit = fit or bench.run(world_size)
    out = []
    for stage in stages:
        m = launch(_measure_stage, world_size, stage, layers, hidden, steps, reduce_bucket_size, echo=False)[0]
        est = predict(m["psi"], layers, hidden, 1, 1, world_size, stage, link=fit,
                       reduce_bucket_size=reduce_bucket_size, checkpointing=False)
        out.append({"stage": stage, "psi": m["psi"], "wire_bytes": m["wire_bytes"], "sim_wire_bytes": est.wire_bytes,
                    "calls": m["calls"], "sim_calls": est.calls, "seconds": m["seconds"],
                    "sim_seconds": est.comm_s})
    return out


def format_calibration(rows: list[dict]) -> str:
    lines = [f"{'stage':<7}{'wire bytes':>12}{'simulated':>12}{'calls':>7}{'simulated':>11}"
             f"{'comm ms':>10}{'simulated':>11}{'ratio':>7}"]
    for r in rows:
        lines.append(f"{r['stage']:<7}{r['wire_bytes']:>12,.0f}{r['sim_wire_bytes']:>12,.0f}{r['calls']:>7}"
                     f"{r['sim_calls']:>11}{r['seconds'] * 1e3:>10.2f}{r['sim_seconds'] * 1e3:>11.2f}"
                     f"{r['seconds'] / r['sim_seconds']:>7.2f}")
    lines.append("measured: the ledger's gradient and parameter collectives in one step (median of the steps);")
    lines.append("simulated: zerolab.tools.simulate with this machine's alpha-beta fit as the link "
                 "(ratio = measured / simulated);")
    lines.append(f"comm_factor for simulate() on this machine (median ratio): {comm_factor(rows):.2f}")
    return "\n".join(lines)


def comm_factor(rows: list[dict]) -> float:
    """The median measured / simulated communication time of :func:`calibrate`'s rows: what a
    training step's collectives cost here beyond the bare α-β link (waiting for the slower
    rank, the host's load, a call's software path), to pass to :func:`simulate`."""
    ratios = sorted(r["seconds"] / r["sim_seconds"] for r in rows if r["sim_seconds"] > 0)
    return ratios[len(ratios) // 2] if ratios else 1.0
