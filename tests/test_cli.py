import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from zerolab.cli import main


def test_estimate_prints_the_paper_numbers(capsys):
    assert main(["estimate", "--params", "7.5e9", "--gpus", "64"]) == 0
    out = capsys.readouterr().out
    # ZeRO paper, Psi = 7.5B, N = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    for want in ("120.00 GB", "31.41 GB", "16.64 GB", "1.88 GB"):
        assert want in out, out
    # DeepSpeed's estimator is named with its stage, and its extra 4 Psi/N said
    assert "ZeRO stage 2, DeepSpeed's own estimator" in out and "18Ψ/N" in out, out


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


# ---- explain: any real DeepSpeed config (issue 8) ----------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED = ROOT / "configs" / "seed002_zero3_offload.json"


def test_explain_lists_what_zerolab_does_not_implement_instead_of_failing(capsys):
    assert main(["explain", str(SEED), "--world", "8", "--params", "7e9"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert captured.err == ""
    assert "not implemented in zerolab" not in out                   # the seed's config runs as written
    assert "zero_optimization.round_robin_gradients = true: at stages 1-2" in out
    for key in ("offload_optimizer.device = cpu", "offload_param.device = cpu"):
        assert f"not implemented in zerolab: zero_optimization.{key}" not in out, key   # offload runs now
    # what the offload does, and where the bytes live (fp32 gradient shards on the host: 4 bytes)
    assert "each rank's optimizer states" in out and "in host (CPU) memory, pinned when a GPU is present" in out
    assert "on the GPU: none (0.00 GB)" in out
    assert "in host (CPU) memory: optimizer states 10.50 GB + grads 3.50 GB + params 1.75 GB (15.75 GB)" in out
    # keys with no effect in zerolab, with the reason; no prefetch claim
    assert "No effect in zerolab" in out and "zero_optimization.contiguous_gradients = true: " in out
    assert "prefetch up to" not in out
    assert "13.04 GiB   <- this config" in out          # stage 3 row: 16 * 7e9 / 8 bytes


def test_explain_reports_real_errors_after_what_it_could_explain(tmp_path, capsys):
    cfg = json.loads(SEED.read_text())
    cfg["zero_optimization"]["stage3_prefetch_bucket"] = 1          # a typo
    cfg["fp16"]["hysteresis"] = 0                                     # a bad value
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    assert main(["explain", str(path), "--world", "3"]) == 2          # 128 is no multiple of 4 * 3
    captured = capsys.readouterr()
    assert "ZeRO stage 3 on 3 data-parallel rank(s)" in captured.out
    assert "Batch: not resolved for 3 rank(s)" in captured.out
    assert "Offload: offload_optimizer.device = cpu" in captured.out
    err = captured.err
    assert err.startswith(f"zerolab explain: 3 errors in {path} (typos, bad values, batch arithmetic; fix them")
    assert "did you mean 'stage3_prefetch_bucket_size'?" in err and "'fp16.hysteresis' must be" in err
    assert "check the batch parameters" in err and "not implemented" not in err
    assert main(["explain", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the DeepSpeed config file" in capsys.readouterr().err


def readme_shell_examples() -> list[str]:
    """Every line of README.md's bash blocks that runs the zerolab command."""
    lines, in_bash = [], False
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash"
        elif in_bash and line.startswith("zerolab "):
            lines.append(line)
    return lines


def test_the_readme_has_shell_examples_for_each_command():
    commands = [shlex.split(line, comments=True)[1] for line in readme_shell_examples()]
    assert {"explain", "estimate", "env"} <= set(commands)


@pytest.mark.parametrize("line", readme_shell_examples())
def test_readme_shell_example_runs_as_written(line):
    """Run from the repository root with the environment's ``zerolab`` script, as a reader would."""
    argv = shlex.split(line, comments=True)
    bindir = pathlib.Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    if argv[1] == "compare":
        import importlib.util
        if importlib.util.find_spec("deepspeed") is not None:
            pytest.skip("zerolab compare runs DeepSpeed for minutes: benchmarks/side_by_side.py holds it")
        # without DeepSpeed (the test environment): it says how to install it, exit status 2
        r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'" in r.stdout, (r.stdout, r.stderr)
        return
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" or argv[1] == "env", r.stderr
    expected = {"explain": "ZeRO stage", "estimate": "model states per GPU", "env": "gloo available",
                "bench": "reduce_scatter  alpha", "report": "torch", "simulate": "bound by"}[argv[1]]
    assert expected in r.stdout, r.stdout
    if argv[1] == "explain" and "--params" in argv:
        assert "<- this config" in r.stdout


def test_simulate_names_the_flags_when_a_node_size_is_missing(capsys):
    """--inter-link without --ranks-per-node: the flags the user typed, not the simulator's keywords."""
    argv = ["simulate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--inter-link", "ib-hdr"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerolab simulate: --inter-link needs --ranks-per-node"), err
    assert main(argv + ["--ranks-per-node", "8"]) == 0
