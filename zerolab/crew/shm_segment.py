"""The shared-memory segment of :mod:`zerolab.crew.shm`: whether this machine can use one, its
layout, its file under ``/dev/shm``, and how the ranks of a group make and map it.

Layout, for N ranks: two cache lines per rank (the rank's *posted* and *done* flags, see
:mod:`zerolab.crew.shm_transport`), then ``ROUNDS`` rounds of N slots of equal size. Rank 0 makes
the file, named ``zerolab-shm-<host>-<pid>-<id>``, and passes its path to the others through
the process group's store (not a collective); every rank maps it, and rank 0 unlinks it as
soon as every rank has mapped it or failed, so nothing is left behind if a rank fails. A
segment whose creator was killed before it could unlink is removed by the next creation on
the host (:func:`remove_stale_segments`). Any rank's problem (not x86-64, another host, no
room, cannot map) is raised on every rank as :class:`ShmUnavailable`.
"""
from __future__ import annotations

import errno
import json
import mmap
import os
import platform
import socket
import tempfile
import time
import uuid

from .procs import pid_alive

SEGMENT_PREFIX = "zerolab-shm-"
LINE = 64                             # one cache line per rank's flag
ROUNDS = 4                            # collectives whose slots can be in use at once
_FIX = ("Use backend='gloo' (the default on CPU), or free /dev/shm / give the container more "
        "(docker run --shm-size=256m)")


class ShmUnavailable(RuntimeError):
    """The ``zshm`` backend was asked for but cannot work here (raised on every rank)."""


