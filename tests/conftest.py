"""Shared test helpers and fixtures.

What this test process has left running: the crew starts its ranks through multiprocessing's
*forkserver*. Two helper processes live for the whole session by design: the forkserver itself
(the ranks are its children) and multiprocessing's resource tracker. Leak checks exclude exactly
those two, identified by the PIDs multiprocessing recorded for them, and count everything else
below this process.

Fixtures: ``browser_tools`` (the browser tests; their other helpers are in browser_helpers.py)
and ``closes_check_crews`` (the exercise checks' tests).
"""
from __future__ import annotations

import os

import psutil
import pytest
from browser_helpers import chromium


@pytest.fixture
def browser_tools():
    """(chromium path, playwright's sync API), or a skip that says which is missing."""
    path = chromium()
    if path is None:
        pytest.skip("no Chromium found (apt-get install -y chromium, or set ZEROLAB_CHROMIUM=/path/to/chrome)")
    try:
        from playwright import sync_api
    except ImportError:
        pytest.skip("the Python package playwright is not installed (pip install -e '.[test]')")
    return path, sync_api


@pytest.fixture(scope="module")
def closes_check_crews():
    """The crews the exercise checks keep between calls, closed after the module's last test
    (``pytestmark = pytest.mark.usefixtures("closes_check_crews")``)."""
    yield
    from zerolab.course.checks import close_crews
    close_crews()


def session_helpers() -> set[int]:
    """PIDs of the long-lived forkserver and resource tracker (empty before the first crew)."""
    from multiprocessing import forkserver, resource_tracker
    pids = {forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid}
    return {p for p in pids if p}


def stray_descendants(exclude_trees=()) -> list[psutil.Process]:
    """Every process below this one except the two session helpers (ranks included), and
    except the process trees rooted at ``exclude_trees`` (subprocesses a test started on purpose)."""
    helpers, roots = session_helpers(), set(exclude_trees)
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid in helpers or p.pid in roots or roots & {a.pid for a in p.parents()}:
                continue
            out.append(p)
        except psutil.NoSuchProcess:                  # ended while we looked
            pass
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def gone(pids) -> bool:
    """True when none of ``pids`` is in the process table any more (zombies count as present)."""
    return not any(psutil.pid_exists(p) for p in pids)
