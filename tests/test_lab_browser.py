"""The visual lab in a real browser: JupyterLab under headless Chromium, driven by Playwright.

A JupyterLab server (its own port, token, config and settings directories, all temporary) opens
a copy of notebooks/12_visual_lab.ipynb with its outputs removed; every cell is run in the
page; then the four modes' widgets must have rendered (controls and a picture each), and
must answer their controls: the basic mode's stage dropdown, the core mode's collective
slider (moved with the keyboard), the application mode's GPU-count dropdown, the extension
mode's offload_optimizer dropdown and its ZeRO++ part's hpZ dropdown and qwZ checkbox each change
what the widget shows.

Needs Debian's ``chromium`` (``apt-get install -y chromium``; or ``ZEROLAB_CHROMIUM=/path``)
and the Python package ``playwright`` (the ``test`` extra; no browser download: the system
Chromium is used). Without either, the test is skipped and says which is missing.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest
from browser_helpers import JupyterServer, free_port, open_page

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "12_visual_lab.ipynb"


def _stripped_copy(dest: Path) -> Path:
    """The chapter without outputs or stored widget state: what the page shows comes from this run."""
    import nbformat
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    path = dest / NOTEBOOK.name
    nbformat.write(nb, path)
    return path


@pytest.fixture
def lab_server(tmp_path):
    """A JupyterLab server on a free port whose root is a temporary folder; yields (url, token, tmp_path)."""
    root = tmp_path / "root"
    root.mkdir()
    _stripped_copy(root)
    config = tmp_path / "config"
    (config / "labconfig").mkdir(parents=True)
    # no "would you like news?" toast over the page
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    port, token = free_port(), secrets.token_hex(16)
    jupyter = Path(sys.executable).with_name("jupyter")
    server = JupyterServer(
        [str(jupyter), "lab", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--LabApp.expose_app_in_browser=True"],
        root, env, tmp_path / "server.log", port, token, start_timeout=60, what="jupyter lab")
    try:
        yield server.base, token, tmp_path
    finally:
        server.stop()


def test_the_lab_renders_and_answers_in_jupyterlab(browser_tools, lab_server):
    chromium, sync_api = browser_tools            # first: a skip costs no server start
    expect, sync_playwright = sync_api.expect, sync_api.sync_playwright
    url, token, tmp = lab_server
    errors: list[str] = []
    with sync_playwright() as p:
        with open_page(p, chromium, tmp) as page:
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{url}/lab/tree/{NOTEBOOK.name}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                                   ".status === 'idle'", timeout=60_000)
            page.locator(".jp-Notebook .jp-Cell").first.click()
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")

            basic = page.locator(".zerolab-lab-basic")
            core = page.locator(".zerolab-lab-core")
            app = page.locator(".zerolab-lab-application")
            ext = page.locator(".zerolab-lab-extension")
            zpp = page.locator(".zerolab-lab-zeropp")
            for box in (basic, core, app, ext, zpp):                       # each mode rendered: controls and a picture
                expect(box.locator("img")).to_have_count(1, timeout=60_000)
                expect(box.locator(".widget-dropdown").first).to_be_visible()
            expect(page.locator(".jp-OutputArea-output pre", has_text="the lab's ranks are stopped"))\
                .to_be_visible(timeout=60_000)

            # application mode: 64 GPUs instead of 8
            summary = app.locator(".widget-html").last
            expect(summary).to_contain_text("on 8 x a100-80gb")
            picture = app.locator("img").get_attribute("src")
            app.locator(".widget-dropdown select").nth(1).select_option("64")
            expect(summary).to_contain_text("on 64 x a100-80gb", timeout=30_000)
            expect(app.locator("img")).not_to_have_attribute("src", picture, timeout=30_000)

            # basic mode: stage 3 instead of 2 (the ranks were stopped by the last cell: they restart)
            summary = basic.locator(".widget-html").last
            expect(summary).to_contain_text("stage 2, N = ")
            basic.locator(".widget-dropdown select").first.select_option("3")
            expect(summary).to_contain_text("stage 3, N = ", timeout=60_000)
            expect(summary).to_contain_text("1/", timeout=5_000)

            # core mode: the collective slider, one step to the right with the keyboard
            line = core.locator(".widget-html").first
            expect(line).to_contain_text("#0:")
            core.locator(".widget-slider").nth(1).locator(".noUi-handle").focus()
            page.keyboard.press("ArrowRight")
            expect(line).to_contain_text("#1:", timeout=30_000)

            # extension mode: the optimizer states to host memory instead of the device
            summary = ext.locator(".widget-html").last
            expect(summary).to_contain_text("optimizer states on the device")
            picture = ext.locator("img").get_attribute("src")
            ext.locator(".widget-dropdown select").nth(1).select_option("cpu")
            expect(summary).to_contain_text("optimizer states in host memory", timeout=60_000)
            expect(ext.locator("img")).not_to_have_attribute("src", picture, timeout=30_000)

            # extension mode, ZeRO++: hpZ 2 (its dropdown), then qwZ (a checkbox)
            summary = zpp.locator(".widget-html").last
            expect(summary).to_contain_text("ZeRO++ off")
            picture = zpp.locator("img").get_attribute("src")
            zpp.locator(".widget-dropdown select").nth(1).select_option("2")
            expect(summary).to_contain_text("secondary shards after the last backward", timeout=60_000)
            expect(zpp.locator("img")).not_to_have_attribute("src", picture, timeout=30_000)
            zpp.locator(".widget-checkbox input").first.check()
            expect(summary).to_contain_text("hpZ 2 + qwZ", timeout=60_000)
    widget_errors = [e for e in errors if "widget" in e.lower()]
    assert not widget_errors, widget_errors
