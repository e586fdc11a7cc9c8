"""zerolab.course.lab's extension mode, ZeRO++ part (zerolab/course/lab/zeropp.py): real stage-3 engines on crews
in virtual nodes, the ledger's bytes per link beside the simulator's formula, hpZ's secondary
shards beside 2Ψ/h; the widget's controls wired to the engine's keys (driven without a browser).

Each control is checked by what only it can change in the ledger: the layout moves bytes between
the links, hpZ sends the backward's gathers inside the node (tags "(hpZ)") and holds 2Ψ/h more,
qwZ turns the parameter gathers into int8 + fp32 scales, qgZ the gradients' reduce-scatter into
all-to-alls, the micro-steps repeat the step's calls (and with hpZ keep the later forwards inside).
"""
from __future__ import annotations

import html

import matplotlib
import pytest

matplotlib.use("Agg")

from zerolab import i18n  # noqa: E402
from zerolab.course import lab
from zerolab.course.lab import zeropp as Z  # noqa: E402

PSI = Z.LAYERS * (Z.WIDTH * Z.WIDTH + Z.WIDTH)          # 16,640: no padding at 2 or 4 ranks


@pytest.fixture(scope="module")
def pool():
    with lab.CrewPool() as p:
        yield p


def _ops(lk, rank=0):
    return [(phase, op, tag, dtype, link) for _, phase, op, tag, _, dtype, link, _ in lk.records[rank]]


