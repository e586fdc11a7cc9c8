"""zerolab's shared-memory backend ``zshm`` (zerolab.crew.shm), asked for by name, never by default.

Each collective gives gloo's bits at 2 ranks and rank-order sums at 3; torch's DDP and zerolab's
engine train over it with the same bits as over gloo; asynchronous calls stay right with more in
flight than rounds, waited in any order, and a call larger than a slot does not block at issue;
where it cannot work every rank refuses with the reason (no fallback to gloo); no segment is left
in /dev/shm; a dead or missing peer is named.

Most tests make a ``zshm`` group with ``dist.new_group(backend="zshm")`` inside a gloo crew, so
that the same ranks can compare it with gloo and patch the module before the group is made."""
import os
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import zerolab
from zerolab.crew import shm
from zerolab.crew import shm_segment
from zerolab.crew import resolve_backend

x86 = pytest.mark.skipif(shm.problem_here() is not None, reason="zshm needs x86-64")
pytestmark = x86

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64]


@pytest.fixture(scope="module")
def crew2():
    with zerolab.Crew(2, "gloo", echo=False, timeout=120) as crew:
        yield crew


def zgroup(budget=shm.BUDGET):
    """A zshm group over every rank, its slots sized from ``budget`` (rank 0's value counts)."""
    saved, shm.BUDGET = shm.BUDGET, budget
    try:
        return dist.new_group(backend="zshm")
    finally:
        shm.BUDGET = saved


def segments_of(pids) -> list[str]:
    """Segments in /dev/shm made by any of ``pids``."""
    head = f"{shm.SEGMENT_PREFIX}{socket.gethostname()}-"
    return [f for f in os.listdir("/dev/shm") if f.startswith(head)
            and f[len(head):].split("-")[0] in {str(p) for p in pids}]


# ----------------------------------------------------------------------------- the same bits as gloo

def against_gloo(budget):
    """Every collective on a zshm group beside the same call on the (gloo) default group."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = zgroup(budget)
    R = dist.ReduceOp
    bad, sums = [], []

    def same(name, a, b):
        if not torch.equal(a, b):
            bad.append(name)
    for dtype in DTYPES:
        gen = torch.Generator().manual_seed(10 + r)
        for numel in (1, 7, 1000, 5003):
            base = (torch.randn(numel * n, generator=gen) * 100).to(dtype)
            ops = [R.SUM, R.MAX, R.MIN] + ([R.AVG] if dtype.is_floating_point else []) + \
                  ([R.PRODUCT] if numel < 10 else []) + \
                  ([R.BAND, R.BOR, R.BXOR] if not dtype.is_floating_point and numel < 10 else [])
            for op in ops:
                a, b = base.clone(), base.clone()
                dist.all_reduce(a, op=op, group=g)
                dist.all_reduce(b, op=op)
                same(("all_reduce", dtype, numel, op), a, b)
                sums.append(a.double().sum().item())
                oa, ob = torch.empty(numel, dtype=dtype), torch.empty(numel, dtype=dtype)
                dist.reduce_scatter_tensor(oa, base, op=op, group=g)
                dist.reduce_scatter_tensor(ob, base, op=op)
                same(("reduce_scatter_tensor", dtype, numel, op), oa, ob)
                la = torch.empty(numel, dtype=dtype)
                dist.reduce_scatter(la, list(base.chunk(n)), op=op, group=g)
                same(("reduce_scatter list", dtype, numel, op), la, ob)
                ra, rb = base.clone(), base.clone()
                dist.reduce(ra, dst=1, op=op, group=g)
                dist.reduce(rb, dst=1, op=op)
                if r == 1:
                    same(("reduce", dtype, numel, op), ra, rb)
            mine = base[:numel]
            fa, fb = torch.empty(numel * n, dtype=dtype), torch.empty(numel * n, dtype=dtype)
            dist.all_gather_into_tensor(fa, mine, group=g)
            dist.all_gather_into_tensor(fb, mine)
            same(("all_gather_into_tensor", dtype, numel), fa, fb)
            parts = [torch.empty(numel, dtype=dtype) for _ in range(n)]
            dist.all_gather(parts, mine, group=g)
            same(("all_gather list", dtype, numel), torch.cat(parts), fb)
            c, d = base.clone(), base.clone()
            dist.broadcast(c, src=n - 1, group=g)
            dist.broadcast(d, src=n - 1)
            same(("broadcast", dtype, numel), c, d)
    # a non-contiguous tensor is carried too (through a contiguous copy)
    m = torch.arange(12.0).view(3, 4).t() + r
    m2 = m.clone()
    dist.all_reduce(m, group=g)
    dist.all_reduce(m2)
    same(("all_reduce non-contiguous",), m, m2)
    # what zshm leaves to its gloo group: barrier, gather, scatter, object collectives
    dist.barrier(group=g)
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r}, group=g)
    gathered = [torch.empty(2) for _ in range(n)] if r == 0 else None
    dist.gather(torch.full((2,), float(r)), gathered, dst=0, group=g)
    used = shm.transport_of(g).collectives
    dist.destroy_process_group(g)
    return bad, sums, objs, gathered, used, dist.get_backend(), os.getpid()


def test_every_collective_matches_gloo_bit_for_bit_in_pieces_and_whole(crew2):
    for budget in (1 << 12, 1 << 22):                   # 256 B slots (many pieces) and 256 KiB ones
        res0, res1 = crew2.run(against_gloo, budget)
        (bad0, sums0, objs, gathered, used, backend, pid0), (bad1, sums1, *_, pid1) = res0, res1
        assert bad0 == [] and bad1 == []
        assert sums0 == sums1                           # an all-reduce gives every rank the same bits
        assert objs == [{"rank": 0}, {"rank": 1}] and [t[0].item() for t in gathered] == [0.0, 1.0]
        assert used >= 420 and backend == "gloo"        # the calls went through zshm, beside gloo
        assert segments_of([pid0, pid1]) == []          # the segment's name is gone once all mapped


def rank_order_sums():
    """3 ranks: each reduction equals the one computed in rank order from everyone's inputs."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = zgroup(1 << 12)
    x = torch.randn(3001 * n, generator=torch.Generator().manual_seed(r))
    everyone = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(everyone, x)                        # over gloo
    ref = everyone[0].clone()
    for other in everyone[1:]:
        ref.add_(other)
    a = x.clone()
    dist.all_reduce(a, group=g)
    out = torch.empty(3001)
    dist.reduce_scatter_tensor(out, x, group=g)
    full = torch.empty(3001 * n)
    dist.all_gather_into_tensor(full, x[:3001], group=g)
    red = x.clone()
    dist.reduce(red, dst=2, group=g)
    dist.destroy_process_group(g)
    return (torch.equal(a, ref), torch.equal(out, ref.view(n, -1)[r]),
            torch.equal(full, torch.cat([e[:3001] for e in everyone])),
            r != 2 or torch.equal(red, ref), a.sum().item())


