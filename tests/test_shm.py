"""The shared-memory transport (zerolab.shm): the same bits as gloo, pieces larger than a slot,
every dtype and reduce op, a clear error when a rank never arrives, nothing left in /dev/shm,
and training through it bit-identical to training over gloo."""
import os

import pytest
import torch
import torch.distributed as dist

import zerolab
from zerolab import shm
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.reference import train_engine

needs_two = pytest.mark.skipif(not shm.enabled(2), reason="shared memory needs x86-64")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64]


def against_gloo(budget):
    """Each collective through a ShmTransport with a small slot (so tensors go in pieces),
    beside the same call through gloo; returns the mismatches and what all_reduce gave."""
    r, n = dist.get_rank(), dist.get_world_size()
    tr = shm.ShmTransport(budget=budget)
    bad, sums = [], []
    for dtype in DTYPES:
        g = torch.Generator().manual_seed(10 + r)
        for numel in (1, 7, 1000, 5003):
            base = (torch.randn(numel * n, generator=g) * 100).to(dtype)
            for op in shm.REDUCE_OPS:
                a, b = base.clone(), base.clone()
                tr.all_reduce(a, op)
                dist.all_reduce(b, op=op)
                bad += [("all_reduce", dtype, numel, op)] if not torch.equal(a, b) else []
                sums.append(a)
                out_a, out_b = torch.empty(numel, dtype=dtype), torch.empty(numel, dtype=dtype)
                tr.reduce_scatter(out_a, base, op)
                ref = base.clone()
                dist.all_reduce(ref, op=op)                 # gloo's reduce-scatter: chunk r of this
                out_b.copy_(ref.view(n, -1)[r])
                bad += [("reduce_scatter", dtype, numel, op)] if not torch.equal(out_a, out_b) else []
            mine = base[:numel]
            full_a, full_b = torch.empty(numel * n, dtype=dtype), torch.empty(numel * n, dtype=dtype)
            tr.all_gather(full_a, mine)
            dist.all_gather_into_tensor(full_b, mine.contiguous())
            bad += [("all_gather", dtype, numel)] if not torch.equal(full_a, full_b) else []
            c = base.clone()
            tr.broadcast(c, src=n - 1)
            d = base.clone()
            dist.broadcast(d, src=n - 1)
            bad += [("broadcast", dtype, numel)] if not torch.equal(c, d) else []
    tr.close()
    left = [f for f in os.listdir("/dev/shm") if f.startswith("zerolab-")] if os.path.isdir("/dev/shm") else []
    return bad, [s.float().sum().item() for s in sums], left


@needs_two
def test_every_collective_matches_gloo_bit_for_bit_in_pieces_and_whole():
    for budget in (1 << 12, 1 << 24):                   # 1 KiB slots (many pieces) and 4 MiB ones
        (bad0, sums0, left), (bad1, sums1, _) = zerolab.launch(against_gloo, 2, budget, echo=False,
                                                               timeout=120)
        assert bad0 == [] and bad1 == []
        assert sums0 == sums1                           # an all-reduce gives every rank the same bits
        assert left == []                               # the segment's name is gone once all mapped


def skip_one(timeout_s):
    tr = shm.ShmTransport(timeout_s=timeout_s)
    t = torch.ones(4)
    tr.all_reduce(t)                                    # both ranks
    if dist.get_rank() == 0:
        try:
            tr.all_reduce(t)                            # rank 1 never comes
        except shm.ShmTimeout as e:
            return str(e)
    return None


@needs_two
def test_a_rank_that_never_arrives_is_named_after_the_timeout():
    msg = zerolab.launch(skip_one, 2, 1.0, echo=False, timeout=60)[0]
    assert msg is not None and "rank(s) [1]" in msg and "collective #2" in msg


def test_off_by_env_and_on_whatever_the_core_count(monkeypatch):
    monkeypatch.delenv("ZEROLAB_SHM", raising=False)
    assert not shm.enabled(1)
    assert shm.enabled(10 ** 6) == shm.enabled(2)       # the same bits and order on any machine size
    monkeypatch.setenv("ZEROLAB_SHM", "0")
    assert not shm.enabled(2)