def sizes(n: int, budget: int) -> tuple[int, int]:
    """(slot bytes, segment bytes) for ``n`` ranks and ``budget`` bytes of slots."""
    slot = max(LINE, (budget // (ROUNDS * n)) // LINE * LINE)
    return slot, 2 * LINE * n + ROUNDS * n * slot


# ----------------------------------------------------------------------------- the machine

def problem_here() -> str | None:
    """Why this process cannot use the shared-memory transport, or None."""
    machine = platform.machine() or "unknown"
    if machine.lower() not in ("x86_64", "amd64"):
        return (f"this CPU is {machine}, not x86-64: the shared-memory transport relies on "
                "x86-64's total store order (no fences; see zerolab.crew.shm's docstring)")
    return None


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup CPU quota (a container
    limited to 1 CPU may still see all of the host's cores in its affinity)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                                   # not Linux
        cores = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:            # cgroup v2: "<quota> <period>" or "max ..."
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


def _folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def remove_stale_segments(folder: str | None = None) -> list[str]:
    """Delete segments left in ``folder`` (default: /dev/shm) by zerolab processes of this host
    that are gone: a segment's name holds its creator's pid, and a live creator unlinks it
    itself within a moment. Returns the names removed."""
    folder = folder or _folder()
    head = f"{SEGMENT_PREFIX}{socket.gethostname()}-"
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(head):
            continue
        try:
            pid = int(name[len(head):].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _reserve(fd: int, size: int) -> None:
    """Reserve the segment's space now (ENOSPC here, not SIGBUS at the first touch later)."""
    os.posix_fallocate(fd, 0, size)


def _create(path: str, size: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        _reserve(fd, size)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- making the segment

def _poll(store, key: str, deadline: float, pids: dict[int, int], what: str, rank: int) -> str:
    """The store's value at ``key``, once a rank has set it; a rank in ``pids`` that dies while
    we wait is named at once, a missing one after the timeout."""
    checks = 0
    while not store.check([key]):
        time.sleep(0.002)
        checks += 1
        if checks % 25 == 0:
            dead = [r for r, pid in pids.items() if not pid_alive(pid)]
            if dead:
                raise ShmUnavailable(f"zshm: rank {rank} waited for rank(s) {dead} to {what}, whose "
                                     "process has exited")
        if time.monotonic() > deadline:
            raise ShmUnavailable(f"zshm: rank {rank} waited in vain for the other ranks to {what} "
                                 "(the process group's timeout)")
    value = store.get(key)
    return value.decode() if isinstance(value, bytes) else value


def open_segment(store, rank: int, n: int, timeout_s: float,
                 budget: int) -> tuple[mmap.mmap, int, list[int]]:
    """Every rank: check, exchange through the store, map the segment rank 0 made (its slots
    sized from rank 0's ``budget``). Returns (the mapping, slot bytes, every rank's pid). Raises
    :class:`ShmUnavailable` on every rank if any rank cannot."""
    deadline = time.monotonic() + timeout_s
    # keys of their own for each group made under this name (torch reuses names after the
    # default group is destroyed and made again over the same store)
    k = f"zshm/{(store.add('zshm/made', 1) - 1) // n}/"
    me = {"pid": os.getpid(), "host": _host_id(), "problem": problem_here() or ""}
    store.set(f"{k}hello/{rank}", json.dumps(me))
    peers = [json.loads(_poll(store, f"{k}hello/{r}", deadline, {}, "start", rank)) for r in range(n)]
    pids = [p["pid"] for p in peers]
    problems = [(r, p["problem"]) for r, p in enumerate(peers) if p["problem"]]
    if problems:
        r, why = problems[0]
        raise ShmUnavailable(f"zshm (shared-memory collectives) cannot run here: rank {r}: {why}. "
                             "Use backend='gloo'")
    hosts = sorted({p["host"] for p in peers})
    if len(hosts) > 1:
        where = ", ".join(f"rank {r} on {p['host'].split('/')[0]}" for r, p in enumerate(peers))
        raise ShmUnavailable(f"zshm (shared-memory collectives) needs every rank on one machine; "
                             f"here: {where}. Use backend='gloo' across machines")
    others = {r: pid for r, pid in enumerate(pids) if r != rank}
    path = None
    try:
        if rank == 0:
            remove_stale_segments()
            slot, size = sizes(n, budget)
            folder = _folder()
            path = os.path.join(folder, f"{SEGMENT_PREFIX}{socket.gethostname()}-{os.getpid()}-"
                                        f"{uuid.uuid4().hex[:12]}")
            try:
                _create(path, size)
            except OSError as e:
                path = None
                why = _describe(e, folder, size)
                store.set(f"{k}segment", json.dumps({"error": why}))
                raise ShmUnavailable(why) from None
            store.set(f"{k}segment", json.dumps({"path": path, "slot": slot, "size": size}))
            seg = {"path": path, "slot": slot, "size": size}
        else:
            seg = json.loads(_poll(store, f"{k}segment", deadline, {0: pids[0]}, "make the segment", rank))
            if "error" in seg:
                raise ShmUnavailable(seg["error"])
        buf, err = None, ""
        try:
            buf = _map(seg["path"], seg["size"])
        except OSError as e:
            err = (f"rank {rank} could not map {seg['path']}: {e.strerror or e} (ranks in separate "
                   "containers or /dev/shm namespaces cannot share it)")
        store.set(f"{k}mapped/{rank}", err or "ok")
        failed = [err] if err else []
        for r in others:
            v = _poll(store, f"{k}mapped/{r}", deadline, others, "map the segment", rank)
            if v != "ok":
                failed.append(v)
        if rank == 0:                       # everyone has it mapped (or has failed): drop the name
            os.unlink(path)
            path = None
        if failed:
            if buf is not None:
                buf.close()
            raise ShmUnavailable(f"zshm: {failed[0]}. {_FIX}")
    finally:
        if path is not None:                # rank 0 failed or was interrupted before the unlink
            try:
                os.unlink(path)
            except OSError:
                pass
    return buf, seg["slot"], pids


def _describe(e: OSError, folder: str, size: int) -> str:
    try:
        free = os.statvfs(folder)
        avail = free.f_bavail * free.f_frsize
        room = f"{avail / 2**20:.1f} MiB free of {free.f_blocks * free.f_frsize / 2**20:.1f} MiB"
    except OSError:
        room = "free space unknown"
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return (f"zshm: {folder} has no room for the {size / 2**20:.1f} MiB shared-memory segment "
                f"({room}): {_FIX}")
    return f"zshm: rank 0 could not make a {size / 2**20:.1f} MiB segment in {folder} ({room}): " \
           f"{e.strerror or e}. {_FIX}"