def test_three_ranks_reduce_in_rank_order_and_agree():
    res = zerolab.launch(rank_order_sums, 3, backend="gloo", echo=False, timeout=120)
    assert all(r[:4] == (True, True, True, True) for r in res)
    assert len({r[4] for r in res}) == 1                # the same bits on every rank


# ----------------------------------------------------------------------------- training over it

def ddp_both():
    """torch DDP trained over zshm and over gloo from the same start: the parameters' bits."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    r = dist.get_rank()
    g = zgroup(1 << 14)                                 # small slots: the buckets go in pieces
    out = {}
    for name, group in (("zshm", g), ("gloo", None)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        ddp = DDP(model, process_group=group, bucket_cap_mb=0.005)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(100 + r)
        for _ in range(4):
            x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        out[name] = [p.detach().clone() for p in model.parameters()]
    used = shm.transport_of(g).collectives
    dist.destroy_process_group(g)
    return out, used


def test_torch_ddp_trains_over_zshm_with_the_bits_of_gloo(crew2):
    (out0, used), (out1, _) = crew2.run(ddp_both)
    assert used >= 4 * 2                                # DDP's bucket all-reduces went through zshm
    for out in (out0, out1):
        assert all(torch.equal(a, b) for a, b in zip(out["zshm"], out["gloo"]))
    assert all(torch.equal(a, b) for a, b in zip(out0["zshm"], out1["zshm"]))   # ranks agree


def train_stages():
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine
    world = zerolab.world_size()
    res = {}
    for stage in (0, 1, 2, 3):
        cfg = {"train_batch_size": 4 * world, "gradient_clipping": 1.0,
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": stage, "reduce_bucket_size": 700, "overlap_comm": stage == 2,
                                     "stage3_param_persistence_threshold": 30}}
        engine = zerolab.initialize(TinyLM(), cfg)
        losses = train_engine(engine, lm_batches(3, 4 * world), lm_loss)
        state = {k: v.clone() for k, v in engine.full_params().items()}     # stage 3: gathered (a collective)
        engine.close()
        res[stage] = (losses, state)
    tr = shm.transport_of()
    return res, dist.get_backend(), tr.collectives if tr is not None else 0


def test_the_engine_trains_over_zshm_with_the_bits_of_gloo():
    """A crew asks for it by name (backend="shm"); every stage, bit for bit against gloo."""
    over_shm, backend, used = zerolab.launch(train_stages, 2, backend="shm", echo=False, timeout=120)[0]
    over_gloo, gloo_name, none = zerolab.launch(train_stages, 2, backend="gloo", echo=False, timeout=120)[0]
    assert (backend, gloo_name, none) == ("zshm", "gloo", 0) and used > 50
    for stage in (0, 1, 2, 3):
        assert over_shm[stage][0] == over_gloo[stage][0], stage        # the losses, bit for bit
        params_shm, params_gloo = over_shm[stage][1], over_gloo[stage][1]      # and every parameter, stage 3 too
        assert params_shm.keys() == params_gloo.keys() and len(params_shm) > 5, stage
        assert all(torch.equal(params_shm[k], params_gloo[k]) for k in params_shm), stage


def test_asked_for_by_name_never_by_auto():
    assert resolve_backend("auto", 2) in ("gloo", "nccl")
    assert resolve_backend("shm", 2) == resolve_backend("zshm", 2) == "zshm"
    with pytest.raises(ValueError, match="'shm'"):
        resolve_backend("shared", 2)


def test_the_segment_layout_and_every_name_still_in_zerolab_shm():
    """Two cache lines per rank (posted, done), then ROUNDS x N slots, each a whole number of
    cache lines; zerolab.crew.shm keeps every public name of its three modules."""
    assert shm.ShmTransport.size_for(2, 1 << 12) == shm_segment.sizes(2, 1 << 12) == (512, 2 * 64 * 2 + 4 * 2 * 512)
    assert shm_segment.sizes(3, 600) == (64, 2 * 64 * 3 + 4 * 3 * 64)         # never below one line
    assert all(hasattr(shm, name) for name in shm.__all__)


# ----------------------------------------------------------------------------- asynchronous calls

def in_flight_then_late_read():
    """Issue 23 #1: rank 0 leaves collective 1 unread across three blocking calls, posts 5
    asynchronously and reads it late; rank 1 issues 1..9 at once. Before the fix rank 0's done
    flag claimed 5 while it had not read 5, rank 1 posted 9 into 5's round, and rank 0 read 9's
    data for 5 (141 instead of 101)."""
    r = dist.get_rank()
    g = zgroup(1 << 16)
    ts = [torch.full((8,), float(k * 10 + r)) for k in range(1, 10)]
    if r == 0:
        w1 = dist.all_reduce(ts[0], group=g, async_op=True)
        for k in (1, 2, 3):
            dist.all_reduce(ts[k], group=g)
        w5 = dist.all_reduce(ts[4], group=g, async_op=True)
        time.sleep(0.3)                                 # rank 1 runs ahead meanwhile
        w5.wait()
        w1.wait()
        for k in range(5, 9):
            dist.all_reduce(ts[k], group=g)
    else:
        for w in [dist.all_reduce(t, group=g, async_op=True) for t in ts]:
            w.wait()
    dist.destroy_process_group(g)
    return [t[0].item() for t in ts]


def shuffled_waits(seed):
    """Many asynchronous calls of several kinds in flight (3 x ROUNDS and more, some in pieces),
    each rank waiting for them in its own random order, with sleeps: every result right."""
    import random
    r, n = dist.get_rank(), dist.get_world_size()
    g = zgroup(1 << 12)                                 # 256 B slots: 2048 floats = 32 pieces
    rng = random.Random(seed * 10 + r)
    calls = []
    for k in range(3 * shm.ROUNDS + 2):
        size = (1, 100, 2048)[k % 3]                    # the same calls on every rank
        kind = ("ar", "ag", "rs")[(k // 3) % 3]
        if kind == "ar":
            t = torch.full((size,), float(k * 10 + r))
            calls.append((kind, k, t, dist.all_reduce(t, group=g, async_op=True)))
        elif kind == "ag":
            out = torch.empty(size * n)
            calls.append((kind, k, out, dist.all_gather_into_tensor(out, torch.full((size,), float(k * 10 + r)),
                                                                     group=g, async_op=True)))
        else:
            out = torch.empty(size)
            calls.append((kind, k, out, dist.reduce_scatter_tensor(out, torch.full((size * n,), float(k * 10 + r)),
                                                                   group=g, async_op=True)))
        if rng.random() < 0.2:
            time.sleep(0.01)
    order = list(range(len(calls)))
    rng.shuffle(order)
    for i in order:
        if rng.random() < 0.3:
            time.sleep(0.01)
        calls[i][3].wait()
    bad = []
    for kind, k, t, _ in calls:
        want = {"ar": n * k * 10 + sum(range(n)), "rs": n * k * 10 + sum(range(n))}.get(kind)
        if kind == "ag":
            ok = all(torch.equal(t.view(n, -1)[j], torch.full((t.numel() // n,), float(k * 10 + j)))
                     for j in range(n))
        else:
            ok = torch.equal(t, torch.full_like(t, float(want)))
        if not ok:
            bad.append((kind, k))
    dist.destroy_process_group(g)
    return bad


def test_more_in_flight_than_rounds_read_late_or_in_any_order_stays_right(crew2):
    want = [float(20 * k + 1) for k in range(1, 10)]
    assert crew2.run(in_flight_then_late_read) == [want, want]
    for seed in range(3):
        assert crew2.run(shuffled_waits, seed) == [[], []]


def large_async_call():
    """A call of 64 pieces (far more than ROUNDS) issued while the peer is 0.5 s late: the issue
    returns at once and the wait is where the rank waits (before, it blocked at issue and its
    Work said it had waited 0 s)."""
    r = dist.get_rank()
    g = zgroup(1 << 12)                                 # 256 B slots: 64 floats per piece
    t = torch.full((64 * 64,), float(r + 1))
    dist.barrier(group=g)
    if r == 1:
        time.sleep(0.5)
    t0 = time.perf_counter()
    work = dist.all_reduce(t, group=g, async_op=True)
    issued = time.perf_counter() - t0
    work.wait()
    total = time.perf_counter() - t0
    ok = torch.equal(t, torch.full_like(t, 3.0))
    dist.destroy_process_group(g)
    return issued, total, work.waited, ok


def test_an_asynchronous_call_larger_than_a_slot_does_not_block_at_issue(crew2):
    (issued, total, waited, ok), (_, _, _, ok1) = crew2.run(large_async_call)
    assert ok and ok1
    assert issued < 0.2, issued                         # rank 0 did not wait for rank 1 at issue
    assert total > 0.3 and waited > 0.25, (total, waited)   # it waited at wait(), and says so


def async_then_gloo():
    """A rank that goes to gloo (barrier) with pieces still queued posts them first: its peer,
    still waiting for them, finishes and reaches the barrier too (no deadlock)."""
    r = dist.get_rank()
    g = zgroup(1 << 12)
    t = torch.full((64 * 40,), float(r + 1))
    work = dist.all_reduce(t, group=g, async_op=True)
    if r == 0:
        dist.barrier(group=g)                           # before waiting: must not strand rank 1
        work.wait()
    else:
        work.wait()
        dist.barrier(group=g)
    ok = torch.equal(t, torch.full_like(t, 3.0))
    dist.destroy_process_group(g)
    return ok


def test_a_rank_leaving_for_gloo_posts_what_it_queued_first(crew2):
    assert crew2.run(async_then_gloo, timeout=20) == [True, True]


# ----------------------------------------------------------------------------- refusals, never a fallback

def refused(patch):
    """Make a zshm group with ``patch`` applied on one rank (to zerolab.crew.shm_segment, which makes the
    segment); every rank returns what it raised."""
    r = dist.get_rank()
    saved = {k: getattr(shm_segment, k) for k in ("problem_here", "_host_id", "_reserve", "_map")}
    if patch == "arm" and r == 1:
        shm_segment.problem_here = lambda: ("this CPU is aarch64, not x86-64: the shared-memory "
                                            "transport relies on x86-64's total store order")
    elif patch == "hosts" and r == 1:
        shm_segment._host_id = lambda: "elsewhere/boot"
    elif patch == "full" and r == 0:
        def full(fd, size):
            raise OSError(28, "No space left on device")
        shm_segment._reserve = full
    elif patch == "unmappable" and r == 1:
        def no_map(path, size):
            raise OSError(12, "Cannot allocate memory")
        shm_segment._map = no_map
    t0 = time.monotonic()
    try:
        g = dist.new_group(backend="zshm")
    except shm.ShmUnavailable as e:
        msg = str(e)
    else:
        dist.destroy_process_group(g)
        msg = None
    finally:
        for k, v in saved.items():
            setattr(shm_segment, k, v)
    return msg, time.monotonic() - t0, os.getpid()


@pytest.mark.parametrize("patch, words", [
    ("arm", ["rank 1", "aarch64", "backend='gloo'"]),
    ("hosts", ["one machine", "rank 1 on elsewhere", "backend='gloo'"]),
    ("full", ["no room", "MiB", "--shm-size", "backend='gloo'"]),
    ("unmappable", ["rank 1 could not map", "backend='gloo'"]),
])
def test_where_it_cannot_work_every_rank_refuses_with_the_reason(crew2, patch, words):
    res = crew2.run(refused, patch, timeout=60)
    for msg, seconds, _ in res:
        assert msg is not None and all(w in msg for w in words), msg
        assert seconds < 10                              # nobody hung
    assert segments_of([pid for *_, pid in res]) == []   # and nothing is left in /dev/shm
    assert crew2.run(lambda: dist.get_backend()) == ["gloo", "gloo"]   # the crew carries on, on gloo


def die_before_mapping():
    """Rank 1 dies between rank 0's create and its own map (the old leak: 32 MiB left behind)."""
    if dist.get_rank() == 1:
        shm_segment._map = lambda path, size: os._exit(3)
    dist.new_group(backend="zshm")                      # rank 0 raises ShmUnavailable, naming rank 1


