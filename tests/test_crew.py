"""The crew: real ranks that start once, run any function, and fail loudly but cleanly.

Each failure mode the course can hit is provoked here for real: a rank that raises, a rank
that dies, a rank stuck in a collective, a KeyboardInterrupt while waiting. After each one
the test looks in the process table (psutil) for leftovers and starts a new crew at once.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest
import torch
import torch.distributed as dist

import zerolab
from zerolab import Crew, CrewTimeout, RankError
from conftest import gone, open_fds, session_helpers, stray_descendants

PY = sys.executable


# The crew's mechanics are tested on gloo (CPU tensors) on every machine; backend="auto" is
# tested on its own below, and by the two scripts, which put their tensors on the rank's device.
@pytest.fixture(scope="module")
def crew2():
    with Crew(2, backend="gloo", timeout=30) as crew:
        yield crew


# ----------------------------------------------------------------------------- what a rank sees

def _who_am_i():
    info = zerolab.rank_info()
    t = torch.tensor([float(info.rank + 1)])
    dist.all_reduce(t)                                    # the process group really is up
    return (info.rank, info.world_size, info.local_rank, str(info.device), info.backend,
            dist.get_rank(), dist.get_world_size(), t.item())


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_launch_world_sizes(world):
    res = zerolab.launch(_who_am_i, world, backend="gloo", timeout=60)
    total = world * (world + 1) / 2
    assert res == [(r, world, r, "cpu", "gloo", r, world, total) for r in range(world)]


def _affinity():
    """This rank's core set, and whether every thread of it (gloo's included) has the same."""
    mine = os.sched_getaffinity(0)
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    return sorted(mine), all(os.sched_getaffinity(t) == mine for t in tids), len(tids)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")
def test_ranks_that_outnumber_the_cores_are_bound_one_core_each():
    cores = sorted(os.sched_getaffinity(0))
    over = len(cores) + 1                                 # more ranks than cores: bound by default
    for world, bind in ((over, None), (over, False), (2, True), (min(2, len(cores)), None)):
        with Crew(world, backend="gloo", timeout=60, echo=False, bind_cores=bind) as crew:
            got = crew.run(_affinity)
        bound = bind if bind is not None else world > len(cores)
        for r, (mine, same, threads) in enumerate(got):
            assert mine == ([cores[r % len(cores)]] if bound else cores), (world, bind, r, mine)
            assert same and threads > 1, (world, bind, r, threads)   # the gloo threads too


def test_auto_backend_uses_a_gpu_per_rank_or_gloo():
    world = 2
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    want = ("nccl", [f"cuda:{r}" for r in range(world)]) if gpus >= world else ("gloo", ["cpu"] * world)
    with Crew(world, backend="auto") as crew:
        got = crew.run(lambda: (zerolab.rank_info().backend, str(zerolab.device())))
    assert (got[0][0], [d for _, d in got]) == want


def test_small_rank_api_inside_a_rank(crew2):
    assert crew2.run(lambda: (zerolab.rank(), zerolab.world_size(), zerolab.device())) == \
        [(0, 2, torch.device("cpu")), (1, 2, torch.device("cpu"))]


def test_rank_info_outside_a_rank_is_an_error():
    with pytest.raises(RuntimeError, match="not inside a rank"):
        zerolab.rank_info()


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        Crew(0)
    with pytest.raises(ValueError, match="backend"):
        Crew(2, backend="mpi")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="GPUs"):
            Crew(2, backend="nccl")


def test_args_kwargs_and_results_travel(crew2):
    def f(a, b, *, scale):
        return {"rank": zerolab.rank(), "value": (a + b) * scale, "tensor": torch.full((2,), float(a))}
    res = crew2.run(f, 1, 2, scale=10)
    assert [r["rank"] for r in res] == [0, 1]
    assert all(r["value"] == 30 and torch.equal(r["tensor"], torch.ones(2)) for r in res)


# ----------------------------------------------------------------------------- __main__ functions

MAIN_SCRIPT = """
import zerolab, torch
import torch.distributed as dist

OFFSET = 100                       # a global of __main__, read by the function in the rank

