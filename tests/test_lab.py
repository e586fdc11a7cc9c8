"""zerolab.course.lab: the visual lab's data (real engines on 2 ranks), pictures and widgets.

The gathering functions are tested on their own: who holds what (read from the engine's
tensors, checked against engine.memory()), one step's ledger, timeline and memory samples,
what each collective moves, and the application mode's plan against the simulator and
DeepSpeed's estimators. Then the pictures are drawn and the widgets are driven without a
browser (tests/test_lab_browser.py does it in JupyterLab).
"""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from zerolab.tools import estimate  # noqa: E402
from zerolab.course import lab
from zerolab.tools import simulate
from zerolab.comm import wire_factor  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    with lab.CrewPool() as p:
        yield p


def _covers(ranges_by_rank, total):
    """The ranks' ranges are disjoint and together cover 0..total."""
    spans = sorted(s for ranges in ranges_by_rank for s in ranges)
    pos = 0
    for a, b in spans:
        if a != pos:
            return False
        pos = b
    return pos == total


# ----------------------------------------------------------------------------- basic

@pytest.mark.parametrize("stage, shares", [(0, ("all", "all", "all")), (1, ("all", "all", "1/2")),
                                           (2, ("all", "1/2", "1/2")), (3, ("1/2", "1/2", "1/2"))])
def test_holdings_say_which_giants_each_stage_splits(pool, stage, shares):
    h = lab.holdings(2, stage, "bf16", pool=pool)
    assert (h.world_size, h.stage, h.precision) == (2, stage, "bf16")
    assert tuple(h.share(g) for g in lab.GIANTS) == shares
    assert h.psi == sum(numel for _, numel, _ in h.groups)
    for giant, share in zip(lab.GIANTS, shares):
        held = [h.held[r][giant] for r in range(2)]
        if share == "all":
            assert all(_covers([ranges], h.padded_total) for ranges in held)
        else:
            assert _covers(held, h.padded_total)           # each element on exactly one rank
    for r in range(2):                                     # the ranges are what engine.memory() weighs
        assert h.bytes[r]["grads"] == 2 * h.elements(r, "grads")          # bf16 gradients
        frozen = 2                                                         # TinyLM's frozen temperature
        assert h.bytes[r]["params"] == 2 * h.elements(r, "params") + frozen
    assert "N = 2" in h.headline() and "Ψ = " in h.describe()


def test_holdings_fp32_and_fp16(pool):
    h32 = lab.holdings(2, 1, "fp32", pool=pool)
    assert h32.share("optimizer_states") == "1/2" and h32.share("grads") == "all"
    assert h32.bytes[0]["grads"] == 4 * h32.elements(0, "grads")
    h16 = lab.holdings(2, 2, "fp16", pool=pool)        # a first step that is not skipped
    assert h16.share("grads") == "1/2" and h16.bytes[0]["optimizer_states"] > 0
    with pytest.raises(ValueError, match="precision"):
        lab.lab_config(1, 2, "int8")


def test_draw_holdings(pool):
    import matplotlib.pyplot as plt
    fig = lab.draw_holdings(lab.holdings(2, 2, "bf16", pool=pool))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].endswith("whole on every rank") and titles[1].endswith("1/2")
    assert "stage 2, N = 2" in fig._suptitle.get_text()
    plt.close(fig)


# ----------------------------------------------------------------------------- core

def test_step_trace_stage3(pool):
    tr = lab.step_trace(2, 3, "bf16", pool=pool)
    calls = tr.calls
    assert [(c.op, c.tag, c.numel) for c in tr.collectives[1]] == [(c.op, c.tag, c.numel) for c in calls]
    ops = tr.totals()
    groups = lab.holdings(2, 3, "bf16", pool=pool).groups
    padded = sum(p for _, _, p in groups)
    # DeepSpeed's buckets: several modules' gradients per reduce-scatter, every group once
    assert ops["reduce_scatter"]["calls"] <= len(groups) and ops["reduce_scatter"]["numel"] == padded
    params = [c for c in calls if c.op == "all_gather" and c.tag.startswith("params")]
    assert sum(c.numel for c in params) >= 2 * padded        # gathered in forward and again in backward
    for c in calls:
        assert c.wire_bytes == pytest.approx(wire_factor(c.op, 2) * c.bytes)
        assert c.start is not None and c.end >= c.start       # every record has its timeline span
    for r in range(2):
        after = [s.after for s in tr.memory[r] if s.after is not None]
        assert after == list(range(len(calls)))               # a memory sample after every collective
        assert len(tr.memory[r]) == len(calls) + 4            # + start, after forward/backward/step
        assert [s.t for s in tr.memory[r]] == sorted(s.t for s in tr.memory[r])
    start = tr.memory[0][0]
    assert start.buffers == 0 and tr.peak().total > start.total      # gathered params, buckets in flight
    assert "collectives on each rank" in tr.describe()


