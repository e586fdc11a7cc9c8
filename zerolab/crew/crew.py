"""The crew: N real ranks of a ``torch.distributed`` process group that a notebook can drive.

In the story, the ranks are the workers of a moving crew. Here they are processes:

    with zerolab.Crew(4) as crew:          # four workers start once (about a second)
        crew.run(fn, x)                    # every rank runs fn(x); the list of results comes back
        crew.run(other_fn)                 # the same ranks, reused: no new start-up cost

    zerolab.launch(fn, 4, x)               # one-shot: start, run, close

Why it is built this way (each choice was seen to matter on a 2-core machine):

* Ranks start through *forkserver*: a clean process (no inherited OpenMP threads, CUDA
  context or process group of the notebook's kernel), and after the first start a new rank
  costs about 0.1 s instead of the 3-4 s of importing torch again under *spawn*.
* ``fn`` travels by value with cloudpickle, so a function defined in a notebook cell (or a
  closure, or a lambda) works.
* Each rank writes its output (Python prints, warnings, C++ messages) into a file of its
  own at the file-descriptor level; the parent prints the files in rank order. The output
  of a cell is then the same on every run.
* Rendezvous is a ``TCPStore`` that the *parent* holds on 127.0.0.1 with port 0: the
  operating system picks a free port atomically, so two crews never collide.
* Ranks die with their driver. Each rank has a watchdog thread blocked on a *lifeline*: a pipe
  whose write end only the parent holds. When the parent ends in any way (SIGKILL, SIGTERM,
  a crashed or restarted kernel) the kernel closes that end, the watchdog reads EOF and ends
  the rank at once, even one busy in ``fn`` or blocked in a collective. With the ranks gone,
  multiprocessing's forkserver and resource tracker exit by themselves (they wait for every
  holder of their pipes: the parent and the ranks).
* Ranks that outnumber the cores are each bound to one core (round-robin over the cores this
  process may use; DeepSpeed's launcher calls it ``--bind_cores_to_rank``). Oversubscribed,
  an unbound rank's gloo threads hop between cores at every hand-off: four ranks on two cores
  spent a third less CPU and 40 % less time per step bound (benchmarks/bind_cores.py). With a core
  per rank (or more) nothing is bound: there the binding made a 2-rank all-gather slower.
* The parent never waits without a deadline. A rank that raises, dies or hangs ends the
  whole crew (a failed collective poisons the process group, so the crew is not reused):
  every rank process is killed and reaped, the error names the ranks and shows their
  tracebacks, and the next ``run`` starts a fresh crew.

Inside ``fn``, :func:`rank_info` (or ``rank()``, ``world_size()``, ``device()``) says who
this rank is. The same worker code runs under ``torchrun``: there ``launch`` initialises the
process group from the environment, runs ``fn`` once in this process and all-gathers the
results.
On a small machine, ``ZEROLAB_MAX_RANKS=n`` (or ``zerolab.set_max_ranks(n)``) caps the ranks of
one crew: a bigger ``Crew``/``launch`` refuses with :class:`TooManyRanks` instead of shrinking
(a chapter's formulas use the N it asked for); :func:`fit_ranks` lets a cell pick a smaller N.
This module is the parent side (the driver: start, run, collect, stop) and the one-shot and
torchrun entry points; what runs inside each rank process (its main loop, the lifeline
watchdog, the output redirection, ``rank_info``) is in :mod:`zerolab.crew.worker`.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import shutil
import sys
import tempfile
import time
import types
import weakref
from multiprocessing import connection as mp_connection
from typing import Any, Callable

import cloudpickle
import torch.distributed as dist
import torch.multiprocessing as mp

from .. import i18n
# What a crew may be and how it fails (backend, rank cap, errors) lives in crew_limits; the rank
# side (what runs inside each rank process, also under torchrun) in crew_worker. Their public
# names are this module's too, as before the split.
from .limits import (SHM_NAMES, CrewError, CrewTimeout, RankError, T, TooManyRanks, _cap,  # noqa: F401
                          fit_ranks, max_ranks, resolve_backend, set_max_ranks)
from .worker import (RankInfo, _destroy_at_exit, _format_error, _info_from_initialized_group,  # noqa: F401
                          _rank_main, _Redirect, _watch_lifeline, device, init_from_env, rank, rank_info,
                          under_torchrun, world_size)
from .workdirs import _driver_tmp, _mark_driver, _sweep_stale_workdirs

__all__ = [
    "Crew", "launch", "rank_info", "rank", "world_size", "device", "RankInfo",
    "CrewError", "RankError", "CrewTimeout",
    "TooManyRanks", "max_ranks", "set_max_ranks", "fit_ranks",
]


# ----------------------------------------------------------------------------- parent side

def _died(rank: int, what: str, code: int | None = None) -> str:
    """The message of a rank that ended without a reply, ``what`` being "start" or "run"."""
    during = T.text("during start" if what == "start" else "during run")
    if code is None:
        return T("rank {rank} died {during}", rank=rank, during=during)
    return T("rank {rank} died (exit code {code}) {during}", rank=rank, code=code, during=during)


_LIVE_CREWS: "weakref.WeakSet[Crew]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for crew in list(_LIVE_CREWS):
        crew.close()


@contextlib.contextmanager
def _main_module_hidden():
    """Keep multiprocessing from re-running the caller's script in every new rank.

    ``fn`` travels by value (cloudpickle), so a rank never needs ``__main__``; without this, a
    script that launches a crew without an ``if __name__ == "__main__":`` guard would start
    crews recursively.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _rank_cores(world: int, backend: str, bind: bool | None) -> list:
    """The core each rank is bound to (None: not bound): see ``Crew(bind_cores=...)``."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):           # (no affinity on this platform)
        return [None] * world
    if bind is None:
        bind = backend != "nccl" and world > len(cores)
    return [cores[r % len(cores)] for r in range(world)] if bind and cores else [None] * world


class Crew:
    """A persistent set of ranks that runs functions on every rank.

    Args:
        world_size: number of ranks.
        backend: "auto" (NCCL with one GPU per rank if there are enough, else gloo), "gloo", "nccl",
            or "shm": zerolab's shared-memory collectives (CPU ranks on one x86-64 machine; the
            process group's backend is then named "zshm"). "auto" never picks "shm".
        timeout: default seconds a ``run`` may take before the crew is stopped.
        threads: torch intra-op threads per rank (default: cores // world_size, at least 1).
        echo: print each rank's output after every ``run`` (grouped by rank, in rank order).
        nodes: a virtual topology (:mod:`zerolab.crew.topology`): the ranks as ``nodes`` nodes of
            ``world_size // nodes`` consecutive ranks (torchrun's layout; ``nodes`` must divide
            ``world_size``). Each rank sees torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK
            for it; nothing else changes (all ranks still run on this machine, on one transport),
            but ``Comm.node_comm()``/``cross_comm()`` group the ranks by these nodes and the ledger
            files each call as "intra" or "inter" node. Default 1: one node.
        bind_cores: bind each rank to one core, round-robin over the cores this process may use
            (``os.sched_getaffinity``). Default (None): on CPU backends, when the ranks outnumber
            those cores; never with NCCL. Binding changes the speed, never a number.
    """

    def __init__(self, world_size: int, backend: str = "auto", *, timeout: float = 120.0,
                 threads: int | None = None, echo: bool = True, start_timeout: float = 60.0,
                 nodes: int = 1, bind_cores: bool | None = None):
        if int(world_size) < 1:
            raise ValueError(T("world_size must be >= 1, got {n}", n=world_size))
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1 or int(world_size) % nodes:
            raise ValueError(T("Crew(nodes={nodes}): nodes must be a whole number >= 1 that divides world_size={n} "
                               "(each node holds world_size // nodes consecutive ranks, as under torchrun); e.g. "
                               "Crew({n}, nodes=1)", nodes=repr(nodes), n=world_size))
        cap, source = _cap()
        if cap is not None and int(world_size) > cap:
            raise TooManyRanks(int(world_size), cap, source)
        self.world_size = int(world_size)
        self.nodes = nodes
        self.backend = resolve_backend(backend, self.world_size)
        self.timeout = timeout
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.world_size)
        self.cores = _rank_cores(self.world_size, self.backend, bind_cores)   # per rank: a core, or None
        self.echo = echo
        self.start_timeout = start_timeout
        self.starts = 0            # how many times ranks were started (restarts after a failure count)
        self._procs: list = []
        self._conns: list = []
        self._store = None
        self._lifeline = None      # the write end of the ranks' lifeline: only this process holds it
        self._workdir: str | None = None
        self._task = 0
        _LIVE_CREWS.add(self)
        self._start()

    # -- lifecycle
    @property
    def alive(self) -> bool:
        return bool(self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _start(self) -> None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "cloudpickle", "zerolab._face",
                                   "zerolab.crew.worker"])
        _sweep_stale_workdirs()
        _mark_driver()
        self._workdir = tempfile.mkdtemp(prefix="zerolab-crew-")
        with open(os.path.join(self._workdir, "driver"), "w") as f:    # for _sweep_stale_workdirs
            f.write("\n".join(map(str, _driver_tmp(0))))
        self._store = dist.TCPStore("127.0.0.1", 0, self.world_size, is_master=True,
                                    wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=self.start_timeout))
        port = self._store.port
        pg_timeout = max(self.timeout, 30.0)
        self.starts += 1
        lifeline_r, self._lifeline = ctx.Pipe(duplex=False)
        try:      # an interrupt (or a failed start) half-way must not leave ranks behind
            try:
                for r in range(self.world_size):
                    parent_end, child_end = ctx.Pipe(duplex=True)
                    p = ctx.Process(target=_rank_main, name=f"zerolab-rank{r}", daemon=True,
                                    args=(child_end, lifeline_r, r, self.world_size, self.backend,
                                          "127.0.0.1", port, self._workdir, self.threads, pg_timeout,
                                          _driver_tmp(r), self.world_size // self.nodes, self.cores[r]))
                    self._conns.append(parent_end)
                    try:
                        with _main_module_hidden():
                            p.start()
                    finally:
                        child_end.close()
                    self._procs.append(p)
            finally:
                lifeline_r.close()      # each rank has its own copy now; the parent keeps only the write end
            replies = self._collect(self.start_timeout, what="start")
        except BaseException:
            self._stop()
            raise
        failures = {r: rep[1] for r, rep in replies.items() if rep[0] == "error"}
        if failures:
            self._stop()
            raise RankError(failures)

    def close(self) -> None:
        """Stop every rank (politely, then by force) and remove the crew's files."""
        if self._procs:
            for c in self._conns:
                try:
                    c.send(("close",))
                except (OSError, BrokenPipeError):
                    pass
            deadline = time.monotonic() + 5
            for p in self._procs:
                p.join(max(0.0, deadline - time.monotonic()))
        self._stop()

    def _kill(self) -> None:
        """Kill every rank process that is still running and reap it (keeps the log files)."""
        for p in self._procs:
            if p.exitcode is None:
                p.kill()
        for p in self._procs:
            p.join(5)                         # kill() cannot be ignored: this returns at once

    def _stop(self) -> None:
        """Kill and reap every rank; release the store, pipes and files."""
        self._kill()
        for p in self._procs:
            try:
                p.close()
            except ValueError:
                pass
        for c in self._conns:
            c.close()
        if self._lifeline is not None:    # after the kill: a rank still alive would exit on EOF
            self._lifeline.close()
            self._lifeline = None
        self._procs, self._conns = [], []
        self._store = None
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "Crew":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "running" if self.alive else "stopped"
        nodes = f", nodes={self.nodes}" if self.nodes != 1 else ""
        return f"Crew(world_size={self.world_size}, backend={self.backend!r}{nodes}, {state})"

    # -- running
    def run(self, fn: Callable, *args, timeout: float | None = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results, index = rank.

        Raises :class:`RankError` if any rank raised and :class:`CrewTimeout` if any rank did
        not finish within ``timeout`` seconds; in both cases the ranks are stopped and the
        next ``run`` starts a fresh crew.
        """
        if not self.alive:
            self._start()
        timeout = self.timeout if timeout is None else timeout
        payload = cloudpickle.dumps((fn, args, kwargs))
        self._task += 1
        for c in self._conns:
            c.send(("run", list(sys.path), payload, i18n.lang()))
        try:
            replies = self._collect(timeout, what="run")
        except BaseException:
            self._kill()                       # first stop the ranks, then show what they printed
            self._print_logs(f"task{self._task}")
            self._stop()
            raise
        self._print_logs(f"task{self._task}")
        failures = {r: rep[1] for r, rep in replies.items() if rep[0] == "error"}
        if failures:
            self._stop()
            raise RankError(failures)
        return [cloudpickle.loads(replies[r][1]) for r in range(self.world_size)]

    def _collect(self, timeout: float, what: str) -> dict[int, tuple]:
        """Wait for one reply per rank. A rank error gives the others a short grace period."""
        replies: dict[int, tuple] = {}
        deadline = time.monotonic() + timeout
        pending = dict(enumerate(self._conns))
        sentinels = {p.sentinel: r for r, p in enumerate(self._procs)}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CrewTimeout(sorted(pending), timeout)
            ready = mp_connection.wait(list(pending.values()) + list(sentinels), remaining)
            for obj in ready:
                if obj in sentinels:                      # a rank process ended
                    r = sentinels.pop(obj)
                    if r in pending and not pending[r].poll():
                        code = self._procs[r].exitcode
                        replies[r] = ("error", {"type": "RankDied", "traceback": "",
                                                "message": _died(r, what, code)})
                        del pending[r]
                    continue
                r = next((k for k, c in pending.items() if c is obj), None)
                if r is None:                             # already counted through its sentinel
                    continue
                try:
                    replies[r] = obj.recv()
                except EOFError:
                    replies[r] = ("error", {"type": "RankDied", "traceback": "", "message": _died(r, what)})
                del pending[r]
            if pending and any(rep[0] == "error" for rep in replies.values()):
                # One rank failed: the others are probably blocked in a collective with it.
                grace = min(deadline, time.monotonic() + 3.0)
                while pending and time.monotonic() < grace:
                    for c in mp_connection.wait(list(pending.values()), grace - time.monotonic()):
                        r = next(k for k, cc in pending.items() if cc is c)
                        try:
                            replies[r] = c.recv()
                        except EOFError:
                            replies[r] = ("error", {"type": "RankDied", "traceback": "", "message": _died(r, what)})
                        del pending[r]
                failures = {r: rep[1] for r, rep in replies.items() if rep[0] == "error"}
                others = T("; ranks {ranks} were still running and were stopped", ranks=sorted(pending)) \
                    if pending else ""
                raise RankError(failures, others)     # the caller stops the crew
        return replies

    def _print_logs(self, tag: str) -> None:
        if not self.echo or not self._workdir:
            return
        out = []
        for r in range(self.world_size):
            path = os.path.join(self._workdir, f"rank{r}.{tag}.log")
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
                os.remove(path)
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                out.append(f"[rank {r}] {line}")
        if out:
            sys.stdout.write("\n".join(out) + "\n")
            sys.stdout.flush()


# ----------------------------------------------------------------------------- one-shot

def launch(fn: Callable, world_size: int, *args, backend: str = "auto", timeout: float = 120.0,
           threads: int | None = None, echo: bool = True, nodes: int = 1, **kwargs) -> list:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` fresh ranks; return the results by rank.
    ``backend`` and ``nodes`` as for :class:`Crew` ("auto", "gloo", "nccl" or "shm"; a virtual
    topology of ``nodes`` nodes).

    Under torchrun the ranks already exist: ``fn`` runs once in this process (the world size
    comes from the environment) and the results of all ranks are all-gathered. Elsewhere more
    ranks than :func:`max_ranks` raise :class:`TooManyRanks` (torchrun's own world size is not capped).
    """
    if under_torchrun():
        info = init_from_env(backend)
        if info.world_size != world_size:
            print(T("zerolab.launch: torchrun gives world size {got}, not {asked}; using {got}",
                    got=info.world_size, asked=world_size), file=sys.stderr)
        value = fn(*args, **kwargs)
        gathered: list[Any] = [None] * info.world_size
        dist.all_gather_object(gathered, value)
        return gathered
    with Crew(world_size, backend, timeout=timeout, threads=threads, echo=echo, nodes=nodes) as crew:
        return crew.run(fn, *args, **kwargs)
