"""``zerolab train``: a small model trained on N ranks from a DeepSpeed config, as a subprocess."""
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "zero2_bf16.json"


def env():
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    e["OMP_NUM_THREADS"] = "1"
    return e


def check_summary(out: str, world: int, steps: int, picture: pathlib.Path):
    assert f"ZeRO stage 2, {world} rank(s) on cpu, bfloat16, global batch {2 * 2 * world} = 2 x 2 " \
           f"(accumulation) x {world}" in out, out
    first, last = re.search(r"loss: ([\d.]+) at step 1 -> ([\d.]+) at step", out).groups()
    assert float(last) < float(first), out                      # it trained
    assert f"at step {steps}" in out
    for r in range(world):
        assert f"\n    {r:<6}" in out, out                       # a memory row per rank
    for op in ("all_reduce", "all_gather"):                     # stage 2: DeepSpeed all-reduces each bucket
        assert f"    {op}" in out, out
    assert "ms per step" in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zerolab_train_on_two_ranks(tmp_path):
    pic = tmp_path / "train.png"
    r = subprocess.run([sys.executable, "-m", "zerolab.cli", "train", "--config", str(CONFIG), "--nproc", "2",
                        "--steps", "4", "--picture", str(pic)], capture_output=True, text=True, timeout=240,
                       env=env(), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_summary(r.stdout, 2, 4, pic)
    assert "zerolab train: 100%" in r.stderr and "4/4" in r.stderr      # the progress bar


def test_the_same_entry_point_under_torchrun(tmp_path):
    pic = tmp_path / "tr.png"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    r = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "zerolab.cli", "train",
                        "--config", str(CONFIG), "--steps", "3", "--picture", str(pic)],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path,
                       env={**env(), "PET_LOG_DIR": str(tmp_path / "torchrun-logs")})   # torchrun's --log-dir
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_summary(r.stdout, 2, 3, pic)
    assert r.stdout.count("zerolab train: TinyLM") == 1                 # rank 0 alone prints it


def test_a_bad_config_is_exit_status_2_before_any_rank_starts(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train_batch_size": 8, "zero_optimisation": {"stage": 2}}))
    r = subprocess.run([sys.executable, "-m", "zerolab.cli", "train", "--config", str(bad), "--nproc", "2"],
                       capture_output=True, text=True, timeout=120, env=env(), cwd=tmp_path)
    assert r.returncode == 2 and "did you mean 'zero_optimization'" in r.stderr, r.stderr