def test_a_rank_dying_while_the_segment_is_made_leaves_nothing_behind():
    with zerolab.Crew(2, "gloo", echo=False, timeout=60) as crew:
        pids = crew.pids
        t0 = time.monotonic()
        with pytest.raises(zerolab.RankError) as err:
            crew.run(die_before_mapping)
    assert time.monotonic() - t0 < 20
    assert "rank(s) [1]" in str(err.value) and "has exited" in str(err.value)   # rank 0 named it
    assert segments_of(pids) == []


def test_stale_segments_of_dead_processes_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    head = shm.SEGMENT_PREFIX
    names = {"stale": f"{head}{host}-{dead.pid}-abc", "live": f"{head}{host}-{os.getpid()}-abc",
             "other host": f"{head}{host}x-{dead.pid}-abc", "not ours": f"zerolab-crew-{dead.pid}"}
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    assert shm.remove_stale_segments(str(tmp_path)) == [names["stale"]]
    assert sorted(os.listdir(tmp_path)) == sorted(v for k, v in names.items() if k != "stale")


def make_group():
    g = dist.new_group(backend="zshm")
    dist.destroy_process_group(g)


def test_making_a_group_sweeps_dev_shm(crew2):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = f"/dev/shm/{shm.SEGMENT_PREFIX}{socket.gethostname()}-{dead.pid}-0123456789ab"
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    crew2.run(make_group)
    assert not os.path.exists(path)


