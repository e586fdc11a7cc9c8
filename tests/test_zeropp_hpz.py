"""hpZ (zero_hpz_partition_size, ZeRO++'s secondary partition) in stage 3, with DeepSpeed 0.19.8's
semantics (zerolab/zeropp/hpz.py has them, file by file; benchmarks/ds_reference/ds_hpz.py measured them).

What is asserted, at 4 ranks as 2 nodes of 2 with hpZ 2 (and 6 ranks as 3 nodes of 2):

* hpZ moves the same values (a secondary shard is a copy of the gathered parameter), so losses
  and parameters are bit-identical to the run without it, which itself matches single-process
  training (zerolab.zero.reference) within rtol 1e-5, atol 1e-5 (tests/test_engine_parity.py's claim).
* The ledger, call by call: the first step's forward gathers inside the node (the secondary shards
  made at initialization), every later step's forward over all 4 ranks, every backward inside the
  node; with gradient accumulation, the forward of the second micro-step inside the node too.
  Bytes per link per step: forward (N-1)/N x padded x 2 B across nodes, backward (h-1)/h x padded x
  2 B inside the node and no parameter byte across nodes.
* Memory: after backward each rank holds padded/h elements per gathered unit more, in the model's
  dtype; after the step none (DeepSpeed drops them in _post_step). With offload_param cpu they are
  in host memory.
* qwZ together: the backward's gathers are int8 + fp32 scales inside the node, and the losses
  stay within qwZ's tolerance of the exact run.
* Refusals and warnings: h not dividing the ranks, offload_param nvme, groups spanning nodes.
"""
import warnings

import pytest
import torch
from torch import nn

import zerolab
from zerolab.zeropp import quant
from zerolab.config import load_config
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zeropp.hpz import hpz_group_size
from zerolab.zero.reference import micro_batches, train_engine, train_reference
from zerolab.crew.topology import Topology

from zeropp_gpt import gpt, gpt_batches, gpt_config

WIDTH, LAYERS = 64, 4