def test_step_trace_stage2_is_deepspeeds_all_reduce_then_one_all_gather(pool):
    tr = lab.step_trace(2, 2, "bf16", pool=pool)
    ops = tr.totals()
    h = lab.holdings(2, 2, "bf16", pool=pool)
    assert ops["all_reduce"]["numel"] - 2 == h.psi               # every gradient (+ the norm's 2)
    assert ops["all_gather"]["numel"] == h.padded_total and ops["all_gather"]["calls"] == 1
    assert "reduce_scatter" not in ops


def test_step_trace_says_whose_pattern_and_offers_the_papers_ideal(pool):
    default = lab.step_trace(2, 2, "bf16", pool=pool)
    ideal = lab.step_trace(2, 2, "bf16", ideal=True, pool=pool)
    assert not default.ideal and ideal.ideal
    assert "DeepSpeed's default" in default.describe() and "3Ψ" in default.describe()
    assert "ideal_reduce_scatter" in ideal.describe() and "not DeepSpeed's" in ideal.describe()
    ops = ideal.totals()
    h = lab.holdings(2, 2, "bf16", pool=pool)
    assert ops["reduce_scatter"]["numel"] >= h.psi               # every gradient, each bucket padded to N
    assert ops["all_reduce"]["numel"] == 2                       # only the overflow flag and the norm
    assert ops["all_gather"]["numel"] == ops["reduce_scatter"]["numel"]
    wire_default, wire_ideal = (sum(c.wire_bytes for c in t.calls if c.numel > 2) for t in (default, ideal))
    assert wire_ideal == pytest.approx(2 / 3 * wire_default, rel=0.02)       # 2Ψ against 3Ψ
    assert "the paper's ideal" in " ".join(ax.get_title() for ax in lab.draw_step(ideal, 0).axes)
    assert lab.step_trace(2, 3, "bf16", ideal=True, pool=pool) is lab.step_trace(2, 3, "bf16", pool=pool)
    with pytest.raises(ValueError, match="stages 1 and 2"):
        lab.lab_config(3, 2, "bf16", ideal=True)


def test_step_trace_keeps_zerolabs_order_checks_apart(pool):
    tr = lab.step_trace(2, 3, "bf16", pool=pool)
    assert tr.checks and all(op == "all_gather" and nbytes == 16 * 2 for op, _, nbytes in tr.checks)   # 16 B a rank
    assert not any(c.tag.startswith("check") for c in tr.calls)     # never among ZeRO's collectives
    assert "zerolab's own" in tr.describe() and "DeepSpeed sends none" in tr.describe()
    assert "DeepSpeed's stage 3" in tr.describe()
    # stage 2: at most the one agreement on the gradient order (the second backward), 16 B a rank
    assert [nbytes for op, _, nbytes in lab.step_trace(2, 2, "bf16", pool=pool).checks] in ([], [16 * 2])


def test_moved():
    from zerolab.course.lab import Collective
    c = Collective(0, "all_gather", "params x", 12, 24, "bfloat16", 12.0, None, None)
    m = lab.moved(c, 3)
    assert (m["in_numel"], m["out_numel"]) == (4, 12)
    assert m["before"][1] == [None, "own", None] and m["after"][1] == [{"from": 0}, "own", {"from": 2}]
    m = lab.moved(Collective(0, "reduce_scatter", "grads", 12, 24, "bfloat16", 16.0, None, None), 3)
    assert (m["in_numel"], m["out_numel"]) == (12, 4)
    assert m["before"][2] == ["own"] * 3 and m["after"][2] == [None, None, "sum"]
    m = lab.moved(Collective(0, "all_reduce", "g", 6, 24, "float32", 16.0, None, None), 2)
    assert m["after"] == [["sum", "sum"]] * 2
    m = lab.moved(Collective(0, "broadcast", "b", 6, 24, "float32", 24.0, None, None), 2)
    assert m["after"][1] == [{"from": 0}] * 2
    with pytest.raises(ValueError):
        lab.moved(Collective(0, "send", "s", 6, 24, "float32", 24.0, None, None), 2)


