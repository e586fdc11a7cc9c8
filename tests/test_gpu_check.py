"""tools/gpu_check.py, the GPU check, tested on the CPU for what the CPU can test: without a GPU it refuses
in one line (exit 2) and leaves the results file alone; its dry run (``--device cpu --dry-run``) runs every
part of the script (world size 1 at stages 0-3 with bf16 and offload, torch's own training, two ranks
against DDP) and writes the results it would write on a GPU; the stored results file says "not run yet"
or holds a real run."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.py"
STORED = ROOT / "benchmarks" / "results" / "gpu_check.json"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_without_a_gpu_it_refuses_in_one_line_and_writes_nothing():
    before = STORED.read_bytes() if STORED.exists() else None
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2, run
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA GPU here"), run.stderr
    assert (STORED.read_bytes() if STORED.exists() else None) == before
    # --device cpu is a dry run only, never a measurement
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 2 and "--dry-run" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_the_dry_run_goes_through_every_part_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    assert _load().main(["--device", "cpu", "--dry-run", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["status"] == "dry run (CPU): all variants ran" and res["dry_run"]
    one = res["one_gpu"]
    assert set(one["torch"]) == {"torch fp32", "torch bf16 autocast"}
    assert {r["stage"] for r in one["zerolab"].values()} == {0, 1, 2, 3}
    for name, r in one["zerolab"].items():
        assert "error" not in r, (name, r.get("error"))
        assert r["ledger_device"]["model_states"] > 0 and r["median_step_s"] > 0
        if not r.get("bf16"):                      # fp32 on the CPU: the same losses as torch's
            assert r["fp32_loss_gap_to_torch"] < 1e-5, name
        if r.get("offload_opt"):
            where = r["ledger_nvme"] if r.get("nvme") else r["ledger_host"]
            assert r["pinning"]["host_tensors"] > 0 and where["optimizer_states"] > 0, name
        assert "flags" not in r, (name, r.get("flags"))     # (swap files left after close are flagged)
    many = res["many_gpus"]
    assert many["world_size"] == 2 and not many["errors"]
    assert set(many["results"]) == {"torch DDP"} | {f"zerolab stage {s}" for s in range(4)}
    assert all(r["loss_gap_to_ddp"] < 1e-5 for r in many["results"].values())
    text = (tmp_path / "gpu_check.txt").read_text()
    assert "DRY RUN on the CPU: not a GPU result" in text and "FLAG" not in text


def test_the_stored_results_say_not_run_yet_or_hold_a_real_run():
    res = json.loads(STORED.read_text())
    if res["status"] == "not run yet":
        assert "untested" in res["note"]
        assert "not run yet" in STORED.with_suffix(".txt").read_text()
    else:
        assert res["status"].startswith("run:") and not res["dry_run"] and res["gpus"] >= 1
