"""The folders a crew's driver leaves in the temp folder, and sweeping those of killed drivers.

Each crew works in a folder ``zerolab-crew-*`` of its own, with a ``driver`` file naming the driver's
pid and multiprocessing's temp folder (the forkserver's socket lives there). Rank 0 removes that
temp folder if the driver is killed alone; when the driver is killed together with its ranks (Jupyter
shuts a kernel down by killing its whole process group), the next crew sweeps both
(:func:`_sweep_stale_workdirs`, called by :class:`zerolab.crew.crew.Crew` before it starts).

A driver killed *between* crews (a notebook kernel shut down after its last cell's crew ended: how
nbval and Jupyter end most kernels) has no crew folder and no rank left to name its temp folder, so
each driver also leaves a mark, ``zerolab-driver-<pid>``, from its first crew until it exits
(:func:`_mark_driver`): at a normal exit the mark goes and multiprocessing removes its own folder;
after a kill the next sweep finds the folder through the mark."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_MARK_PREFIX = "zerolab-driver-"
_marked: str | None = None        # this process's mark, once it has one


def _driver_tmp(rank: int) -> tuple:
    """For rank 0: this process's pid and multiprocessing's temp folder (the forkserver's socket
    lives there), which rank 0 removes if this process is killed (its atexit never runs)."""
    import multiprocessing.util
    return (os.getpid(), multiprocessing.util.get_temp_dir()) if rank == 0 else ()


def _mark_driver() -> None:
    """Once per driver process: the mark naming this pid and multiprocessing's temp folder, kept
    until this process exits normally (a fork's exit leaves the parent's mark alone)."""
    global _marked
    pid, folder = _driver_tmp(0)
    path = os.path.join(tempfile.gettempdir(), f"{_MARK_PREFIX}{pid}")
    if _marked == path:
        return
    with open(path, "w") as f:
        f.write(f"{pid}\n{folder}")
    _marked = path

    def unmark(pid=pid, path=path) -> None:
        if os.getpid() == pid:
            try:
                os.remove(path)
            except OSError:
                pass
    atexit.register(unmark)


def _of_dead_driver(record: str) -> list[str] | None:
    """The multiprocessing temp folders named in ``record`` (a driver's pid, then its folder) if
    that driver is gone; None while it lives, or if the record cannot be read (being written)."""
    from .procs import pid_alive
    try:
        with open(record) as f:
            pid, *mp_tmp = f.read().split("\n")
        if pid_alive(int(pid)):
            return None
    except (OSError, ValueError):
        return None
    return [m for m in mp_tmp if os.path.basename(m).startswith("pymp-")]


def _sweep_stale_workdirs() -> None:
    """Remove the folders of crews whose driver was killed together with its ranks (Jupyter shuts
    a kernel down by killing its whole process group: no rank is left to clean up), and the
    forkserver folder that driver left; and the forkserver folders of drivers killed between
    crews (their marks). A folder is stale when the pid in its ``driver`` file or mark is gone;
    one being created (no file yet) or of a live driver is left alone."""
    import glob
    tmp = tempfile.gettempdir()
    for d in glob.glob(os.path.join(tmp, "zerolab-crew-*")):
        mp_tmp = _of_dead_driver(os.path.join(d, "driver"))
        if mp_tmp is not None:
            for path in (d, *mp_tmp):
                shutil.rmtree(path, ignore_errors=True)
    for mark in glob.glob(os.path.join(tmp, _MARK_PREFIX + "*")):
        mp_tmp = _of_dead_driver(mark)
        if mp_tmp is not None:
            for path in mp_tmp:
                shutil.rmtree(path, ignore_errors=True)
            try:
                os.remove(mark)
            except OSError:
                pass
