"""What a new learner meets first (issue 36, "tried as a new learner would"): the one command
(``zerolab course``: a working copy, chapter 0, no news), ``zerolab simulate`` and ``estimate``
as typed from memory (``--params 7B --gpus 8``), ``--help``, ``zerolab progress`` in one clone of
several, ``zerolab train``'s first loss, and preflight's word on fonts for the Chinese edition.
The browser half (JupyterLab in Chromium, autosave, the pop-up) is tests/test_lab_browser.py."""
from __future__ import annotations

import argparse
import json
import math

import pytest

from zerolab.course import workspace as course
from zerolab.course import progress
from zerolab.tools import report
from zerolab.cli import count
from zerolab.cli import main as cli


# -- zerolab course ------------------------------------------------------------------------------------

def test_the_working_copy_is_made_once_and_never_overwrites_a_learners_edits(tmp_path):
    root = course.clone_root()
    assert root is not None, "the tests run from a clone"
    dest = tmp_path / "course"
    copied, kept = course.working_copy(root, dest)
    chapter0 = dest / "notebooks" / course.FIRST_CHAPTER
    assert copied > 40 and kept == 0 and chapter0.is_file()
    assert (dest / "notebooks" / "zh" / course.FIRST_CHAPTER).is_file()
    assert (dest / "exercises" / "03c_zero1_by_hand.ipynb").is_file() and (dest / "solutions").is_dir()
    assert not any(".ipynb_checkpoints" in str(p) for p in dest.rglob("*"))
    chapter0.write_text("my edits")
    (dest / "exercises" / "13_block_quantizer.ipynb").unlink()          # deleted: comes back
    again = course.working_copy(root, dest)
    assert again == (1, copied - 1) and chapter0.read_text() == "my edits"


def test_the_news_pop_up_is_off_in_the_environments_settings_not_the_users(tmp_path):
    path = course.news_off(tmp_path / "settings")
    assert path == tmp_path / "settings" / "overrides.d" / "zerolab.json"
    plugin = json.loads(path.read_text())["@jupyterlab/apputils-extension:notification"]
    assert plugin == {"fetchNews": "false", "checkForUpdates": False}
    # what JupyterLab's server reads from its app settings folder
    from jupyterlab_server.settings_utils import _get_overrides
    overrides, error = _get_overrides(str(tmp_path / "settings"))
    assert not error and overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert course.lab_settings_dir().name == "settings" and "share" in course.lab_settings_dir().parts


