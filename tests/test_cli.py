import json
import subprocess
import sys

from zerolab.cli import main


def test_estimate_prints_the_paper_numbers(capsys):
    assert main(["estimate", "--params", "7.5e9", "--gpus", "64"]) == 0
    out = capsys.readouterr().out
    # ZeRO paper, Psi = 7.5B, N = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    for want in ("120.00 GB", "31.41 GB", "16.64 GB", "1.88 GB"):
        assert want in out, out


def test_explain_reads_a_config_and_reports_errors(tmp_path, capsys):
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"train_batch_size": 32, "zero_optimization": {"stage": 2},
                                "bf16": {"enabled": True}}))
    assert main(["explain", str(good), "--world", "4", "--params", "1e9"]) == 0
    out = capsys.readouterr().out
    assert "stage 2" in out and "GiB" in out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train_batch_size": 32, "zero_optimisation": {"stage": 2}}))
    assert main(["explain", str(bad)]) == 2
    assert "did you mean 'zero_optimization'" in capsys.readouterr().err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "zerolab.cli", "env"], capture_output=True, text=True)
    assert r.returncode == 0 and "gloo available: True" in r.stdout
