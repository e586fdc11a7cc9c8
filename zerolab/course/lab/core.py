"""The lab's core mode: one training step played back, collective by collective, with memory per rank."""
from __future__ import annotations

import dataclasses
import time

from .common import (F, T, image_layout, RANK_COLORS, CrewPool, _run, lab_model, lab_config, _batches, _plt,
                     _png, _html, _wrap, _run_controls, pattern, lab_box)


@dataclasses.dataclass
class Collective:
    """One ledger record, with its span on the rank's timeline (seconds since the step began)."""
    index: int
    op: str
    tag: str
    numel: int
    bytes: int
    dtype: str
    wire_bytes: float
    start: float | None
    end: float | None

    def describe(self, world_size: int) -> str:
        m = moved(self, world_size)
        return T("#{i}: {op} '{tag}', {numel:,} elements of {dtype} ({nbytes:,} bytes)\n    each rank puts in "
                 "{put:,} elements, keeps {kept:,}, sends {wire:,.0f} bytes", i=self.index, op=self.op, tag=self.tag,
                 numel=self.numel, dtype=self.dtype, nbytes=self.bytes, put=m["in_numel"], kept=m["out_numel"],
                 wire=self.wire_bytes)

@dataclasses.dataclass
class MemorySample:
    """Bytes a rank held at one moment of the step (``engine.memory()``): ``t`` seconds since
    the step began; ``after``: the collective index just recorded (None at a phase boundary)."""
    t: float
    label: str
    after: int | None
    params: int
    grads: int
    optimizer_states: int
    buffers: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer_states + self.buffers

@dataclasses.dataclass
class StepTrace:
    """One training step on every rank: ``collectives[r]`` (the ledger, in the order recorded),
    ``memory[r]`` (samples at every collective and phase boundary), ``events[r]``
    (``(kind, name, start, end)`` from the timeline, seconds since the step began).
    ``ideal``: zerolab's ``ideal_reduce_scatter`` was on (the paper's pattern, not DeepSpeed's).
    ``checks``: rank 0's zerolab order checks ``(op, numel, bytes)`` (stage 3): zerolab's own
    safety calls, which DeepSpeed does not send, kept apart from ``collectives``."""
    world_size: int
    stage: int
    precision: str
    psi: int
    collectives: list
    memory: list
    events: list
    ideal: bool = False
    checks: list = dataclasses.field(default_factory=list)

    @property
    def calls(self) -> list[Collective]:
        return self.collectives[0]

    def totals(self) -> dict[str, dict]:
        """Per op on rank 0: calls, elements, bytes, wire bytes (exact)."""
        out: dict[str, dict] = {}
        for c in self.calls:
            t = out.setdefault(c.op, {"calls": 0, "numel": 0, "bytes": 0, "wire_bytes": 0.0})
            t["calls"] += 1
            t["numel"] += c.numel
            t["bytes"] += c.bytes
            t["wire_bytes"] += c.wire_bytes
        return out

    def peak(self, rank: int = 0) -> MemorySample:
        return max(self.memory[rank], key=lambda s: s.total)

    def sample_after(self, index: int, rank: int = 0) -> MemorySample:
        """The memory sample taken right after collective ``index`` on ``rank``."""
        return next(s for s in self.memory[rank] if s.after == index)

    def pattern(self) -> str:
        """Whose collectives these are: DeepSpeed's for the config, or the paper's through zerolab's switch."""
        return pattern(self.stage, self.ideal)

    def describe(self) -> str:
        lines = [T("stage {stage}, N = {n}, {precision}: one step, {calls} collectives on each rank",
                   stage=self.stage, n=self.world_size, precision=self.precision, calls=len(self.calls)),
                 T("  ({pattern})", pattern=self.pattern())]
        for op, t in sorted(self.totals().items()):
            lines.append(T("  {op:<15}{calls:>4} calls {numel:>9,} elements {nbytes:>9,} bytes {wire:>10,.0f} on the "
                           "wire", op=op, calls=t["calls"], numel=t["numel"], nbytes=t["bytes"], wire=t["wire_bytes"]))
        if self.checks:
            each = self.checks[0][2] // self.world_size
            lines.append(T("  not counted above: {n} order checks (all_gather, {each} bytes from each rank), "
                           "zerolab's own safety; DeepSpeed sends none", n=len(self.checks), each=each))
        p = self.peak()
        lines.append(T("  rank 0 held at most {total:,} bytes, {label}:", total=p.total, label=_sample_label(p.label)))
        lines.append(T("    params {params:,}, grads {grads:,}, optimizer states {states:,}, buffers {buffers:,}",
                       params=p.params, grads=p.grads, states=p.optimizer_states, buffers=p.buffers))
        return _wrap(lines)


