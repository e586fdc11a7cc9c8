"""The visual lab: widgets and pictures over real engines on real ranks.

Four modes (chapter 12, ``notebooks/12_visual_lab.ipynb``):

* **Basic**: who holds which shard of each giant (parameters, gradients, optimizer states)
  at each ZeRO stage, read from the tensors of a real engine on N ranks (:func:`holdings`).
* **Core**: one training step played back from the engine's ledger (every collective) and
  timeline (what each rank spent its time on), with the bytes each rank held after every
  collective (:func:`step_trace`, :func:`moved`).
* **Application**: a model size, a GPU count, a GPU memory and an interconnect in; which
  configurations fit and how fast out, from :mod:`zerolab.simulate` and DeepSpeed's
  estimators in :mod:`zerolab.estimate` (:func:`plan`).
* **Extension**: offload, what lives where and when: a real engine with its optimizer
  states on the device, in host memory or on NVMe (and at stage 3 its parameter shards too),
  the bytes each rank keeps in each place (``engine.memory(where)``), and one step's timeline
  with the host optimizer step, sub-group by sub-group, and every NVMe read and write
  (:func:`placement`). At stage 3 it also shows each parameter gather and release, and how many
  gathers were prefetched from the previous step's trace (``stage3_prefetch_bucket_size``).

The lab runs engines only through zerolab's public entry points (``zerolab.Crew``,
``zerolab.initialize``, ``engine.memory()``, ``engine.ledger``, ``engine.timeline``) and reads the
stage's buffers to say *where* each byte lives; it changes nothing in them. The gathering
functions return plain dataclasses (tested on their own, ``tests/test_lab.py``); the
``draw_*`` functions turn them into matplotlib figures; the ``*_widget`` functions wire
ipywidgets controls to both. matplotlib and ipywidgets are imported only when drawing.
"""
from __future__ import annotations

import dataclasses
import io
import math
import shutil
import tempfile
import textwrap
import time

__all__ = ["GIANTS", "CrewPool", "lab_config", "lab_model", "Holdings", "holdings", "Collective",
           "MemorySample", "StepTrace", "step_trace", "moved", "MODELS", "PlanRow", "Plan", "plan",
           "draw_holdings", "draw_step", "draw_plan", "basic_widget", "core_widget",
           "application_widget", "OFFLOAD_DEVICES", "PLACES", "offload_config", "Placement", "placement",
           "draw_placement", "extension_widget"]

GIANTS = ("params", "grads", "optimizer_states")
GIANT_NAMES = {"params": "parameters (the furniture)", "grads": "gradients (the door stickers)",
               "optimizer_states": "optimizer states (the heavy notebook)"}
PRECISIONS = ("fp32", "bf16", "fp16")
RANK_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:olive")

# The lab's model: zerolab's TinyLM (tied embedding, a frozen parameter, sizes that do not
# divide by N), small enough that a step takes milliseconds on two ranks of a laptop.
LAB_MODEL = {"vocab": 37, "d": 26, "hidden": 53, "layers": 2, "seq_len": 16}
MICRO_BATCH = 2                # sequences per rank per step
BUCKET = 2_000                 # reduce_bucket_size (elements): a few buckets for stages 0-2


# ============================================================================= the ranks

class CrewPool:
    """One crew of ranks per world size, started on first use and kept (starting ranks costs
    about a second; running on ranks that are up costs milliseconds)."""

    def __init__(self, threads: int = 1, timeout: float = 120.0):
        self.threads, self.timeout = threads, timeout
        self._crews: dict = {}

    def get(self, n: int):
        import zerolab
        crew = self._crews.get(n)
        if crew is None:
            crew = self._crews[n] = zerolab.Crew(n, threads=self.threads, timeout=self.timeout, echo=False)
        return crew

    def run(self, n: int, fn, *args, **kwargs) -> list:
        return self.get(n).run(fn, *args, **kwargs)

    def close(self) -> None:
        while self._crews:
            self._crews.popitem()[1].close()

    def __enter__(self) -> "CrewPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run(n: int, fn, *args, pool: CrewPool | None = None):
    if pool is not None:
        return pool.run(n, fn, *args)
    import zerolab
    return zerolab.launch(fn, n, *args, threads=1, echo=False)


def lab_model():
    """The lab's model, the same weights on every rank (seed 0)."""
    from .models import TinyLM
    return TinyLM(**LAB_MODEL, seed=0)