def stack():
    """Four Linear(64, 64): one gathered unit each (4,160 elements, a multiple of 4 and of 8)."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def stack_config(world, gas=1, dtype="bf16", **zero):
    c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas, "train_batch_size": 2 * gas * world,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
         # nothing persistent, no prefetch, no reuse: one all-gather per unit, forward and backward
         "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                               "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0, **zero}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


def _params(records):
    """The parameter all-gathers of a slice of the ledger: (world, link, dtype, elements)."""
    return [(r.world_size, r.link, r.dtype, r.numel) for r in records
            if r.op == "all_gather" and r.tag.startswith("params")]


def _phases_rank(zero, steps, gas=1, dtype="bf16"):
    """Train the stack; for each micro-step, the forward's and the backward's parameter gathers,
    the device memory after backward and after the step."""
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    eng = zerolab.initialize(stack(), stack_config(world, gas, dtype, **zero))
    led = eng.comm.ledger
    g = torch.Generator().manual_seed(1)
    out = {"micro": [], "init_mem": eng.memory(), "host_init": eng.memory("host")}
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    for _ in range(steps):
        for _ in range(gas):
            x = torch.randn(2 * world, WIDTH, generator=g)[2 * rank:2 * rank + 2].to(dt)
            m = led.mark()
            loss = eng(x).float().pow(2).mean()
            fwd = led.since(m)
            m = led.mark()
            eng.backward(loss)
            bwd = led.since(m)
            after_bwd = eng.memory()
            host_bwd = eng.memory("host")
            eng.step()
            out["micro"].append(dict(fwd=_params(fwd.records), bwd=_params(bwd.records), loss=float(loss),
                                     fwd_links=_link_bytes(fwd), bwd_links=_link_bytes(bwd),
                                     mem_bwd=after_bwd, host_bwd=host_bwd, mem_step=eng.memory()))
    # one unit per Linear: its weight and bias, each its own partition (DeepSpeed's), gathered together
    padded = [g.padded_numel for g in eng.stage.groups]
    out["padded"] = [w + b for w, b in zip(padded[0::2], padded[1::2])]
    out["params"] = eng.full_params()
    return out


def _link_bytes(led):
    """Wire bytes of the parameter all-gathers by link."""
    out = {"intra": 0.0, "inter": 0.0}
    for r in led.records:
        if r.op == "all_gather" and r.tag.startswith("params"):
            out[r.link] += r.wire_bytes
    return out


def _two_runs(zero_a, zero_b, steps, gas=1, dtype="bf16"):
    return _phases_rank(zero_a, steps, gas, dtype), _phases_rank(zero_b, steps, gas, dtype)


@pytest.mark.timeout(150)
def test_ledger_per_phase_and_link_at_2x2():
    """One call per unit: forward over all 4 ranks (after the first step), backward inside the
    node; bytes per link are the formula's; the secondary shards' bytes in memory."""
    res = zerolab.launch(_two_runs, 4, {}, {"zero_hpz_partition_size": 2}, 3, backend="gloo", nodes=2,
                         timeout=140)
    for rank, (exact, hpz) in enumerate(res):
        pad = exact["padded"]
        assert pad == [4160] * LAYERS
        all4 = [(4, "inter", "bfloat16", n) for n in pad]
        node = [(2, "intra", "bfloat16", n) for n in pad]
        for i, (e, h) in enumerate(zip(exact["micro"], hpz["micro"])):
            assert e["fwd"] == all4 and e["bwd"] == all4[::-1]
            assert h["fwd"] == (node if i == 0 else all4), (rank, i, h["fwd"])   # step 1: init's secondaries
            assert h["bwd"] == node[::-1], (rank, i, h["bwd"])
            assert h["loss"] == e["loss"]
            # bytes per link: (N-1)/N of the padded unit in bf16 forward, (h-1)/h backward, inside the node
            fwd = sum(3 / 4 * n * 2 for n in pad)
            bwd = sum(1 / 2 * n * 2 for n in pad)
            assert e["fwd_links"] == {"intra": 0.0, "inter": fwd} and e["bwd_links"] == {"intra": 0.0, "inter": fwd}
            assert h["bwd_links"] == {"intra": bwd, "inter": 0.0}
            assert h["fwd_links"] == ({"intra": bwd, "inter": 0.0} if i == 0 else {"intra": 0.0, "inter": fwd})
            # memory: padded/h elements per unit in bf16 after backward, none after the step
            sec = sum(n // 2 * 2 for n in pad)
            assert h["mem_bwd"]["params_secondary"] == sec and "params_secondary" not in e["mem_bwd"]
            assert h["mem_bwd"]["params"] == e["mem_bwd"]["params"] + sec
            assert h["mem_step"]["params_secondary"] == 0 and h["mem_step"]["params"] == e["mem_step"]["params"]
        assert hpz["init_mem"]["params_secondary"] == sum(n // 2 * 2 for n in pad)   # made at initialization
        assert all(torch.equal(exact["params"][k], hpz["params"][k]) for k in exact["params"])


@pytest.mark.timeout(150)
def test_accumulation_offload_param_cpu_and_the_groups_larger_than_a_node():
    """gas 2: the second micro-step's forward reuses the secondary (DeepSpeed drops it only at the
    step); offload_param cpu: the secondary shards live in host memory; hpZ 4 on 2 nodes of 2
    spans the nodes (a warning; the backward crosses nodes, as DeepSpeed's would)."""
    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            off = _phases_rank({"offload_param": {"device": "cpu"}}, 2, gas=2)
            on = _phases_rank({"offload_param": {"device": "cpu"}, "zero_hpz_partition_size": 2}, 2, gas=2)
            wide = _phases_rank({"zero_hpz_partition_size": 4}, 2)
        return off, on, wide, [str(w.message) for w in caught if "zero_hpz_partition_size" in str(w.message)]

    res = zerolab.launch(run, 4, backend="gloo", nodes=2, timeout=140)
    off, on, wide, caught = res[0]
    pad = off["padded"]
    all4 = [(4, "inter", "bfloat16", n) for n in pad]
    node = [(2, "intra", "bfloat16", n) for n in pad]
    fwd = [m["fwd"] for m in on["micro"]]
    assert fwd == [node, node, all4, node]                  # step 1 (init's), its micro-step 2, step 2, its 2nd
    assert all(m["bwd"] == node[::-1] for m in on["micro"])
    assert [m["loss"] for m in on["micro"]] == [m["loss"] for m in off["micro"]]
    assert all(torch.equal(off["params"][k], on["params"][k]) for k in off["params"])
    sec = sum(n // 2 * 2 for n in pad)
    for m in on["micro"]:
        assert m["host_bwd"]["params_secondary"] == sec and m["mem_bwd"]["params_secondary"] == 0
    # hpZ 4: one group of all 4 ranks, across the nodes: gathers as without hpZ, one more shard each
    assert all(m["bwd"] == all4[::-1] for m in wide["micro"])
    assert wide["micro"][0]["mem_bwd"]["params_secondary"] == sum(n // 4 * 2 for n in pad)
    assert len(caught) == 1 and "span nodes" in caught[0] and "ranks per node (2)" in caught[0], caught


def _parity_rank(steps):
    """TinyLM (tied weights, a frozen parameter, sizes that do not divide by the ranks), fp32,
    stage 3, gas 2, clipping: exact, hpZ 2, hpZ 2 with prefetch and reuse, hpZ 1 and 0, and the
    single-process reference."""
    world = zerolab.world_size()
    out = {}
    variants = {"exact": {}, "hpz": {"zero_hpz_partition_size": 2},
                "hpz_prefetch": {"zero_hpz_partition_size": 2, "stage3_max_reuse_distance": 0,
                                 "stage3_prefetch_bucket_size": 200},
                "prefetch": {"stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 200},
                "one": {"zero_hpz_partition_size": 1}, "zero": {"zero_hpz_partition_size": 0}}
    for name, zero in variants.items():
        cfg = tinylm_config(world, **zero)
        batches = lm_batches(steps, cfg["train_batch_size"], seed=3)
        if name == "exact":
            out["ref"] = train_reference(TinyLM(), cfg, batches, lm_loss)
        eng = zerolab.initialize(TinyLM(), cfg)
        losses = train_engine(eng, batches, lm_loss)
        recs = eng.comm.ledger.records
        out[name] = dict(losses=losses, params=eng.full_params(),
                         calls=[(r.op, r.dtype, r.numel, r.world_size, r.tag) for r in recs],
                         links={lk: sum(r.wire_bytes for r in recs if r.link == lk and r.op == "all_gather"
                                        and r.tag.startswith("params")) for lk in ("intra", "inter")})
    return out


def tinylm_config(world, **zero):
    """tests/test_engine_parity.py's stage-3 case: gas 2, clipping, AdamW (eps 1e-6: see there)."""
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_batch_size": 4 * world,
            "gradient_clipping": 0.05,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": 700, "stage3_param_persistence_threshold": 30,
                                  **zero}}


def max_rel_diff(a, b, atol=1e-5):
    """max |a - b| / (1 + |b|) over every element: below 1e-5 means within rtol 1e-5, atol 1e-5."""
    return max(float(((a[k] - b[k]).abs() / (atol / 1e-5 + b[k].abs())).max()) for k in a)


def differing(a, b):
    """Names whose tensors are not bit-for-bit equal."""
    return [k for k in a if not (a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]))]


