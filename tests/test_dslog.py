"""zerolab.tools.dslog reads DeepSpeed 0.19.8's own log lines and ds_report, from the recorded files."""
from pathlib import Path

from zerolab.tools import dslog

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "recorded"


def test_a_recorded_training_log_parses_into_progress_throughput_timers_and_config():
    log = dslog.read_log(RECORDED / "ds_stage2_train_log_cpu.txt")
    assert [p["step"] for p in log.progress] == [0, 10, 20, 30]           # steps_per_print: 10
    assert all(p["skipped"] == 0 and p["lr"] == [0.0001] for p in log.progress)
    assert [t["global_step"] for t in log.throughput] == [10, 20, 30]
    assert all(t["running_avg"] > 0 and t["current"] > 0 for t in log.throughput)
    med = log.timer_medians()
    assert {"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "optimizer_allgather"} <= set(med)
    # bwd encloses bwd_inner (autograd) and bwd_allreduce (the gradient reduction) on every line
    for line in log.timers:
        if {"bwd", "bwd_inner", "bwd_allreduce"} <= set(line):
            assert line["bwd_inner"] + line["bwd_allreduce"] <= line["bwd"] + 0.02
    assert "zero_config" in log.config or "zero_enabled" in log.config
    assert log.config["steps_per_print"] == "10"


def test_skipped_steps_and_colours_are_read():
    text = ("\x1b[32m[2026-01-01 00:00:00,000] [INFO] [logging.py:123:log_dist] [Rank 0] step=40, skipped=3, "
            "lr=[5e-05], mom=[(0.9, 0.95)]\x1b[0m\n"
            "[2026-01-01 00:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=80/global_step=40, "
            "RunningAvgSamplesPerSec=12.5, CurrSamplesPerSec=13.0, MemAllocated=1.5GB, MaxMemAllocated=2.25GB\n")
    log = dslog.parse_log(text)
    assert log.progress == [{"step": 40, "skipped": 3, "lr": [5e-05], "mom": [(0.9, 0.95)]}]
    assert log.throughput[0]["micro_step"] == 80 and log.throughput[0]["max_mem_gb"] == 2.25


def test_ds_report_lists_ops_and_environment():
    rep = dslog.read_report(RECORDED / "ds_report_cpu.txt")
    assert rep["ops"]["cpu_adam"] == (False, True)             # not prebuilt (DS_BUILD_OPS=0), JIT-compatible
    assert rep["ops"]["async_io"] == (False, False)            # needs libaio
    assert rep["env"]["torch version"].startswith("2.13.0")
    assert rep["env"]["deepspeed info"].startswith("0.19.8")