def lab_config(stage: int, world_size: int, precision: str = "bf16", **zero) -> dict:
    """The DeepSpeed config of every lab run: AdamW, ``MICRO_BATCH`` sequences per rank,
    buckets of ``BUCKET`` elements, and at stage 3 every parameter sharded (persistence
    threshold 0: DeepSpeed's default, 100,000 elements, would keep this small model whole)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    cfg = {"train_batch_size": MICRO_BATCH * world_size, "train_micro_batch_size_per_gpu": MICRO_BATCH,
           "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": BUCKET,
                                 "stage3_param_persistence_threshold": 0, **zero}}
    if precision == "fp16":       # a small first loss scale: no skipped first step, so Adam's states exist
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    elif precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def _batches(steps: int, world_size: int):
    from .models import lm_batches
    return lm_batches(steps, MICRO_BATCH * world_size, LAB_MODEL["seq_len"], LAB_MODEL["vocab"])


def _held_tensors(engine) -> dict[str, list]:
    """For each flat group of the engine's stage, the tensor this rank keeps of each giant
    (None: nothing). Read-only: where the stage keeps them (``stage*.py``)."""
    st = engine.stage
    persistent = getattr(st, "persistent", [False] * len(st.groups))
    out = {g: [] for g in GIANTS}
    for g, master in zip(st.groups, st.masters):
        if hasattr(st, "param_flats"):                    # stages 0-2: the whole flat buffer
            p = st.param_flats[g.index]
        else:                                             # stage 3: a shard, or all of a persistent group
            p = st.full[g.index] if persistent[g.index] else st.shards[g.index]
        grad = st.grad_shards[g.index] if hasattr(st, "grad_shards") else st.grad_flats[g.index]
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

    def headline(self) -> str:
        n = self.world_size
        split = [GIANT_NAMES[g].split(" (")[0] for g in GIANTS if self.share(g) != "all"]
        whole = [GIANT_NAMES[g].split(" (")[0] for g in GIANTS if self.share(g) == "all"]
        if n == 1 or not split:
            return f"stage {self.stage}, N = {n}: every rank holds all three giants"
        text = f"stage {self.stage}, N = {n}: each rank keeps 1/{n} of the {' and '.join(split)}"
        return text + (f"; all of the {whole[0]}" if whole else "")

    def describe(self) -> str:
        lines = [self.headline(), f"({self.precision}, Ψ = {self.psi:,}; bytes measured by engine.memory() on each rank)",
                 f"{'rank':>4}  {'params':>15}  {'grads':>15}  {'optimizer states':>17}  {'model states':>13}"]
        for r in range(self.world_size):
            b = self.bytes[r]
            cells = [f"{b[g]:>9,} B {self.share(g) if self.share(g) != 'mixed' else '':>3}" for g in GIANTS]
            lines.append(f"{r:>4}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>17}  {b['model_states']:>11,} B")
        return _wrap(lines)


def _holdings_on_rank(stage: int, precision: str) -> dict:
    from . import initialize, rank_info
    from .models import lm_loss
    from .reference import train_engine
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
        return (f"#{self.index}: {self.op} '{self.tag}', {self.numel:,} elements of {self.dtype} "
                f"({self.bytes:,} bytes)\n    each rank puts in {m['in_numel']:,} elements, keeps "
                f"{m['out_numel']:,}, sends {self.wire_bytes:,.0f} bytes")


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
    (``(kind, name, start, end)`` from the timeline, seconds since the step began)."""
    world_size: int
    stage: int
    precision: str
    psi: int
    collectives: list
    memory: list
    events: list

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

    def describe(self) -> str:
        lines = [f"stage {self.stage}, N = {self.world_size}, {self.precision}: one step, "
                 f"{len(self.calls)} collectives on each rank"]
        for op, t in sorted(self.totals().items()):
            lines.append(f"  {op:<15}{t['calls']:>4} calls {t['numel']:>9,} elements {t['bytes']:>9,} bytes"
                         f" {t['wire_bytes']:>10,.0f} on the wire")
        p = self.peak()
        lines.append(f"  rank 0 held at most {p.total:,} bytes, {p.label}:")
        lines.append(f"    params {p.params:,}, grads {p.grads:,}, optimizer states {p.optimizer_states:,}, "
                     f"buffers {p.buffers:,}")
        return _wrap(lines)


def _probed_step(engine, batch, info, sample, t0: float):
    """One training step on ``batch`` (this rank's micro-batch) with a ledger that calls
    ``sample(label, record_index)`` after every collective, and ``sample(label)`` at the start
    and after forward, backward and the optimizer step. Returns the step's ledger records, its
    timeline events as (kind, name, start, end) in seconds from ``t0``, and that timeline."""
    from .comm import Ledger
    from .models import lm_loss
    from .reference import micro_batches

    class Probe(Ledger):
        """The engine's ledger, unchanged, that also notes what the rank holds after each record."""

        def add(self, rec) -> None:
            super().add(rec)
            if self.enabled:
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
    return probe.records, [(e.kind, e.name, e.start - t0, e.end - t0) for e in tl.events], tl


def _step_on_rank(stage: int, precision: str) -> dict:
    from . import initialize, rank_info
    from .models import lm_loss
    from .reference import train_engine
    info = rank_info()
    engine = initialize(lab_model(), lab_config(stage, info.world_size, precision))
    batches = _batches(2, info.world_size)
    train_engine(engine, batches[:1], lm_loss)                 # warm-up step: Adam's states appear
    samples: list = []
    t0 = time.perf_counter()

    def sample(label: str, after: int | None = None) -> None:
        m = engine.memory()
        samples.append((time.perf_counter() - t0, label, after, m["params"], m["grads"],
                        m["optimizer_states"], m["buffers"]))

    records, events, _ = _probed_step(engine, batches[1], info, sample, t0)
    spans = [e for e in events if e[0] in ("comm", "async")]   # one per record, in the same order
    matched = len(spans) == len(records) and all(
        name == f"{r.op} {r.tag}".strip() for (_, name, _, _), r in zip(spans, records))
    calls = [(i, r.op, r.tag, r.numel, r.bytes, r.dtype, r.wire_bytes,
              spans[i][2] if matched else None, spans[i][3] if matched else None)
             for i, r in enumerate(records)]
    psi = sum(g.numel for g in engine.stage.groups)        # (stage 3: the params hold nothing now)
    engine.close()
    return {"calls": calls, "samples": samples, "events": events, "psi": psi}


_STEP_CACHE: dict = {}


def step_trace(world_size: int, stage: int, precision: str = "bf16", *, pool: CrewPool | None = None) -> StepTrace:
    """Run the lab's model on ``world_size`` real ranks: a warm-up step, then one step recorded
    (ledger, timeline, and ``engine.memory()`` after every collective). Cached."""
    key = (world_size, stage, precision)
    if key not in _STEP_CACHE:
        per_rank = _run(world_size, _step_on_rank, stage, precision, pool=pool)
        _STEP_CACHE[key] = StepTrace(
            world_size, stage, precision, per_rank[0]["psi"],
            [[Collective(*c) for c in r["calls"]] for r in per_rank],
            [[MemorySample(*s) for s in r["samples"]] for r in per_rank],
            [r["events"] for r in per_rank])
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
MODELS = {
    "GPT-2 XL (1.5B)": (1.56e9, 48, 1600, 50257),
    "Llama-2 7B": (6.74e9, 32, 4096, 32000),
    "Llama-2 13B": (13.0e9, 40, 5120, 32000),
    "Llama-2 70B": (69.0e9, 80, 8192, 32000),
    "GPT-3 (175B)": (175e9, 96, 12288, 50257),
}