def test_draw_step(pool):
    import matplotlib.pyplot as plt
    tr = lab.step_trace(2, 3, "bf16", pool=pool)
    k = next(c.index for c in tr.calls if c.op == "reduce_scatter")
    fig = lab.draw_step(tr, k)
    titles = " | ".join(ax.get_title() for ax in fig.axes)
    assert f"collective {k + 1} of {len(tr.calls)}" in titles and "reduce_scatter" in titles
    plt.close(fig)


# ----------------------------------------------------------------------------- application

def test_plan_is_the_simulator_and_the_estimator():
    p = lab.plan("Llama-2 7B", 8, "a100-80gb", link="nvlink-a100")
    params, layers, hidden, vocab = lab.MODELS["Llama-2 7B"]
    sim = simulate.table(params, layers, hidden, 2048, 1, 8, gpu="a100-80gb", link="nvlink-a100",
                         host_bytes=1024e9)
    assert [r.name for r in p.rows][:4] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    for row, est in zip(p.rows, sim):
        assert row.gpu_bytes == est.gpu_bytes and row.step_s == est.step_s and row.fits == est.fits
    assert not p.rows[0].fits and p.rows[3].fits                    # 16 Ψ = 108 GB > 80 GB
    assert p.rows[2].deepspeed_gpu_bytes == estimate.estimate_zero2_model_states_mem_needs(
        params, 8, 1, cpu_offload=False)[1]
    assert p.rows[3].deepspeed_gpu_bytes == estimate.estimate_zero3_model_states_mem_needs(
        params, vocab * hidden, 8, 1, cpu_offload=False, cpu_offload_params=False)[1]
    assert p.rows[0].deepspeed_gpu_bytes is None
    assert p.best() is not None and p.best().fits
    assert "fastest that fits" in p.describe()


def test_plan_memory_override_and_nothing_fits():
    small = lab.plan("Llama-2 70B", 8, "a100-80gb", gpu_memory_gb=16)
    assert small.gpu_memory == 16e9
    assert small.host_memory == 1024e9                           # one node of 8 GPUs
    assert all(r.fits == (r.gpu_bytes["total"] <= 16e9 and r.cpu_bytes * 8 <= 1024e9) for r in small.rows)
    assert not any(r.fits for r in small.rows)                  # 70B: 1,104 GB offloaded > 1,024 GB of host
    assert lab.plan("Llama-2 70B", 8, "a100-80gb", gpu_memory_gb=16, host_memory_gb=2048).best().offload
    huge = lab.plan("GPT-3 (175B)", 1, "a100-40gb", gpu_memory_gb=16)     # 16 Ψ = 2.8 TB > 1 TB of host
    assert huge.best() is None and "nothing fits" in huge.describe()
    assert lab.plan("GPT-3 (175B)", 1, "a100-40gb", host_memory_gb=4096).best().offload == "optimizer+params"


def test_draw_plan():
    import matplotlib.pyplot as plt
    fig = lab.draw_plan(lab.plan())
    assert "fastest that fits" in fig.axes[1].get_title()
    plt.close(fig)


# ----------------------------------------------------------------------------- extension

def test_placement_cpu_offload_moves_the_optimizer_to_the_host(pool):
    p = lab.placement(2, 2, "cpu", pool=pool)
    on_device = lab.placement(2, 2, "none", pool=pool)
    shard = sum(on_device.sub_groups[0])                       # the optimizer steps this rank's shard
    for r in range(2):
        dev, host, nvme = (p.places[r][w] for w in lab.PLACES)
        assert dev["optimizer_states"] == 0 and dev["grads"] == 0
        tiles = p.tiles[r]                                     # Adam's 4-byte step counter per tile
        assert host["optimizer_states"] == (4 + 8) * shard + 4 * tiles     # fp32 master + two moments
        assert host["grads"] == 4 * shard                      # the fp32 gradient shard
        assert nvme["model_states"] == 0
        # the same bytes the device held without offload (the counters: one per group there)
        assert on_device.places[r]["device"]["optimizer_states"] - 4 * on_device.tiles[r] \
            == host["optimizer_states"] - 4 * tiles
    kinds = {k for k, _, _, _ in p.events[0]}
    assert "host" in kinds and "io" not in kinds and p.io[0] == {}
    assert p.split(0)["host"] > 0 and p.split(0)["io"] == 0
    assert "in host memory" in p.switches["optimizer states"]
    assert "optimizer states in host memory" in p.describe() and "NVMe during" not in p.describe()