# ----------------------------------------------------------------------------- a peer that is gone

def skip_one():
    t = torch.ones(4)
    dist.all_reduce(t)                                  # both ranks (at the default timeout: on a busy
    shm.transport_of().timeout_s = 1.0                  # machine rank 1 may start more than 1 s late)
    if dist.get_rank() == 0:
        try:
            dist.all_reduce(t)                          # rank 1 never comes
        except shm.ShmTimeout as e:
            return str(e)
    return None


def test_a_rank_that_never_arrives_is_named_after_the_timeout():
    msg = zerolab.launch(skip_one, 2, backend="shm", echo=False, timeout=60)[0]
    assert msg is not None and "rank(s) [1]" in msg and "collective #2" in msg


def die_in_collective():
    t = torch.ones(4)
    dist.all_reduce(t)
    if dist.get_rank() == 1:
        os._exit(3)                                     # the process vanishes mid-run
    dist.all_reduce(t)                                  # rank 0 waits for it: ShmTimeout


def test_a_peer_that_died_is_noticed_long_before_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(zerolab.RankError) as err:       # rank 1 died: the crew reports it ...
        zerolab.launch(die_in_collective, 2, backend="shm", echo=False, timeout=60)
    assert time.monotonic() - t0 < 30                   # ... and rank 0 did not wait out 60 s
    # Who says it first is a race: rank 0's transport, which checks its peers' processes while it
    # waits ("... whose process has exited"), or the crew, which watches every rank's process and
    # gives the others 3 s to report before it stops them (on a busy machine rank 0 may be slower).
    msg = str(err.value)
    assert "whose process has exited" in msg or ("rank 1 died" in msg and "were stopped" in msg), msg
