"""Stage-3 prefetch: the next modules' parameters gathered ahead from the recorded trace.

* Same numbers: prefetch on or off, the parameters are bit-identical and the gathered bytes equal;
  prefetch turns many 16-byte headers into a few (one per unit of gathers plus one per forward),
  and a unit's prefetched modules travel in one all-gather (DeepSpeed's coalescing).
* Paths that change (an eval forward in between, a branch every other step) follow the model:
  no hang, the same parameters as without prefetch.
* stage3_max_live_parameters caps what is gathered or in flight at once.
* A rank that leaves the trace after it was recorded raises ModuleOrderError on every rank.
* stage3_max_reuse_distance keeps a module gathered after its forward when the trace uses it again
  within that many elements: fewer bytes (DeepSpeed's), the same numbers.
"""
import torch
from torch import nn

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss


class Alternating(nn.Module):
    """Takes ``extra`` on even steps (set by the caller), on every rank or on one rank only."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 64)
        self.extra = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 4)
        self.take_extra = True

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.take_extra:
            h = h + torch.tanh(self.extra(h))
        return self.c(torch.relu(self.b(h)))


def cfg(world, prefetch, own=None, **zero):
    return {"train_batch_size": 2 * world, "train_micro_batch_size_per_gpu": 2, "zerolab": own or {},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": prefetch,
                                  "stage3_max_reuse_distance": 0, **zero}}   # (reuse: the end of this file)


def _tinylm(prefetch, steps=4, own=None, **zero):
    world = zerolab.world_size()
    engine = zerolab.initialize(TinyLM(), cfg(world, prefetch, own, **zero))
    checks = []
    for x, y in lm_batches(steps, 2 * world, seed=0):
        mark = engine.ledger.mark()
        engine.backward(lm_loss(engine(x), y))
        engine.step()
        led = engine.ledger.since(mark)
        assert not any(r.tag.startswith("check") or r.kind == "check" for r in led.records)
        checks.append(len(led.checks))            # zerolab's order checks: kept apart
        gathered = sum(r.bytes for r in led.records if r.op == "all_gather" and r.tag.startswith("params"))
        calls = sum(1 for r in led.records if r.op == "all_gather" and r.tag.startswith("params"))
    st = engine.stage.params                # the running counts equal a count from scratch
    counts_agree = (st._live_numel() == sum(st.groups[j].padded_numel for j in st.full if not st.persistent[j])
                    and st._inflight_numel() == sum(st.groups[j].padded_numel for j in st._inflight) == 0)
    out = {"params": engine.full_params(), "checks": checks, "gathered_bytes": gathered, "calls": calls,
           "counts_agree": counts_agree,
           "prefetches": engine.stage.prefetches, "peak": engine.stage.params.peak_gathered_numel,
           "largest": max(g.padded_numel for g in engine.stage.groups)}
    engine.close()
    return out


def test_prefetch_keeps_what_it_scanned_as_deepspeed_does_and_changes_no_number():
    with zerolab.Crew(2, threads=1) as crew:
        off = crew.run(_tinylm, 0)
        on = crew.run(_tinylm, 50_000_000)
        capped = crew.run(_tinylm, 50_000_000, stage3_max_live_parameters=3000)
    for a, b, c in zip(off, on, capped):
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
        assert all(torch.equal(a["params"][k], c["params"][k]) for k in a["params"])
        # at reuse distance 0 without prefetch every module is gathered again for backward; with it,
        # DeepSpeed's prefetcher marks every use it scans as "fetched for" and keeps those
        # parameters gathered, so backward gathers only what the cap kept it from scanning
        assert b["gathered_bytes"] < c["gathered_bytes"] < a["gathered_bytes"], (a, b, c)
        assert 2 * b["gathered_bytes"] < a["gathered_bytes"] + 1024
        # a prefetch batch of several modules travels in one all-gather (DeepSpeed's coalescing)
        assert b["calls"] < c["calls"] < a["calls"], (a["calls"], b["calls"], c["calls"])
        assert a["prefetches"] == 0 and b["prefetches"] > 0 and c["prefetches"] > 0
        assert a["counts_agree"] and b["counts_agree"] and c["counts_agree"]
        # step 1 records (a header per gather, as without prefetch); later steps follow the trace
        assert b["checks"][0] == a["checks"][0] and all(n < a["checks"][-1] / 3 for n in b["checks"][1:])
        # the cap bounds what is gathered or in flight, DeepSpeed's way: prefetching stops once the
        # cap is reached, the group that crosses it included (and a module's own fetch is never held)
        assert c["peak"] < 3000 + 2 * c["largest"] < b["peak"]


def test_order_checks_switched_off_send_nothing_and_change_no_number():
    with zerolab.Crew(2, threads=1) as crew:
        on = crew.run(_tinylm, 50_000_000, 3)
        off = crew.run(_tinylm, 50_000_000, 3, {"order_checks": False})
    for a, b in zip(on, off):
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
        assert (a["calls"], a["gathered_bytes"]) == (b["calls"], b["gathered_bytes"])
        assert min(a["checks"]) > 0 and b["checks"] == [0, 0, 0]


def test_a_trace_that_gathers_nothing_ends_its_forward_without_a_check():
    """Every group persistent (kept whole, refreshed after the step): a pass that follows the trace
    gathers nothing, so no fetch can pair with another rank's and its end sends no header; with
    groups to gather it does."""
    with zerolab.Crew(2, threads=1) as crew:
        kept = crew.run(_tinylm, 50_000_000, 4, None, stage3_param_persistence_threshold=10 ** 9)
        gathered = crew.run(_tinylm, 50_000_000, 4)
    for a, b in zip(kept, gathered):
        assert a["checks"][-1] == 0 and b["checks"][-1] > 0, (a["checks"], b["checks"])


def _changing_paths(prefetch, everyone, reuse=0):
    world, rank = zerolab.world_size(), zerolab.rank()
    model = Alternating()
    engine = zerolab.initialize(model, cfg(world, prefetch, stage3_max_reuse_distance=reuse))
    torch.manual_seed(rank)
    try:
        for step in range(6):
            model.take_extra = step % 2 == 0 if (everyone or rank == 0 or step < 3) else True
            x = torch.randn(2, 16)
            if step == 2:                                     # an eval forward between steps
                with torch.no_grad():
                    engine.eval()
                    engine(x)
                    engine.train()
            engine.backward(engine(x).square().mean())
            engine.step()
    except zerolab.ModuleOrderError as e:
        return str(e)
    out = engine.full_params()
    engine.close()
    return out


def test_paths_that_change_are_followed_without_a_hang():
    with zerolab.Crew(2, threads=1) as crew:
        off = crew.run(_changing_paths, 0, True)
        on = crew.run(_changing_paths, 50_000_000, True)
        reuse = crew.run(_changing_paths, 50_000_000, True, 10 ** 9)
    for a, b, c in zip(off, on, reuse):
        assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a)


def test_a_rank_that_leaves_the_trace_raises_on_every_rank():
    # steps 0-2 agree (the trace is recorded and followed); at step 3 rank 1 takes "extra", rank 0 not
    messages = zerolab.launch(_changing_paths, 2, 50_000_000, False, echo=False, timeout=60)
    for m in messages:
        assert isinstance(m, str) and "ranks ran different modules" in m, m


class Checkpointed(nn.Module):
    """Blocks recomputed in backward (torch.utils.checkpoint stops the recomputation early, by an
    exception inside torch, so some module forwards never return)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32)) for _ in range(4))

    def forward(self, x):
        for b in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
        return x


