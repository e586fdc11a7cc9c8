"""The lab's extension mode, ZeRO++: the crew in two buildings, bytes per link and hpZ's memory.

DeepSpeed 0.19.8's ZeRO++ keys at stage 3 (``zero_hpz_partition_size``, ``zero_quantized_weights``,
``zero_quantized_gradients``; the engine's files: ``hpz.py``, ``gather.py``, ``reduce.py``) on a
crew whose ranks sit in virtual nodes (``zerolab.Crew(4, nodes=2)``). Each setting runs a fresh
engine on the ranks: a first optimizer step (it records the fetch order and drops the secondary
shards made at initialization, as DeepSpeed's ``_post_step`` does), then a second one whose
collectives are read from the ledger, each filed by phase (forward, backward, step) and by link
(``"intra"``: the call's ranks share a node; ``"inter"``: they span nodes, as
``Ledger.by_link()`` files them). Beside them, the formula: :func:`zerolab.tools.simulate.simulate`'s
``rank_link_bytes`` for the same Ψ, layers, ranks, nodes and keys, and hpZ's 2Ψ/h of secondary
shards, read from ``engine.memory()`` after the step's last backward.

The model is four square layers (``Linear(64, 64)``: 4,160 elements each): the simulator's shape
(every layer gathered in forward and again in backward), and shards that DeepSpeed's qwZ
quantizer can cut into blocks of a multiple of 8 at 2 and 4 ranks (the lab's TinyLM, whose
sizes do not divide, cannot run qwZ).
"""
from __future__ import annotations

import dataclasses

from .common import F, T, image_layout, RANK_COLORS, CrewPool, _run, _plt, _png, _html, _wrap, lab_box, pad as _pad
from ... import i18n

WIDTH, LAYERS = 64, 4                  # four Linear(WIDTH, WIDTH): the simulator's square layers
ZPP_MICRO_BATCH = 2                    # rows per rank per micro-step
ZPP_BUCKET = 5_000                     # reduce_bucket_size: one layer's gradient per bucket
LAYOUTS = ((2, 1), (2, 2), (4, 1), (4, 2), (4, 4))     # (ranks, nodes)
KINDS = (T.mark("forward gathers"), T.mark("backward gathers"), T.mark("gradients"))
LINKS = ("intra", "inter")


def layout_name(world_size: int, nodes: int, tr=T) -> str:
    """"4 ranks as 2 nodes of 2" (``tr``: :data:`T` for printed text, ``F`` for a figure's)."""
    if nodes == 1:
        return tr("{n} ranks on one node", n=world_size)
    return tr("{n} ranks as {m} nodes of {k}", n=world_size, m=nodes, k=world_size // nodes)


def hpz_choices(world_size: int) -> list[int]:
    """``zero_hpz_partition_size`` values DeepSpeed accepts on ``world_size`` ranks: 1 (off) and
    the divisors of the world size (its groups of h consecutive ranks must tile the world)."""
    return [1] + [h for h in range(2, world_size + 1) if world_size % h == 0]


def zeropp_model():
    """Four ``Linear(64, 64)``, the same weights on every rank (seed 0)."""
    import torch
    from torch import nn
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def zeropp_config(world_size: int, hpz: int = 1, qwz: bool = False, qgz: bool = False,
                  accumulation: int = 1) -> dict:
    """Stage 3 in bf16, every layer sharded (persistence threshold 0), gathered again for backward
    (reuse distance 0), no prefetch, and DeepSpeed's ZeRO++ keys: ``hpz`` is
    ``zero_hpz_partition_size``, ``qwz`` ``zero_quantized_weights``, ``qgz``
    ``zero_quantized_gradients``; ``accumulation`` micro-steps per optimizer step."""
    if hpz not in hpz_choices(world_size):
        raise ValueError(f"zero_hpz_partition_size={hpz} on {world_size} ranks: DeepSpeed needs 1 (off) or a "
                         f"divisor of the world size ({', '.join(map(str, hpz_choices(world_size)[1:]))})")
    if accumulation < 1:
        raise ValueError(f"accumulation must be at least 1 micro-step, not {accumulation}")
    return {"train_micro_batch_size_per_gpu": ZPP_MICRO_BATCH,
            "train_batch_size": ZPP_MICRO_BATCH * world_size * accumulation,
            "gradient_accumulation_steps": accumulation, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": ZPP_BUCKET,
                                  "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0,
                                  "stage3_max_reuse_distance": 0, "zero_hpz_partition_size": hpz,
                                  "zero_quantized_weights": bool(qwz), "zero_quantized_gradients": bool(qgz)}}


