"""The CPU time of a command and of every process it starts, orphans included.

    python benchmarks/cpu_of.py <command ...>
    python benchmarks/cpu_of.py .venv/bin/python -m pytest --nbval --nbval-current-env \\
        --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider notebooks solutions

``time`` undercounts a notebook pass: a kernel's crew starts a forkserver that outlives the
kernel, and the ranks are the forkserver's children, so their CPU never reaches the command's
``RUSAGE_CHILDREN``. Here this process makes itself their subreaper (Linux ``prctl``): every
orphan is handed to it, waited for, and counted. Prints wall time and user + system CPU seconds on
stderr (one notebook pass alone, the command above, on the 2-core machine of 2026-12-04: 469
CPU-seconds, user 329 and system 140). For the CPU of each test, see ``cpu_per_test.py``.
"""
from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    t0 = time.perf_counter()
    rc = subprocess.call(argv)
    while True:                                  # the orphans handed to us, until none is left
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu_of] wall {time.perf_counter() - t0:.1f} s, CPU {r.ru_utime + r.ru_stime:.1f} s "
          f"(user {r.ru_utime:.1f}, system {r.ru_stime:.1f})", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