@dataclasses.dataclass
class PlanRow:
    name: str
    stage: int
    offload: str
    gpu_bytes: dict                 # the simulator's per-GPU bytes: params, grads, optimizer_states, ...
    cpu_bytes: float
    fits: bool                      # gpu_bytes["total"] <= the GPU memory asked for
    step_s: float
    bound_by: str
    tokens_per_s: float
    deepspeed_gpu_bytes: float | None   # DeepSpeed's estimator (model states + 4 x largest layer), or None


@dataclasses.dataclass
class Plan:
    model: str
    params: float
    gpus: int
    gpu: str
    gpu_memory: float               # bytes per GPU
    link: str
    seq: int
    micro_batch: int
    rows: list
    host_memory: float = 0.0        # bytes of CPU memory, all nodes together

    def best(self) -> PlanRow | None:
        """The fastest configuration that fits; among equally fast ones (within 1 %), the lowest
        stage, the one that communicates least."""
        fitting = [r for r in self.rows if r.fits]
        if not fitting:
            return None
        fastest = min(r.step_s for r in fitting)
        return next(r for r in fitting if r.step_s <= fastest * 1.01)

    def verdict(self) -> str:
        best = self.best()
        if best is None:
            return "nothing fits: more GPUs, more memory (GPU or host), or a smaller micro-batch"
        ties = [r.name for r in self.rows if r.fits and r is not best and r.step_s <= best.step_s * 1.01]
        return (f"fastest that fits: {best.name}, {best.step_s:.2f} s per step"
                + (f" ({', '.join(ties)} as fast)" if ties else ""))

    def describe(self) -> str:
        head = [f"{self.model} on {self.gpus} x {self.gpu} with {self.gpu_memory / 1e9:.0f} GB each, {self.link},",
                f"{self.host_memory / 1e9:,.0f} GB of host memory; sequence {self.seq}, micro-batch {self.micro_batch}"]
        lines = head + [f"{'configuration':<30}{'GB/GPU':>8}{'DS est.':>8}{'host GB':>9}{'fits':>6}{'step s':>8}"
                        f"{'tokens/s':>10}  bound by"]
        for r in self.rows:
            ds = f"{r.deepspeed_gpu_bytes / 1e9:>8.1f}" if r.deepspeed_gpu_bytes is not None else f"{'-':>8}"
            lines.append(f"{r.name:<30}{r.gpu_bytes['total'] / 1e9:>8.1f}{ds}{r.cpu_bytes * self.gpus / 1e9:>9,.0f}"
                         f"{'yes' if r.fits else 'NO':>6}{r.step_s:>8.2f}{r.tokens_per_s:>10,.0f}  {r.bound_by}")
        lines.append(self.verdict())
        lines.append("GB = 1e9 bytes. DS est.: DeepSpeed's model-state estimator (no activations); "
                     "host GB: all nodes")
        return _wrap(lines)


def plan(model: str = "Llama-2 7B", gpus: int = 8, gpu: str = "a100-80gb", gpu_memory_gb: float | None = None,
         link: str = "nvlink-a100", seq: int = 2048, micro_batch: int = 1, gpus_per_node: int = 8,
         host_memory_gb: float = 1024, checkpointing: bool = True) -> Plan:
    """Every configuration of :func:`zerolab.simulate.table` (stages 0-3, stage 3 with optimizer
    offload, and with parameters offloaded too) for ``model`` (a key of :data:`MODELS`) on
    ``gpus`` GPUs of kind ``gpu`` (its FLOP/s; its memory unless ``gpu_memory_gb`` is given),
    ``host_memory_gb`` of CPU memory per node of ``gpus_per_node`` GPUs, beside DeepSpeed's
    estimator of the model states where it has one (stages 2 and 3). A configuration fits when
    the GPU holds what the simulator puts on it and the nodes' hosts hold what it offloads."""
    from . import estimate, simulate
    params, layers, hidden, vocab = MODELS[model]
    memory = simulate.GPUS[gpu][0] if gpu_memory_gb is None else gpu_memory_gb * 1e9
    per_node = min(gpus, gpus_per_node)
    nodes = math.ceil(gpus / per_node)
    largest = max(vocab * hidden, 4 * hidden * hidden)          # the embedding, or one MLP matrix
    host = host_memory_gb * 1e9 * nodes
    rows = []
    for est in simulate.table(params, layers, hidden, seq, micro_batch, gpus, gpu=gpu, link=link,
                              checkpointing=checkpointing, host_bytes=host):
        ds = None
        if est.stage == 2 and not est.offload:
            ds = estimate.estimate_zero2_model_states_mem_needs(params, per_node, nodes, cpu_offload=False)[1]
        elif est.stage == 3:
            ds = estimate.estimate_zero3_model_states_mem_needs(
                params, largest, per_node, nodes, cpu_offload="optimizer" in est.offload,
                cpu_offload_params="params" in est.offload)[1]
        offload = est.offload.replace("optimizer+params", "opt+params")
        name = f"stage {est.stage}" + (f" + offload {offload}" if offload else "")
        rows.append(PlanRow(name, est.stage, est.offload, est.gpu_bytes, est.cpu_bytes,
                            est.gpu_bytes["total"] <= memory and est.cpu_bytes * gpus <= host,
                            est.step_s, est.bound_by,
                            micro_batch * seq * gpus / est.step_s, ds))
    return Plan(model, params, gpus, gpu, memory, link, seq, micro_batch, rows, host)


# ============================================================================= extension: what lives where, and when

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
PLACES = ("device", "host", "nvme")
PLACE_NAMES = {"device": "on the device", "host": "in host memory", "nvme": "on NVMe"}
SUB_GROUP_SIZES = (1_000_000_000, 2_000, 1_000, 500)      # DeepSpeed's default first