def square_plus_rank(x):           # defined in __main__, and no `if __name__ == "__main__"` guard
    t = torch.tensor([float(x * x + zerolab.rank())], device=zerolab.device())
    dist.all_reduce(t)
    return zerolab.rank() + OFFSET, t.item()

def make_adder(k):
    def add_rank():                # a closure over k
        return zerolab.rank() + k
    return add_rank

print("LAUNCH", zerolab.launch(square_plus_rank, 2, 3))
with zerolab.Crew(3) as crew:
    print("CLOSURE", crew.run(make_adder(7), ))
    print("LAMBDA", crew.run(lambda: zerolab.world_size() * 2))
print("DONE")
"""


def test_functions_from_main_without_guard_and_closures(scripts):
    out = scripts.result("no_guard")
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if not l.startswith("[rank")]
    # "DONE" once: the script was not re-run inside the ranks.
    assert lines == ["LAUNCH [(100, 19.0), (101, 19.0)]", "CLOSURE [7, 8, 9]", "LAMBDA [6, 6, 6]",
                     "DONE"]


# ----------------------------------------------------------------------------- output

def _chatty():
    r, n = zerolab.rank(), zerolab.world_size()
    time.sleep(0.1 * (n - 1 - r))           # the last rank speaks first: order must not depend on it
    print(f"line 1 from rank {r}")
    print(f"to stderr from rank {r}", file=sys.stderr)
    os.write(1, f"raw fd write from rank {r}\n".encode())   # what C++ code would print
    print(f"line 2 from rank {r}")
    return r


def test_output_grouped_by_rank_in_rank_order(crew2, capsys):
    expected = "".join(f"[rank {r}] line 1 from rank {r}\n[rank {r}] to stderr from rank {r}\n"
                       f"[rank {r}] raw fd write from rank {r}\n[rank {r}] line 2 from rank {r}\n"
                       for r in range(2))
    for _ in range(2):                      # the same every run
        assert crew2.run(_chatty) == [0, 1]
        assert capsys.readouterr().out == expected


def test_echo_off_prints_nothing(capsys):
    with Crew(2, backend="gloo", echo=False) as crew:
        crew.run(print, "quiet")
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------- failures

def test_failing_rank_named_with_traceback(crew2, capsys):
    def boom():
        print("before the error")
        if zerolab.rank() == 1:
            raise ValueError("shard 1 is corrupt")
        return "fine"
    pids = crew2.pids
    with pytest.raises(RankError) as ei:
        crew2.run(boom)
    err = ei.value
    assert err.rank == 1 and list(err.failures) == [1]
    assert "rank 1 raised ValueError: shard 1 is corrupt" in str(err)
    assert "Traceback (most recent call last)" in str(err) and "in boom" in str(err)
    assert capsys.readouterr().out == "[rank 0] before the error\n[rank 1] before the error\n"
    assert gone(pids) and not crew2.alive
    assert crew2.run(zerolab.rank) == [0, 1]          # the next run starts a fresh crew


def test_failing_rank_while_peers_wait_in_a_collective(crew2):
    def boom_then_barrier():
        if zerolab.rank() == 0:
            raise KeyError("missing layer")
        dist.barrier()                                # rank 1 waits for rank 0 forever
    pids = crew2.pids
    t0 = time.monotonic()
    with pytest.raises(RankError) as ei:
        crew2.run(boom_then_barrier, timeout=60)
    assert time.monotonic() - t0 < 15                 # a short grace period, not the timeout
    assert ei.value.rank == 0 and "KeyError" in str(ei.value) and "[1]" in str(ei.value)
    assert gone(pids)
    assert crew2.run(zerolab.rank) == [0, 1]


def test_dying_rank_is_the_one_named(crew2):
    def die():
        if zerolab.rank() == 1:
            os._exit(3)
        dist.barrier()                                # rank 0 sees "connection reset by peer"
    with pytest.raises(RankError) as ei:
        crew2.run(die)
    assert ei.value.rank == 1 and "rank 1 died" in str(ei.value)
    assert crew2.run(zerolab.rank) == [0, 1]


def test_unpicklable_result_is_a_rank_error(crew2):
    with pytest.raises(RankError, match="pickle|lock"):
        crew2.run(threading.Lock)
    assert crew2.run(zerolab.rank) == [0, 1]


@pytest.mark.quiet
@pytest.mark.parametrize("timeout", [3.0])
def test_hung_rank_times_out_and_leaves_no_process(timeout, scripts):
    def stuck():
        if zerolab.rank() != 1:                       # ranks 0 and 2 wait for rank 1, forever
            dist.all_reduce(torch.ones(1))
        return "skipped the all-reduce"
    before = {p.pid for p in stray_descendants(scripts.pids)}     # e.g. the module's crew
    with Crew(3, backend="gloo", timeout=timeout) as crew:
        pids = crew.pids
        t0 = time.monotonic()
        with pytest.raises(CrewTimeout) as ei:
            crew.run(stuck)
        elapsed = time.monotonic() - t0
        assert timeout <= elapsed < timeout + 5
        assert ei.value.ranks == [0, 2] and "[0, 2]" in str(ei.value)
        assert gone(pids), [psutil.Process(p).status() for p in pids if psutil.pid_exists(p)]
        assert not crew.alive
        assert crew.run(zerolab.rank) == [0, 1, 2]    # a new crew at once
    assert {p.pid for p in stray_descendants(scripts.pids)} == before


def test_keyboard_interrupt_kills_ranks_and_a_new_crew_starts(tmp_path, scripts, request):
    flag = tmp_path / "sleeping"
    # a parent that ignores SIGINT (nohup, some CI runners) must not decide the test: Python's own
    # handler is what turns the notebook's stop button into KeyboardInterrupt, as in a kernel
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, saved))

    def sleeper(path):
        open(f"{path}.{zerolab.rank()}", "w").close()
        time.sleep(240)

    def interrupt_when_asleep():
        deadline = time.monotonic() + 200     # generous: a loaded 2-core machine starts ranks slowly
        while time.monotonic() < deadline:
            if all(os.path.exists(f"{flag}.{r}") for r in range(2)):
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)   # what the notebook's stop button sends
                return
            time.sleep(0.02)

    sent = []
    before = {p.pid for p in stray_descendants(scripts.pids)}
    with Crew(2, backend="gloo", timeout=300) as crew:
        pids = crew.pids
        t = threading.Thread(target=interrupt_when_asleep, daemon=True)
        t.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            crew.run(sleeper, str(flag))
        t.join(5)
        assert sent and time.monotonic() - sent[0] < 20     # stopped soon after the interrupt
        assert gone(pids) and not crew.alive
        t1 = time.monotonic()
        assert crew.run(zerolab.rank) == [0, 1]
        assert time.monotonic() - t1 < 10
    assert {p.pid for p in stray_descendants(scripts.pids)} == before


def test_interrupt_while_starting_leaves_nothing(monkeypatch, scripts):
    import contextlib
    from zerolab.crew import crew as crew_module
    real, started = crew_module._main_module_hidden, []

    @contextlib.contextmanager
    def interrupted_at_the_third_rank():
        started.append(1)
        if len(started) == 3:
            raise KeyboardInterrupt               # Ctrl-C after two of four ranks started
        with real():
            yield

    before = {p.pid for p in stray_descendants(scripts.pids)}
    monkeypatch.setattr(crew_module, "_main_module_hidden", interrupted_at_the_third_rank)
    with pytest.raises(KeyboardInterrupt):
        Crew(4, backend="gloo")
    assert {p.pid for p in stray_descendants(scripts.pids)} == before


# ----------------------------------------------------------------------------- no leaks

def test_50_runs_and_10_cycles_leak_nothing(crew2, scripts):
    crew2.run(zerolab.rank)                           # warm: forkserver and crew already up
    fds, procs = open_fds(), {p.pid for p in stray_descendants(scripts.pids)}
    assert set(crew2.pids) <= procs                   # the crew's ranks are seen (as grandchildren)
    for i in range(50):
        assert crew2.run(lambda k: zerolab.rank() + k, i) == [i, i + 1]
    assert open_fds() == fds
    assert {p.pid for p in stray_descendants(scripts.pids)} == procs
    for _ in range(10):
        with Crew(2, backend="gloo") as crew:
            assert crew.run(zerolab.world_size) == [2, 2]
            pids = crew.pids
        assert gone(pids)
    assert open_fds() == fds
    assert {p.pid for p in stray_descendants(scripts.pids)} == procs


def test_the_excluded_helpers_are_what_we_think(crew2):
    helpers = session_helpers()
    assert len(helpers) == 2
    cmdlines = sorted(" ".join(psutil.Process(p).cmdline()) for p in helpers)
    assert "multiprocessing.forkserver" in cmdlines[0] and "resource_tracker" in cmdlines[1]
    # the ranks are children of the forkserver, so the leak checks do see them
    assert {p.ppid() for p in map(psutil.Process, crew2.pids)} <= helpers


# ----------------------------------------------------------------------------- a killed driver

DRIVER_SCRIPT = """
import json, os, sys, time
import torch, torch.distributed as dist
import zerolab
from multiprocessing import forkserver, resource_tracker
import multiprocessing.util

