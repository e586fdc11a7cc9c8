"""Processes on this machine: the one question the transports, the NVMe store, checkpoints and the
crew's ranks all ask before they clean up after someone (is that process still there?)."""
from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Is there a process with this id on this machine? A zombie (killed, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                          # a zombie (killed, not yet reaped) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