def offload_config(stage: int, world_size: int, offload_optimizer: str = "none", offload_param: str = "none",
                   sub_group_size: int = 1_000_000_000, pipeline_read: bool = False, pipeline_write: bool = False,
                   nvme_path: str | None = None, precision: str = "bf16") -> dict:
    """:func:`lab_config` with offload: ``offload_optimizer`` and ``offload_param`` each "none",
    "cpu" or "nvme" (parameters only at stage 3); NVMe files go under ``nvme_path``. Offloaded
    parameters on NVMe use ``max_in_cpu: 0`` (DeepSpeed's default, 10^9 elements kept in host
    memory, would keep all of this small model's shards there and write no file)."""
    for name, value in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
        if value not in OFFLOAD_DEVICES:
            raise ValueError(f"{name} must be one of {', '.join(OFFLOAD_DEVICES)}, not {value!r}")
    if offload_param != "none" and stage != 3:
        raise ValueError(f"offload_param needs stage 3 (parameters are sharded only there), not stage {stage}")
    if offload_optimizer != "none" and stage == 0:
        raise ValueError("offload_optimizer needs stage 1, 2 or 3 (each rank offloads its shard)")
    if "nvme" in (offload_optimizer, offload_param) and not nvme_path:
        raise ValueError("offload to nvme needs nvme_path (a folder)")
    zero: dict = {"sub_group_size": int(sub_group_size)}
    if offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": offload_optimizer}
        if offload_optimizer == "nvme":
            zero["offload_optimizer"].update(nvme_path=nvme_path, pipeline_read=bool(pipeline_read),
                                             pipeline_write=bool(pipeline_write))
    if offload_param != "none":
        zero["offload_param"] = {"device": offload_param}
        if offload_param == "nvme":
            zero["offload_param"].update(nvme_path=nvme_path, max_in_cpu=0)
    return lab_config(stage, world_size, precision, **zero)


@dataclasses.dataclass
class Placement:
    """Where one engine's bytes live, and when they moved during one recorded step.

    ``places[r][where]``: ``engine.memory(where)`` on rank r after the step, for where in
    :data:`PLACES` (params, grads, optimizer_states, buffers, ...). ``sub_groups[r]``: the
    elements of each sub-group the optimizer step was tiled into; ``tiles[r]``: how many tensors
    the optimizer steps (groups, cut at ``sub_group_size`` when offloaded). ``io[r]``: the step's NVMe
    traffic: ``{"optimizer"|"params": {"reads", "writes", "bytes_read", "bytes_written"}}``.
    ``gathers[r]``: ``(tag, numel, start, end)`` of each parameter all-gather (stage 3);
    ``prefetched[r]``: how many of them the stage issued ahead (its ``prefetches`` counter; 0
    where the stage has none).
    ``memory[r]``: ``(t, label, device buffers)`` after every collective and phase boundary.
    ``events[r]``: the step's timeline, ``(kind, name, start, end)`` in seconds since the step
    began (kinds compute, comm, async, wait, host, io). ``seconds[r]``: its
    :meth:`zerolab.timeline.Timeline.summary`. Times are measured: only pictures show them."""
    world_size: int
    stage: int
    precision: str
    offload_optimizer: str
    offload_param: str
    sub_group_size: int
    pipeline_read: bool
    pipeline_write: bool
    psi: int
    switches: dict
    places: list
    sub_groups: list
    tiles: list
    io: list
    gathers: list
    memory: list
    events: list
    seconds: list
    prefetched: list
    nvme_dir: str | None = None      # the temporary folder the NVMe files went to (removed afterwards)

    def bytes(self, rank: int, where: str, giant: str = "model_states") -> int:
        return self.places[rank][where][giant]

    def split(self, rank: int = 0) -> dict[str, float]:
        """Measured seconds of the step on ``rank``: on the training thread ``compute`` (forward,
        backward and the step's device work, waits for parameter reads included), ``comm``
        (exposed communication) and ``host`` (the host optimizer step, sub-group by sub-group,
        waits for its NVMe reads and unpipelined writes included); ``io``: the I/O threads' busy time."""
        s = self.seconds[rank]
        return {"compute": max(s["compute"] - s["host_step"], 0.0), "comm": s["exposed_comm"],
                "host": s["host_step"], "io": s["nvme_io"]}

    def setting(self) -> str:
        opt = {"none": "optimizer states on the device", "cpu": "optimizer states in host memory",
               "nvme": "optimizer states on NVMe"}[self.offload_optimizer]
        if self.offload_optimizer == "nvme":
            pipes = [k for k, on in (("read", self.pipeline_read), ("write", self.pipeline_write)) if on]
            opt += f" (pipelined {' and '.join(pipes)})" if pipes else " (no pipelining)"
        if self.stage == 3:
            opt += {"none": ", parameter shards on the device", "cpu": ", parameter shards in host memory",
                    "nvme": ", parameter shards on NVMe"}[self.offload_param]
        return f"stage {self.stage}, N = {self.world_size}, {self.precision}: {opt}, sub_group_size {self.sub_group_size:,}"

    def describe(self) -> str:
        lines = [self.setting(), "the engine's switches (engine.switches()):"]
        lines += [f"  {k}: {v}" for k, v in self.switches.items()]
        lines.append(f"bytes after the step (engine.memory(where); Ψ = {self.psi:,}):")
        lines.append(f"{'rank':>4}  {'where':<7}{'params':>10}{'grads':>10}{'optimizer states':>18}{'buffers':>9}")
        for r in range(self.world_size):
            for where in PLACES:
                m = self.places[r][where]
                lines.append(f"{r if where == 'device' else '':>4}  {where:<7}{m['params']:>10,}{m['grads']:>10,}"
                             f"{m['optimizer_states']:>18,}{m['buffers']:>9,}")
        sizes = self.sub_groups[0]
        where = {"none": "on the device", "cpu": "on the host", "nvme": "on the host, streamed from NVMe"}
        lines.append(f"the optimizer step {where[self.offload_optimizer]}: {len(sizes)} sub-group"
                     f"{'s' if len(sizes) != 1 else ''} of {', '.join(f'{n:,}' for n in sizes)} elements (rank 0)")
        for what, label in (("optimizer", "optimizer states"), ("params", "parameter shards")):
            io = self.io[0].get(what)
            if io:
                lines.append(f"NVMe during the step, {label} (rank 0): {io['reads']} reads ({io['bytes_read']:,} B), "
                             f"{io['writes']} writes ({io['bytes_written']:,} B)")
        if self.stage == 3:
            g = self.gathers[0]
            peak = self.places[0]["device"]["peak_buffers"]
            ahead = self.prefetched[0]
            lines.append(f"stage 3: {len(g)} parameter all-gathers ({sum(n for _, n, _, _ in g):,} elements) in the "
                         f"step on rank 0, " + (f"{ahead} of them prefetched ahead" if ahead else
                                                "each just in time, none prefetched")
                         + f"; at most {peak:,} B gathered or in flight at once")
        return _wrap(lines)


