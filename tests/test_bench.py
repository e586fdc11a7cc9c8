"""The alpha-beta model: fitted here, it predicts a training step's communication time."""
import pytest

import zerolab
from zerolab.tools import bench
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine


def test_fit_recovers_a_known_line():
    rows = [["all_reduce", s, 50e-6 + s / 2e9] for s in (1e3, 1e5, 1e6, 1e7)]
    f = bench.fit(rows, 2, "gloo")
    assert f.ops["all_reduce"]["alpha_s"] == pytest.approx(50e-6, rel=1e-6)
    assert f.ops["all_reduce"]["beta_Bps"] == pytest.approx(2e9, rel=1e-6)
    assert f.time("all_gather", 1e6) == pytest.approx(50e-6 + 1e6 / 2e9)      # falls back to all_reduce


def steps(stage, n_steps):
    engine = zerolab.initialize(TinyLM(d=64, hidden=256), {
        "train_batch_size": 2 * zerolab.world_size(), "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        # every collective blocking: an asynchronous one (stage 3's prefetch) is recorded from issue
        # to completion, computation in between included, which the alpha-beta model does not predict
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 20_000, "overlap_comm": False,
                              "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0}})
    train_engine(engine, lm_batches(2, 2 * zerolab.world_size()), lm_loss)     # warm-up
    out = []
    for k in range(n_steps):
        mark = engine.ledger.mark()
        train_engine(engine, lm_batches(1, 2 * zerolab.world_size(), seed=k), lm_loss)
        out.append(engine.ledger.since(mark))
    return out


@pytest.mark.quiet     # a timing band: measured under four phases side by side it drifts out (6.2 > 6)
def test_prediction_matches_measured_communication_within_the_band(tmp_path):
    """Band: measured / predicted within [1/4, 6] (the least of 5 steps: other work on the machine only
    ever adds time, so the least is the step it disturbed least). Measured: the seconds of
    the step's records less what they spent waiting for the other rank to arrive (``waited``,
    known on the shared-memory path; waiting is skew, not communication, and the fit leaves it
    out too). Over gloo the wait cannot be told apart, so measured runs above predicted, more so
    on a loaded machine (seen here: 1.2-3.4 with other jobs on the 2 cores). A model with the
    wrong calls or bytes is off by far more: the stage-3 step has 3x the calls of stage 2."""
    f = bench.run(2, sizes_bytes=(4 << 10, 256 << 10, 2 << 20, 8 << 20), repeats=7)
    f.save(tmp_path / "fit.json")
    f = bench.Fit.load(tmp_path / "fit.json")
    assert set(f.ops) == set(bench.OPS) and all(v["beta_Bps"] > 0 for v in f.ops.values())
    for stage in (2, 3):
        ledgers = zerolab.launch(steps, 2, stage, 5, echo=False, timeout=120)[0]
        ratios = [sum(r.seconds - r.waited for r in led.records) / f.predict(led) for led in ledgers]
        ratio = min(ratios)
        assert 1 / 4 <= ratio <= 6, f"stage {stage}: measured / predicted = {ratio:.2f} ({f.describe()})"


def test_zerolab_bench_command(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, "-m", "zerolab.cli", "bench", "--nproc", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "reduce_scatter  alpha" in run.stdout and bench.Fit.load(out).world_size == 2


def test_bandwidths_follow_nccl_tests_formulas():
    # nccl-tests: algbw = size / time; busbw = algbw x 2(N-1)/N (all-reduce), x (N-1)/N (all-gather,
    # reduce-scatter): at N = 4 an all-reduce of 4 MB in 1 ms is 4 GB/s algbw, 6 GB/s busbw
    from zerolab.tools.bench import bandwidths, format_bandwidths
    from zerolab.comm import CommRecord, Ledger
    ledger = Ledger()
    ledger.add(CommRecord("all_reduce", 10**6, 4 * 10**6, "float32", 4, 1e-3))
    ledger.add(CommRecord("all_gather", 10**6, 4 * 10**6, "float32", 4, 2e-3))
    ledger.add(CommRecord("reduce_scatter", 10**6, 2 * 10**6, "bfloat16", 2, 1e-3))
    ar, ag, rs = bandwidths(ledger)
    assert (ar.algbw, ar.busbw) == (4e9, 6e9)
    assert (ag.algbw, ag.busbw) == (2e9, 1.5e9)
    assert (rs.algbw, rs.busbw) == (2e9, 1e9)                     # N = 2: half
    # the bus bandwidth is the beta of this module's fit: wire bytes per second
    assert ar.busbw == ledger.records[0].wire_bytes / ledger.records[0].seconds
    text = format_bandwidths(bandwidths(ledger))
    assert "~4.000 GB/s" in text and "~6.000 GB/s" in text and "1.500" in text, text