def _check_parity(results):
    for rank, r in enumerate(results):
        for name, base in (("hpz", "exact"), ("hpz_prefetch", "prefetch")):
            assert r[name]["losses"] == r[base]["losses"], (rank, name)
            assert not differing(r[name]["params"], r[base]["params"]), (rank, name)   # bit-identical
            assert r[name]["links"]["intra"] > 0 and r[name]["links"]["inter"] < r[base]["links"]["inter"]
        diff = max_rel_diff(r["hpz"]["params"], r["ref"])
        assert diff < 1e-5, f"rank {rank}: hpZ against one process: {diff:.3g}"
        for name in ("one", "zero"):                # off: today's run, call by call and bit by bit
            assert r[name]["calls"] == r["exact"]["calls"] and r[name]["losses"] == r["exact"]["losses"]
            assert not differing(r[name]["params"], r["exact"]["params"])


@pytest.mark.timeout(200)
def test_parity_with_exact_and_single_process_2x2():
    _check_parity(zerolab.launch(_parity_rank, 4, 3, backend="gloo", nodes=2, timeout=190))


@pytest.mark.timeout(300)
def test_parity_with_exact_and_single_process_3_nodes_of_2():
    _check_parity(zerolab.launch(_parity_rank, 6, 2, backend="gloo", nodes=3, timeout=290))