def _placement_on_rank(cfg: dict) -> dict:
    from . import initialize, rank_info
    from .models import lm_loss
    from .reference import train_engine
    info = rank_info()
    engine = initialize(lab_model(), cfg)
    try:
        batches = _batches(2, info.world_size)
        train_engine(engine, batches[:1], lm_loss)             # warm-up step: Adam's states appear
        st = engine.stage
        stores = {"optimizer": st.home.nvme, "params": getattr(st, "_param_files", None)}
        before = {k: (s.bytes_read, s.bytes_written) for k, s in stores.items() if s is not None}
        prefetches = getattr(st, "prefetches", 0)
        samples: list = []
        t0 = time.perf_counter()

        def sample(label: str, after: int | None = None) -> None:
            samples.append((time.perf_counter() - t0, label, engine.memory()["buffers"]))

        records, events, tl = _probed_step(engine, batches[1], info, sample, t0)
        gathers = [(r.tag, r.numel) for r in records if r.op == "all_gather" and r.tag.startswith("params")]
        gspans = [(s, e) for k, n, s, e in events if k in ("comm", "async") and n.startswith("all_gather params")]
        io = {}
        for what, store in stores.items():
            if store is None:
                continue
            key = ".param." if what == "params" else None
            mine = [n for k, n, _, _ in events if k == "io" and ((key in n) if key else (".param." not in n))]
            io[what] = {"reads": sum(n.startswith("nvme read") for n in mine),
                        "writes": sum(n.startswith("nvme write") for n in mine),
                        "bytes_read": store.bytes_read - before[what][0],
                        "bytes_written": store.bytes_written - before[what][1]}
        home = st.home
        out = {"places": {w: engine.memory(w) for w in PLACES},
               "sub_groups": [sum(home.tiles[j][2] - home.tiles[j][1] for j in sg) for sg in home.sub_groups],
               "tiles": len(home.tensors), "io": io,
               "gathers": [(tag, n, *(gspans[i] if len(gspans) == len(gathers) else (None, None)))
                           for i, (tag, n) in enumerate(gathers)],
               "memory": samples, "events": events, "seconds": tl.summary(),
               "switches": engine.switches(), "psi": sum(g.numel for g in st.groups),
               "prefetched": getattr(st, "prefetches", 0) - prefetches}
    finally:
        engine.close()
    return out


_PLACEMENT_CACHE: dict = {}


def placement(world_size: int = 2, stage: int = 3, offload_optimizer: str = "cpu", offload_param: str = "none",
              sub_group_size: int = 1_000_000_000, pipeline_read: bool = False, pipeline_write: bool = False,
              precision: str = "bf16", *, pool: CrewPool | None = None) -> Placement:
    """Run the lab's model with this offload on ``world_size`` real ranks: a warm-up step, then
    one step recorded (timeline with its host-step and NVMe I/O events, the ledger's parameter
    gathers, ``engine.memory()`` on the device, the host and NVMe afterwards). NVMe files go to
    a temporary folder (``tempfile.mkdtemp``), removed when the run ends. Cached per setting."""
    nvme = "nvme" in (offload_optimizer, offload_param)
    if not nvme:
        pipeline_read = pipeline_write = False            # they only steer NVMe reads and writes
    key = (world_size, stage, offload_optimizer, offload_param, int(sub_group_size), bool(pipeline_read),
           bool(pipeline_write), precision)
    if key in _PLACEMENT_CACHE:
        return _PLACEMENT_CACHE[key]
    offload_config(stage, world_size, offload_optimizer, offload_param, sub_group_size, precision=precision,
                   nvme_path="." if nvme else None)       # refuse a bad setting before starting ranks
    folder = tempfile.mkdtemp(prefix="zerolab-lab-nvme-") if nvme else None
    try:
        cfg = offload_config(stage, world_size, offload_optimizer, offload_param, sub_group_size,
                             pipeline_read, pipeline_write, nvme_path=folder, precision=precision)
        per_rank = _run(world_size, _placement_on_rank, cfg, pool=pool)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    first = per_rank[0]
    result = Placement(world_size, stage, precision, offload_optimizer, offload_param, int(sub_group_size),
                       bool(pipeline_read), bool(pipeline_write), first["psi"], first["switches"],
                       [r["places"] for r in per_rank], [r["sub_groups"] for r in per_rank],
                       [r["tiles"] for r in per_rank], [r["io"] for r in per_rank], [r["gathers"] for r in per_rank],
                       [r["memory"] for r in per_rank], [r["events"] for r in per_rank],
                       [r["seconds"] for r in per_rank], [r["prefetched"] for r in per_rank], folder)
    _PLACEMENT_CACHE[key] = result
    return result


# ============================================================================= pictures

def _plt():
    import matplotlib.pyplot as plt
    return plt


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
        ax.set_title(f"{GIANT_NAMES[giant].split(' (')[0]}: {'whole on every rank' if share == 'all' else share}",
                     fontsize=10)
        ax.set_xlim(0, total * 1.3)
        ax.set_xticks([0, total])
        ax.set_xlabel(f"elements ({len(h.groups)} flat groups)", fontsize=8)
    axes[0].set_yticks(range(n), [f"rank {r}" for r in range(n)])
    axes[0].invert_yaxis()
    fig.suptitle(h.headline() + f" ({h.precision}; bytes measured by engine.memory())", fontsize=10)
    fig.tight_layout()
    return fig