PHASE_LABELS = (T.mark("start of the step"), T.mark("after forward"), T.mark("after backward"),   # _probed_step's
                T.mark("after the optimizer step"))


def _sample_label(label: str) -> str:
    """A memory sample's label ("after forward", "after all_gather 'params embed'") in the edition's language."""
    if label.startswith("after ") and label.endswith("'") and " '" in label:
        op, tag = label[len("after "):-1].split(" '", 1)
        return T("after {op} '{tag}'", op=op, tag=tag)
    return T.text(label)

def _probed_step(engine, batch, info, sample, t0: float):
    """One training step on ``batch`` (this rank's micro-batch) with a ledger that calls
    ``sample(label, record_index)`` after every collective, and ``sample(label)`` at the start
    and after forward, backward and the optimizer step. Returns the step's ledger records, its
    timeline events as (kind, name, start, end) in seconds from ``t0``, that timeline, and the
    step's zerolab order checks (``ledger.checks``: zerolab's own, never among the records)."""
    from ...comm import Ledger
    from ...models import lm_loss
    from ...zero.reference import micro_batches

    class Probe(Ledger):
        """The engine's ledger, unchanged, that also notes what the rank holds after each record."""

        def add(self, rec) -> None:
            super().add(rec)
            if self.enabled and rec.kind != "check":       # zerolab's order checks are not ZeRO's
                sample(f"after {rec.op} '{rec.tag}'", len(self.records) - 1)

    base, probe = engine.comm.ledger, Probe()
    engine.comm.ledger = probe
    tmark = engine.timeline.mark()
    try:
        sample("start of the step")
        x, y = next(micro_batches(batch, info.rank, info.world_size, 1))
        loss = lm_loss(engine(x), y)
        sample("after forward")
        engine.backward(loss)
        sample("after backward")
        engine.step()
        sample("after the optimizer step")
    finally:
        engine.comm.ledger = base
    tl = engine.timeline.since(tmark)
    return probe.records, [(e.kind, e.name, e.start - t0, e.end - t0) for e in tl.events], tl, probe.checks

def _step_on_rank(stage: int, precision: str, ideal: bool = False) -> dict:
    from ... import initialize, rank_info
    from ...models import lm_loss
    from ...zero.reference import train_engine
    info = rank_info()
    engine = initialize(lab_model(), lab_config(stage, info.world_size, precision, ideal))
    batches = _batches(2, info.world_size)
    train_engine(engine, batches[:1], lm_loss)                 # warm-up step: Adam's states appear
    samples: list = []
    t0 = time.perf_counter()

    def sample(label: str, after: int | None = None) -> None:
        m = engine.memory()
        samples.append((time.perf_counter() - t0, label, after, m["params"], m["grads"],
                        m["optimizer_states"], m["buffers"]))

    records, events, _, checks = _probed_step(engine, batches[1], info, sample, t0)
    # one span per record (zerolab's order checks are on the timeline, not in records). Records are
    # in the order calls were issued, spans in the order they ended (an async call's at its wait):
    # each record takes the first unused span of its name
    spans = [e for e in events if e[0] in ("comm", "async") and not e[1].split(" ", 1)[-1].startswith("check")]
    used = [False] * len(spans)
    found = []
    for r in records:
        name = f"{r.op} {r.tag}".strip()
        k = next((j for j, e in enumerate(spans) if not used[j] and e[1] == name), None)
        if k is not None:
            used[k] = True
        found.append((None, None) if k is None else (spans[k][2], spans[k][3]))
    calls = [(i, r.op, r.tag, r.numel, r.bytes, r.dtype, r.wire_bytes, *found[i]) for i, r in enumerate(records)]
    psi = sum(g.numel for g in engine.stage.groups)        # (stage 3: the params hold nothing now)
    engine.close()
    return {"calls": calls, "samples": samples, "events": events, "psi": psi,
            "checks": [(c.op, c.numel, c.bytes) for c in checks]}

_STEP_CACHE: dict = {}

def step_trace(world_size: int, stage: int, precision: str = "bf16", *, ideal: bool = False,
               pool: CrewPool | None = None) -> StepTrace:
    """Run the lab's model on ``world_size`` real ranks: a warm-up step, then one step recorded
    (ledger, timeline, and ``engine.memory()`` after every collective). DeepSpeed's collectives
    for the config; ``ideal`` (stages 1-2): the paper's reduce-scatter through zerolab's
    ``ideal_reduce_scatter`` switch. Cached."""
    ideal = bool(ideal) and stage in (1, 2)
    key = (world_size, stage, precision, ideal)
    if key not in _STEP_CACHE:
        per_rank = _run(world_size, _step_on_rank, stage, precision, ideal, pool=pool)
        _STEP_CACHE[key] = StepTrace(
            world_size, stage, precision, per_rank[0]["psi"],
            [[Collective(*c) for c in r["calls"]] for r in per_rank],
            [[MemorySample(*s) for s in r["samples"]] for r in per_rank],
            [r["events"] for r in per_rank], ideal, per_rank[0]["checks"])
    return _STEP_CACHE[key]