def test_placement_nvme_streams_sub_groups_and_cleans_up(pool):
    import os
    p = lab.placement(2, 3, "nvme", "nvme", sub_group_size=1000, pipeline_read=True, pipeline_write=True,
                      pool=pool)
    shard = sum(p.sub_groups[0])
    assert len(p.sub_groups[0]) > 1 and max(p.sub_groups[0]) <= 1000
    for r in range(2):
        dev, host, nvme = (p.places[r][w] for w in lab.PLACES)
        # nothing: stage 3 partitions the frozen temperature too, and offloads its shard with the others
        assert dev["params"] == 0 and dev["optimizer_states"] == 0
        # the trained shard and the frozen temperature's 1-element shard, in fp16
        assert nvme["optimizer_states"] == (4 + 8) * shard and nvme["params"] == 2 * (shard + 1)
        assert host["optimizer_states"] == 0 and host["grads"] == 4 * shard
        opt = p.io[r]["optimizer"]                             # every state in and out once per step
        assert opt["bytes_read"] == opt["bytes_written"] == (4 + 8) * shard
        assert opt["reads"] == opt["writes"] > 0
        par = p.io[r]["params"]                                # each gather reads its shard
        assert par["reads"] >= len(p.gathers[r]) and par["bytes_written"] == 2 * shard
    names = [name for k, name, _, _ in p.events[0] if k == "io"]
    assert any(".param." in n for n in names) and any(".master." in n for n in names)
    hosts = [e for e in p.events[0] if e[0] == "host"]
    assert len(hosts) == len(p.sub_groups[0])                  # one host event per sub-group
    assert p.split(0)["io"] > 0
    assert p.nvme_dir is not None and not os.path.exists(p.nvme_dir)   # the temporary folder is gone
    assert "NVMe during the step, parameter shards" in p.describe()


def test_placement_stage3_gathers_and_refusals(pool):
    p = lab.placement(2, 3, "none", pool=pool)
    tr = lab.step_trace(2, 3, "bf16", pool=pool)
    params = [c for c in tr.calls if c.op == "all_gather" and c.tag.startswith("params")]
    assert [(t, n) for t, n, _, _ in p.gathers[0]] == [(c.tag, c.numel) for c in params]
    assert all(s is not None and e >= s for _, _, s, e in p.gathers[0])
    assert ("none prefetched" in " ".join(p.describe().split())) == (p.prefetched[0] == 0)
    assert all(p.places[r][w]["model_states"] == 0 for r in range(2) for w in ("host", "nvme"))
    assert max(b for _, _, b in p.memory[0]) > 0 == p.memory[0][-1][2]       # gathered, then released
    assert p.nvme_dir is None and len(p.sub_groups[0]) == 1 and p.tiles[0] == len(lab.holdings(2, 3, "bf16", pool=pool).groups)
    with pytest.raises(ValueError, match="stage 3"):
        lab.placement(2, 2, "cpu", "cpu", pool=pool)
    with pytest.raises(ValueError, match="offload_optimizer"):
        lab.placement(2, 2, "disk", pool=pool)
    with pytest.raises(ValueError, match="stage 1, 2 or 3"):
        lab.offload_config(0, 2, "cpu")


def test_draw_placement(pool):
    import matplotlib.pyplot as plt
    p = lab.placement(2, 3, "nvme", "nvme", sub_group_size=1000, pipeline_read=True, pipeline_write=True,
                      pool=pool)
    fig = lab.draw_placement(p)
    titles = " | ".join(ax.get_title() for ax in fig.axes)
    assert "what each rank holds where" in titles and "NVMe" in titles
    assert "parameter shards on NVMe" in fig._suptitle.get_text()
    plt.close(fig)


# ----------------------------------------------------------------------------- widgets, without a browser

def _static_view(box):
    """What a notebook stores for the widget besides its live view: (png bytes, text)."""
    import base64
    data = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data          # live in JupyterLab, as before
    return base64.b64decode(data["image/png"]), data["text/plain"]