def work(flag, how):
    open(f"{flag}.{zerolab.rank()}", "w").close()
    if how == "collective" and zerolab.rank() == 0:
        dist.all_reduce(torch.ones(1))       # blocked: rank 1 never joins
    time.sleep(600)

flag, how, info = sys.argv[1:]
crew = zerolab.Crew(2, backend="gloo", timeout=900)
with open(info + ".tmp", "w") as f:
    json.dump({"ranks": crew.pids, "forkserver": forkserver._forkserver._forkserver_pid,
               "resource_tracker": resource_tracker._resource_tracker._pid,
               "workdir": crew._workdir, "mp_tempdir": multiprocessing.util.get_temp_dir()}, f)
os.rename(info + ".tmp", info)
if how in ("idle", "closed", "exit"):         # the ranks wait for a task; or the crew has ended
    if how != "idle":
        crew.close()
    for r in range(2):
        open(f"{flag}.{r}", "w").close()
    if how != "exit":                         # "exit": a normal exit once the crew has ended
        time.sleep(600)
else:
    crew.run(work, flag, how)
"""


def _running(p: psutil.Process) -> bool:
    """Still running: not ended, not a zombie, and not a new process that reused the pid."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start_driver(tmp_path, how: str, **env: str) -> subprocess.Popen:
    """DRIVER_SCRIPT in a session of its own: a crew of 2 whose ranks are ``how`` ("sleep",
    "collective" or "idle"), with ``env`` added to its environment; what it prints goes to driver.err."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER_SCRIPT)
    with open(tmp_path / "driver.err", "w") as err:       # a file, not a pipe: orphans may hold it
        return subprocess.Popen([PY, str(script), str(tmp_path / "busy"), how, str(tmp_path / "info.json")],
                                stdout=err, stderr=err, env=dict(os.environ, OMP_NUM_THREADS="1", **env),
                                start_new_session=True)


def _wait_until_started(driver: subprocess.Popen, tmp_path) -> dict:
    """What the driver wrote about its crew (ranks, helpers, folders), once both ranks are up."""
    flag, info = tmp_path / "busy", tmp_path / "info.json"
    deadline = time.monotonic() + 120
    while not (info.exists() and all(os.path.exists(f"{flag}.{r}") for r in range(2))):
        assert driver.poll() is None, (tmp_path / "driver.err").read_text()
        assert time.monotonic() < deadline, "the driver's crew did not start"
        time.sleep(0.05)
    return json.loads(info.read_text())


@pytest.mark.quiet
@pytest.mark.parametrize("sig, ranks_are", [(signal.SIGKILL, "asleep"), (signal.SIGTERM, "in_collective"),
                                            (signal.SIGKILL, "idle")],
                         ids=["SIGKILL-asleep", "SIGTERM-in_collective", "SIGKILL-idle"])
def test_killed_driver_leaves_nothing_running(sig, ranks_are, tmp_path):
    """A notebook kernel killed (or restarted) takes its ranks, the forkserver and the resource
    tracker with it within seconds, even while the ranks are busy in a long task."""
    how = {"asleep": "sleep", "in_collective": "collective", "idle": "idle"}[ranks_are]
    driver = _start_driver(tmp_path, how)
    procs: list[psutil.Process] = []
    try:
        started = _wait_until_started(driver, tmp_path)
        time.sleep(0.3)                                   # rank 0 is inside its all-reduce by now
        procs = psutil.Process(driver.pid).children(recursive=True)
        pids = {p.pid for p in procs}
        assert set(started["ranks"]) | {started["forkserver"], started["resource_tracker"]} <= pids
        assert all(_running(p) for p in procs) and len(procs) == 4, [p.cmdline() for p in procs]

        t0 = time.monotonic()
        driver.send_signal(sig)
        assert driver.wait(10) == -sig                    # reaps the driver
        while any(map(_running, procs)) and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        left = [(p.pid, p.name()) for p in procs if _running(p)]
        assert not left, f"still running {elapsed:.1f} s after the driver got {sig.name}: {left}"
        assert elapsed <= 5, f"everything ended, but only after {elapsed:.1f} s"
        assert not os.path.exists(started["workdir"])    # the crew's log files went too
        while os.path.exists(started["mp_tempdir"]) and time.monotonic() - t0 < 20:
            time.sleep(0.05)                              # multiprocessing's pymp-* folder too (its last
                                                          # process to exit removes it: slower under load)
        assert not os.path.exists(started["mp_tempdir"]), "the driver's pymp-* folder was left"
    finally:                                              # whatever failed: leave nothing behind
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(driver.pid, signal.SIGKILL)         # the driver's session: its whole tree
        driver.kill()
        driver.wait(10)


def test_a_crew_killed_with_its_whole_process_group_is_swept_by_the_next(tmp_path, monkeypatch):
    """Jupyter shuts a kernel down by killing its process group: the driver and every rank at
    once, so no rank is left to remove the crew's folder. The next crew started removes it (and
    that driver's pymp-* folder); a live driver's folder is left alone. Both crews keep their
    folders in a temp folder of this test's own: a crew started elsewhere on the machine (the
    suite's other phases) sweeps /tmp and would remove the dead driver's folder first."""
    private = tempfile.mkdtemp(prefix="zl-")   # short: the forkserver socket path must fit AF_UNIX (108 bytes); kept: this process may use it
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    driver = _start_driver(tmp_path, "idle", TMPDIR=str(private))
    try:
        started = _wait_until_started(driver, tmp_path)
        with Crew(1, backend="gloo") as live:             # a live driver's folder: kept
            zerolab.crew.workdirs._sweep_stale_workdirs()
            assert os.path.exists(started["workdir"]) and os.path.exists(live._workdir)
            os.killpg(driver.pid, signal.SIGKILL)         # the whole group at once, as Jupyter does
            driver.wait(10)
            time.sleep(0.5)
            assert os.path.exists(started["workdir"])     # nobody was left to clean up
            zerolab.crew.workdirs._sweep_stale_workdirs()          # what the next Crew() does first
            assert not os.path.exists(started["workdir"])
            assert not os.path.exists(started["mp_tempdir"])
            assert os.path.exists(live._workdir)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(10)


def test_a_driver_killed_between_crews_is_swept_by_the_next(tmp_path, monkeypatch):
    """A kernel shut down after its last crew ended (how nbval and Jupyter end most kernels) has
    no crew folder and no rank to name multiprocessing's temp folder (the forkserver's socket): the
    driver's mark does, and the next crew's sweep removes both. A driver that exits normally
    leaves neither. (They had piled up: 1,600 pymp-* folders in this machine's /tmp, one per
    notebook run.)"""
    private = tempfile.mkdtemp(prefix="zl-")   # short: AF_UNIX paths; a sweep elsewhere must not see it
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    for how in ("exit", "closed"):
        run = tmp_path / how
        run.mkdir()
        driver = _start_driver(run, how, TMPDIR=str(private))
        try:
            started = _wait_until_started(driver, run)
            mark = os.path.join(private, f"zerolab-driver-{driver.pid}")
            assert not os.path.exists(started["workdir"])          # the crew ended: its folder went
            if how == "exit":
                assert driver.wait(60) == 0, (run / "driver.err").read_text()
                assert not os.path.exists(mark) and not os.path.exists(started["mp_tempdir"])
                continue
            assert os.path.exists(mark) and os.path.exists(started["mp_tempdir"])
            zerolab.crew.workdirs._sweep_stale_workdirs()          # a live driver's: kept
            assert os.path.exists(mark) and os.path.exists(started["mp_tempdir"])
            os.killpg(driver.pid, signal.SIGKILL)                   # as Jupyter does
            driver.wait(10)
            deadline = time.monotonic() + 10                        # (its forkserver goes by itself)
            while zerolab.crew.procs.pid_alive(started["forkserver"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert os.path.exists(started["mp_tempdir"])           # nobody was left to clean up
            zerolab.crew.workdirs._sweep_stale_workdirs()          # what the next Crew() does first
            assert not os.path.exists(started["mp_tempdir"]) and not os.path.exists(mark)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)
    import multiprocessing.process
    if not str(multiprocessing.process.current_process()._config.get("tempdir", "")).startswith(private):
        shutil.rmtree(private, ignore_errors=True)             # (unless this process's own lives there)


# ----------------------------------------------------------------------------- two crews

def test_two_crews_at_once_do_not_collide(crew2):
    def value_sum(base):
        t = torch.tensor([float(base + zerolab.rank())])
        dist.all_reduce(t)
        return int(t.item()), os.environ["MASTER_PORT"]

    with Crew(2, backend="gloo") as other:
        ports = {crew2.run(value_sum, 0)[0][1], other.run(value_sum, 0)[0][1]}
        assert len(ports) == 2                         # each crew has its own rendezvous port
        results: dict[str, list] = {"a": [], "b": []}

        def hammer(crew, key, base):
            for _ in range(20):
                results[key].append(crew.run(value_sum, base))

        threads = [threading.Thread(target=hammer, args=(crew2, "a", 1000)),
                   threading.Thread(target=hammer, args=(other, "b", 5000))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [r[0][0] for r in results["a"]] == [2001] * 20
        assert [r[0][0] for r in results["b"]] == [10001] * 20


# ----------------------------------------------------------------------------- torchrun

TORCHRUN_SCRIPT = """
import zerolab, torch
import torch.distributed as dist