def test_zeropp_off_on_two_nodes_crosses_the_street_with_everything(pool):
    lk = lab.links(4, 2, pool=pool)
    ring = 3 / 4 * 2 * PSI                                   # one rank's share of a bf16 ring over 4
    for r in range(4):
        k = lk.kinds(r)
        assert {kind: k[kind]["inter"] for kind in Z.KINDS} == dict.fromkeys(Z.KINDS, ring)
        assert all(k[kind]["intra"] == 0 for kind in Z.KINDS)
    assert lk.by_link(0) == {"intra": 0.0, "inter": 3 * ring} == {k: lk.formula[k] for k in Z.LINKS}
    assert lk.secondary == [0] * 4 and lk.params == [2 * PSI // 4] * 4
    assert {dtype for *_, dtype, _ in _ops(lk)} >= {"bfloat16"} and "all_to_all" not in {o for _, o, *_ in _ops(lk)}
    text = lk.describe()
    assert "4 ranks as 2 nodes of 2" in text and "ZeRO++ off" in text and "74,880" in text


def test_hpz_keeps_the_backward_inside_the_node_at_a_measured_memory_cost(pool):
    lk = lab.links(4, 2, hpz=2, pool=pool)
    k = lk.kinds(0)
    assert k["backward gathers"] == {"intra": 1 / 2 * 2 * PSI, "inter": 0.0}      # over the node's 2 ranks
    assert k["forward gathers"] == {"intra": 0.0, "inter": 3 / 4 * 2 * PSI}     # the step dropped the secondary
    assert all(tag.endswith("(hpZ)") for phase, op, tag, _, _ in _ops(lk) if phase == "backward" and op == "all_gather")
    assert lk.by_link(0) == {k_: lk.formula[k_] for k_ in Z.LINKS}
    assert lk.secondary == [2 * PSI // 2] * 4 == [lk.formula["secondary"]] * 4   # 2Ψ/h on every rank
    assert lk.params == [2 * PSI // 4 + 2 * PSI // 2] * 4 and lk.secondary_after_step == [0] * 4
    assert "hpZ 2" in lk.setting() and "secondary shards after the last backward: 16,640 B" in lk.describe()
    # one node: the same hpZ, nothing crosses
    one = lab.links(4, 1, hpz=2, pool=pool)
    assert one.by_link(0)["inter"] == 0 and one.by_link(0) == {k_: one.formula[k_] for k_ in Z.LINKS}


def test_micro_steps_with_hpz_gather_later_forwards_inside_the_node(pool):
    lk = lab.links(4, 2, hpz=2, accumulation=2, pool=pool)
    k = lk.kinds(0)
    assert k["forward gathers"] == {"intra": 1 / 2 * 2 * PSI, "inter": 3 / 4 * 2 * PSI}
    assert k["backward gathers"] == {"intra": 2 * (1 / 2 * 2 * PSI), "inter": 0.0}
    assert k["gradients"]["inter"] == 2 * 3 / 4 * 2 * PSI                       # reduced every micro-step
    assert lk.by_link(0) == {k_: lk.formula[k_] for k_ in Z.LINKS}
    assert {m for m, *_ in lk.records[0]} == {0, 1} and "2 micro-steps per step" in lk.setting()


def test_qwz_and_qgz_change_what_crosses(pool):
    qw = lab.links(4, 2, qwz=True, pool=pool)
    gathers = [(tag, dtype) for phase, op, tag, dtype, _ in _ops(qw) if op == "all_gather" and phase != "step"]
    assert {d for t, d in gathers if not t.endswith("scales")} == {"int8"}
    assert {d for t, d in gathers if t.endswith("scales")} == {"float32"}
    assert qw.kinds(0)["forward gathers"]["inter"] < 0.51 * 3 / 4 * 2 * PSI      # about half of bf16
    qg = lab.links(4, 2, qgz=True, pool=pool)
    grads = {(op, link) for _, op, tag, _, link in _ops(qg) if tag.startswith("grads")}
    # the quantized all-to-alls; a 1-D parameter (a bias: each parameter is its own partition) takes
    # DeepSpeed's fallback, a reduce-scatter
    assert {("all_to_all", "intra"), ("all_to_all", "inter")} <= grads <= {
        ("all_to_all", "intra"), ("all_to_all", "inter"), ("reduce_scatter", "inter")}
    assert qg.kinds(0)["gradients"]["inter"] < 0.2 * 3 / 4 * 2 * PSI             # int4, half of a node's share
    assert any("qgZ's gradients come out 2x the mean" in w for w in qg.warnings)
    for lk in (qw, qg):                                      # the formula counts fewer scales: within 3 %
        for link in Z.LINKS:
            assert lk.by_link(0)[link] == pytest.approx(lk.formula[link], rel=0.03)
    assert "the formula counts the scales per element" in qg.describe()


def test_bad_settings_are_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match="divisor of the world size"):
        lab.links(4, 2, hpz=3)
    with pytest.raises(ValueError, match="the lab's layouts"):
        lab.links(3, 1)
    assert lab.hpz_choices(4) == [1, 2, 4] and lab.hpz_choices(2) == [1, 2]
    cfg = lab.zeropp_config(4, 2, True, True, 2)["zero_optimization"]
    assert (cfg["zero_hpz_partition_size"], cfg["zero_quantized_weights"], cfg["zero_quantized_gradients"]) \
        == (2, True, True)


def test_draw_links(pool):
    import matplotlib.pyplot as plt
    fig = lab.draw_links(lab.links(4, 2, hpz=2, pool=pool))
    titles = " | ".join(ax.get_title() for ax in fig.axes)
    assert "bytes per link" in titles and "what hpZ costs in memory" in titles
    assert "hpZ 2" in fig._suptitle.get_text()
    plt.close(fig)


def test_the_widget_wires_each_control_to_its_key(pool):
    pytest.importorskip("ipywidgets")
    import base64
    box = lab.zeropp_widget(pool, world_size=4, nodes=2, max_ranks=4)
    layout, hpz, qwz, qgz, micro = box.children[0].children
    summary, image = box.children[-1], box.children[-2]
    data = box._repr_mimebundle_()                           # read without a kernel: the first state
    assert base64.b64decode(data["image/png"]) == image.value and "ZeRO++ off" in data["text/plain"]
    first = image.value
    hpz.value = 2
    text = html.unescape(summary.value)
    assert "hpZ 2" in text and "secondary shards after the last backward" in text and image.value != first
    qwz.value = True
    assert "hpZ 2 + qwZ" in html.unescape(summary.value)
    qgz.value = True
    assert "hpZ 2 + qwZ + qgZ" in html.unescape(summary.value)
    micro.value = 2
    assert "2 micro-steps per step" in html.unescape(summary.value)
    hpz.value = 4
    layout.value = (2, 2)                                    # hpZ 4 does not divide 2 ranks: back to off
    assert list(hpz.options) == [1, 2] and hpz.value == 1
    text = html.unescape(summary.value)
    assert "2 ranks as 2 nodes of 1" in text and "hpZ" not in text.split("\n")[0]
    assert lab.links(2, 2, 1, True, True, 2).describe() in text    # the cached run of the new setting


def test_the_summary_speaks_the_editions_language(pool):
    lk = lab.links(4, 2, hpz=2, pool=pool)
    with i18n.using("zh"):
        text = lk.describe()
    assert "节点内" in text and "跨节点" in text and "二级分片" in text and "16,640" in text
    assert "inside a node" not in text
