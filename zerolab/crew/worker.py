"""The rank side of the crew: what runs inside each rank process.

``zerolab.crew.Crew`` (the parent side) starts every rank with :func:`_rank_main` as its
target, through multiprocessing's forkserver. A rank

* starts a watchdog thread on its *lifeline* (:func:`_watch_lifeline`): a pipe whose write end
  only the parent holds; at EOF (the parent closed the crew or died, however) the rank removes
  the crew's files and ends at once, even while busy in ``fn`` or blocked in a collective;
* points its file descriptors 1 and 2 at a file of its own per task (:class:`_Redirect`), so
  that the parent can print the output in rank order;
* joins the process group through the parent's ``TCPStore`` on 127.0.0.1, then runs the
  cloudpickled tasks the parent sends until told to stop (each in the parent's language,
  ``zerolab/i18n/language.py``), replying with a cloudpickled result or a formatted error (:func:`_format_error`).

Inside ``fn``, :func:`rank_info` (or ``rank()``, ``world_size()``, ``device()``) says who
this rank is. Under torchrun the ranks already exist: :func:`init_from_env` joins the process group
from torchrun's environment, here in this process. Everything public here is re-exported by
``zerolab.crew`` and ``zerolab``.
"""
from __future__ import annotations

import atexit
import dataclasses
import datetime
import os
import shutil
import signal
import sys
import threading
import time
import traceback

import cloudpickle
import torch
import torch.distributed as dist

from .. import i18n
from .limits import SHM_NAMES

__all__ = ["RankInfo", "rank_info", "rank", "world_size", "device", "under_torchrun", "init_from_env"]


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """Who this process is inside the crew."""
    rank: int            # 0 .. world_size-1
    world_size: int      # number of ranks in the process group
    local_rank: int      # rank on its node (torchrun's LOCAL_RANK; a crew's virtual node, see topology.py)
    device: torch.device # cuda:<local_rank> with NCCL, else cpu with gloo
    backend: str         # "nccl", "gloo" or "zshm" (zerolab.crew.shm, asked for with backend="shm")


_INFO: RankInfo | None = None


def rank_info() -> RankInfo:
    """The :class:`RankInfo` of the calling rank (only valid inside a crew or torchrun)."""
    if _INFO is None:
        if dist.is_available() and dist.is_initialized():   # a process group made elsewhere
            return _info_from_initialized_group()
        raise RuntimeError("not inside a rank: call this from a function run by zerolab.launch or Crew.run")
    return _INFO


def rank() -> int:
    return rank_info().rank


def world_size() -> int:
    return rank_info().world_size


def device() -> torch.device:
    return rank_info().device


def _info_from_initialized_group() -> RankInfo:
    backend = dist.get_backend()
    local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    dev = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    return RankInfo(dist.get_rank(), dist.get_world_size(), local, dev, backend)