def _links_on_rank(cfg: dict, accumulation: int) -> dict:
    """On a rank: a fresh engine, two optimizer steps of ``accumulation`` micro-steps; the second
    step's ledger records, each with its micro-step and phase, and the memory after its last backward."""
    import warnings

    import torch

    from ... import initialize, rank_info
    info = rank_info()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = initialize(zeropp_model(), cfg)
    try:
        g = torch.Generator().manual_seed(1)
        ledger, phases = engine.ledger, []
        for _ in range(2):
            mark = ledger.mark()
            for micro in range(accumulation):
                x = torch.randn(ZPP_MICRO_BATCH * info.world_size, WIDTH, generator=g)
                x = x[info.rank * ZPP_MICRO_BATCH:(info.rank + 1) * ZPP_MICRO_BATCH].to(torch.bfloat16)
                out = engine(x)
                phases.append((micro, "forward", len(ledger.since(mark).records)))
                engine.backward(out.float().square().mean())
                phases.append((micro, "backward", len(ledger.since(mark).records)))
                memory = engine.memory()
                engine.step()
                phases.append((micro, "step", len(ledger.since(mark).records)))
        records, start, second = [], 0, ledger.since(mark).records
        for micro, phase, end in phases[-3 * accumulation:]:        # the second step's phases
            records += [(micro, phase, r.op, r.tag, r.numel, r.dtype, r.link, r.wire_bytes) for r in second[start:end]]
            start = end
        return {"records": records, "secondary": memory.get("params_secondary", 0), "params": memory["params"],
                "secondary_after_step": engine.memory().get("params_secondary", 0),
                "psi": sum(gr.numel for gr in engine.stage.groups),
                "warnings": sorted({str(w.message) for w in caught})}
    finally:
        engine.close()


@dataclasses.dataclass
class Links:
    """One stage-3 step with ZeRO++ keys on a crew in nodes: every rank's collectives of the second
    optimizer step (``records[r]``: ``(micro, phase, op, tag, numel, dtype, link, wire_bytes)``),
    hpZ's secondary shards after the step's last backward (``secondary[r]``, bytes) and after the
    step, the parameters' bytes then (``params[r]``: primary shard + secondary), the engine's
    warnings, and the simulator's formula for the same setting (``formula``: bytes per link of one
    rank, and ``"secondary"``)."""
    world_size: int
    nodes: int
    hpz: int
    qwz: bool
    qgz: bool
    accumulation: int
    psi: int
    records: list
    secondary: list
    secondary_after_step: list
    params: list
    warnings: list
    formula: dict

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nodes

    def kinds(self, rank: int = 0) -> dict[str, dict[str, float]]:
        """Bytes ``rank`` sent in the step, per kind (:data:`KINDS`, and "other": the overflow check
        and gradient norm) and per link."""
        out = {k: {lk: 0.0 for lk in LINKS} for k in (*KINDS, "other")}
        for _, phase, _, tag, _, _, link, wire in self.records[rank]:
            head = tag.split(" ")[0]
            kind = ("gradients" if head == "grads" else f"{phase} gathers" if head == "params" and
                    phase in ("forward", "backward") else "other")
            out[kind][link] += wire
        return out

    def by_link(self, rank: int = 0) -> dict[str, float]:
        """Bytes of the parameter gathers and the gradients per link: what the simulator counts."""
        k = self.kinds(rank)
        return {lk: sum(k[kind][lk] for kind in KINDS) for lk in LINKS}

    def setting(self, tr=T) -> str:
        """The setting in one line (``tr``: :data:`T` for printed text, ``F`` for a figure's)."""
        on = [f"hpZ {self.hpz}"] if self.hpz > 1 else []
        on += ["qwZ"] * self.qwz + ["qgZ"] * self.qgz
        steps = (tr("one micro-step per step") if self.accumulation == 1 else
                 tr("{g} micro-steps per step", g=self.accumulation))
        return tr("stage 3, {layout}, bf16, {keys}, {steps}", layout=layout_name(self.world_size, self.nodes, tr),
                  keys=" + ".join(on) or tr("ZeRO++ off"), steps=steps)

    def describe(self) -> str:
        k, total = self.kinds(0), self.by_link(0)
        cols = (T("inside a node"), T("across nodes"))
        rows = [(T(kind), k[kind]["intra"], k[kind]["inter"]) for kind in KINDS]
        rows += [(T("total"), total["intra"], total["inter"]),
                 (T("formula (the simulator)"), self.formula["intra"], self.formula["inter"])]
        lines = [self.setting(),
                 T("Ψ = {psi:,} (four Linear(64, 64)); bytes rank 0 sent in the second step, from the ledger:",
                   psi=self.psi),
                 "  " + _pad("", 28) + "".join(_pad(c, 15, right=True) for c in cols)]
        lines += ["  " + _pad(name, 28) + f"{a:>15,.0f}{b:>15,.0f}" for name, a, b in rows]
        other = sum(k["other"].values())
        lines.append(T("  not in the formula: the gradient norm's all-reduce, {b:,.0f} B", b=other))
        if self.qwz or self.qgz:
            lines.append(T("  the formula counts the scales per element (qwZ: 4 B per 8,000, qgZ: 4 B per {w}); "
                           "DeepSpeed cuts each shard into whole blocks, so the measured scales are a few more",
                           w=WIDTH))
        if self.hpz > 1:
            lines.append(T("hpZ's secondary shards after the last backward: {b:,} B per rank = 2 B x {psi:,} / {h} "
                           "(formula 2Ψ/h: {f:,.0f} B); after the step: {a:,} B", b=self.secondary[0],
                           psi=self.psi, h=self.hpz, f=self.formula["secondary"], a=self.secondary_after_step[0]))
        else:
            lines.append(T("no secondary shards (hpZ off): the parameters take {b:,} B per rank, the 1/N shard",
                           b=self.params[0]))
        for w in self.warnings:
            lines.append(T("the engine warned: {w}", w=w))
        return _wrap(lines)