def moved(call, world_size: int) -> dict:
    """What one collective does to each rank's data (the ring convention of ``zerolab.comm``).

    ``before[r]`` / ``after[r]``: for each of the N chunks of the tensor, what rank r holds:
    ``"own"`` (its own contribution, or the root's for a broadcast), ``"sum"`` (summed over every
    rank) or ``None``; and ``{"from": r}`` for a chunk that arrived from rank r unchanged.
    ``in_numel`` / ``out_numel``: elements a rank puts in and keeps."""
    n, op = world_size, call.op
    chunk = call.numel // n if n else call.numel
    if op == "all_gather":
        before = [[("own" if c == r else None) for c in range(n)] for r in range(n)]
        after = [[("own" if c == r else {"from": c}) for c in range(n)] for r in range(n)]
        return {"before": before, "after": after, "in_numel": chunk, "out_numel": call.numel}
    if op == "reduce_scatter":
        before = [["own"] * n for _ in range(n)]
        after = [[("sum" if c == r else None) for c in range(n)] for r in range(n)]
        return {"before": before, "after": after, "in_numel": call.numel, "out_numel": chunk}
    if op == "all_reduce":
        return {"before": [["own"] * n for _ in range(n)], "after": [["sum"] * n for _ in range(n)],
                "in_numel": call.numel, "out_numel": call.numel}
    if op == "broadcast":
        before = [(["own"] * n if r == 0 else [None] * n) for r in range(n)]
        after = [(["own"] * n if r == 0 else [{"from": 0}] * n) for r in range(n)]
        return {"before": before, "after": after, "in_numel": call.numel, "out_numel": call.numel}
    raise ValueError(f"moved: no picture for {op!r}")


# ============================================================================= application: plan a run

# name -> (parameters, layers, hidden, vocabulary): published shapes, rounded

_CHUNK_COLORS = {"own": None, "sum": "#444444"}