class _Redirect:
    """Point fd 1 and 2 (and sys.stdout/err) at a file, and back."""

    def __init__(self) -> None:
        self._saved = (os.dup(1), os.dup(2))

    def to(self, path: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def restore(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)


def _watch_lifeline(lifeline, workdir: str, driver_tmp: tuple = ()) -> None:
    """End this rank as soon as the parent's end of ``lifeline`` is closed.

    Nothing is ever sent on the lifeline, so the read returns only at EOF: when the parent
    closed the crew, or died (the kernel closes a dead process's descriptors, whatever killed
    it). The read releases the GIL, so this works while the main thread sleeps, computes in
    torch or waits in a collective. The rank's parent is the forkserver, not the driver, so
    ``PR_SET_PDEATHSIG`` would not help here.
    """
    try:
        while True:
            lifeline.recv_bytes()
    except BaseException:          # EOFError (the usual way), or OSError: the parent is gone either way
        pass
    _parent_gone(workdir, driver_tmp)
    os._exit(1)


def _parent_gone(workdir: str, driver_tmp: tuple) -> None:
    """Remove what the parent would have removed: the crew's folder, and (rank 0, when the driver
    was killed, so that its atexit never ran) multiprocessing's temp folder of the driver."""
    shutil.rmtree(workdir, ignore_errors=True)
    if driver_tmp:
        from .procs import pid_alive
        pid, folder = driver_tmp
        for _ in range(20):                      # (a killed process takes a moment to go)
            if not pid_alive(pid):
                shutil.rmtree(folder, ignore_errors=True)
                return
            time.sleep(0.05)


def _rank_main(conn, lifeline, rank_: int, world: int, backend: str, host: str, port: int,
               workdir: str, threads: int, pg_timeout_s: float, driver_tmp: tuple = (),
               per_node: int | None = None, core: int | None = None) -> None:
    """The life of one rank: join the group, then run tasks until told to stop. ``per_node``: the
    ranks per (virtual) node; the rank gets torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK
    for that layout (consecutive ranks per node). The GPU is still picked by the global rank: all
    the virtual nodes are on this machine. ``core``: the one core this rank runs on (``Crew(bind_cores=...)``),
    or None."""
    global _INFO
    if core is not None:          # before any thread starts: every thread of the rank inherits it
        try:
            os.sched_setaffinity(0, {core})
        except OSError:           # (the core went away, a cpuset changed: a speed choice, never a failure)
            pass
    threading.Thread(target=_watch_lifeline, args=(lifeline, workdir, driver_tmp), name="zerolab-lifeline",
                     daemon=True).start()
    # The parent manages the ranks (it kills them on interrupt); a Ctrl-C or kernel shutdown
    # reaching an idle rank must not print a KeyboardInterrupt traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    redirect = _Redirect()
    redirect.to(os.path.join(workdir, f"rank{rank_}.start.log"))
    # Each rank writes to its own file; line-buffering keeps partial output if it is killed.
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    per_node = per_node or world
    local = rank_ % per_node
    os.environ.update(GLOO_SOCKET_IFNAME="lo", MASTER_ADDR=host, MASTER_PORT=str(port),
                      RANK=str(rank_), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                      LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(rank_ // per_node),
                      ZEROLAB_PG_TIMEOUT_S=str(pg_timeout_s))
    try:
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank_)
            dev = torch.device("cuda", rank_)
        else:
            dev = torch.device("cpu")
        if backend == "zshm":       # zerolab's shared-memory backend: registered on import
            from . import shm  # noqa: F401
        store = dist.TCPStore(host, port, world, is_master=False,
                              timeout=datetime.timedelta(seconds=pg_timeout_s))
        kwargs = dict(device_id=dev) if backend == "nccl" else {}
        dist.init_process_group(backend, store=store, rank=rank_, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout_s), **kwargs)
        _INFO = RankInfo(rank_, world, local, dev, backend)
        conn.send(("ready", None))
    except BaseException:
        conn.send(("error", _format_error(rank_)))
        return
    task = 0
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:        # the parent went away
                _parent_gone(workdir, driver_tmp)
                return
            if msg[0] == "close":
                return
            _, parent_path, payload, language = msg
            task += 1
            sys.path.extend(p for p in parent_path if p not in sys.path)
            redirect.to(os.path.join(workdir, f"rank{rank_}.task{task}.log"))
            try:
                fn, args, kwargs = cloudpickle.loads(payload)
                with i18n.using(language):     # a rank speaks the language of the notebook that runs it
                    reply = ("ok", cloudpickle.dumps(fn(*args, **kwargs)))
            except BaseException:
                reply = ("error", _format_error(rank_))
            finally:
                redirect.restore()
            try:
                conn.send(reply)
            except OSError:         # the parent went away while fn ran (its collective failed with it):
                _parent_gone(workdir, driver_tmp)   # clean up here too, before this process exits and
                return                              # ends the lifeline thread in the middle of it
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass


def _format_error(rank_: int) -> dict:
    etype, value, tb = sys.exc_info()
    if tb is not None and tb.tb_next is not None:   # drop the crew's own frame: show the user's code
        tb = tb.tb_next
    return {"type": etype.__name__ if etype else "Exception", "message": str(value),
            "traceback": "".join(traceback.format_exception(etype, value, tb))}


# ----------------------------------------------------------------------------- under torchrun
# There the ranks already exist and this process is one of them (``zerolab.launch`` calls these).

def under_torchrun() -> bool:
    """True when this process was started by torchrun (or another launcher that sets RANK etc.)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")) \
        and _INFO is None


def init_from_env(backend: str = "auto", timeout_s: float = 600.0) -> RankInfo:
    """Join the process group described by torchrun's environment variables."""
    global _INFO
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "auto":           # NCCL only with a GPU for every rank on this machine
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        enough = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
        backend = "nccl" if enough and dist.is_nccl_available() else "gloo"
    elif backend in SHM_NAMES:      # asked for by name: registered here, refuses where it cannot run
        from . import shm
        backend = shm.BACKEND
    if backend == "nccl":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        # A process group still alive at interpreter exit is torn down by C++ destructors that
        # race with the peers' (seen: "terminate called without an active exception", SIGABRT,
        # in about 1 run in 10 under torchrun). Close it in order instead.
        atexit.register(_destroy_at_exit)
    dev = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    _INFO = RankInfo(dist.get_rank(), world, local, dev, backend)
    return _INFO


def _destroy_at_exit() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            # every rank gets here before any tears its connections down: a rank that closed
            # first could abort a peer whose gloo threads still read from it
            dist.barrier()
            dist.destroy_process_group()
        except Exception:
            pass
