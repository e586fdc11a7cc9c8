"""Shared test helpers: what this test process has left running.

The crew starts its ranks through multiprocessing's *forkserver*. Two helper processes live
for the whole session by design: the forkserver itself (the ranks are its children) and
multiprocessing's resource tracker. Leak checks exclude exactly those two, identified by the
PIDs multiprocessing recorded for them, and count everything else below this process.
"""
from __future__ import annotations

import os

import psutil


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
