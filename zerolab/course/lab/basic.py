"""The lab's basic mode: who holds which shard of each giant, read from a real engine's tensors."""
from __future__ import annotations

import dataclasses

from .common import (F, T, join_and, image_layout, GIANTS, GIANT_NAMES, RANK_COLORS, CrewPool, _run, lab_model,
                     lab_config, _batches, _plt, _png, _html, _wrap, _run_controls, lab_box, pad)


def _held_tensors(engine) -> dict[str, list]:
    """For each flat group of the engine's stage, the tensor this rank keeps of each giant
    (None: nothing). Read-only: where the stage's switches keep them (``params.py``,
    ``gather.py``, ``reduce.py``)."""
    st = engine.stage
    ps = st.params
    out = {g: [] for g in GIANTS}
    for g, master in zip(st.groups, st.masters):
        if st.stage < 3:                                  # stages 0-2: the whole flat buffer
            p = ps.param_flats[g.index]
        else:                                             # stage 3: a shard, or all of a persistent group
            p = ps.full[g.index] if ps.persistent[g.index] else ps.shards[g.index]
        grad = st.grad_shards[g.index] if st.stage >= 2 else st.grad_flats[g.index]
        out["params"].append(p)
        out["grads"].append(grad)
        out["optimizer_states"].append(master)            # masters and Adam's moments cover the same range
    return out

def _range_of(g, numel: int, rank: int) -> tuple[int, int] | None:
    """Which elements of group ``g``'s flat numbering a tensor of ``numel`` elements on ``rank`` covers."""
    if numel == 0:
        return None
    if numel == g.padded_numel:
        return (0, g.padded_numel)
    if numel == g.shard_numel:
        return g.shard_range(rank)
    raise ValueError(f"{g.label}: a tensor of {numel} elements is neither the group ({g.padded_numel}) "
                     f"nor a shard ({g.shard_numel})")


# ============================================================================= basic: who holds what

@dataclasses.dataclass
class Holdings:
    """Who holds which part of each giant, measured on a real engine after one step.

    ``groups``: ``(label, numel, padded_numel)`` of each flat group, in the engine's order; a
    giant's elements are numbered group after group (``offsets``). ``held[r][giant]``: the
    ``(start, end)`` element ranges rank r keeps, in that numbering. ``bytes[r]``: what
    ``engine.memory()`` measured on rank r (params, grads, optimizer_states, model_states ...)."""
    world_size: int
    stage: int
    precision: str
    psi: int
    groups: list
    held: list
    bytes: list

    @property
    def offsets(self) -> list[int]:
        out = [0]
        for _, _, padded in self.groups[:-1]:
            out.append(out[-1] + padded)
        return out

    @property
    def padded_total(self) -> int:
        return sum(padded for _, _, padded in self.groups)

    def elements(self, rank: int, giant: str) -> int:
        return sum(b - a for a, b in self.held[rank][giant])

    def share(self, giant: str) -> str:
        """"all" when every rank holds the whole giant, "1/N" when the ranks split it."""
        counts = [self.elements(r, giant) for r in range(self.world_size)]
        if all(c == self.padded_total for c in counts):
            return "all"
        if sum(counts) == self.padded_total and len(set(counts)) == 1:
            return f"1/{self.world_size}"
        return "mixed"

    def headline(self, tr=T) -> str:
        """Who keeps what, in one line (``tr``: :data:`T` for printed text, ``F`` for a figure's)."""
        n = self.world_size
        split = [tr(GIANT_NAMES[g].split(" (")[0]) for g in GIANTS if self.share(g) != "all"]
        whole = [tr(GIANT_NAMES[g].split(" (")[0]) for g in GIANTS if self.share(g) == "all"]
        if n == 1 or not split:
            return tr("stage {stage}, N = {n}: every rank holds all three giants", stage=self.stage, n=n)
        text = tr("stage {stage}, N = {n}: each rank keeps 1/{n} of the {giants}", stage=self.stage, n=n,
                  giants=join_and(split, tr))
        return text + (tr("; all of the {giant}", giant=whole[0]) if whole else "")

    def describe(self) -> str:
        def share(g):
            s = self.share(g)
            return "" if s == "mixed" else T("all") if s == "all" else s
        heads = [pad(T(h), w, right=True) for h, w in (("rank", 4), (T.mark("params"), 15),
                                                       (T.mark("grads"), 15), (T.mark("optimizer states"), 17),
                                                       (T.mark("model states"), 13))]
        lines = [self.headline(), T("({precision}, Ψ = {psi:,}; bytes measured by engine.memory() on each rank)",
                                    precision=self.precision, psi=self.psi), "  ".join(heads)]
        for r in range(self.world_size):
            b = self.bytes[r]
            cells = [f"{b[g]:>9,} B {pad(share(g), 3, right=True)}" for g in GIANTS]
            lines.append(f"{r:>4}  {pad(cells[0], 15, True)}  {pad(cells[1], 15, True)}  {pad(cells[2], 17, True)}"
                         f"  {b['model_states']:>11,} B")
        return _wrap(lines)