def _qwz_rank(steps):
    """The GPT of tests/test_zeropp_engine.py (tests/zeropp_gpt.py, bf16): exact, qwZ, qwZ + hpZ 2,
    with reuse 0 and prefetch off so that backward gathers again (DeepSpeed's prefetch would keep what
    it scanned); the ledger of the last steps' backward gathers."""
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    bs = gpt_batches(steps, 2 * world)
    out = {}
    for name, zero in (("exact", {}), ("qwz", {"zero_quantized_weights": True}),
                       ("both", {"zero_quantized_weights": True, "zero_hpz_partition_size": 2})):
        eng = zerolab.initialize(gpt(), gpt_config(world, stage3_max_reuse_distance=0, stage3_prefetch_bucket_size=0,
                                                   **zero))
        losses, bwd = [], []
        for x, y in bs:
            for xm, ym in micro_batches((x, y), rank, world, 1):
                loss = lm_loss(eng(xm), ym)
                m = eng.comm.ledger.mark()
                eng.backward(loss)
                bwd = [(r.world_size, r.link, r.dtype, r.numel) for r in eng.comm.ledger.since(m).records
                       if r.op == "all_gather" and r.tag.startswith("params")]
                eng.step()
                losses.append(float(loss))
        out[name] = dict(losses=losses, bwd=bwd,
                         units={g.label: g.padded_numel for g, keep in zip(eng.stage.groups, eng.stage.params.persistent)
                                if not keep})
    return out