_CHUNK_COLORS = {"own": None, "sum": "#444444"}


def _draw_moved(ax, call: Collective, n: int) -> None:
    m = moved(call, n)
    for col, (state, title) in enumerate(((m["before"], "before"), (m["after"], "after"))):
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
        ax.text(x0 + n / 2, -0.3, title, ha="center", fontsize=9)
    ax.annotate("", xy=(n + 1.35, n / 2), xytext=(n + 0.15, n / 2), arrowprops={"arrowstyle": "->"})
    ax.set_xlim(-0.2, 2 * n + 1.7)
    ax.set_ylim(n + 0.1, -0.8)
    ax.set_yticks([r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=8)
    ax.set_xticks([])
    ax.set_frame_on(False)
    ax.set_title(f"{call.op} '{call.tag}'\n{call.numel:,} elements, {call.wire_bytes:,.0f} B sent per rank",
                 fontsize=9)
    ax.text(n + 0.75, n + 0.05, "colour: whose values; dark: summed over ranks;\nhatched: arrived from that rank",
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
    ax_t.set_yticks(range(len(lanes)), ["compute spans", "blocking comm", "async comm", "waits"], fontsize=8)
    ax_t.set_xlabel("ms since the step began (rank 0)", fontsize=8)
    ax_t.set_title(f"stage {trace.stage}, N = {n}, {trace.precision}: collective {index + 1} of {len(calls)}",
                   fontsize=10)
    # memory over the step
    for r in range(n):
        ts = [s.t * 1e3 for s in trace.memory[r]]
        ax_m.step(ts, [s.total for s in trace.memory[r]], where="post", color=RANK_COLORS[r % 8],
                  label=f"rank {r}")
    now = trace.sample_after(index)
    ax_m.axvline(now.t * 1e3, color="black", linewidth=1)
    ax_m.set_xlabel("ms since the step began", fontsize=8)
    ax_m.set_ylabel("bytes held (engine.memory())", fontsize=8)
    ax_m.set_title("what each rank holds over the step: model states + buffers in flight", fontsize=9)
    ax_m.legend(fontsize=7, loc="lower right")
    _draw_moved(ax_c, call, n)
    # bytes per rank right after the collective
    bottoms = [0] * n
    for giant, colour in (("params", "#4c72b0"), ("grads", "#dd8452"), ("optimizer_states", "#8172b3"),
                          ("buffers", "#937860")):
        vals = [getattr(trace.sample_after(index, r), giant) for r in range(n)]
        ax_b.bar(range(n), vals, bottom=bottoms, color=colour, label=giant.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax_b.set_xticks(range(n), [f"rank {r}" for r in range(n)], fontsize=8)
    ax_b.set_ylabel("bytes", fontsize=8)
    ax_b.set_title("held right after this collective", fontsize=9)
    ax_b.set_ylim(0, max(bottoms) * 1.45)
    ax_b.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def draw_plan(p: Plan):
    """Memory per GPU of each configuration (stacked: model states, activations, working
    buffers) against the GPU's memory, and the step time of those that fit."""
    plt = _plt()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(11, 3.8))
    names = [r.name.replace("stage 3 + offload ", "3 + offload\n") for r in p.rows]
    x = range(len(p.rows))
    bottoms = [0.0] * len(p.rows)
    for key, colour, label in (("params", "#4c72b0", "parameters"), ("grads", "#dd8452", "gradients"),
                               ("optimizer_states", "#8172b3", "optimizer states"),
                               ("activations", "#55a868", "activations"), ("working", "#937860", "working buffers")):
        vals = [r.gpu_bytes[key] / 1e9 for r in p.rows]
        ax_m.bar(x, vals, bottom=bottoms, color=colour, label=label)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    cap = p.gpu_memory / 1e9
    ax_m.axhline(cap, color="black", linestyle="--", label=f"{cap:.0f} GB per GPU")
    top = 2 * cap
    for i, r in enumerate(p.rows):
        total = r.gpu_bytes["total"] / 1e9
        ax_m.text(i, min(total, top), f"{total:,.0f} GB" + (" ↑" if total > top else ""), ha="center",
                  va="top" if total > top else "bottom", fontsize=7)
    ax_m.set_ylim(0, top)
    ax_m.set_xticks(list(x), names, fontsize=7)
    ax_m.set_ylabel("GB per GPU")
    ax_m.legend(fontsize=7, loc="upper right")
    ax_m.set_title(f"{p.model} on {p.gpus} GPUs: what each GPU must hold", fontsize=10)
    times = [r.step_s if r.fits else 0.0 for r in p.rows]
    ax_t.bar(x, times, color=["tab:green" if r.fits else "lightgrey" for r in p.rows])
    for i, r in enumerate(p.rows):
        ax_t.text(i, r.step_s if r.fits else 0.0, f"{r.step_s:.2f} s" if r.fits else "does\nnot fit",
                  ha="center", va="bottom", fontsize=7)
    ax_t.set_xticks(list(x), names, fontsize=7)
    ax_t.set_ylabel("seconds per step (simulated)")
    ax_t.set_title(p.verdict().split(" (")[0], fontsize=10)
    ax_t.set_ylim(0, max([r.step_s for r in p.rows if r.fits] or [1.0]) * 1.3)
    fig.tight_layout()
    return fig


_GIANT_COLOURS = (("params", "#4c72b0", "parameters"), ("grads", "#dd8452", "gradients"),
                  ("optimizer_states", "#8172b3", "optimizer states"), ("buffers", "#937860", "buffers"))


def draw_placement(p: Placement):
    """Where the bytes live (per rank, per place, stacked by giant), the step's time split as
    measured, rank 0's timeline with its host-step and NVMe rows, and what was gathered on the
    device over the step (stage 3's gather and release)."""
    plt = _plt()
    n = p.world_size
    fig = plt.figure(figsize=(11, 7.6))
    grid = fig.add_gridspec(3, 2, height_ratios=[1.25, 1.35, 0.8], width_ratios=[1.35, 1])
    ax_b, ax_s = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_t = fig.add_subplot(grid[1, :])
    ax_m = fig.add_subplot(grid[2, :], sharex=ax_t)
    # bytes: one group of N bars per place
    width = 0.8 / n
    top = 1
    ticks, tick_labels = [], []
    for pi, where in enumerate(PLACES):
        for r in range(n):
            x = pi + (r - (n - 1) / 2) * width
            bottom = 0
            for giant, colour, label in _GIANT_COLOURS:
                v = p.bytes(r, where, giant)
                ax_b.bar(x, v, width * 0.9, bottom=bottom, color=colour,
                         label=label if (pi, r) == (0, 0) else None)
                bottom += v
            top = max(top, bottom)
            ax_b.text(x, bottom, f" {bottom:,}", ha="center", va="bottom", fontsize=6.5, rotation=90)
            ticks.append(x)
            tick_labels.append(f"r{r}")
        ax_b.text(pi, -0.2, PLACE_NAMES[where], ha="center", va="top", fontsize=8,
                  transform=ax_b.get_xaxis_transform())
    ax_b.set_xticks(ticks, tick_labels, fontsize=7)
    ax_b.set_ylim(0, top * 1.6)
    ax_b.set_ylabel("bytes (engine.memory(where))", fontsize=8)
    ax_b.set_title("what each rank holds where, after the step", fontsize=9)
    ax_b.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
    # time split, measured
    parts = (("compute", "#4c72b0", "compute"), ("comm", "#dd8452", "exposed comm"),
             ("host", "#8172b3", "host step"))
    for r in range(n):
        split = p.split(r)
        left = 0.0
        for key, colour, label in parts:
            ax_s.barh(2 * r, split[key] * 1e3, left=left, color=colour, label=label if r == 0 else None)
            left += split[key] * 1e3
        ax_s.barh(2 * r + 0.8, split["io"] * 1e3, color="#55a868", label="NVMe I/O threads" if r == 0 else None)
    ax_s.set_yticks([2 * r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=8)
    ax_s.invert_yaxis()
    ax_s.set_xlabel("ms in the recorded step (measured; machine-dependent)", fontsize=8)
    ax_s.set_title("the step's time: training thread, and I/O threads below", fontsize=9)
    ax_s.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4, frameon=False)
    # rank 0's timeline: what ran when, and where the bytes moved
    rows = (("compute spans", "#4c72b0", lambda k, name: k == "compute"),
            ("parameter gathers", "#c44e52", lambda k, name: k in ("comm", "async") and name.startswith("all_gather params")),
            ("other collectives", "#dd8452", lambda k, name: k in ("comm", "async", "wait")
             and not name.startswith("all_gather params")),
            ("host step (sub-groups)", "#8172b3", lambda k, name: k == "host"),
            ("NVMe: parameter shards", None, lambda k, name: k == "io" and ".param." in name),
            ("NVMe: optimizer states", None, lambda k, name: k == "io" and ".param." not in name))
    for row, (label, colour, pick) in enumerate(rows):
        for io_kind, io_colour in (("read", "#8fd19e"), ("write", "#2f7d4a")):
            spans = [(s * 1e3, max((e - s) * 1e3, 0.01)) for k, name, s, e in p.events[0] if pick(k, name)
                     and (colour is not None or name.startswith(f"nvme {io_kind}"))]
            if spans:
                ax_t.broken_barh(spans, (row - 0.35, 0.7), color=colour or io_colour,
                                 edgecolor="white" if row >= 3 else (colour or io_colour), linewidth=0.3)
            if colour is not None:
                break
    for k, name, s, e in p.events[0]:
        if k == "compute":
            ax_t.text((s + e) / 2 * 1e3, -0.55, name, ha="center", va="bottom", fontsize=7)
    ax_t.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax_t.set_ylim(len(rows) - 0.4, -0.9)
    ax_t.set_title("rank 0's step: when each thing ran, and when the bytes moved (measured; NVMe: light = read, "
                  "dark = write)", fontsize=9)
    ax_t.tick_params(labelbottom=False)
    # the device's gathered bytes over the step
    for r in range(n):
        ts = [t * 1e3 for t, _, _ in p.memory[r]]
        ax_m.step(ts, [b for _, _, b in p.memory[r]], where="post", color=RANK_COLORS[r % 8], label=f"rank {r}")
    ax_m.set_xlabel("ms since the step began", fontsize=8)
    ax_m.set_ylabel("bytes", fontsize=8)
    ax_m.set_title("buffers on the device over the step: gathered parameters (stage 3) and gradient buckets",
                   fontsize=9)
    ax_m.legend(fontsize=7, loc="upper right")
    fig.suptitle(p.setting(), fontsize=10)
    fig.tight_layout()
    return fig


# ============================================================================= widgets

def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    _plt().close(fig)
    return buf.getvalue()


def _html(text: str) -> str:
    import html
    return f"<pre style='font-size:12px; line-height:1.25'>{html.escape(text)}</pre>"


def basic_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 2, precision: str = "bf16",
                 max_ranks: int = 4):
    """Controls N, stage and precision over :func:`holdings` (a real engine per choice)."""
    import ipywidgets as W
    n = W.IntSlider(value=world_size, min=1, max=max_ranks, description="N ranks", continuous_update=False)
    st = W.Dropdown(options=[0, 1, 2, 3], value=stage, description="stage")
    pr = W.Dropdown(options=list(PRECISIONS), value=precision, description="precision")
    image = W.Image(format="png")
    summary = W.HTML()
    status = W.HTML()

    def update(*_):
        status.value = "<i>running the engine on the ranks ...</i>"
        h = holdings(n.value, st.value, pr.value, pool=pool)
        image.value = _png(draw_holdings(h))
        summary.value = _html(h.describe())
        status.value = ""

    for w in (n, st, pr):
        w.observe(update, names="value")
    update()
    box = W.VBox([W.HBox([n, st, pr]), status, image, summary])
    box.add_class("zerolab-lab-basic")
    return box


def core_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 3, precision: str = "bf16",
                max_ranks: int = 4):
    """Controls N, stage and precision, and a player over the step's collectives."""
    import ipywidgets as W
    n = W.IntSlider(value=world_size, min=1, max=max_ranks, description="N ranks", continuous_update=False)
    st = W.Dropdown(options=[0, 1, 2, 3], value=stage, description="stage")
    pr = W.Dropdown(options=list(PRECISIONS), value=precision, description="precision")
    which = W.IntSlider(value=0, min=0, max=0, description="collective", continuous_update=False)
    play = W.Play(value=0, min=0, max=0, interval=900, description="play")
    W.jslink((play, "value"), (which, "value"))
    image = W.Image(format="png")
    line = W.HTML()
    summary = W.HTML()
    state: dict = {}

    def redraw(*_):
        trace = state["trace"]
        k = min(which.value, len(trace.calls) - 1)
        image.value = _png(draw_step(trace, k))
        line.value = _html(trace.calls[k].describe(trace.world_size))

    def rerun(*_):
        trace = step_trace(n.value, st.value, pr.value, pool=pool)
        state["trace"] = trace
        summary.value = _html(trace.describe())
        last = len(trace.calls) - 1
        if which.value > last:
            which.value = last                       # fires redraw
        which.max = play.max = last
        redraw()

    for w in (n, st, pr):
        w.observe(rerun, names="value")
    which.observe(redraw, names="value")
    rerun()
    box = W.VBox([W.HBox([n, st, pr]), W.HBox([play, which]), line, image, summary])
    box.add_class("zerolab-lab-core")
    return box