def _draw_moved(ax, call: Collective, n: int) -> None:
    m = moved(call, n)
    for col, (state, title) in enumerate(((m["before"], T.mark("before")), (m["after"], T.mark("after")))):
        x0 = col * (n + 1.5)
        for r in range(n):
            for c in range(n):
                v = state[r][c]
                if v is None:
                    color, hatch = "#f2f2f2", None
                elif v == "sum":
                    color, hatch = "#555555", None
                elif v == "own":
                    color, hatch = RANK_COLORS[(0 if call.op == "broadcast" else r) % len(RANK_COLORS)], None
                else:
                    color, hatch = RANK_COLORS[v["from"] % len(RANK_COLORS)], "//"
                ax.add_patch(_plt().Rectangle((x0 + c, r), 0.92, 0.8, color=color, hatch=hatch,
                                              ec="white" if hatch else color))
        ax.text(x0 + n / 2, -0.3, F(title), ha="center", fontsize=9)
    ax.annotate("", xy=(n + 1.35, n / 2), xytext=(n + 0.15, n / 2), arrowprops={"arrowstyle": "->"})
    ax.set_xlim(-0.2, 2 * n + 1.7)
    ax.set_ylim(n + 0.1, -0.8)
    ax.set_yticks([r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=8)
    ax.set_xticks([])
    ax.set_frame_on(False)
    ax.set_title(F("{op} '{tag}'\n{numel:,} elements, {wire:,.0f} B sent per rank", op=call.op, tag=call.tag,
                   numel=call.numel, wire=call.wire_bytes), fontsize=9)
    ax.text(n + 0.75, n + 0.05, F("colour: whose values; dark: summed over ranks;\nhatched: arrived from that rank"),
            ha="center", va="top", fontsize=7)

def draw_step(trace: StepTrace, index: int = 0):
    """One moment of the step: rank 0's timeline with collective ``index`` marked, what that
    collective moved, and the bytes every rank held over the step (and right after it)."""
    plt = _plt()
    n = trace.world_size
    calls = trace.calls
    index = max(0, min(index, len(calls) - 1))
    call = calls[index]
    fig = plt.figure(figsize=(11, 6.2))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.25], width_ratios=[1.6, 1])
    ax_t, ax_m = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    ax_c, ax_b = fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, 1])
    # timeline of rank 0
    lanes = ("compute", "comm", "async", "wait")
    colours = {"compute": "#4c72b0", "comm": "#dd8452", "async": "#55a868", "wait": "#c44e52"}
    for row, kind in enumerate(lanes):
        spans = [(s * 1e3, (e - s) * 1e3) for k, _, s, e in trace.events[0] if k == kind]
        if spans:
            ax_t.broken_barh(spans, (row - 0.35, 0.7), color=colours[kind])
    if call.start is not None:
        ax_t.axvspan(call.start * 1e3, max(call.end * 1e3, call.start * 1e3 + 0.02), color="black", alpha=0.25)
        ax_t.axvline(call.end * 1e3, color="black", linewidth=1)
    ax_t.set_yticks(range(len(lanes)), [F("compute spans"), F("blocking comm"), F("async comm"), F("waits")],
                    fontsize=8)
    ax_t.set_xlabel(F("ms since the step began (rank 0)"), fontsize=8)
    whose = F("the paper's ideal (zerolab's switch)") if trace.ideal else F("DeepSpeed's collectives")
    ax_t.set_title(F("stage {stage}, N = {n}, {precision}, {whose}: collective {i} of {calls}", stage=trace.stage,
                     n=n, precision=trace.precision, whose=whose, i=index + 1, calls=len(calls)), fontsize=10)
    # memory over the step
    for r in range(n):
        ts = [s.t * 1e3 for s in trace.memory[r]]
        ax_m.step(ts, [s.total for s in trace.memory[r]], where="post", color=RANK_COLORS[r % 8],
                  label=f"rank {r}")
    now = trace.sample_after(index)
    ax_m.axvline(now.t * 1e3, color="black", linewidth=1)
    ax_m.set_xlabel(F("ms since the step began"), fontsize=8)
    ax_m.set_ylabel(F("bytes held (engine.memory())"), fontsize=8)
    ax_m.set_title(F("what each rank holds over the step: model states + buffers in flight"), fontsize=9)
    ax_m.legend(fontsize=7, loc="lower right")
    _draw_moved(ax_c, call, n)
    # bytes per rank right after the collective
    bottoms = [0] * n
    for giant, colour in (("params", "#4c72b0"), ("grads", "#dd8452"), ("optimizer_states", "#8172b3"),
                          ("buffers", "#937860")):
        vals = [getattr(trace.sample_after(index, r), giant) for r in range(n)]
        ax_b.bar(range(n), vals, bottom=bottoms, color=colour, label=F(giant.replace("_", " ")))
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax_b.set_xticks(range(n), [f"rank {r}" for r in range(n)], fontsize=8)
    ax_b.set_ylabel(F("bytes"), fontsize=8)
    ax_b.set_title(F("held right after this collective"), fontsize=9)
    ax_b.set_ylim(0, max(bottoms) * 1.45)
    ax_b.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
    fig.tight_layout()
    return fig

def core_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 3, precision: str = "bf16",
                max_ranks: int = 4):
    """Controls N, stage and precision (and, at stages 1-2, the paper's ideal through zerolab's
    ``ideal_reduce_scatter`` switch; DeepSpeed's default otherwise), and a player over the step's
    collectives."""
    import ipywidgets as W
    n, st, pr = _run_controls(world_size, stage, precision, max_ranks)
    ideal = W.Checkbox(value=False, description=T("paper's ideal (zerolab's switch)"), indent=False,
                       disabled=stage not in (1, 2))
    which = W.IntSlider(value=0, min=0, max=0, description=T("collective"), continuous_update=False)
    play = W.Play(value=0, min=0, max=0, interval=900, description=T("play"))
    W.jslink((play, "value"), (which, "value"))
    image = W.Image(format="png", layout=image_layout())
    line = W.HTML()
    summary = W.HTML()
    state: dict = {}

    def redraw(*_):
        trace = state["trace"]
        k = min(which.value, len(trace.calls) - 1)
        image.value = _png(draw_step(trace, k))
        line.value = _html(trace.calls[k].describe(trace.world_size))

    def rerun(*_):
        ideal.disabled = st.value not in (1, 2)            # a switch of stages 1-2 only
        trace = step_trace(n.value, st.value, pr.value, ideal=ideal.value, pool=pool)
        state["trace"] = trace
        summary.value = _html(trace.describe())
        last = len(trace.calls) - 1
        if which.value > last:
            which.value = last                       # fires redraw
        which.max = play.max = last
        redraw()

    for w in (n, st, pr, ideal):
        w.observe(rerun, names="value")
    which.observe(redraw, names="value")
    rerun()
    trace = state["trace"]
    return lab_box([W.HBox([n, st, pr, ideal]), W.HBox([play, which]), line, image, summary], png=image.value,
                   text=trace.calls[0].describe(trace.world_size) + "\n" + trace.describe(), css_class="zerolab-lab-core")