@pytest.mark.timeout(200)
def test_hpz_with_qwz_quantizes_the_backward_gathers_inside_the_node():
    r = zerolab.launch(_qwz_rank, 4, 12, backend="gloo", nodes=2, timeout=190)[0]
    ex, qw, both = r["exact"], r["qwz"], r["both"]
    assert both["bwd"] and all(link == "intra" and w == 2 for w, link, _, _ in both["bwd"])
    assert [d for _, _, d, _ in both["bwd"]] == ["int8", "float32"] * (len(both["bwd"]) // 2)
    # each gather: the int8 values of 2 secondary shards, then their fp32 scales, by DeepSpeed's block rule
    # applied to a secondary shard (a prefetch batch quantizes the concatenation of its shards)
    for (_, _, dv, v), (_, _, ds, s) in zip(both["bwd"][0::2], both["bwd"][1::2]):
        assert dv == "int8" and ds == "float32" and s == 2 * quant.qwz_groups(v // 2), both["bwd"]
    # every unit once, and the embedding tied to the head once more: released after the head's backward
    # with reuse distance 0, gathered again for its own (DeepSpeed's release after each module's backward)
    assert sum(v for _, _, d, v in both["bwd"] if d == "int8") == sum(both["units"].values()) + both["units"]["tok.weight"]
    assert all(link == "inter" for _, link, _, _ in qw["bwd"])
    for a, b in zip(ex["losses"], both["losses"]):
        assert abs(a - b) <= 0.01, (ex["losses"], both["losses"])    # qwZ's tolerance (test_zeropp_engine)
    # the secondary is copied from the dequantized forward gather and quantized again for backward (as
    # in DeepSpeed), and the first forward gathers init's secondaries in blocks over 2 ranks: not qwZ's run
    assert both["losses"] != ex["losses"] and both["losses"] != qw["losses"]


def _checkpoint_rank(ckpt):
    """hpZ 2: two steps, save mid-step (after a backward: the secondaries alive), load into a fresh
    engine, two more steps; against four steps without a checkpoint."""
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    cfg = stack_config(world, zero_hpz_partition_size=2)
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(2 * world, WIDTH, generator=g)[2 * rank:2 * rank + 2].bfloat16() for _ in range(4)]

    def step(e, x):
        e.backward(e(x).float().pow(2).mean())
        e.step()
    whole = zerolab.initialize(stack(), cfg)
    for x in xs:
        step(whole, x)
    first = zerolab.initialize(stack(), cfg)
    for x in xs[:2]:
        step(first, x)
    first.backward(first(xs[0]).float().pow(2).mean())      # a backward whose step never comes
    alive = first.memory()["params_secondary"]
    first.save_checkpoint(ckpt, tag="t")
    dropped = first.memory()["params_secondary"]
    saved = sorted(torch.load(f"{ckpt}/t/rank_{rank}.pt", weights_only=False))
    second = zerolab.initialize(stack(), cfg)
    second.load_checkpoint(ckpt, tag="t")
    after_load = second.memory()["params_secondary"]
    m = second.comm.ledger.mark()
    for x in xs[2:]:
        step(second, x)
    fwd_world = [r.world_size for r in second.comm.ledger.since(m).records
                 if r.op == "all_gather" and r.tag.startswith("params")][:LAYERS]
    return dict(alive=alive, dropped=dropped, after_load=after_load, saved=saved, fwd_world=fwd_world,
                same=all(torch.equal(a, b) for a, b in zip(whole.full_params().values(),
                                                           second.full_params().values())))


@pytest.mark.timeout(120)
def test_checkpoint_drops_the_secondary_and_does_not_save_it(tmp_path):
    for r in zerolab.launch(_checkpoint_rank, 4, str(tmp_path / "ckpt"), backend="gloo", nodes=2, timeout=110):
        assert r["alive"] == LAYERS * 4160 // 2 * 2 and r["dropped"] == 0 and r["after_load"] == 0, r
        assert r["saved"] == ["masters", "optimizer_states", "rank"]        # no secondary in the files
        assert r["fwd_world"] == [4] * LAYERS                  # after a load the forward gathers over all
        assert r["same"]


def _refusal_rank(zero, model=stack):
    world = zerolab.world_size()
    try:
        zerolab.initialize(model(), stack_config(world, **zero))
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.timeout(60)
def test_refusals_name_the_fix():
    msgs = zerolab.launch(_refusal_rank, 3, {"zero_hpz_partition_size": 2}, backend="gloo", timeout=50)
    assert all(m and "does not divide the 3 ranks" in m and "Fix: a divisor of 3 (1, 3)" in m
               and "_ensure_divisibility" in m for m in msgs), msgs
    msgs = zerolab.launch(_refusal_rank, 2, {"zero_hpz_partition_size": 2, "offload_param": {
        "device": "nvme", "nvme_path": "/tmp/zerolab-hpz-never"}}, backend="gloo", timeout=50)
    assert all(m and "offload_param on nvme" in m and "Fix:" in m for m in msgs), msgs


def test_config():
    c = load_config({"train_batch_size": 2, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}, 2)
    assert c.zero.zero_hpz_partition_size == 8 and not c.ignored_settings()
    assert "hpZ (zero_hpz_partition_size 8)" in c.describe()
    assert load_config({"train_batch_size": 2, "zero_optimization": {"stage": 3}}, 2).zero.zero_hpz_partition_size == 1
    for stage in (0, 1, 2):
        c = load_config({"train_batch_size": 2, "zero_optimization": {"stage": stage, "zero_hpz_partition_size": 2}}, 2)
        assert "stage 3 only" in dict(c.ignored_settings())["zero_optimization.zero_hpz_partition_size"]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(Exception, match="zero_hpz_partition_size"):
            load_config({"train_batch_size": 2, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": bad}}, 2)


def test_group_size_rules():
    """DeepSpeed's rules (utils/groups.py): 0 and 1 off, min(h, N), h must divide N; zerolab's
    warnings where the groups would not do what hpZ is for."""
    two_by_two = Topology(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hpz_group_size(2, 4, two_by_two) == 2                 # one node each: no warning
        assert hpz_group_size(0, 4, two_by_two) == hpz_group_size(1, 4, two_by_two) == 1
        assert hpz_group_size(2, 1) == 1                             # one rank: nothing to gather
        assert hpz_group_size(1, 4, offload="nvme") == 1             # off: nothing refused
    with pytest.warns(UserWarning, match=r"min\(8, 4\) = 4"):
        assert hpz_group_size(8, 4, two_by_two) == 4
    with pytest.warns(UserWarning, match="span nodes"):
        assert hpz_group_size(4, 4, two_by_two) == 4
    with pytest.warns(UserWarning, match="span nodes"):
        assert hpz_group_size(3, 6, Topology(6, 2)) == 3            # (0,1,2): nodes 0 and 1
    with pytest.raises(ValueError, match=r"does not divide the 6 ranks.*Fix: a divisor of 6 \(1, 2, 3, 6\)"):
        hpz_group_size(4, 6, Topology(6, 2))
    with pytest.raises(ValueError, match="offload_param on nvme"):
        hpz_group_size(2, 4, two_by_two, offload="nvme")