def fn(x):
    info = zerolab.rank_info()
    t = torch.tensor([float(info.rank + 1)], device=info.device)
    dist.all_reduce(t)
    return info.rank, info.world_size, info.backend, t.item() + x

res = zerolab.launch(fn, 2, 0.5)     # unchanged from the notebook: torchrun supplies the ranks
print(f"RESULT rank={dist.get_rank()} {res}", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_same_code_under_torchrun(scripts):
    out = scripts.result("torchrun")
    assert out.returncode == 0, out.stdout + out.stderr
    backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    expected = f"[(0, 2, {backend!r}, 3.5), (1, 2, {backend!r}, 3.5)]"
    # the two ranks write to one pipe: a line may arrive glued to the other rank's
    got = sorted(re.findall(r"RESULT rank=\d \[[^\]]*\]", out.stdout))
    assert got == [f"RESULT rank=0 {expected}", f"RESULT rank=1 {expected}"]
    assert "terminate called" not in out.stderr


# ----------------------------------------------------------------------------- the scripts

class _Scripts:
    """Two scripts in subprocesses, started together before the in-process tests.

    Each imports torch in fresh processes (seconds of CPU); the in-process tests mostly wait
    (timeouts, grace periods), so starting these first lets the two overlap.
    """

    def __init__(self, folder):
        main = folder / "no_guard.py"
        main.write_text(MAIN_SCRIPT)
        under = folder / "under_torchrun.py"
        under.write_text(TORCHRUN_SCRIPT)
        env = dict(os.environ, OMP_NUM_THREADS="1", PET_LOG_DIR=str(folder / "torchrun-logs"))
        cmds = {"no_guard": [PY, str(main)],
                "torchrun": [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
                             str(under)]}
        self.procs = {k: subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env, start_new_session=True)
                      for k, c in cmds.items()}

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def result(self, name: str) -> subprocess.CompletedProcess:
        p = self.procs[name]
        out, err = p.communicate(timeout=180)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:                      # a test was deselected or failed early
                try:                                  # torchrun's workers run in sessions of
                    root = psutil.Process(p.pid)      # their own: kill the tree, leaves first
                    for q in root.children(recursive=True)[::-1] + [root]:
                        q.kill()
                except psutil.NoSuchProcess:
                    pass
            p.communicate(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def scripts(tmp_path_factory):
    s = _Scripts(tmp_path_factory.mktemp("scripts"))
    yield s
    s.close()