_LINKS_CACHE: dict = {}


def links(world_size: int = 4, nodes: int = 2, hpz: int = 1, qwz: bool = False, qgz: bool = False,
          accumulation: int = 1, *, pool: CrewPool | None = None) -> Links:
    """Run the four square layers at stage 3 with these ZeRO++ keys on ``world_size`` ranks as
    ``nodes`` virtual nodes: two optimizer steps of ``accumulation`` micro-steps, the second one
    read from every rank's ledger, and the simulator's formula beside it. Cached per setting."""
    if (world_size, nodes) not in LAYOUTS:
        raise ValueError(f"{world_size} ranks as {nodes} nodes: the lab's layouts are "
                         + ", ".join(f"{n} as {m}" for n, m in LAYOUTS))
    key = (world_size, nodes, int(hpz), bool(qwz), bool(qgz), int(accumulation))
    if key in _LINKS_CACHE:
        return _LINKS_CACHE[key]
    from ...tools.simulate import simulate
    cfg = zeropp_config(world_size, hpz, qwz, qgz, accumulation)      # refuses a bad setting first
    per_rank = _run(world_size, _links_on_rank, cfg, accumulation, pool=pool, nodes=nodes)
    first = per_rank[0]
    est = simulate(first["psi"], LAYERS, WIDTH, 1, 1, world_size, 3, grad_accum=accumulation,
                   ranks_per_node=world_size // nodes, reduce_bucket_size=ZPP_BUCKET, quantized_weights=bool(qwz),
                   hpz_partition_size=hpz, quantized_gradients=bool(qgz))
    formula = {**est.rank_link_bytes, "secondary": 2 * first["psi"] / hpz if hpz > 1 else 0.0}
    result = Links(world_size, nodes, int(hpz), bool(qwz), bool(qgz), int(accumulation), first["psi"],
                   [r["records"] for r in per_rank], [r["secondary"] for r in per_rank],
                   [r["secondary_after_step"] for r in per_rank], [r["params"] for r in per_rank],
                   first["warnings"], formula)
    _LINKS_CACHE[key] = result
    return result


# ============================================================================= picture

_KIND_COLOURS = {"forward gathers": "#4c72b0", "backward gathers": "#55a868", "gradients": "#dd8452"}