def test_zerolab_course_opens_chapter_0_of_the_copy(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(course, "news_off", lambda settings=None: tmp_path / "overrides.d" / "zerolab.json")
    assert cli(["course", "--dir", str(tmp_path / "c"), "--no-browser", "--port", "8899",
                "--ServerApp.ip=127.0.0.1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    argv = out.strip().splitlines()[-1]
    assert f"--ServerApp.root_dir={tmp_path / 'c'}" in argv
    assert "--LabApp.default_url=/lab/tree/notebooks/00_meet_the_crew.ipynb" in argv
    assert "--ServerApp.ip=127.0.0.1" in argv and "--no-browser" in argv and "--port=8899" in argv
    assert "your working copy of the course" in out and "news pop-up: off" in out
    assert cli(["course", "--dir", str(tmp_path / "c"), "--lang", "zh", "--dry-run"]) == 0
    assert "--LabApp.default_url=/lab/tree/notebooks/zh/00_meet_the_crew.ipynb" in capsys.readouterr().out


def test_zerolab_course_refuses_the_stored_course_itself(capsys):
    assert cli(["course", "--dir", str(course.clone_root() / "notebooks"), "--dry-run"]) == 2
    assert "the stored course itself" in capsys.readouterr().err


# -- parameter counts, simulate, estimate, --help --------------------------------------------------

@pytest.mark.parametrize("text,value", [("7e9", 7e9), ("7B", 7e9), ("1.3b", 1.3e9), ("350M", 350e6),
                                        ("70b", 70e9), ("1T", 1e12), ("7,000,000,000", 7e9), ("125m", 125e6)])
def test_a_parameter_count_reads_as_people_write_it(text, value):
    assert math.isclose(count(text), value)


@pytest.mark.parametrize("text", ["7x", "B", "", "-3B", "inf"])
def test_a_bad_parameter_count_says_how_to_write_one(text):
    with pytest.raises(argparse.ArgumentTypeError, match="7B, 1.3b, 350M"):
        count(text)


def test_simulate_7b_on_8_gpus_needs_nothing_else(capsys):
    assert cli(["simulate", "--params", "7B", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--layers/--hidden not given: 32 layers, hidden 4096 (Llama-2 7B)")
    assert "never the model states" in out and "bound by" in out
    assert cli(["simulate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--gpus", "8"]) == 0
    explicit = capsys.readouterr().out
    assert out.split("\n", 2)[2] == explicit                          # the same table as when typed out


def test_an_offload_row_says_the_cpu_step_adds_to_the_compute(capsys):
    assert cli(["simulate", "--params", "7B", "--gpus", "8"]) == 0
    rows = {line[:36].strip(): line for line in capsys.readouterr().out.splitlines()}
    plain, offload = rows["stage 3"], rows["stage 3 + offload optimizer"]
    assert plain.rstrip().endswith(" compute")
    assert offload.rstrip().endswith("compute+CPU step")               # was "compute", at twice the time
    assert float(offload.split()[-3]) > 1.5 * float(plain.split()[-2])     # its step time, then the label


def test_gpus_means_gpus_in_total_in_estimate_as_in_simulate(capsys):
    assert cli(["estimate", "--params", "7B", "--gpus", "16"]) == 0
    assert "16 GPU(s)" in capsys.readouterr().out
    assert cli(["estimate", "--params", "7B", "--gpus-per-node", "8", "--nodes", "2"]) == 0
    out, err = capsys.readouterr()
    assert "16 GPU(s)" in out and not err
    assert cli(["estimate", "--params", "7B", "--gpus", "8", "--nodes", "2"]) == 0      # the old spelling works
    out, err = capsys.readouterr()
    assert "16 GPU(s)" in out and "deprecated" in err and "--gpus-per-node 8" in err
    assert cli(["estimate", "--params", "7B", "--gpus", "8", "--gpus-per-node", "8", "--nodes", "2"]) == 2


def _parsers():
    from zerolab import cli as cli_module
    captured = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)
    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            cli_module.main(["env"])
    finally:
        argparse.ArgumentParser.parse_args = real
    top = captured["parser"]
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return top, sub.choices


def test_every_option_has_help_and_no_help_shows_rst_backticks(capsys):
    top, commands = _parsers()
    missing = [f"{name} {a.option_strings[0]}" for name, p in commands.items() for a in p._actions
               if a.option_strings and a.help in (None, "") and a.dest != "help"]
    assert not missing, missing
    texts = [top.format_help()] + [p.format_help() for p in commands.values()]
    assert not [t for t in texts if "``" in t]


# -- zerolab progress: this clone's checks ---------------------------------------------------------

def test_progress_counts_only_this_clones_checks(tmp_path, monkeypatch, capsys):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("ZEROLAB_PROGRESS", str(path))
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    here = progress.this_clone()
    progress.record("ch06.check_bucket_params", True, "mine")               # this clone: "clone" is written
    records = json.loads(path.read_text())["records"]
    assert records[0]["clone"] == here
    other = [{"exercise": "ch00.check_ring_all_gather", "time": "2026-01-01T00:00:00+00:00", "passed": True,
              "message": "", "clone": "/home/u/another-clone"},
             {"exercise": "ch01.check_model_state_bytes", "time": "2026-01-01T00:00:00+00:00", "passed": True,
              "message": "", "notebook": "/home/u/another-clone/exercises/01_memory_giants.ipynb"},   # older
             {"exercise": "ch02.check_ring_reduce_scatter", "time": "2026-01-01T00:00:00+00:00", "passed": True,
              "message": "", "notebook": f"{here}/course/exercises/02_ring_reduce_scatter.ipynb"}]   # older, here
    path.write_text(json.dumps({"zerolab_progress": 1, "records": records + other}))
    assert cli(["progress"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"2 of {len(progress.EXERCISES)} exercises done", out
    assert "2 records from other clones on this machine not counted" in out
    assert cli(["progress", "--all"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"4 of {len(progress.EXERCISES)} exercises done"


# -- zerolab train's first loss; preflight's fonts in Chinese ---------------------------------------

def test_the_first_loss_of_tinylm_is_explained():
    from zerolab.tools.train import _why_the_first_loss
    assert _why_the_first_loss(3.5) == []
    line = "\n".join(_why_the_first_loss(24.4))
    assert "ln 37 = 3.61" in line and "tied to the embedding" in line and "d = 26" in line
    assert all(len(part) <= 98 for part in line.splitlines())


def test_the_first_loss_is_what_the_explanation_says():
    """Measured, not asserted from memory: the tied head gives each position's own token a logit
    near d, and the loss is far above ln V."""
    import torch

    from zerolab.models import TinyLM, lm_batches, lm_loss
    model = TinyLM()
    x, y = next(iter(lm_batches(1, 8)))
    with torch.no_grad():
        logits = model(x)
        own = float(logits.gather(-1, x.unsqueeze(-1)).mean())
        loss = float(lm_loss(logits, y))
    assert 18 < own < 34 and loss > 4 * math.log(37)


def test_preflight_in_chinese_says_the_chinese_edition_is_boxes_without_a_cjk_font(monkeypatch):
    from zerolab import i18n
    monkeypatch.setattr(report, "cjk_fonts", lambda: [])
    with i18n.using("zh"):
        check = report.check_fonts()
    assert check.warn and "方框" in check.detail and "fonts-noto-cjk" in check.detail
    with i18n.using("en"):
        assert "boxes" in report.check_fonts().detail
