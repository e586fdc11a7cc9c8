"""Communication: the all-reduce path's traffic, overlap in the timeline, the timeline itself."""
import json

import pytest
import torch

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine


def one_step(stage, own=None, **zero):
    world = zerolab.world_size()
    cfg = {"train_batch_size": 2 * world, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 700,
                                 "stage3_param_persistence_threshold": 30, **zero}}
    if own:
        cfg["zerolab"] = own
    engine = zerolab.initialize(TinyLM(), cfg)
    train_engine(engine, lm_batches(1, 2 * world), lm_loss)        # warm-up
    mark, tmark = engine.ledger.mark(), engine.timeline.mark()
    train_engine(engine, lm_batches(1, 2 * world, seed=1), lm_loss)
    grads = [r for r in engine.ledger.since(mark).records if r.tag.startswith("grads")]
    tl = engine.timeline.since(tmark)
    return {"ops": sorted({r.op for r in grads}), "wire": sum(r.wire_bytes for r in grads),
            "bytes": sum(r.bytes for r in grads), "kinds": sorted({e.kind for e in tl.events}),
            # asynchronous gradient collectives (stage 3's prefetched parameter gathers are async too)
            "grad_async": sum(1 for e in tl.events if e.kind == "async" and " grads " in f" {e.name} "),
            "summary": tl.summary(), "padded": sum(g.padded_numel for g in engine.stage.groups) * 4,
            "psi": sum(g.numel for g in engine.stage.groups) * 4, "transport": engine.comm.transport()}


def variants(stage, *runs):
    """``one_step`` for each ``(own, zero)`` in ``runs``, one after another on the same crew (one
    crew start per test, not one per variant)."""
    return [one_step(stage, own, **zero) for own, zero in runs]


@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeeds_all_reduce_moves_twice_the_gradient_bytes_of_the_ideal_reduce_scatter(stage):
    """Stages 1-2: DeepSpeed all-reduces each bucket, whether reduce_scatter is true (its default)
    or false; zerolab's opt-in ideal_reduce_scatter reduce-scatters it: half the wire bytes."""
    ds, ar, rs = zerolab.launch(variants, 2, stage, (None, {}), (None, {"reduce_scatter": False}),
                                ({"ideal_reduce_scatter": True}, {}), echo=False, timeout=60)[0]
    assert ds["ops"] == ar["ops"] == ["all_reduce"] and rs["ops"] == ["reduce_scatter"]
    assert ds["bytes"] == ar["bytes"] == ds["psi"]                # every real gradient element, once
    assert rs["bytes"] == rs["padded"]                             # each bucket padded to N shards
    # 2(N-1)/N against (N-1)/N (up to the ideal layout's padding): 3 Psi vs 2 Psi in all
    assert ds["wire"] == pytest.approx(2 * rs["wire"], rel=0.01)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_overlap_issues_async_collectives_and_moves_the_same_bytes(stage):
    # the gradient buckets' collectives go asynchronous with overlap_comm (all-reduce here)
    zero = {} if stage == 0 else {"reduce_scatter": False}
    sync, over = zerolab.launch(variants, 2, stage, (None, {"overlap_comm": False, **zero}),
                                (None, {"overlap_comm": True, **zero}), echo=False, timeout=60)[0]
    assert "async" in over["kinds"] and "wait" in over["kinds"] and over["grad_async"] > 0
    assert sync["grad_async"] == 0
    assert (over["ops"], over["bytes"], over["wire"]) == (sync["ops"], sync["bytes"], sync["wire"])
    s = over["summary"]
    assert s["wall"] > 0 and s["compute"] >= 0 and s["exposed_comm"] > 0 and s["hidden_comm"] >= 0
    assert s["compute"] + s["exposed_comm"] == pytest.approx(s["wall"])


def trace(path):
    engine = zerolab.initialize(TinyLM(), {"train_batch_size": 2 * zerolab.world_size(),
                                           "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                                           "zero_optimization": {"stage": 3, "reduce_scatter": False}})
    train_engine(engine, lm_batches(2, 2 * zerolab.world_size()), lm_loss)
    engine.timeline.chrome_trace(f"{path}.{zerolab.rank()}.json", rank=zerolab.rank())
    ax = engine.timeline.plot()
    names = [e.name for e in engine.timeline.events]
    return names.count("forward"), names.count("backward"), names.count("step"), len(ax.patches) > 0 or bool(ax.collections)


def test_timeline_spans_chrome_trace_and_gantt(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    for r, (fwd, bwd, step, drawn) in enumerate(zerolab.launch(trace, 2, str(tmp_path / "t"), echo=False,
                                                              timeout=60)):
        assert (fwd, bwd, step, drawn) == (2, 2, 2, True)
        events = json.loads((tmp_path / f"t.{r}.json").read_text())["traceEvents"]
        assert {e["cat"] for e in events} >= {"compute", "comm", "async", "wait"}
        assert all(e["ph"] == "X" and e["dur"] >= 0 and e["pid"] == r for e in events)


def test_stage3_reduce_scatter_goes_through_gloo_asynchronously():
    """By default every collective is torch.distributed's on the crew's backend (gloo here); stage
    3's bucket reduce-scatters are issued asynchronously with overlap_comm (its default)."""
    r = zerolab.launch(one_step, 3, 3, echo=False, timeout=60)[0]
    assert r["transport"] == "gloo"
    assert r["ops"] == ["reduce_scatter"] and r["bytes"] == r["padded"] and r["grad_async"] > 0
    assert r["wire"] == pytest.approx(r["padded"] * 2 / 3)          # (N-1)/N of the buckets, once