def application_widget(model: str = "Llama-2 7B", gpus: int = 8, gpu: str = "a100-80gb", gpu_memory_gb: int = 80,
                       link: str = "nvlink-a100"):
    """Controls model, GPU count, GPU, GPU memory and interconnect over :func:`plan`."""
    import ipywidgets as W
    from .simulate import GPUS, LINKS
    md = W.Dropdown(options=list(MODELS), value=model, description="model")
    ng = W.Dropdown(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=gpus, description="GPUs")
    kind = W.Dropdown(options=list(GPUS), value=gpu, description="GPU")
    mem = W.Dropdown(options=[16, 24, 32, 40, 48, 80, 94, 141], value=gpu_memory_gb, description="GB each")
    ln = W.Dropdown(options=list(LINKS), value=link, description="link")
    mb = W.Dropdown(options=[1, 2, 4, 8], value=1, description="micro-batch")
    host = W.Dropdown(options=[256, 512, 1024, 2048], value=1024, description="host GB/node")
    image = W.Image(format="png")
    summary = W.HTML()

    def update(*_):
        p = plan(md.value, ng.value, kind.value, mem.value, ln.value, micro_batch=mb.value,
                 host_memory_gb=host.value)
        image.value = _png(draw_plan(p))
        summary.value = _html(p.describe())

    for w in (md, ng, kind, mem, ln, mb, host):
        w.observe(update, names="value")
    update()
    box = W.VBox([W.HBox([md, ng, kind, mem]), W.HBox([ln, mb, host]), image, summary])
    box.add_class("zerolab-lab-application")
    return box