def test_widgets_respond_to_their_controls(pool):
    W = pytest.importorskip("ipywidgets")
    import html as html_mod
    box = lab.basic_widget(pool, world_size=2, stage=2, max_ranks=2)
    controls = box.children[0].children
    summary = box.children[-1]
    before, image = summary.value, box.children[2].value
    png, text = _static_view(box)              # read without a kernel: the first state, not "VBox(...)"
    assert png == image and text in html_mod.unescape(before) and "stage 2, N = 2" in text
    assert "stage 2, N = 2" in before and image[:4] == b"\x89PNG"
    controls[1].value = 3                                     # the stage dropdown
    assert "stage 3, N = 2" in summary.value and box.children[2].value != image

    core = lab.core_widget(pool, world_size=2, stage=2, max_ranks=2)
    slider, line = core.children[1].children[1], core.children[2]
    png, static_text = _static_view(core)
    assert png == core.children[3].value and "DeepSpeed's default" in static_text
    assert isinstance(slider, W.IntSlider) and slider.max == len(lab.step_trace(2, 2, "bf16").calls) - 1
    first = line.value
    slider.value = slider.max
    assert line.value != first and "all_gather" in line.value        # the step ends gathering params
    import html
    summary = core.children[-1]
    ideal = core.children[0].children[3]                      # the paper's ideal, zerolab's switch
    assert isinstance(ideal, W.Checkbox) and not ideal.disabled
    assert "DeepSpeed's default" in html.unescape(summary.value)
    ideal.value = True
    assert "ideal_reduce_scatter" in summary.value and "reduce_scatter " in summary.value
    core.children[0].children[1].value = 3                    # stage 3: more collectives
    assert slider.max == len(lab.step_trace(2, 3, "bf16").calls) - 1
    assert ideal.disabled and "DeepSpeed's stage 3" in html.unescape(summary.value)

    app = lab.application_widget()
    gpus, text = app.children[0].children[1], app.children[-1]
    first = text.value
    png, static_text = _static_view(app)
    assert png[:4] == b"\x89PNG" and "Llama-2 7B on 8 x" in static_text
    gpus.value = 64
    assert text.value != first and "on 64 x" in text.value

    ext = lab.extension_widget(pool, world_size=2, stage=3, offload_optimizer="none", max_ranks=2)
    n, stage, opt, par = ext.children[0].children
    sub, read, write = ext.children[1].children
    text, image = ext.children[-1], ext.children[-2].value
    assert "optimizer states on the device" in text.value and read.disabled
    png, static_text = _static_view(ext)
    assert png == image and "optimizer states on the device" in static_text
    opt.value = "cpu"
    assert "optimizer states in host memory" in text.value and ext.children[-2].value != image
    par.value = "cpu"
    assert "parameter shards in host memory" in text.value
    stage.value = 2                                           # parameters are offloaded only at stage 3
    assert par.value == "none" and par.disabled and "stage 2, N = 2" in text.value


# ----------------------------------------------------------------------------- the edition's language

def test_every_modes_summary_speaks_the_editions_language(pool):
    """The printed summaries (issue 26: the lab in the edition's language): Chinese in a zh kernel,
    the same numbers; English unchanged elsewhere."""
    import re

    from zerolab import i18n
    runs = [lab.holdings(2, 2, "bf16", pool=pool), lab.step_trace(2, 3, "bf16", pool=pool),
            lab.plan("Llama-2 70B", gpus=64, gpu="a100-80gb", link="ib-hdr"), lab.placement(2, 3, "cpu", pool=pool)]
    english = [r.describe() for r in runs]
    with i18n.using("zh"):
        chinese = [r.describe() for r in runs]
        line = runs[1].calls[0].describe(2)
    words = [("每个 rank 保管", "模型状态"), ("次集合通信", "次调用", "最多持有"), ("装得下的配置中最快的", "瓶颈", "通信"),
             ("优化器状态在主机内存里", "位置", "主机", "优化器更新在主机上")]
    for en, zh, must in zip(english, chinese, words):
        assert all(w in zh for w in must), (must, zh)
        number = r"\d+(?:,\d{3})*(?:\.\d+)?"
        assert sorted(re.findall(number, en)) == sorted(re.findall(number, zh))      # the same numbers
        for heading in ("bound by", "bytes after the step", "collectives on each rank", "held at most", "of the grad"):
            assert heading not in zh, (heading, zh)
    assert "个元素" in line and "每个 rank 放入" in line
    assert english == [r.describe() for r in runs]                      # back to English outside the block