def draw_links(lk: Links):
    """Left: the bytes rank 0 sent in the step, inside a node and across nodes, stacked by kind,
    with the formula's total marked. Right: the parameters' bytes on every rank after the last
    backward: the 1/N shard, and hpZ's secondary shard on top."""
    plt = _plt()
    fig, (ax_l, ax_m) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.3, 1]})
    k = lk.kinds(0)
    for x, link in enumerate(LINKS):
        bottom = 0.0
        for kind in KINDS:
            v = k[kind][link]
            ax_l.bar(x, v, 0.55, bottom=bottom, color=_KIND_COLOURS[kind], label=F(kind) if x == 0 else None)
            bottom += v
        ax_l.text(x, bottom, f"{bottom:,.0f} B", ha="center", va="bottom", fontsize=8)
        ax_l.plot([x - 0.36, x + 0.36], [lk.formula[link]] * 2, color="black", linewidth=1.5,
                  linestyle="--", label=F("formula (the simulator)") if x == 0 else None)
    top = max([*(sum(k[kind][lnk] for kind in KINDS) for lnk in LINKS), *(lk.formula[lnk] for lnk in LINKS), 1.0])
    ax_l.set_ylim(0, top * 1.35)
    ax_l.set_xticks(range(len(LINKS)), [F("inside a node"), F("across nodes")])
    ax_l.set_ylabel(F("bytes rank 0 sent in one step (ledger)"), fontsize=8)
    ax_l.set_title(F("bytes per link"), fontsize=10)
    ax_l.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)
    ranks = range(lk.world_size)
    primary = [p - s for p, s in zip(lk.params, lk.secondary)]
    ax_m.bar(ranks, primary, color="#4c72b0", label=F("1/N shard"))
    ax_m.bar(ranks, lk.secondary, bottom=primary, color="#c44e52", label=F("hpZ's secondary shard"))
    for r in ranks:
        ax_m.text(r, lk.params[r], f"{lk.params[r]:,}", ha="center", va="bottom", fontsize=8)
        ax_m.axvspan(r - 0.5, r + 0.5, color=RANK_COLORS[(r // lk.ranks_per_node) % 8], alpha=0.06, lw=0)
    ax_m.set_xticks(list(ranks), [F("rank {r}\nnode {m}", r=r, m=r // lk.ranks_per_node) for r in ranks], fontsize=8)
    ax_m.set_ylim(0, max(lk.params) * 1.3)
    ax_m.set_ylabel(F("parameter bytes after the last backward"), fontsize=8)
    ax_m.set_title(F("what hpZ costs in memory"), fontsize=10)
    ax_m.legend(fontsize=7, loc="upper left", frameon=False)
    fig.suptitle(lk.setting(F), fontsize=10)
    fig.tight_layout()
    return fig


# ============================================================================= widget

def zeropp_widget(pool: CrewPool | None = None, world_size: int = 4, nodes: int = 2, hpz: int = 1,
                  qwz: bool = False, qgz: bool = False, accumulation: int = 1, max_ranks: int = 4):
    """Controls the node layout, ``zero_hpz_partition_size``, ``zero_quantized_weights``,
    ``zero_quantized_gradients`` and the micro-steps per step over :func:`links` (a real engine
    per choice)."""
    import ipywidgets as W
    layouts = [(layout_name(n, m), (n, m)) for n, m in LAYOUTS if n <= max_ranks]
    lay = W.Dropdown(options=layouts, value=(world_size, nodes), description=T("ranks"))
    h = W.Dropdown(options=hpz_choices(world_size), value=hpz, description="hpZ")
    qw = W.Checkbox(value=qwz, description="qwZ", indent=False)
    qg = W.Checkbox(value=qgz, description="qgZ", indent=False)
    acc = W.Dropdown(options=[1, 2], value=accumulation, description=T("micro-steps"))
    for w in (lay, h, acc):
        w.style.description_width = "initial"
    # wide enough for the longest layout's name ("4 ranks as 2 nodes of 2"): the default 300 px
    # (label included) cut it; about 0.6 em per column, a column per Latin character, two per CJK one
    cols = max(i18n.width(name) for name, _ in layouts) + i18n.width(T("ranks"))
    lay.layout.width = f"{0.6 * cols + 5:.1f}em"
    image = W.Image(format="png", layout=image_layout())
    summary = W.HTML()
    status = W.HTML()
    busy = {"on": False}
    first = {}

    def update(*_):
        if busy["on"]:
            return
        busy["on"] = True
        try:
            n = lay.value[0]
            if list(h.options) != hpz_choices(n):          # hpZ's sizes divide the world
                keep = h.value if h.value in hpz_choices(n) else 1
                h.options = hpz_choices(n)
                h.value = keep
        finally:
            busy["on"] = False
        status.value = "<i>" + T("running the engine on the ranks ...") + "</i>"
        lk = links(*lay.value, h.value, qw.value, qg.value, acc.value, pool=pool)
        image.value = _png(draw_links(lk))
        summary.value = _html(lk.describe())
        first.setdefault("text", lk.describe())
        status.value = ""

    for w in (lay, h, qw, qg, acc):
        w.observe(update, names="value")
    update()
    return lab_box([W.HBox([lay, h, qw, qg, acc]), status, image, summary], png=image.value,
                   text=first["text"], css_class="zerolab-lab-zeropp")