def extension_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 3,
                     offload_optimizer: str = "cpu", offload_param: str = "none",
                     sub_group_size: int = 1_000_000_000, max_ranks: int = 4):
    """Controls N, stage, offload_optimizer, offload_param (stage 3 only), sub_group_size and
    the NVMe pipelines (NVMe only) over :func:`placement` (a real engine per choice)."""
    import ipywidgets as W
    n = W.IntSlider(value=world_size, min=1, max=max_ranks, description="N ranks", continuous_update=False)
    st = W.Dropdown(options=[1, 2, 3], value=stage, description="stage")
    opt = W.Dropdown(options=list(OFFLOAD_DEVICES), value=offload_optimizer, description="optimizer")
    par = W.Dropdown(options=list(OFFLOAD_DEVICES), value=offload_param, description="params")
    sub = W.Dropdown(options=[(f"{s:,}", s) for s in SUB_GROUP_SIZES], value=sub_group_size,
                     description="sub_group")
    pr = W.Checkbox(value=False, description="pipeline_read", indent=False)
    pw = W.Checkbox(value=False, description="pipeline_write", indent=False)
    image = W.Image(format="png")
    summary = W.HTML()
    status = W.HTML()
    busy = {"on": False}

    def update(*_):
        if busy["on"]:
            return
        busy["on"] = True
        try:
            if st.value != 3 and par.value != "none":
                par.value = "none"                     # parameters are sharded, and offloaded, only at stage 3
            par.disabled = st.value != 3
            pr.disabled = pw.disabled = opt.value != "nvme"
        finally:
            busy["on"] = False
        status.value = "<i>running the engine on the ranks ...</i>"
        p = placement(n.value, st.value, opt.value, par.value, sub.value, pr.value, pw.value, pool=pool)
        image.value = _png(draw_placement(p))
        summary.value = _html(p.describe())
        status.value = ""

    for w in (n, st, opt, par, sub, pr, pw):
        w.observe(update, names="value")
    update()
    box = W.VBox([W.HBox([n, st, opt, par]), W.HBox([sub, pr, pw]), status, image, summary])
    box.add_class("zerolab-lab-extension")
    return box


def _wrap(lines: list[str], width: int = 98) -> str:
    """Printed lines of at most ``width`` characters (JupyterLab wraps longer ones mid-word),
    continuations indented under their line."""
    out = []
    for line in lines:
        for part in line.split("\n"):
            lead = len(part) - len(part.lstrip(" "))
            out.append(textwrap.fill(part, width, subsequent_indent=" " * (lead + 4),
                                     break_long_words=False) if len(part) > width else part)
    return "\n".join(out)
