"""What the browser tests share (tests/test_lab_browser.py, tests/test_course_browser.py): the
system's Chromium, a free port, a JupyterLab server started and stopped, a page of headless
Chromium (a screenshot when the test fails in it). The ``browser_tools`` fixture (the skip
when Chromium or playwright is missing) is in tests/conftest.py.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def chromium() -> str | None:
    """The system's Chromium (``ZEROLAB_CHROMIUM`` first), or None."""
    for candidate in (os.environ.get("ZEROLAB_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_browser(p, chromium: str, profile: Path):
    """Headless Chromium with its own profile folder, through playwright ``p``."""
    return p.chromium.launch_persistent_context(
        str(profile), executable_path=chromium, headless=True, viewport={"width": 1400, "height": 1000},
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"])


@contextlib.contextmanager
def open_page(p, chromium: str, folder: Path):
    """A page of headless Chromium (its profile in ``folder``/profile), closed at the end; on an
    exception, a screenshot in ``folder``/failure.png first, and where it and the server's log
    (``folder``/server.log) are."""
    browser = launch_browser(p, chromium, folder / "profile")
    page = browser.new_page()
    try:
        yield page
    except Exception:
        page.screenshot(path=str(folder / "failure.png"))
        print(f"screenshot: {folder / 'failure.png'}; server log: {folder / 'server.log'}")
        raise
    finally:
        browser.close()


class JupyterServer:
    """A server started by ``argv`` on ``port`` with ``token``, its output in ``log``, in its own
    session (``stop`` ends it with its kernels and their ranks). Waits until it answers
    ``/api/status`` (``start_timeout`` seconds at most: then it is stopped and ``RuntimeError``
    names ``what`` did not start). ``printed``: the first URL of this server it printed
    (JupyterLab prints the token as "...")."""

    def __init__(self, argv: list[str], cwd: Path, env: dict, log: Path, port: int, token: str,
                 start_timeout: float = 120, what: str = "the server"):
        self.log_path, self.base, self.token = log, f"http://127.0.0.1:{port}", token
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{what} did not start:\n" + log.read_text()) from None
                time.sleep(0.3)
        found = re.search(re.escape(self.base) + r"/\S*", log.read_text())
        self.printed = found.group(0) if found else ""

    def url(self, printed: str) -> str:
        """``printed`` with the real token (what a learner's terminal shows them in full)."""
        return printed.replace("token=...", f"token={self.token}")

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)       # the server, its kernel and the kernel's ranks
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.log.close()
