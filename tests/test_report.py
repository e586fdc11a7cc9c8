"""The workshop kit: `zerolab report`, `zerolab report --preflight`, tools/wheelhouse.sh."""
import io
import os
import pathlib
import subprocess
import sys

import pytest

from zerolab.tools import report

ROOT = pathlib.Path(__file__).resolve().parents[1]


def zerolab(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "zerolab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_report_fits_one_screen_and_names_what_matters():
    r = zerolab("report")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= 160, r.stdout
    for want in ("torch ....", "torch build", "gloo yes", "NCCL", "GPUs", "/dev/shm", "CPU features",
                 "cores", "memory", "what the course can run here", "every chapter .... yes"):
        assert want in r.stdout, (want, r.stdout)


def test_preflight_is_ready_here():
    r = zerolab("report", "--preflight")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "READY", r.stdout
    crew = next(line for line in lines if "] crew" in line)
    assert "4 ranks" in crew and "started in" in crew and "torn down in" in crew, crew
    for name in ("python", "torch", "jupyter", "plots", "CJK fonts", "memory"):
        assert any(f"] {name}" in line for line in lines), (name, r.stdout)
    assert "FAIL" not in r.stdout


def test_preflight_not_ready_says_what_to_fix_and_exits_nonzero():
    r = zerolab("report", "--preflight", "--ranks", "2", "--need-gb", "1000000")   # a million GB free: no
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1].startswith("NOT READY: memory: free memory"), lines[-1]
    assert any(line.strip().startswith("fix: free memory") for line in lines), r.stdout
    assert any("[FAIL] memory" in line for line in lines), r.stdout
    assert any("2 ranks on gloo" in line for line in lines), r.stdout   # the other checks still ran


def test_a_check_that_breaks_is_a_failure_not_a_crash(monkeypatch):
    def broken(ranks=4):
        raise OSError("no sockets here")
    monkeypatch.setattr(report, "check_crew", broken)
    out = io.StringIO()
    assert report.preflight(need_gb=0.001, out=out) is False
    text = out.getvalue().strip().splitlines()
    assert any("[FAIL]" in line and "OSError: no sockets here" in line for line in text), text
    assert text[-1].startswith("NOT READY: "), text


def test_memory_facts_are_plausible():
    m = report.memory()
    assert m["total"] and m["available"] and 0 < m["available"] <= m["total"]
    c = report.cpu()
    assert c["usable"] >= 1 and c["logical"] >= c["usable"]


# ---- tools/wheelhouse.sh: the offline install's commands -----------------------------------------

WHEELHOUSE = ROOT / "tools" / "wheelhouse.sh"


def sh(*args, env=None):
    return subprocess.run(["bash", str(WHEELHOUSE), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_wheelhouse_help_and_usage():
    r = sh("--help")
    assert r.returncode == 0 and "build DIR" in r.stdout and "install DIR" in r.stdout
    assert sh().returncode == 2
    assert sh("frobnicate", "/tmp/x").returncode == 2


def test_wheelhouse_build_dry_run_downloads_everything_the_course_needs(tmp_path):
    r = sh("build", str(tmp_path / "wh"), "--dry-run")
    assert r.returncode == 0, r.stderr
    cmds = [line[2:] for line in r.stdout.splitlines() if line.startswith("+ ")]
    assert any("pip wheel --no-deps" in c and str(ROOT) in c for c in cmds), cmds
    downloads = [c for c in cmds if "pip download" in c]
    assert downloads and all("torch==2.13.0" in c for c in downloads), cmds
    assert "[course,test]" in downloads[-1] and "setuptools" in downloads[-1], cmds
    assert not (tmp_path / "wh").exists()          # a dry run writes nothing


def test_wheelhouse_cross_platform_build_asks_for_binary_wheels(tmp_path):
    r = sh("build", str(tmp_path), "-n", env={"PLATFORM": "manylinux_2_28_aarch64", "PYVER": "3.12",
                                             "TORCH_INDEX": "https://example.invalid/cpu"})
    downloads = [line for line in r.stdout.splitlines() if "pip download" in line]
    assert all("--only-binary=:all:" in c and "--platform manylinux_2_28_aarch64" in c
               and "--python-version 3.12" in c for c in downloads), downloads
    assert "--index-url https://example.invalid/cpu" in downloads[0]
    assert "--index-url" not in downloads[1]


def test_wheelhouse_install_dry_run_uses_no_index(tmp_path):
    r = sh("install", str(tmp_path), "--dry-run", env={"VENV": str(tmp_path / "venv")})
    assert r.returncode == 0, r.stderr
    install = next(line for line in r.stdout.splitlines() if "pip install" in line)
    assert f"--no-index --find-links {tmp_path}" in install and "torch==2.13.0" in install
    assert "-e .[course,test]" in install
    assert r.stdout.strip().splitlines()[-1].endswith("zerolab report --preflight")


def test_wheelhouse_install_refuses_a_missing_wheelhouse(tmp_path):
    r = sh("install", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "tools/wheelhouse.sh build" in r.stderr


def test_measure_chapters_has_a_usage():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "measure_chapters.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--interval" in r.stdout
