"""The simulator's two-link model, its ZeRO++ formulas and offload over PCIe (zerolab/tools/simulate.py):
each byte count against the formula written out by hand, the defaults unchanged, bad values refused."""
import math

import pytest

from zerolab.tools import simulate as S
from zerolab.tools.bench import Fit

PSI, LAYERS, HIDDEN = 7e9, 32, 4096


def sim(gpus, **kw):
    kw.setdefault("checkpointing", False)
    return S.simulate(PSI, LAYERS, HIDDEN, 4096, 1, gpus, kw.pop("stage", 3), **kw)


def test_one_node_is_the_single_link_model():
    """ranks_per_node = all the GPUs (or an inter_link equal to link): the numbers of the old model."""
    plain = sim(8, link="nvlink-h100")
    one = sim(8, link="nvlink-h100", ranks_per_node=8, inter_link="ethernet-100g")   # never used: one node
    assert (one.comm_s, one.wire_bytes, one.calls) == (plain.comm_s, plain.wire_bytes, plain.calls)
    assert plain.link_bytes == {"intra": plain.wire_bytes, "inter": 0.0}
    same = sim(16, link="nvlink-h100", ranks_per_node=8, inter_link="nvlink-h100")
    assert same.comm_s == pytest.approx(sim(16, link="nvlink-h100").comm_s)