def train(stage, use_shm):
    from zerolab.comm import Comm
    Comm.shm_on_cpu = use_shm
    world = zerolab.world_size()
    cfg = {"train_batch_size": 4 * world, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 700,
                                 "stage3_param_persistence_threshold": 30}}
    engine = zerolab.initialize(TinyLM(), cfg)
    losses = train_engine(engine, lm_batches(3, 4 * world), lm_loss)
    used = engine.comm._may_shm and shm.transport() is not None
    params = [p.detach().clone() for p in engine.full_parameters()] if hasattr(engine, "full_parameters") else None
    state = {k: v.clone() for k, v in engine.module.state_dict().items()} if stage < 3 else None
    engine.close()
    return losses, used, state, params


@needs_two
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_training_through_shared_memory_is_bit_identical_to_gloo(stage):
    with_shm = zerolab.launch(train, 2, stage, True, echo=False, timeout=120)[0]
    without = zerolab.launch(train, 2, stage, False, echo=False, timeout=120)[0]
    assert with_shm[1] and not without[1]
    assert with_shm[0] == without[0]                    # the losses, bit for bit
    if stage < 3:
        assert all(torch.equal(with_shm[2][k], without[2][k]) for k in with_shm[2])


def die_in_collective():
    tr = shm.ShmTransport(timeout_s=60)
    t = torch.ones(4)
    tr.all_reduce(t)
    if dist.get_rank() == 1:
        os._exit(3)                                     # the process vanishes mid-run
    tr.all_reduce(t)                                    # rank 0 waits for it: ShmTimeout


@needs_two
def test_a_peer_that_died_is_noticed_long_before_the_timeout():
    import time
    t0 = time.monotonic()
    with pytest.raises(zerolab.RankError) as err:       # rank 1 died: the crew reports it ...
        zerolab.launch(die_in_collective, 2, echo=False, timeout=60)
    assert time.monotonic() - t0 < 30                   # ... and rank 0 did not wait out 60 s
    assert "whose process has exited" in str(err.value)   # rank 0 said why it stopped waiting


def rank_order_sums():
    """3 ranks: each reduction equals the one computed in rank order from everyone's inputs."""
    r, n = dist.get_rank(), dist.get_world_size()
    tr = shm.ShmTransport(budget=1 << 12)
    x = torch.randn(3001 * n, generator=torch.Generator().manual_seed(r))
    everyone = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(everyone, x)
    ref = everyone[0].clone()
    for other in everyone[1:]:
        ref.add_(other)
    a = x.clone()
    tr.all_reduce(a)
    out = torch.empty(3001)
    tr.reduce_scatter(out, x)
    full = torch.empty(3001 * n)
    tr.all_gather(full, x[:3001])
    tr.close()
    return (torch.equal(a, ref), torch.equal(out, ref.view(n, -1)[r]),
            torch.equal(full, torch.cat([e[:3001] for e in everyone])), a.sum().item())


@needs_two
def test_three_ranks_reduce_in_rank_order_and_agree():
    res = zerolab.launch(rank_order_sums, 3, echo=False, timeout=120)
    assert all(r[:3] == (True, True, True) for r in res)
    assert len({r[3] for r in res}) == 1                # the same bits on every rank


def many_in_flight():
    """More collectives in flight than rounds, waited for in reverse: each still right."""
    r, n = dist.get_rank(), dist.get_world_size()
    tr = shm.ShmTransport(budget=1 << 16)
    ts = [torch.full((100,), float(k + r)) for k in range(2 * shm.ROUNDS + 1)]
    handles = [tr.all_reduce(t, async_op=True) for t in ts]
    outs = [torch.empty(100 * n) for _ in range(3)]
    gathers = [tr.all_gather(o, torch.full((100,), float(r * 10 + k)), async_op=True) for k, o in enumerate(outs)]
    for h in reversed(handles + gathers):
        h.wait()
    ok = all(torch.equal(t, torch.full((100,), float(n * k + sum(range(n))))) for k, t in enumerate(ts))
    ok_g = all(torch.equal(o.view(n, -1)[j], torch.full((100,), float(j * 10 + k)))
               for k, o in enumerate(outs) for j in range(n))
    tr.close()
    return ok, ok_g


@needs_two
def test_asynchronous_collectives_complete_in_any_order_with_more_in_flight_than_rounds():
    assert zerolab.launch(many_in_flight, 2, echo=False, timeout=60) == [(True, True)] * 2
