"""The course as a new learner opens it: the README's command, JupyterLab driven in Chromium.

A fresh clone (this working tree's files, committed into a new git repository in a temporary
folder) runs ``zerolab course --no-browser`` as the README says (its own port and token; the
user's JupyterLab settings, config and workspaces in temporary folders). Then:

* the URL JupyterLab prints opens chapter 0, and it is the working copy's
  (``course/notebooks/00_meet_the_crew.ipynb``), not the clone's stored notebook;
* no news notification ("Would you like to get notified about official Jupyter news?") covers
  the page; a control run of plain ``jupyter lab`` without the environment's override shows
  that notification, so its absence above is the command's doing;
* chapter 0 is run to its end in the page and saved (what autosave does, without waiting its 2
  minutes): the working copy holds the outputs, and ``git status`` of the clone is clean.

``zerolab course`` writes ``overrides.d/zerolab.json`` into the environment's JupyterLab settings
(``<sys.prefix>/share/jupyter/lab/settings``), as it does for a learner. Needs Chromium and
playwright, as tests/test_lab_browser.py; skipped (saying which is missing) without them.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_helpers import JupyterServer, free_port, open_page

ROOT = Path(__file__).resolve().parent.parent
NEWS = "Would you like to get notified about official Jupyter news?"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _fresh_clone(dest: Path) -> Path:
    """This working tree's files (tracked, and untracked ones git does not ignore) as a new repository."""
    files = _git(ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone")
    return dest


def _isolated_env(tmp: Path, clone: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(clone), JUPYTER_CONFIG_DIR=str(tmp / "config"),
                JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
                JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), ZEROLAB_PROGRESS="off", OMP_NUM_THREADS="1")


def _wait_for_app(page):
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
    page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)


def _news_shown(page, wait_s: float = 8.0) -> bool:
    """True if the news question appears within ``wait_s`` (JupyterLab asks a few seconds after start)."""
    try:
        page.get_by_text(NEWS).first.wait_for(state="visible", timeout=wait_s * 1000)
        return True
    except Exception:            # noqa: BLE001 - playwright's TimeoutError
        return False


@pytest.mark.timeout(600)
def test_the_readme_command_opens_chapter_0_of_a_working_copy_and_git_stays_clean(browser_tools, tmp_path):
    chromium, sync_api = browser_tools
    clone = _fresh_clone(tmp_path / "clone")
    env = _isolated_env(tmp_path, clone)
    port, token = free_port(), secrets.token_hex(16)
    server = JupyterServer([sys.executable, "-m", "zerolab.cli", "course", "--no-browser", "--allow-root",
                            f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}",
                            "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True"],
                           clone, env, tmp_path / "server.log", port, token)
    try:
        printed = server.printed
        assert printed.startswith(f"{server.base}/lab/tree/notebooks/00_meet_the_crew.ipynb?token="), printed
        # (without --LabApp.default_url it is .../lab?token=..., JupyterLab's Launcher)
        log = server.log_path.read_text()
        assert f"your working copy of the course: {clone / 'course'}" in log, log
        copy = clone / "course" / "notebooks" / "00_meet_the_crew.ipynb"
        stored = (clone / "notebooks" / "00_meet_the_crew.ipynb").read_bytes()
        assert copy.read_bytes() == stored
        with sync_api.sync_playwright() as p:
            with open_page(p, chromium, tmp_path) as page:
                page.goto(server.url(printed))          # the URL as printed, as a learner pastes it
                _wait_for_app(page)
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
                path = page.evaluate("window.jupyterapp.shell.currentWidget.context.path")
                assert path == "notebooks/00_meet_the_crew.ipynb", path     # relative to course/, the root
                root = page.evaluate("fetch('/api/contents/notebooks?token=" + token + "').then(r => r.json())"
                                     ".then(j => j.content.map(c => c.name))")
                assert "00_meet_the_crew.ipynb" in root and "zh" in root
                assert not _news_shown(page), "the news notification is on the page"
                page.wait_for_function("window.jupyterapp.shell.currentWidget.sessionContext.session"
                                       " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                                       " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                                       ".status === 'idle'", timeout=90_000)
                page.locator(".jp-Notebook .jp-Cell").first.click()
                page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                cells = page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets"
                                      ".filter(c => c.model.type === 'code').length")
                page.wait_for_function(
                    "window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')"
                    ".every(c => c.model.executionCount !== null && !c.node.classList.contains('jp-mod-running'))"
                    " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                    timeout=400_000, polling=1000)
                assert page.get_by_text(NEWS).count() == 0, "the news notification came while the chapter ran"
                page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
                deadline = time.monotonic() + 30
                while copy.read_bytes() == stored and time.monotonic() < deadline:
                    time.sleep(0.5)
        assert copy.read_bytes() != stored, "the working copy was not saved"
        import nbformat
        saved = [c for c in nbformat.reads(copy.read_text(), as_version=4).cells if c.cell_type == "code"]
        assert len(saved) == cells > 10 and all(c.execution_count for c in saved), "not every cell ran"
        assert not [o for c in saved for o in c.outputs if o.output_type == "error"], "a cell raised"
        assert (clone / "notebooks" / "00_meet_the_crew.ipynb").read_bytes() == stored
        status = _git(clone, "status", "--porcelain", "--untracked-files=all")
        assert status == "", status
    finally:
        server.stop()


@pytest.mark.timeout(300)
def test_without_the_override_jupyterlab_asks_about_news(browser_tools, tmp_path):
    """The control: plain ``jupyter lab`` with an app settings folder that lacks zerolab's override
    shows the notification the test above finds absent (so finding none there means something)."""
    chromium, sync_api = browser_tools
    (tmp_path / "root").mkdir()
    env = _isolated_env(tmp_path, ROOT)
    port, token = free_port(), secrets.token_hex(16)
    server = JupyterServer([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
                            "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", "--ServerApp.port_retries=0",
                            f"--ServerApp.root_dir={tmp_path / 'root'}",
                            f"--LabApp.app_settings_dir={tmp_path / 'app'}", "--LabApp.expose_app_in_browser=True"],
                           tmp_path / "root", env, tmp_path / "server.log", port, token)
    try:
        with sync_api.sync_playwright() as p:
            with open_page(p, chromium, tmp_path) as page:
                assert server.printed.startswith(f"{server.base}/lab?token="), server.printed   # the Launcher
                page.goto(server.url(server.printed))
                _wait_for_app(page)
                assert _news_shown(page, wait_s=30), "no news notification without the override"
    finally:
        server.stop()