def _checkpointed(prefetch, reuse=0):
    world = zerolab.world_size()
    engine = zerolab.initialize(Checkpointed(), cfg(world, prefetch, stage3_max_reuse_distance=reuse))
    g = torch.Generator().manual_seed(0)
    seen = []
    for _ in range(3):
        x = torch.randn(2, 32, generator=g)
        out = engine(x)
        engine.backward(out.square().mean())
        engine.step()
        seen.append((len(engine.stage.params.hooks.frames), engine.stage.prefetches))
    # a weight used between forward and backward is still caught (the forward's end was seen)
    out = engine(torch.randn(2, 32, generator=g))
    try:
        _ = (out @ engine.module.blocks[0][0].weight).sum()
        caught = False
    except zerolab.ExternalParameterError:
        caught = True
    engine.backward(out.square().mean())
    engine.step()
    params = engine.full_params()
    engine.close()
    return seen, caught, params


def test_recomputed_blocks_leave_no_open_frames_and_still_prefetch():
    with zerolab.Crew(2, threads=1) as crew:
        on = crew.run(_checkpointed, 50_000_000)
        off = crew.run(_checkpointed, 0)
        kept = crew.run(_checkpointed, 50_000_000, 10 ** 9)   # the weight is still gathered: same error
    for (seen, caught, params), (_, caught_off, params_off), (_, caught_kept, params_kept) in zip(on, off, kept):
        assert all(frames == 0 for frames, _ in seen), seen
        assert seen[0][1] == 0 and seen[1][1] > 0 and seen[2][1] > seen[1][1], seen
        assert caught and caught_off and caught_kept
        assert all(torch.equal(params[k], params_off[k]) and torch.equal(params[k], params_kept[k]) for k in params)


