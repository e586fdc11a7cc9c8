"""The folders a crew's driver leaves in the temp folder, and sweeping those of killed drivers.

Each crew works in a folder ``zerolab-crew-*`` of its own, with a ``driver`` file naming the driver's
pid and multiprocessing's temp folder (the forkserver's socket lives there). Rank 0 removes that
temp folder if the driver is killed alone; when the driver is killed together with its ranks (Jupyter
shuts a kernel down by killing its whole process group), the next crew sweeps both
(:func:`_sweep_stale_workdirs`, called by :class:`zerolab.crew.crew.Crew` before it starts)."""
from __future__ import annotations

import os
import shutil
import tempfile


def _driver_tmp(rank: int) -> tuple:
    """For rank 0: this process's pid and multiprocessing's temp folder (the forkserver's socket
    lives there), which rank 0 removes if this process is killed (its atexit never runs)."""
    import multiprocessing.util
    return (os.getpid(), multiprocessing.util.get_temp_dir()) if rank == 0 else ()


def _sweep_stale_workdirs() -> None:
    """Remove the folders of crews whose driver was killed together with its ranks (Jupyter shuts
    a kernel down by killing its whole process group: no rank is left to clean up), and the
    forkserver folder that driver left. A folder is stale when the pid in its ``driver`` file is
    gone; one being created (no file yet) or of a live driver is left alone."""
    import glob
    from .procs import pid_alive
    for d in glob.glob(os.path.join(tempfile.gettempdir(), "zerolab-crew-*")):
        try:
            with open(os.path.join(d, "driver")) as f:
                pid, *mp_tmp = f.read().split("\n")
            if pid_alive(int(pid)):
                continue
        except (OSError, ValueError):
            continue
        for path in (d, *[m for m in mp_tmp if os.path.basename(m).startswith("pymp-")]):
            shutil.rmtree(path, ignore_errors=True)