def test_spanning_nodes_runs_at_the_slower_link():
    e = sim(16, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x")
    a, b = S.LINKS["ib-ndr-1x"][0], S.LINKS["ib-ndr-1x"][1]          # alpha 20 us > 10 us; 45 GB/s < 360
    wire = 3 * 2 * PSI * 15 / 16
    calls = 2 * LAYERS + math.ceil(PSI / 5e8)
    assert e.wire_bytes == pytest.approx(wire) and e.calls == calls
    assert e.comm_s == pytest.approx(calls * a + wire / b)
    assert e.link_bytes == pytest.approx({"intra": wire, "inter": wire})
    one_gpu_nodes = sim(16, link="nvlink-h100", ranks_per_node=1, inter_link="ib-ndr-1x")
    assert one_gpu_nodes.link_bytes["intra"] == 0.0                 # no NVLink hop when a node is one GPU
    for stage in (0, 1, 2):                                          # stages 0-2: every collective spans too
        z = sim(16, stage=stage, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x")
        assert z.comm_s == pytest.approx(z.calls * a + z.wire_bytes / b)


@pytest.mark.parametrize("qwz,hpz,qgz", [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)])
@pytest.mark.parametrize("gpus,k", [(16, 8), (64, 8), (12, 4)])
def test_zeropp_bytes_per_link_are_the_formulas(qwz, hpz, qgz, gpus, k):
    m, f = gpus // k, (gpus - 1) / gpus
    e = sim(gpus, link="nvlink-h100", ranks_per_node=k, inter_link="ib-ndr-1x", quantized_weights=bool(qwz),
            hpz_partition_size=k if hpz else 1, quantized_gradients=bool(qgz))
    gather = PSI * (1 + 4 / 8000) if qwz else 2 * PSI              # int8 + an fp32 scale per 8,000
    q = PSI * (0.5 + 4 / HIDDEN)                                    # 4 bits + an fp32 scale per `hidden`
    fwd = f * gather
    bwd_intra, bwd_inter = ((k - 1) / k * gather, 0.0) if hpz else (f * gather, f * gather)
    if qgz:
        g_intra, g_inter, g_wire = (k - 1) / k * q, (m - 1) / m * q, (k - 1) / k * q + (m - 1) / m * q / k
    else:
        g_intra = g_inter = g_wire = f * 2 * PSI
    assert e.link_bytes["inter"] == pytest.approx(fwd + bwd_inter + g_inter)
    assert e.link_bytes["intra"] == pytest.approx(fwd + bwd_intra + g_intra)
    assert e.wire_bytes == pytest.approx(fwd + bwd_intra + g_wire)
    if hpz:
        assert e.gpu_bytes["params"] == pytest.approx(2 * PSI / gpus + 2 * PSI / k)   # the secondary shard


def test_zeropp_cuts_cross_node_bytes_about_4x_as_the_paper_says():
    """ZeRO++ (Wang et al. 2023): 3M -> 0.75M across nodes (M = the model in fp16), with many nodes."""
    plain = sim(1024, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x")
    pp = sim(1024, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x", quantized_weights=True,
             hpz_partition_size=8, quantized_gradients=True)
    assert plain.link_bytes["inter"] / pp.link_bytes["inter"] == pytest.approx(4, rel=0.01)
    assert pp.comm_s < plain.comm_s / 3 and pp.hide_tokens < plain.hide_tokens / 3


def test_hpz_groups_larger_than_a_node_cross_nodes():
    two = sim(32, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x", hpz_partition_size=16)
    assert two.link_bytes["inter"] == pytest.approx(2 * PSI * (31 / 32 + 15 / 16 + 31 / 32))


def test_hide_tokens_is_where_compute_meets_communication():
    for kw in (S.CLUSTERS["dgx-h100"], S.CLUSTERS["h100-thin"]):
        t = sim(64, **kw).hide_tokens
        at = S.simulate(PSI, LAYERS, HIDDEN, 1, 1, 64, 3, checkpointing=False, **kw)
        e = S.simulate(PSI, LAYERS, HIDDEN, round(t), 1, 64, 3, checkpointing=False, **kw)
        assert e.compute_s == pytest.approx(e.comm_s, rel=1e-3) and at.hide_tokens == pytest.approx(t)
    # with alpha = 0 the bytes alone: T* = (N-1)/N * 6 * 2 Psi ... / 6 Psi = (N-1)/N F mfu / beta
    e = S.simulate(PSI, LAYERS, HIDDEN, 1, 1, 64, 3, checkpointing=False, gpu="h100-80gb", link=(0.0, 45e9))
    assert e.hide_tokens == pytest.approx(63 / 64 * 989e12 * 0.4 / 45e9)
    fit = Fit(2, "gloo", {"all_reduce": {"alpha_s": 0.0, "beta_Bps": 45e9}}, [])
    assert S.simulate(PSI, LAYERS, HIDDEN, 1, 1, 64, 3, checkpointing=False, gpu="h100-80gb",
                      link=fit).hide_tokens == pytest.approx(e.hide_tokens)


def test_offload_over_pcie():
    fast = (0.0, 1e30)                                    # a link that costs nothing: PCIe alone
    e = S.simulate(PSI, LAYERS, HIDDEN, 1, 1, 8, 3, checkpointing=False, link=fast, offload_optimizer=True,
                   pcie_Bps=S.PCIE5_BYTES_PER_S)
    assert e.transfer_s == pytest.approx((4 + 2) * PSI / 8 / 50e9)      # fp32 gradients down, 16-bit params up
    both = S.simulate(PSI, LAYERS, HIDDEN, 1, 1, 8, 3, checkpointing=False, link=fast, offload_optimizer=True,
                      offload_param=True, pcie_Bps=S.PCIE5_BYTES_PER_S)
    assert both.transfer_s == pytest.approx((4 + 2 + 2 + 2) * PSI / 8 / 50e9)
    assert both.hide_tokens == pytest.approx(10 * 312e12 * 0.4 / (6 * 8 * 50e9))


@pytest.mark.parametrize("kw,words", [
    (dict(stage=2, quantized_weights=True), "zero_quantized_weights needs stage 3"),
    (dict(stage=1, quantized_gradients=True), "zero_quantized_gradients needs stage 3"),
    (dict(ranks_per_node=6), "must divide gpus=16"),
    (dict(inter_link="ib-ndr-1x"), "inter_link needs ranks_per_node"),
    (dict(ranks_per_node=8, hpz_partition_size=3), "hpz_partition_size=3"),
    (dict(ranks_per_node=8, hpz_partition_size=12), "multiple of it"),
])
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(ValueError, match=words):
        sim(16, **kw)


def test_every_figure_names_its_source():
    named = set(S.GPUS) | set(S.LINKS)
    assert named <= set(S.SOURCES), named - set(S.SOURCES)
    for cluster in S.CLUSTERS.values():
        assert {cluster["gpu"], cluster["link"], cluster["inter_link"]} <= set(S.SOURCES)


def test_the_command_with_nodes_and_zeropp():
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "zerolab.cli", "simulate", "--params", "70e9", "--layers", "80",
                          "--hidden", "8192", "--gpus", "64", "--cluster", "h100-thin", "--zeropp"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "ib-ndr-1x between them" in run.stdout and "stage 3 + qwZ+hpZ 8+qgZ" in run.stdout
    e = S.simulate(70e9, 80, 8192, 2048, 1, 64, 3, **S.CLUSTERS["h100-thin"])
    assert f"stage 3: {e.link_bytes['inter'] / 1e9:,.1f} GB leave each node" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "zerolab.cli", "simulate", "--params", "7e9", "--layers", "32",
                          "--hidden", "4096", "--gpus", "12", "--ranks-per-node", "8", "--inter-link", "ib-ndr-1x"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "ranks_per_node=8 must divide gpus=12" in bad.stderr


# -- the formulas against the engine's ledger: 4 ranks as 2 nodes of 2 -----------------------------

SQ, SQ_LAYERS = 64, 4            # four Linear(64, 64): 4,160 elements each, no padding at 2 or 4 ranks
SQ_PSI = SQ_LAYERS * (SQ * SQ + SQ)


def _steady_step_links(runs: list) -> list:
    """On a rank: for each (ZeRO++ keys, micro-steps) a fresh stage-3 bf16 engine on four square
    layers (every layer sharded, gathered again for backward, no prefetch: the simulator's stage
    3), a first optimizer step, then the second step's parameter and gradient bytes by link
    (Ledger.by_link(); the small overflow/norm all-reduce left out, as the simulator does)."""
    import torch
    from torch import nn

    import zerolab
    out = []
    for zeropp, gas in runs:
        world, rank = zerolab.world_size(), zerolab.rank()
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(SQ, SQ) for _ in range(SQ_LAYERS)])
        eng = zerolab.initialize(model, {
            "train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * world * gas,
            "gradient_accumulation_steps": gas, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": 5000, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0, **zeropp}})
        g = torch.Generator().manual_seed(1)
        for step in range(2):
            if step == 1:
                mark = eng.ledger.mark()
            for _ in range(gas):
                x = torch.randn(2 * world, SQ, generator=g)[2 * rank:2 * rank + 2].to(torch.bfloat16)
                eng.backward(eng(x).float().square().mean())
                eng.step()
        recs = [r for r in eng.ledger.since(mark).records if r.tag.split(" ")[0] in ("params", "grads")]
        out.append({lk: sum(r.wire_bytes for r in recs if r.link == lk) for lk in ("intra", "inter")})
        eng.close()
    return out


def test_hpz_under_gradient_accumulation_counts_what_the_engine_sends():
    """With hpZ the secondary shard lives from a unit's first release to the optimizer step: of G
    micro-steps only the first forward gathers across nodes. The simulator's per-rank bytes by link
    equal the ledger's, byte for byte, with and without hpZ, for G = 1 and 2 (the old formula, every
    forward across nodes, would say 99,840 B across for hpZ at G = 2; the engine sends 74,880)."""
    import zerolab
    runs = [({}, 1), ({}, 2), ({"zero_hpz_partition_size": 2}, 1), ({"zero_hpz_partition_size": 2}, 2)]
    measured = zerolab.launch(_steady_step_links, 4, runs, backend="gloo", nodes=2, echo=False, timeout=120)[0]
    for (zeropp, gas), got in zip(runs, measured):
        e = S.simulate(SQ_PSI, SQ_LAYERS, SQ, 1, 1, 4, 3, grad_accum=gas, ranks_per_node=2, reduce_bucket_size=5000,
                       hpz_partition_size=zeropp.get("zero_hpz_partition_size", 1))
        assert got == pytest.approx(e.rank_link_bytes, abs=1e-6), (zeropp, gas, got, e.rank_link_bytes)
        assert got["inter"] == pytest.approx(e.link_bytes["inter"])      # a ring crosses each node once
        assert sum(got.values()) == pytest.approx(e.wire_bytes)
    f, ring = 3 / 4 * 2 * SQ_PSI, 1 / 2 * 2 * SQ_PSI                     # over 4 ranks; over a node's 2
    assert measured[3] == {"intra": 3 * ring, "inter": f + 2 * f}        # fwd 1 across, 1 + 2 bwd inside; grads


def test_the_per_rank_split_by_link_with_qgz_and_on_one_node():
    one = sim(8, link="nvlink-h100")                                     # one node: every byte inside
    assert one.rank_link_bytes == {"intra": one.wire_bytes, "inter": 0.0}
    e = sim(16, link="nvlink-h100", ranks_per_node=8, inter_link="ib-ndr-1x", quantized_gradients=True)
    q, f = PSI * (0.5 + 4 / HIDDEN), 15 / 16
    assert e.rank_link_bytes["intra"] == pytest.approx(7 / 8 * q)
    assert e.rank_link_bytes["inter"] == pytest.approx(2 * f * 2 * PSI + 1 / 2 * q / 8)
    assert e.link_bytes["inter"] == pytest.approx(2 * f * 2 * PSI + 8 * (1 / 2 * q / 8))   # a node's 8 ranks


def test_qgz_on_one_node_keeps_the_reduce_scatter_as_deepspeed_does():
    """DeepSpeed 0.19.8 (stage3.py, __avg_scatter_grads) takes qgZ's all-to-alls only with num_nodes > 1."""
    assert sim(8, ranks_per_node=8, quantized_gradients=True).wire_bytes == pytest.approx(sim(8).wire_bytes)
    assert sim(8, quantized_gradients=True).rank_link_bytes == pytest.approx(sim(8).rank_link_bytes)