def test_a_window_of_one_group_prefetches_asynchronously():
    # TinyLM's groups are at most 2,816 elements: a window of 3,000 holds one group at a time
    with zerolab.Crew(2, threads=1) as crew:
        one = crew.run(_tinylm, 3000)
        off = crew.run(_tinylm, 0)
    for a, b in zip(one, off):
        assert a["prefetches"] > 0
        assert a["checks"][-1] < b["checks"][-1]
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])


# -- stage3_max_reuse_distance -------------------------------------------------------------------
def _reuse(distance, prefetch, steps=4):
    """Six 64x64 Linear layers (biases persistent): per step, the elements all-gathered for
    parameters, the releases skipped, and the trained values; then an eval forward."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    engine = zerolab.initialize(model, {
        "train_batch_size": 4 * zerolab.world_size(), "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 64,
                              "stage3_max_reuse_distance": distance, "stage3_prefetch_bucket_size": prefetch}})
    torch.manual_seed(zerolab.rank())
    gathered = []
    pad = [g.padded_numel for g in engine.stage.groups]
    for _ in range(steps):
        x = torch.randn(4, 64)
        mark = engine.ledger.mark()
        engine.backward(engine(x).square().mean())
        engine.step()
        gathered.append(sum(r.numel for r in engine.ledger.since(mark).records
                            if r.op == "all_gather" and r.tag.startswith("params")))
    held_after_step = len(engine.stage.params.full)
    with torch.no_grad():
        engine(torch.randn(4, 64))
        engine(torch.randn(4, 64))                 # the second eval pass follows its trace: reuse applies
    out = {"gathered": gathered, "reused": engine.stage.params.reused, "params": engine.full_params(), "held_after_step": held_after_step,
           "held_after_eval": len(engine.stage.params.full), "peak": engine.memory()["peak_buffers"],
           "pad": pad}
    engine.close()
    return out


def test_reuse_distance_keeps_what_is_used_again_soon_and_changes_no_number():
    with zerolab.Crew(3, threads=1) as crew:
        runs = {(d, pf): crew.run(_reuse, d, pf) for d in (0, 5000, 10 ** 9) for pf in (0, 50_000_000)}
    for (d, pf), per_rank in runs.items():
        r = per_rank[0]
        # group 0: the biases (persistent, refreshed after each step); then one per weight (padded to 3)
        # one partition per parameter (DeepSpeed's): each weight padded to 3, each bias persistent
        layer, bias = r["pad"][0], r["pad"][1]
        weights, biases = 6 * layer, 6 * bias
        assert r["pad"] == [layer, bias] * 6 and layer == 4098
        # step 1 records the order: every module gathered for forward and again for backward
        assert r["gathered"][0] == 2 * weights + biases, (d, pf)
        # then, without prefetch: distance 0 gathers twice; 5000 keeps only the last layer (the
        # first of backward, 0 elements away; the fifth is 8,192 away); 10^9 keeps everything across
        # the turn. With prefetch, whatever the distance, the prefetcher has scanned every backward
        # use by the end of forward and nothing is released until then (DeepSpeed's
        # __most_recent_step_id_param_fetched_for). DeepSpeed 0.19.8 on this model at 2 ranks:
        # 49,536 and 24,960 elements per step from step 2 on, without prefetch, at 0 and 10^9.
        want = (weights if pf else {0: 2 * weights, 5000: 2 * weights - layer, 10 ** 9: weights}[d]) + biases
        assert r["gathered"][1:] == [want] * 3, (d, pf, r["gathered"])
        assert r["held_after_step"] == 6 and r["held_after_eval"] == 6     # only the persistent biases
        for other in per_rank:
            assert all(torch.equal(other["params"][k], r["params"][k]) for k in r["params"])
        base = runs[0, 0][0]["params"]
        assert all(torch.equal(base[k], r["params"][k]) for k in base), (d, pf)
    assert runs[0, 0][0]["reused"] == 0 and runs[10 ** 9, 0][0]["reused"] > 0
    # keeping costs memory: at the turn the whole model is gathered at once
    assert runs[10 ** 9, 0][0]["peak"] > runs[0, 0][0]["peak"]