def _holdings_on_rank(stage: int, precision: str) -> dict:
    from ... import initialize, rank_info
    from ...models import lm_loss
    from ...zero.reference import train_engine
    info = rank_info()
    engine = initialize(lab_model(), lab_config(stage, info.world_size, precision))
    train_engine(engine, _batches(1, info.world_size), lm_loss)     # one step: Adam's states exist
    st = engine.stage
    held = {}
    for giant, tensors in _held_tensors(engine).items():
        ranges, offset = [], 0
        for g, t in zip(st.groups, tensors):
            span = _range_of(g, 0 if t is None else t.numel(), info.rank)
            if span is not None:
                ranges.append((offset + span[0], offset + span[1]))
            offset += g.padded_numel
        held[giant] = ranges
    out = {"groups": [(g.label, g.numel, g.padded_numel) for g in st.groups], "held": held,
           "bytes": engine.memory(), "psi": sum(g.numel for g in st.groups),
           "skipped": engine.skipped_steps}
    engine.close()
    return out

_HOLDINGS_CACHE: dict = {}

def holdings(world_size: int, stage: int, precision: str = "bf16", *, pool: CrewPool | None = None) -> Holdings:
    """Run the lab's model for one step at ``stage`` on ``world_size`` real ranks and return who
    holds what (cached: the engine is deterministic)."""
    key = (world_size, stage, precision)
    if key not in _HOLDINGS_CACHE:
        per_rank = _run(world_size, _holdings_on_rank, stage, precision, pool=pool)
        if any(r["skipped"] for r in per_rank):
            raise RuntimeError("the lab's step was skipped (fp16 overflow): no optimizer states to show")
        first = per_rank[0]
        _HOLDINGS_CACHE[key] = Holdings(world_size, stage, precision, first["psi"], first["groups"],
                                        [r["held"] for r in per_rank], [r["bytes"] for r in per_rank])
    return _HOLDINGS_CACHE[key]


# ============================================================================= core: one step played back

def draw_holdings(h: Holdings):
    """Three panels (parameters, gradients, optimizer states), one row per rank: the element
    ranges the rank keeps, coloured by rank, over every flat group laid end to end."""
    plt = _plt()
    n = h.world_size
    fig, axes = plt.subplots(1, 3, figsize=(11, 1.2 + 0.45 * n), sharey=True)
    total = h.padded_total
    for ax, giant in zip(axes, GIANTS):
        for r in range(n):
            ax.broken_barh([(0, total)], (r - 0.38, 0.76), color="#eeeeee")
            ax.broken_barh([(a, b - a) for a, b in h.held[r][giant]], (r - 0.38, 0.76),
                           color=RANK_COLORS[r % len(RANK_COLORS)])
            ax.text(total * 1.02, r, f"{h.bytes[r][giant]:,} B", va="center", fontsize=8)
        for off in h.offsets[1:]:
            ax.axvline(off, color="white", linewidth=1.2)
        share = h.share(giant)
        ax.set_title(F("{giant}: {share}", giant=F(GIANT_NAMES[giant].split(" (")[0]),
                       share=F("whole on every rank") if share == "all" else share), fontsize=10)
        ax.set_xlim(0, total * 1.3)
        ax.set_xticks([0, total])
        ax.set_xlabel(F("elements ({n} flat groups)", n=len(h.groups)), fontsize=8)
    axes[0].set_yticks(range(n), [f"rank {r}" for r in range(n)])
    axes[0].invert_yaxis()
    fig.suptitle(h.headline(F) + F(" ({precision}; bytes measured by engine.memory())", precision=h.precision),
                 fontsize=10)
    fig.tight_layout()
    return fig

def basic_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 2, precision: str = "bf16",
                 max_ranks: int = 4):
    """Controls N, stage and precision over :func:`holdings` (a real engine per choice)."""
    import ipywidgets as W
    n, st, pr = _run_controls(world_size, stage, precision, max_ranks)
    image = W.Image(format="png", layout=image_layout())
    summary = W.HTML()
    status = W.HTML()
    first = {}

    def update(*_):
        status.value = "<i>" + T("running the engine on the ranks ...") + "</i>"
        h = holdings(n.value, st.value, pr.value, pool=pool)
        image.value = _png(draw_holdings(h))
        summary.value = _html(h.describe())
        first.setdefault("text", h.describe())
        status.value = ""

    for w in (n, st, pr):
        w.observe(update, names="value")
    update()
    return lab_box([W.HBox([n, st, pr]), status, image, summary], png=image.value,
                   text=first["text"], css_class="zerolab-lab-basic")
