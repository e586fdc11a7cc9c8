"""comm: the ledger's numbers equal the ring formulas, and the from-scratch ring equals the
library collectives, for uneven sizes and world sizes 1-4.

One crew per world size (module scope); each test sends one function to every rank, which
checks many sizes at once and returns what it found, so a failure names the size.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import zerolab
from zerolab.comm.comm import Comm, CommRecord, Ledger, ring_all_gather, ring_all_reduce, \
    ring_reduce_scatter, wire_factor

# Uneven on purpose: smaller than the world, primes, not a multiple of N, and one 2-D tensor.
SIZES = [0, 1, 2, 3, 5, 7, 13, 64, 1001, (3, 5)]


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"N{n}")
def crew(request):
    with zerolab.Crew(request.param, backend="gloo", timeout=60) as c:
        yield c


def _data(rank: int, shape, dtype=torch.float64, integers=False) -> torch.Tensor:
    """What rank ``rank`` holds: different on every rank, the same on every run."""
    g = torch.Generator().manual_seed(1000 + rank)
    shape = (shape,) if isinstance(shape, int) else shape
    if integers:                                  # sums of small integers are exact in any order
        return torch.randint(-50, 50, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=dtype)


# ----------------------------------------------------------------------------- ring == library

def _ring_vs_library():
    r, n = dist.get_rank(), dist.get_world_size()
    problems = []
    for shape in SIZES:
        for dtype, integers in [(torch.float64, True), (torch.float32, False), (torch.int64, True)]:
            x = _data(r, shape, dtype, integers)
            lib = x.clone()
            dist.all_reduce(lib)

            ring = ring_all_reduce(x)
            if ring.shape != x.shape:
                problems.append(f"{shape} {dtype}: all-reduce shape {tuple(ring.shape)}")
            elif integers and not torch.equal(ring, lib):
                problems.append(f"{shape} {dtype}: ring all-reduce != dist.all_reduce")
            elif not integers and not torch.allclose(ring, lib, rtol=1e-5, atol=1e-5):
                problems.append(f"{shape} {dtype}: ring all-reduce not close to dist.all_reduce "
                                f"(max diff {(ring - lib).abs().max().item():.2e})")

            # reduce-scatter: chunk r on rank r is the sum of chunk r over all ranks
            mine = ring_reduce_scatter(x)[r]
            want = lib.reshape(-1).tensor_split(n)[r]
            if not torch.allclose(mine.double(), want.double(), rtol=1e-5, atol=1e-5) or \
                    (integers and not torch.equal(mine, want)):
                problems.append(f"{shape} {dtype}: ring reduce-scatter chunk {r} is wrong")

            # all-gather: every rank ends with every rank's chunk, in rank order
            chunks = x.reshape(-1).tensor_split(n)
            gathered = ring_all_gather([c if i == r else torch.full_like(c, -1)
                                        for i, c in enumerate(chunks)])
            everyone = [None] * n
            dist.all_gather_object(everyone, chunks[r])           # the library, any sizes
            if not torch.equal(gathered, torch.cat(everyone)):
                problems.append(f"{shape} {dtype}: ring all-gather != dist.all_gather_object")
    # where the library takes equal pieces, compare with the tensor collectives directly
    for per_rank in [1, 3, 250]:
        x = _data(r, n * per_rank, integers=True)
        rs = torch.empty(per_rank, dtype=x.dtype)
        Comm().reduce_scatter(rs, x.clone())
        if not torch.equal(ring_reduce_scatter(x)[r], rs):
            problems.append(f"{n}x{per_rank}: ring reduce-scatter != library reduce-scatter")
        ag = torch.empty(n * per_rank, dtype=x.dtype)
        Comm().all_gather(ag, x[:per_rank].clone())
        mine = [x[:per_rank] if i == r else torch.zeros(per_rank, dtype=x.dtype) for i in range(n)]
        if not torch.equal(ring_all_gather(mine), ag):
            problems.append(f"{n}x{per_rank}: ring all-gather != library all-gather")
    return problems


def test_ring_equals_library(crew):
    assert crew.run(_ring_vs_library) == [[]] * crew.world_size


def test_ring_does_not_change_its_input(crew):
    def check():
        x = _data(dist.get_rank(), 10)
        before = x.clone()
        ring_all_reduce(x)
        ring_reduce_scatter(x)
        return torch.equal(x, before)
    assert crew.run(check) == [True] * crew.world_size


# ----------------------------------------------------------------------------- the ledger

S_NUMEL = 1200           # divisible by 1, 2, 3 and 4, so every formula is an integer of bytes


def _ledger_totals():
    n, r = dist.get_world_size(), dist.get_rank()
    comm = Comm()
    x = torch.ones(S_NUMEL)                                       # fp32: 4 bytes an element
    comm.all_reduce(x, tag="grads bucket 0")
    comm.all_reduce(torch.ones(S_NUMEL // 2, dtype=torch.float64), tag="grads bucket 1")
    comm.reduce_scatter(torch.empty(S_NUMEL // n), torch.ones(S_NUMEL), tag="grads")
    comm.all_gather(torch.empty(S_NUMEL), torch.ones(S_NUMEL // n), tag="params")
    comm.broadcast(torch.ones(S_NUMEL, dtype=torch.bfloat16), src=0, tag="init")
    with comm.ledger.paused():
        comm.all_reduce(torch.ones(7), tag="not counted")
    mark = comm.ledger.mark()
    t = torch.tensor([float(r)], dtype=torch.float64)
    comm.all_reduce(t, dist.ReduceOp.MAX, tag="overflow")
    amax = t.item()
    ring_ledger = Ledger()
    ring = ring_all_reduce(torch.ones(S_NUMEL), ledger=ring_ledger)
    uneven = Ledger()
    ring_all_reduce(torch.ones(1001), ledger=uneven)
    return dict(totals=comm.ledger.totals(), records=list(comm.ledger.records),
                since=len(comm.ledger.since(mark)), amax=amax, by_tag=comm.ledger.by_tag(),
                table=comm.ledger.table(), all_reduced=x[0].item(), ring_value=ring[0].item(),
                ring=ring_ledger.totals(), uneven=uneven.totals())


def test_ledger_totals_equal_the_ring_formulas(crew):
    n = crew.world_size
    S = S_NUMEL * 4                                               # bytes of the fp32 tensors
    # The formulas, written out here on purpose (not through wire_factor):
    expect_wire = {
        "all_reduce": 2 * (n - 1) / n * S + 2 * (n - 1) / n * (S_NUMEL // 2 * 8) + 2 * (n - 1) / n * 8,
        "reduce_scatter": (n - 1) / n * S,
        "all_gather": (n - 1) / n * S,
        "broadcast": (S_NUMEL * 2 if n > 1 else 0),               # bf16, received by every non-root
    }
    for rank, res in enumerate(crew.run(_ledger_totals)):
        t = res["totals"]
        assert set(t) == set(expect_wire)
        assert t["all_reduce"]["calls"] == 3                      # the paused one is not there
        assert t["all_reduce"]["numel"] == S_NUMEL + S_NUMEL // 2 + 1
        assert t["all_reduce"]["bytes"] == S + S_NUMEL // 2 * 8 + 8
        assert t["reduce_scatter"]["numel"] == S_NUMEL            # the full input, not the shard
        assert t["all_gather"]["numel"] == S_NUMEL                # the full output, not the shard
        assert t["broadcast"]["bytes"] == S_NUMEL * 2
        for op, wire in expect_wire.items():
            assert t[op]["wire_bytes"] == pytest.approx(wire, abs=1e-6), (rank, op)
        assert all(t[op]["seconds"] >= 0 for op in t)
        assert res["since"] == 1 and res["amax"] == n - 1
        assert res["all_reduced"] == n                            # and the data really moved
        rec = res["records"][0]
        assert (rec.op, rec.dtype, rec.world_size, rec.tag) == ("all_reduce", "float32", n,
                                                                "grads bucket 0")
        assert res["records"][4].dtype == "bfloat16"
        assert res["by_tag"]["grads"] == pytest.approx(expect_wire["all_reduce"] - 2 * (n - 1) / n * 8
                                                       + expect_wire["reduce_scatter"])
        assert f"{int(expect_wire['all_gather']):>13}" in res["table"].splitlines()[1]

        # The ring from scratch sends 2(N-1) chunks: exactly 2(N-1)/N * S for even chunks ...
        assert res["ring_value"] == n
        sent = res["ring"].get("send", {"wire_bytes": 0.0, "calls": 0})
        assert sent["wire_bytes"] == pytest.approx(2 * (n - 1) / n * S)
        assert sent["calls"] == 2 * (n - 1)
        # ... and for uneven chunks, everything but its own chunk r in the reduce-scatter and
        # chunk r+1 in the all-gather.
        sizes = [len(c) for c in torch.empty(1001).tensor_split(n)]
        want = (2 * 1001 - sizes[rank] - sizes[(rank + 1) % n]) * 4 if n > 1 else 0
        assert res["uneven"].get("send", {"wire_bytes": 0.0})["wire_bytes"] == want


def test_wire_factor_convention():
    assert wire_factor("all_reduce", 4) == 1.5
    assert wire_factor("reduce_scatter", 4) == wire_factor("all_gather", 4) == 0.75
    assert wire_factor("broadcast", 8) == 1.0
    assert all(wire_factor(op, 1) == 0 for op in ["all_reduce", "reduce_scatter", "all_gather",
                                                   "broadcast", "send"])
    rec = CommRecord("all_reduce", 100, 400, "float32", 2, 0.0)
    assert rec.wire_bytes == 400.0


def test_wrong_sizes_are_clear_errors(crew):
    def bad_sizes():
        n, comm = dist.get_world_size(), Comm()
        errors = []
        for call in (lambda: comm.reduce_scatter(torch.empty(3), torch.empty(3 * n + 1)),
                     lambda: comm.all_gather(torch.empty(3 * n + 1), torch.empty(3))):
            try:
                call()
            except ValueError as e:                   # raised before any traffic: the group is fine
                errors.append(str(e).split(":")[0])
        dist.barrier()
        return errors, len(comm.ledger)
    assert crew.run(bad_sizes) == [(["reduce_scatter", "all_gather"], 0)] * crew.world_size


def test_ring_trace_says_which_chunk_moves_where(crew):
    def traced():
        r, n = dist.get_rank(), dist.get_world_size()
        trace = []
        out = ring_all_reduce(torch.full((n,), 10.0 ** r, dtype=torch.float64), trace=trace)
        return out.tolist(), [(t["phase"], t["step"], t["sent"], t["to"], t["received"], t["from"],
                               [c.tolist() for c in t["chunks"]]) for t in trace]
    n = crew.world_size
    total = sum(10.0 ** r for r in range(n))                     # 1111 at N = 4
    for r, (out, steps) in enumerate(crew.run(traced)):
        assert out == [total] * n
        assert [s[:6] for s in steps] == (
            [("reduce-scatter", s, (r - s - 1) % n, (r + 1) % n, (r - s - 2) % n, (r - 1) % n)
             for s in range(n - 1)] +
            [("all-gather", s, (r - s) % n, (r + 1) % n, (r - s - 1) % n, (r - 1) % n)
             for s in range(n - 1)])
        if n > 1:
            assert steps[n - 2][6][r] == [total]                 # chunk r is complete after RS
            assert steps[-1][6] == [[total]] * n                  # and everything after AG


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 GPUs for NCCL")
def test_ring_equals_library_on_nccl():
    def on_gpu():
        r, dev = zerolab.rank(), zerolab.device()
        x = _data(r, 1001, integers=True).to(dev)
        lib = x.clone()
        dist.all_reduce(lib)
        trace, sent = [], Ledger()
        ring = ring_all_reduce(x, ledger=sent, trace=trace)
        return ring.device.type, torch.equal(ring, lib), len(trace), sent.totals()["send"]["calls"]
    assert zerolab.launch(on_gpu, 2, backend="nccl") == [("cuda", True, 2, 2)] * 2


def test_bounded_log_keeps_the_newest_and_marks_survive_drops_and_clears():
    """Ledger and Timeline share zerolab.comm.ledger.BoundedLog: positions count from the first item
    ever added, so a mark taken before the oldest half was dropped (or the list cleared) still
    slices exactly the items added after it."""
    from zerolab.comm.ledger import BoundedLog
    from zerolab.comm.timeline import Timeline
    log, items = BoundedLog(limit=4), []
    for i in range(3):
        log.append(items, i)
    m = log.mark(items)
    for i in range(3, 6):
        log.append(items, i)                   # 6 > 4: the oldest half (0, 1, 2) dropped at 5 items
    assert items == [2, 3, 4, 5] and log.dropped == 2 and log.since(items, m) == [3, 4, 5]
    m = log.mark(items)
    log.clear(items)
    log.append(items, 6)
    assert log.since(items, m) == [6] and log.since(items, 0) == [6]
    tl = Timeline()
    tl.add("compute", "a", 0.0, 1.0)
    m = tl.mark()
    tl.clear()
    tl.add("compute", "b", 1.0, 2.0)
    assert [e.name for e in tl.since(m).events] == ["b"]
    led = Ledger()
    led.add(CommRecord("all_reduce", 4, 16, "float32", 2, 0.0, "x"))
    m = led.mark()
    led.clear()
    led.add(CommRecord("all_gather", 4, 16, "float32", 2, 0.0, "y"))
    assert [r.op for r in led.since(m).records] == ["all_gather"]
