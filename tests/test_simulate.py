"""The scale simulator: the ZeRO paper's memory figures, the offload table's infeasible rows,
and the shape of the trade-offs (what shrinks, what gets slower)."""
import subprocess
import sys

import pytest

from zerolab.tools import simulate
from zerolab.tools.bench import Fit

MODEL = dict(params=7.5e9, layers=32, hidden=4096, seq=1024, micro_batch=1)


def states(e):
    return e.gpu_bytes["params"] + e.gpu_bytes["grads"] + e.gpu_bytes["optimizer_states"]


def test_zero_paper_figure_1_per_gpu_model_states():
    """7.5B parameters on 64 GPUs: 120 GB per GPU without ZeRO, 31.4 / 16.6 / 1.9 GB at stages 1-3
    (2 + 2 + 12 bytes per parameter, sharded: 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N)."""
    got = [states(simulate.simulate(**MODEL, gpus=64, stage=s)) / 1e9 for s in range(4)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875])


def test_the_70b_offload_rows_cannot_fit_anywhere():
    """70B in mixed precision needs 16 x 70e9 = 1,120 GB of model states; each row of the offload
    table has at most 672 GB of GPU and host memory together."""
    rows = [(8, 40e9, 64e9), (4, 40e9, 512e9), (2, 80e9, 512e9)]
    for gpus, each, host in rows:
        c = simulate.capacity_check(70e9, gpus, each, host)
        assert c["need"] == 1120e9 and c["have"] <= 672e9 and not c["feasible"]
        full = simulate.simulate(70e9, 80, 8192, 2048, 1, gpus, 3, gpu="a100-40gb" if each == 40e9 else "a100-80gb",
                                 offload_optimizer=True, offload_param=True, host_bytes=host)
        assert not full.fits


def test_stages_shrink_memory_offload_trades_it_for_time():
    rows = simulate.table(7e9, 32, 4096, 2048, 1, 8)
    totals = [r.gpu_bytes["total"] for r in rows]
    assert totals == sorted(totals, reverse=True)                  # every step down the table saves memory
    assert [r.fits for r in rows[:2]] == [False, True]             # DDP does not fit 7B on 80 GB; stage 1 does
    assert rows[4].step_s == pytest.approx(rows[3].step_s + rows[4].cpu_step_s)   # the CPU step does not overlap
    assert rows[4].cpu_bytes == pytest.approx(16 * 7e9 / 8)        # fp32 masters, moments and gradients


def test_a_slow_link_makes_communication_the_bound():
    fast = simulate.simulate(7e9, 32, 4096, 2048, 1, 64, 3, link="nvlink-h100", gpu="h100-80gb")
    slow = simulate.simulate(7e9, 32, 4096, 2048, 1, 64, 3, link="ethernet-100g", gpu="h100-80gb")
    assert fast.comm_s < slow.comm_s and slow.bound_by == "communication"
    one = simulate.simulate(7e9, 32, 4096, 2048, 1, 1, 3)
    assert one.comm_s == 0                                         # nothing crosses a wire at N = 1


def test_a_fit_measured_here_can_be_the_link():
    fit = Fit(8, "gloo", {"all_reduce": {"alpha_s": 1e-4, "beta_Bps": 1e9}}, [])
    e = simulate.simulate(1e9, 16, 2048, 512, 1, 8, 2, link=fit)
    # DeepSpeed: 2 buckets of 5e8 all-reduced (2 (N-1)/N of 2 GB) + one all-gather ((N-1)/N of 2 GB)
    assert e.comm_s == pytest.approx(3 * 1e-4 + 3 * (7 / 8) * 2e9 / 1e9)
    # the paper's reduce-scatter (zerolab's ideal_reduce_scatter): 2 + 2 calls, (N-1)/N each way
    ideal = simulate.simulate(1e9, 16, 2048, 512, 1, 8, 2, link=fit, ideal_reduce_scatter=True)
    assert ideal.comm_s == pytest.approx(4 * 1e-4 + 2 * (7 / 8) * 2e9 / 1e9)


def test_the_command():
    run = subprocess.run([sys.executable, "-m", "zerolab.cli", "simulate", "--params", "7e9", "--layers", "32",
                          "--hidden", "4096", "--gpus", "8"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "stage 3 + offload optimizer+params" in run.stdout and "bound by" in run.stdout


def test_calibration_against_real_ranks_here():
    """The simulator's traffic model is exact for what zerolab does (DeepSpeed's collectives: the
    same wire bytes and calls at every stage; stage 3: two all-gathers per layer and one
    reduce-scatter per bucket of modules). Time: the ratio of
    measured to alpha-beta time is reported (it depends on the machine's load), and must be a
    finite positive factor."""
    from zerolab.tools.bench import Fit
    fit = Fit(world_size=2, backend="gloo", samples=[],
              ops={op: {"alpha_s": 1e-4, "beta_Bps": 1e9} for op in ("all_reduce", "reduce_scatter", "all_gather")})
    rows = simulate.calibrate(2, layers=4, hidden=64, steps=2, reduce_bucket_size=10_000, fit=fit)
    assert [r["stage"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        assert r["wire_bytes"] == pytest.approx(r["sim_wire_bytes"]), r
        assert r["calls"] == r["sim_calls"], r
    assert rows[3]["calls"] == 2 * 4 + 2                 # 4 layers of 4,160: buckets of 10,000 take two
    f = simulate.comm_factor(rows)
    assert 0 < f < float("inf")
    slow = simulate.simulate(7e9, 32, 4096, 2048, 1, 8, 3, comm_factor=f)
    assert slow.comm_s == pytest.approx(simulate.simulate(7e9, 32, 4096, 2048, 1, 8, 3).comm_s * f)
