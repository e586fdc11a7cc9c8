#!/usr/bin/env python3
"""Build chapter 3 (``notebooks/03_three_stages.ipynb``), its appendix
(``notebooks/03a_appendix_adamw_rounding.ipynb``: why fp32 data parallelism with AdamW is not
bit-exact) and its exercises' solutions (``solutions/03_stage1_shards.ipynb``,
``solutions/03b_stage2_buckets.ipynb``).

The notebooks are written here as lists of cells (the source of truth); run this script,
then store the outputs by executing them::

    .venv/bin/python tools/build_notebooks/ch03.py             # write the notebooks whose cells changed
    .venv/bin/python tools/build_notebooks/ch03.py --execute   # ... and run what was written, then
                                                                # regenerate exercises/03*.ipynb

Printed floats that are rounding noise (parity with one process) are printed as the bound they
are under, never as raw digits: those change with the CPU's SIMD kernels (see TEACHING.md).

Built like every chapter (``nbsource.py``): fixed cell ids; unchanged notebooks are left alone.
"""
from __future__ import annotations

import sys

import nbsource
from nbsource import code, md


# ----------------------------------------------------------------------------------------
# notebooks/03_three_stages.ipynb
# ----------------------------------------------------------------------------------------

CHAPTER = [
md(r"""
# Chapter 3 · The three stages (ZeRO 三阶段)

At the end of chapter 2 the crew hit the wall. Every worker carried the whole household:
the furniture (the **parameters**), the door stickers (the **gradients**) and the heavy
notebook (the **optimizer states**). Hiring more workers added more copies of the same
load, not more room.

So the captain re-divides the load. He does not change what the workers *do*: each one
still carries his share of boxes through the door (each rank runs forward and backward on
its own slice of the batch). He changes what each worker must *keep*:

1. **First, the heavy notebooks.** For every piece of furniture the notebook holds an exact
   register copy of it (the fp32 **master weights**) and two lines about how it has been moving
   (Adam's **momentum** and **variance**): 12 bytes per parameter, the heaviest thing in the
   backpack. The captain tears the notebooks into N parts. Each worker keeps one part, and
   after every trip updates only the furniture his part describes, then tells the others the
   new positions. This is **stage 1**.
2. **Then the door stickers.** A worker needs the stickers only for the furniture in his part
   of the notebook. So as soon as a batch of stickers is written, the crew adds them up and
   each worker keeps only his own share; the rest are thrown away at once. **Stage 2.**
3. **Finally, the furniture itself.** Each worker carries 1/N of the household. Just before a
   room is worked on, the crew lends each other the pieces it needs, uses them, and hands
   them back. **Stage 3.**

Every cut makes each backpack lighter, and every cut means more shouting across the house.
In this chapter we measure both, on real ranks, and set each number beside the ZeRO paper's
formula.
"""),
md(r"""
## What the paper claims

Ψ is the number of trainable parameters (elements) and N the number of ranks. With mixed
precision and Adam, one parameter costs 2 bytes (bf16/fp16 parameter) + 2 bytes (bf16/fp16
gradient) + 12 bytes (fp32 master 4, momentum 4, variance 4) = **16 bytes**. Per rank:

| stage | split among the N ranks | model-state bytes per rank | traffic per rank per step: the paper |
|---|---|---|---|
| 0 (DDP) | nothing | 2Ψ + 2Ψ + 12Ψ = **16Ψ** | **2Ψ**: all-reduce the gradients |
| 1 | optimizer states | 2Ψ + 2Ψ + 12Ψ/N = **4Ψ + 12Ψ/N** | **2Ψ**: reduce-scatter the gradients (Ψ), all-gather the updated parameters (Ψ) |
| 2 | + gradients | 2Ψ + (2 + 12)Ψ/N = **2Ψ + 14Ψ/N** | **2Ψ**: the same two collectives |
| 3 | + parameters | (2 + 2 + 12)Ψ/N = **16Ψ/N** | **3Ψ**: all-gather in forward (Ψ), again in backward (Ψ), reduce-scatter the gradients (Ψ) |

**DeepSpeed does not move the paper's bytes at stages 1 and 2.** DeepSpeed 0.19.8, by default,
**all-reduces** each gradient bucket (2Ψ in all) and each rank keeps the slices it owns; after
the step it all-gathers the parameters (Ψ): **3Ψ**, as much as stage 3. At stage 3 it moves 3Ψ
when every module is gathered again for backward (`stage3_max_reuse_distance` 0), less with its
default, which keeps recently used modules gathered. zerolab runs DeepSpeed's collectives by
default (`benchmarks/results/side_by_side.txt` sets its calls and bytes beside DeepSpeed's, config
by config); the paper's reduce-scatter is zerolab's own switch, `"zerolab":
{"ideal_reduce_scatter": true}`. We measure both, and every table below says which it shows.

**The traffic convention.** We count the bytes each rank puts on the wire in a ring, as
nccl-tests' *bus bandwidth* and `zerolab.comm` do: for a tensor of S bytes, an all-reduce costs
each rank 2(N−1)/N·S, a reduce-scatter or an all-gather (N−1)/N·S. The paper's 2Ψ and 3Ψ
count elements and drop the factor (N−1)/N, which tends to 1 for large N. Below we keep the
factor and count bytes: Ψ elements of bf16 are 2Ψ bytes.

The folding chair (the **activations**) is not a model state: no stage splits it, and it is
left out of every number in this chapter.

In zerolab a stage is three switches, each short enough to read in a sitting (the table is at
the top of `zerolab/stage.py`): how gradients are reduced (`reduce.py`), where parameters live
(`params.py` for stages 0-2, `gather.py` for stage 3) and where optimizer states live
(`offload.py`), on top of the flat, padded buffers of `zerolab/flat.py`.
"""),
md(r"""
## One model, one crew per world size

A TinyLM made wider: about 189,000 parameters. That is big enough that **padding** is
negligible (each flat buffer is padded with at most N−1 zeros so that it cuts into N equal
shards) and small enough that a step takes milliseconds on a laptop.
"""),
code(r"""
import matplotlib.pyplot as plt
import numpy as np
import torch

import zerolab
from zerolab.memory import comm_ops, comm_volume, model_state_bytes
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.reference import train_engine, train_reference

torch.set_num_threads(1)   # one thread here, as on every rank below: the same arithmetic, run after run
VOCAB, SEQ = 257, 16


def make_model():
    # seed=0 every time: every rank, and the single-process reference, start from the same weights
    return TinyLM(vocab=VOCAB, d=100, hidden=400, layers=2, seq_len=SEQ, seed=0)


model = make_model()
PSI = sum(p.numel() for p in model.parameters() if p.requires_grad)
for name, p in model.named_parameters():
    print(f"{name:22} {str(tuple(p.shape)):11} {p.numel():>7,} elements"
          + ("" if p.requires_grad else "  (frozen)"))
print(f"Ψ = {PSI:,} trainable parameters (the output head shares the embedding matrix: counted once)")
"""),
code(r"""
GLOBAL_BATCH = 12     # sequences per step, split over the ranks: 12 / N each, for N = 1, 2, 3, 4


def ds_config(stage, world_size, precision="bf16", ideal=False, **zero):
    # reduce_bucket_size 50,000 elements: this model then makes several buckets, as a real model
    # makes many. stage3_param_persistence_threshold 0: DeepSpeed's default (100,000 elements)
    # would keep every parameter of this small model whole; we come back to it below.
    # stage3_max_reuse_distance 0: the paper's stage 3, every module gathered again for backward;
    # DeepSpeed's default (10^9 elements) would keep this small model gathered across (chapter 8).
    # ideal=True: zerolab's own switch, the paper's reduce-scatter at stages 1-2 (not DeepSpeed's).
    cfg = {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 50_000,
                              "stage3_param_persistence_threshold": 0,
                              "stage3_max_reuse_distance": 0, **zero},
    }
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    if ideal:
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg
"""),
md(r"""
Starting a rank costs seconds (a fresh Python process importing torch); running a function on
a rank that is already up costs milliseconds. So we start one crew per world size, 1 + 2 + 3 + 4
= 10 ranks, and every cell below reuses them. One thread per rank: ten ranks share the cores.
"""),
code(r"""
crews = {n: zerolab.Crew(n, threads=1) for n in (1, 2, 3, 4)}
print(f"{sum(c.world_size for c in crews.values())} ranks up, in crews of", ", ".join(str(n) for n in crews))
"""),
md(r"""
The function below runs on every rank. It builds the engine exactly as a DeepSpeed user
would, trains two steps and measures the second: what the rank holds (`engine.memory()`,
read from the tensors themselves) and what it sent (`engine.ledger`, every collective the
engine issued). The first step is there because torch's AdamW creates its momentum and
variance lazily, at the first step.
"""),
code(r"""
def train_and_measure(stage, precision="bf16", ideal=False, **zero):
    world = zerolab.world_size()
    engine = zerolab.initialize(make_model(), ds_config(stage, world, precision, ideal, **zero))
    batches = lm_batches(2, GLOBAL_BATCH, SEQ, VOCAB)
    train_engine(engine, batches[:1], lm_loss)     # step 1: Adam's states appear
    mark = engine.ledger.mark()
    prefetched_before = getattr(engine.stage, "prefetches", 0)
    fetched_before = getattr(engine.stage, "fetches", 0)
    train_engine(engine, batches[1:], lm_loss)     # step 2: the one we measure
    step = engine.ledger.since(mark)               # ZeRO's calls (zerolab's own checks: step.checks)
    groups = engine.stage.groups
    persistent = getattr(engine.stage, "persistent", [False] * len(groups))
    return {
        "memory": engine.memory(),                          # bytes this rank holds
        "groups": len(groups),       # flat buffers: 1 at stages 0-2, 1 per bucket (ideal), per module (3)
        "padding": sum(g.padding for g in groups),          # zero elements added for equal shards
        "wire": step.by_tag(),                              # bytes on this rank's wire, by purpose
        "calls": {op: t["calls"] for op, t in step.totals().items()},    # collectives, by kind
        "param_gathers": sum(1 for rec in step.records if rec.tag.startswith("params")),   # all-gather calls
        "module_gathers": getattr(engine.stage, "fetches", 0) - fetched_before,     # stage 3: groups gathered
        "headers": len(step.checks),                        # stage 3: zerolab's own 16-byte order checks
        "header_bytes": sum(rec.wire_bytes for rec in step.checks),
        "prefetched": getattr(engine.stage, "prefetches", 0) - prefetched_before,   # stage 3: gathers issued ahead
        "peak_gathered": getattr(engine.stage, "peak_gathered_numel", 0),           # stage 3: elements at once
        "persistent_numel": sum(g.numel for g, keep in zip(groups, persistent) if keep),
        "layout": [{"label": g.label, "names": g.names, "numels": g.numels, "padded": g.padded_numel,
                    "shards": [g.shard_range(r) for r in range(world)]} for g in groups],
        "bucket_starts": [b.parts[0].start for b in engine.stage.grads.buckets],   # (one-group layout)
        "master_numel": sum(m.numel() for m in engine.stage.masters),   # what this rank's optimizer steps
    }


runs = {}          # (N, stage) -> rank 0's measurements, DeepSpeed's collectives (zerolab's default)
ideal = {}         # (N, stage) -> the same with the paper's reduce-scatter (zerolab's switch), stages 1-2
for n, crew in crews.items():
    for stage in (0, 1, 2, 3):
        per_rank = crew.run(train_and_measure, stage)
        assert all(r["memory"] == per_rank[0]["memory"] for r in per_rank), "ranks hold different amounts"
        runs[n, stage] = per_rank[0]
        if stage in (1, 2) and n > 1:
            ideal[n, stage] = crew.run(train_and_measure, stage, ideal=True)[0]
print(f"{len(runs)} runs: N = 1..4, stages 0..3, bf16 + AdamW; every rank of a run holds the same bytes")
print(f"{len(ideal)} more at stages 1-2 with the paper's reduce-scatter (N = 2..4)")
"""),
md(r"""
## Memory per rank: measured beside the formula

Bytes of model states (parameters + gradients + optimizer states) that **one rank** holds
after a step, measured, beside the paper's formula for the same Ψ and N.
"""),
code(r"""
FORMULA = {0: "16Ψ", 1: "4Ψ + 12Ψ/N", 2: "2Ψ + 14Ψ/N", 3: "16Ψ/N"}
NAME = {0: "0 (DDP)", 1: "1", 2: "2", 3: "3"}

print(f"bytes per rank, bf16 + AdamW, Ψ = {PSI:,}")
print(f"{'N':>2}  {'stage':9}{'params':>9}{'grads':>9}{'optimizer':>11}{'measured':>11}"
      f"{'formula':>11}  {'':12}{'measured − formula':>19}")
for n in crews:
    for stage in range(4):
        m = runs[n, stage]["memory"]
        f = model_state_bytes(PSI, stage, n)["total"]
        print(f"{n:>2}  {NAME[stage]:9}{m['params']:>9,}{m['grads']:>9,}{m['optimizer_states']:>11,}"
              f"{m['model_states']:>11,}{f:>11,.0f}  {FORMULA[stage]:12}{m['model_states'] - f:>12,.0f} bytes")
"""),
md(r"""
The measurement matches the formula to within 91 bytes out of 0.75 to 3 million. The
difference is not noise; every byte of it has a reason:

- **padding**: each flat buffer is padded to a multiple of N, and the padding is stored
  (2 + 2 + 12 bytes per element, divided by N for each giant that is split);
- the model's one **frozen** parameter (`temperature`, 1 element of bf16: 2 bytes), which
  every rank keeps whole;
- torch's AdamW keeps a **step counter** per tensor it steps (a 4-byte fp32 scalar), and the
  engine steps one tensor per flat group.

The next cell adds those up and checks that nothing else is left.
"""),
code(r"""
def known_extra_bytes(n, stage, run):
    per_pad_element = sum(b / (n if stage >= s else 1) for b, s in ((2, 3), (2, 2), (12, 1)))
    return run["padding"] * per_pad_element + 2 + 4 * run["groups"]


left = {key: run["memory"]["model_states"] - model_state_bytes(PSI, key[1], key[0])["total"]
        - known_extra_bytes(*key, run) for key, run in runs.items()}
print("bytes not explained by padding, the frozen parameter and Adam's step counters:")
print(f"    {max(abs(v) for v in left.values()):.0f} (largest over the {len(left)} runs)")
"""),
code(r"""
fig, ax = plt.subplots(figsize=(7.5, 4.5))
ns = np.linspace(1, 4, 61)
colors = {0: "tab:gray", 1: "tab:blue", 2: "tab:orange", 3: "tab:green"}
for stage in range(4):
    ax.plot(ns, [model_state_bytes(PSI, stage, n)["total"] / 1e6 for n in ns], color=colors[stage],
            label=f"{NAME[stage]}: {FORMULA[stage]}")
    ax.plot(list(crews), [runs[n, stage]["memory"]["model_states"] / 1e6 for n in crews], "o",
            color=colors[stage], markersize=8)
ax.plot([], [], "o", color="black", label="measured: engine.memory() on rank 0")
ax.set(xlabel="N, ranks", ylabel="model states per rank (MB, 1 MB = 10⁶ bytes)", xticks=list(crews),
       ylim=(0, None), title=f"Each stage takes one more giant out of the backpack (Ψ = {PSI:,}, bf16)")
ax.legend()
plt.show()
"""),
md(r"""
Read the plot from the top. DDP stays at 16Ψ whatever N is: that is the wall of chapter 2.
Stage 1 removes most of the weight at once, because the notebook (12 bytes of the 16) was
the heavy part; it can never go below 4Ψ, the bf16 parameters and gradients every rank still
keeps whole. Stage 2 can never go below 2Ψ. Only stage 3 keeps falling as 1/N: add ranks and
each backpack keeps getting lighter.

These are DeepSpeed's numbers with its default bf16 settings, where gradients accumulate in the
model's dtype: stage 0 takes its DDP path (`FP16_Optimizer`, which also serves bf16) and stages
1-2 its ZeRO optimizer. With `"data_types": {"grad_accum_dtype": "fp32"}`, stages 0 and 1 run
DeepSpeed's `BF16_Optimizer` instead, which adds a full fp32 gradient buffer on every rank:
**8Ψ + 12Ψ/N** (zerolab does not have that path: it refuses a `data_types` block).

Model states are not all a rank holds. Stage 2 keeps a **gradient bucket** in flight during
backward (at most `reduce_bucket_size` elements, 50,000 here) and stage 3 holds the
**gathered parameters** of the modules being computed, and of the modules it has already
started to gather for later (its *prefetch*, below). `engine.memory()` reports them
separately, as `peak_buffers`. (*On a GPU cluster* DeepSpeed allocates its bucket buffers
once and reuses them, two of them with `overlap_comm`; here a bucket's buffer is made when it
fills and freed when it is sent.)
"""),
code(r"""
for stage in (2, 3):
    m = runs[4, stage]["memory"]
    print(f"{NAME[stage]}, N = 4: model states {m['model_states']:>9,} bytes,"
          f" peak transient buffers {m['peak_buffers']:>9,} bytes")
print(f"stage 3: most parameter elements gathered (or in flight) at once: {runs[4, 3]['peak_gathered']:,}"
      f" of Ψ = {PSI:,}")
"""),
md(r"""
Stage 3's peak holds the **whole model** at once here, and more bytes than that: from the second
step on, stage 3 gathers ahead of time (prefetch, explained with the timeline below), the modules
gathered ahead travel in one all-gather and are copied out of its buffer one by one, and
DeepSpeed's defaults are far larger than this 189k-parameter model: each fetch may start
gathering up to `stage3_prefetch_bucket_size` = 5·10⁷ elements ahead, and only
`stage3_max_live_parameters` = 10⁹ bounds what is gathered at once. On a model of billions of
parameters those bounds hold a few layers, not the model; on a small one, saving memory needs
smaller values.
"""),
md(r"""
## Traffic per step: DeepSpeed's 3Ψ beside the paper's 2Ψ

From the ledger of the measured step, the bytes on one rank's wire, split by purpose: moving
**gradients** (DDP's all-reduce; at stages 1 and 2 DeepSpeed's all-reduce of each bucket, or the
paper's reduce-scatter; stage 3's reduce-scatter) and moving **parameters** (the all-gathers).
The "in Ψ" column divides the total by (N−1)/N·Ψ·2 bytes, so it reads directly as the paper's
2Ψ and 3Ψ. Stages 1 and 2 run twice: as DeepSpeed runs them (zerolab's default) and with the
paper's reduce-scatter (zerolab's switch); stage 3 with reuse distance 0 (every module gathered
again for backward, the paper's count) and with DeepSpeed's default reuse distance.

**Predict, then run.** Stage 2 holds a quarter of DDP's gradients at N = 4. Does it move fewer
bytes than DDP, the same, or more, the paper's way? And DeepSpeed's way? And stage 3, which must
fetch every parameter before using it? Write down a multiple of Ψ for each row, then run the cell.
"""),
code(r"""
reuse = {n: crews[n].run(train_and_measure, 3, stage3_max_reuse_distance=10**9)[0] for n in (2, 3, 4)}
ROWS = [  # (what runs, where its measurement is, the formula in units of (N-1)/N·Ψ·2 bytes)
    ("0 (DDP)", lambda n: runs[n, 0], 2),
    ("1 DeepSpeed: all-reduce", lambda n: runs[n, 1], 3),     # all-reduce (2) + all-gather (1)
    ("1 paper: reduce-scatter", lambda n: ideal[n, 1], 2),    # reduce-scatter (1) + all-gather (1)
    ("2 DeepSpeed: all-reduce", lambda n: runs[n, 2], 3),
    ("2 paper: reduce-scatter", lambda n: ideal[n, 2], 2),
    ("3 reuse distance 0", lambda n: runs[n, 3], 3),          # gather, gather again, reduce-scatter
    ("3 DeepSpeed's reuse 1e9", lambda n: reuse[n], 2),       # gather once, reduce-scatter
]
print(f"bytes on one rank's wire in one step (ring convention; bf16 = 2 bytes per element), Ψ = {PSI:,}")
print(f"{'N':>2}  {'stage':25}{'gradients':>11}{'parameters':>12}{'total':>10}{'formula':>10}"
      f"   in Ψ (formula)")
for n in (2, 3, 4):
    unit = (n - 1) / n * PSI * 2
    for label, where, k in ROWS:
        wire = where(n)["wire"]
        total = wire.get("grads", 0) + wire.get("params", 0)
        print(f"{n:>2}  {label:25}{wire.get('grads', 0):>11,.0f}{wire.get('params', 0):>12,.0f}"
              f"{total:>10,.0f}{k * unit:>10,.0f}   {total / unit:.3f} ({k}Ψ)")
"""),
md(r"""
**The paper's way** (the switch), stages 1 and 2 move exactly DDP's 2Ψ (up to the padding): an
all-reduce is a reduce-scatter followed by an all-gather, and ZeRO only moves the optimizer step
in between, so stages 1 and 2 buy their memory savings **for free in traffic**.

**DeepSpeed's way** they move **3Ψ**, half again as much: each bucket is all-reduced (2Ψ over
the step), each rank keeps the slices that fall in its own partition, and after the step the
updated parameters are all-gathered (Ψ). The reason is DeepSpeed's layout (pictured in *Who owns
what*, below): its stages 1 and 2 keep the parameters in **one** flat buffer cut into N contiguous
partitions, and a bucket is a stretch of that buffer that lies in one or two ranks' partitions,
not a buffer that cuts into N equal pieces, as a reduce-scatter needs. DeepSpeed's
`"use_multi_rank_bucket_allreduce": false` sends one `reduce` to each owner instead. The paper's
layout, which the switch builds, makes every bucket its own flat buffer of N shards.

Stage 3 moves **3.136 Ψ** when every module is gathered again for backward, not 3Ψ. The extra
0.136 Ψ is one matrix: the embedding (257 × 100 = 25,700 elements, 25,700 / 189,000 ≈ 0.136).
The output head shares it, and in stage 3 each module gathers the parameters it uses for its own
forward and releases them after, so a tied matrix used by two modules is gathered twice in
forward (DeepSpeed behaves the same way). The formula counts one forward gather per parameter.
With DeepSpeed's default `stage3_max_reuse_distance` (10⁹ elements), a module that the recorded
order uses again within that many elements stays gathered: this small model is gathered once per
step and moves 2Ψ, like the paper's stage 2. On a model of billions of parameters only the
modules near the turn from forward to backward stay. Let us check that the difference at reuse
distance 0 is the embedding and nothing else:
"""),
code(r"""
embed = model.embed.weight.numel()
for n in (2, 3, 4):
    extra_elements = (runs[n, 3]["wire"]["params"] - comm_ops(PSI, 3, n)["all_gather"]) / ((n - 1) / n * 2)
    print(f"N = {n}: stage 3 gathered {extra_elements:,.0f} more elements than 2Ψ; "
          f"the embedding has {embed:,}, padding the rest")
"""),
md(r"""
The same measurement at N = 4 as a picture: each bar is one rank's bytes per step, split into
gradients and parameters, in units of (N−1)/N·2Ψ bytes; the black line is the formula.
"""),
code(r"""
from zerolab.viz import collective_timeline, traffic_bars

n = 4
unit = (n - 1) / n * PSI * 2
BARS = [("0 (DDP)", runs[n, 0], 2), ("1\nDeepSpeed", runs[n, 1], 3), ("1\npaper", ideal[n, 1], 2),
        ("2\nDeepSpeed", runs[n, 2], 3), ("2\npaper", ideal[n, 2], 2), ("3\nreuse 0", runs[n, 3], 3)]
fig, ax = plt.subplots(figsize=(8.5, 4.2))
traffic_bars(ax, {i: r["wire"] for i, (_, r, _) in enumerate(BARS)},
             {i: k * unit for i, (_, _, k) in enumerate(BARS)}, unit=unit,
             names={i: label for i, (label, _, _) in enumerate(BARS)},
             title=f"DeepSpeed's stages 1-2 move 3Ψ, the paper's 2Ψ; stage 3 3Ψ (N = {n}, Ψ = {PSI:,})")
ax.lines[0].set_label("formula: 2Ψ or 3Ψ")
ax.legend(loc="upper left", fontsize=8, frameon=False)
plt.show()
"""),
md(r"""
### Gradient accumulation: stage 2 pays per micro-step

With `gradient_accumulation_steps = 4` a rank runs 4 forward/backward passes per optimizer step.
Stage 1 keeps full gradients, so it can add the 4 micro-steps up locally and reduce them once
at the end. Stage 2 keeps only its shard: it must reduce every bucket in every micro-step, as
soon as backward fills it. Stage 3 gathers the parameters in every micro-step too.

**Predict, then run.** At N = 3 with accumulation 4, how many Ψ (in (N−1)/N·2Ψ units) does
each row move per optimizer step? (Accumulation 1 gives 2, 3, 2, 3, 2 and 3, as above.)
"""),
code(r"""
def step_traffic(stage, accumulate, ideal=False):
    world = zerolab.world_size()
    cfg = ds_config(stage, world, ideal=ideal)
    cfg["gradient_accumulation_steps"] = accumulate
    cfg["train_micro_batch_size_per_gpu"] = GLOBAL_BATCH // (world * accumulate)
    engine = zerolab.initialize(make_model(), cfg)
    batches = lm_batches(2, GLOBAL_BATCH, SEQ, VOCAB)
    train_engine(engine, batches[:1], lm_loss)
    mark = engine.ledger.mark()
    train_engine(engine, batches[1:], lm_loss)     # one optimizer step = `accumulate` micro-steps
    step = engine.ledger.since(mark)
    return {"wire": step.by_tag(),
            "records": [(r.op, r.tag, r.wire_bytes) for r in step.records]}


n = 3
unit = (n - 1) / n * PSI * 2
print(f"N = {n}, bytes per optimizer step on one rank's wire (gradients + parameters), in Ψ units")
print(f"{'stage':26}{'accumulation 1':>15}{'accumulation 4':>16}   gradient calls")
for label, stage, paper in (("0 (DDP)", 0, False), ("1 DeepSpeed: all-reduce", 1, False),
                            ("1 paper: reduce-scatter", 1, True), ("2 DeepSpeed: all-reduce", 2, False),
                            ("2 paper: reduce-scatter", 2, True), ("3 reuse distance 0", 3, False)):
    cells, calls = [], []
    for accumulate in (1, 4):
        r = crews[n].run(step_traffic, stage, accumulate, paper)[0]
        wire = r["wire"]
        cells.append(f"{(wire.get('grads', 0) + wire.get('params', 0)) / unit:.3f} Ψ")
        calls.append(str(sum(1 for op, tag, _ in r["records"] if tag.startswith("grads"))))
    print(f"{label:26}{cells[0]:>15}{cells[1]:>16}   {' -> '.join(calls)}")
"""),
md(r"""
Stages 0 and 1 do not care how many micro-steps there are: they send the summed gradient once
per optimizer step. Stage 2 sends each micro-step's gradient as it is made, so with accumulation
4 its gradient traffic is 4 times larger: DeepSpeed's way 4 × 2 + 1 = 9 units instead of 3, the
paper's way 4 × 1 + 1 = 5 instead of 2. That is the price of never holding a full gradient;
DeepSpeed's stage 2 pays it too. Stage 3 pays 4 times everything: it also gathers the parameters
again in each micro-step's forward and backward.

### Stage 3 over one step: gather, use, release

The ledger keeps every collective in the order it was issued. For stage 3 on 2 ranks, one
step (accumulation 1) reads like the crew's day: each module's parameters are all-gathered
(`params <module>`, or `params <module> + k more` for the modules gathered ahead with it: see
prefetch below; `(root)` is the model's own parameter, the position table) for its forward and
released after (a release sends nothing, so it is not on the ledger); backward gathers them
again, in reverse order, and as the modules' gradients complete they are packed into buckets of
up to `reduce_bucket_size` elements, each reduce-scattered as one call (`grads bucket k`), and
the gathered parameters go back. Last comes the small all-reduce of the overflow check and the
gradient norm.

**Prefetch.** The first step gathers each module's parameters when its forward (or backward)
starts, one blocking all-gather after another, and records the order of the modules. From the
second step on, each pass follows the previous pass's record, by DeepSpeed's rule
(`fetch_sub_module` in `partitioned_param_coordinator.py`): at every module's fetch (a module
without parameters of its own too) it starts one asynchronous all-gather of the modules the
record says come next, taking them while fewer than min(`stage3_max_live_parameters` − elements
already gathered, `stage3_prefetch_bucket_size`) elements are taken (the one that crosses the
budget goes too). With DeepSpeed's defaults (10⁹ and 5·10⁷) a pass's first fetch starts all the
rest of this model at once, in **one** all-gather (DeepSpeed coalesces a prefetch batch the same
way), so the
step below, the second one, gathers 19 modules in 5 all-gathers, 17 of them prefetched (counted
in the next section). The ledger writes an asynchronous collective down when it is waited for,
that is where the first of its modules needs it; what changes is when the bytes travel (earlier,
behind the work) and in how many calls, not how many bytes. *On a GPU cluster* DeepSpeed issues
these all-gathers on a CUDA stream of their own, so they overlap the current module's kernels.
"""),
code(r"""
records = crews[2].run(step_traffic, 3, 1)[0]["records"]     # ZeRO's calls (no order checks)
fig, ax = plt.subplots(figsize=(11, 3.8))
rows = collective_timeline(ax, records, title="Stage 3, one step on 2 ranks: gather before use, "
                           "reduce-scatter and release after backward")
plt.show()
kinds = {}
for _, lane, tag, _ in rows:
    kinds[lane] = kinds.get(lane, 0) + 1
print("collectives in the step:", ", ".join(f"{k} {v}" for k, v in kinds.items()))
"""),
md(r"""
Two kinds of small collectives are left out of the tables. Every step all-reduces 16 bytes
(2(N−1)/N × 16 = 24 bytes on the wire at N = 4): one float64 saying whether any rank saw an inf
or NaN gradient (bf16's overflow check) and one for the squared gradient norm that clipping
needs. Both are DeepSpeed's, on by default in DeepSpeed 0.19.8 (`bf16.check_grad_overflow`, and
`gradient_clipping` 1.0); older DeepSpeed versions have other defaults.

The other kind is **zerolab's own**, not DeepSpeed's: in stage 3 the ranks all-gather a 16-byte
**header** (the first module's id, how many gathers, a checksum of them) before each *unit* of
parameter gathers: one gather, or one gather and the prefetches issued with it. A forward that
followed the recorded order ends with one more header (a checksum of every module it gathered,
`check forward pass`). Ranks that took different paths through the model would otherwise issue
all-gathers of different sizes and hang; with the headers they raise `ModuleOrderError`
instead. DeepSpeed sends no such thing, so the ledger files them apart (`ledger.checks`), out of
every count of ZeRO's calls and bytes above; `"zerolab": {"order_checks": false}` turns them
off. Without prefetch (the first step, or `stage3_prefetch_bucket_size` 0) there is one header
per gather:
"""),
code(r"""
for stage in range(4):
    r = runs[4, stage]
    print(f"N = 4, stage {NAME[stage]:8} overflow check + grad norm {r['wire'].get('overflow', 0):>3.0f} bytes;"
          f" zerolab's headers {r['headers']:>2} calls, {r['header_bytes']:>3.0f} bytes")
no_prefetch = crews[4].run(train_and_measure, 3, stage3_prefetch_bucket_size=0)[0]
for label, r in (("default prefetch", runs[4, 3]), ("prefetch off (0)", no_prefetch)):
    print(f"stage 3, N = 4, {label}: {r['module_gathers']} module gathers, {r['prefetched']:>2} of them"
          f" prefetched,\n    in {r['param_gathers']:>2} all-gathers (+ {r['headers']:>2} headers, zerolab's), "
          f"{r['wire']['params']:,.0f} parameter bytes on the wire")
"""),
md(r"""
### Stage 3's small parameters: `stage3_param_persistence_threshold`

Gathering a LayerNorm weight of 100 elements costs a collective call (its latency) to save 200
bytes. DeepSpeed therefore keeps every parameter with at most `stage3_param_persistence_threshold`
elements **persistent** (as long as their total stays within `stage3_model_persistence_threshold`,
unlimited by default): gathered once, kept whole, and refreshed after each optimizer step, all
of them in one all-gather. Their gradients are still reduce-scattered. Persistent parameters then move 2Ψ
like stage 2, not 3Ψ: the formula becomes 3(N−1)/N·(Ψ−P) + 2(N−1)/N·P for P persistent
elements (`comm_ops(..., persistent_numel=P)`). They cost memory, as every rank keeps them
whole.

Three thresholds on 4 ranks: 0 (nothing persistent), 30,000 (the position table, the
embedding, every LayerNorm and every bias) and DeepSpeed's default 100,000 (every parameter of
this small model):
"""),
code(r"""
n = 4
print(f"stage 3, N = {n}, Ψ = {PSI:,}; bytes")
print(f"{'threshold':>10}{'persistent P':>14}{'modules gathered':>18}{'all-gathers':>13}{'measured':>11}"
      f"{'formula':>11}{'params per rank':>17}")
for threshold in (0, 30_000, 100_000):
    r = crews[n].run(train_and_measure, 3, stage3_param_persistence_threshold=threshold)[0]
    P = r["persistent_numel"]
    measured = r["wire"]["grads"] + r["wire"]["params"]
    print(f"{threshold:>10,}{P:>14,}{r['module_gathers']:>18}{r['param_gathers']:>13}{measured:>11,.0f}"
          f"{comm_volume(PSI, 3, n, persistent_numel=P):>11,.0f}{r['memory']['params']:>17,}")
"""),
md(r"""
With the threshold at 30,000 the measurement meets the formula (the embedding is now gathered
once, after the step, so its double gather is gone too), and less than half the modules are
gathered in forward and backward: the small parameters are gathered once, together, after the
step. (The all-gather calls hardly change here: with prefetch, the modules gathered ahead travel
in one call anyway.) With DeepSpeed's default, every parameter of a
189k-parameter model is persistent: stage 3 quietly becomes the paper's stage 2 (parameters
whole: 2Ψ = 377,800 bytes per rank; 2Ψ of traffic, the gradients reduce-scattered and the
parameters in a single all-gather per step, less than DeepSpeed's own stage 2 moves). On a
model with billions of parameters, 100,000 elements is a small LayerNorm or bias, and the
default makes sense; on a small model, set the threshold yourself.
"""),
md(r"""
## Correct first: every stage trains like one process

Splitting the load must not change the result. We train 3 steps in **fp32** with each stage on
1 to 4 ranks, and compare every parameter with plain single-process training on the same
global batches (the same 12 sequences per step, all in one process). `engine.full_params()`
gathers the full fp32 values, as DeepSpeed's `zero_to_fp32` would.
"""),
code(r"""
batches = lm_batches(3, GLOBAL_BATCH, SEQ, VOCAB, seed=1)
ROUNDING, AMPLIFIED = 1e-6, 3e-4     # a few fp32 rounding steps near 1; a tenth of one AdamW step (lr / 10)


def train_fp32(stage):
    engine = zerolab.initialize(make_model(), ds_config(stage, zerolab.world_size(), "fp32"))
    train_engine(engine, batches, lm_loss)          # each rank takes its 12/N sequences of each batch
    full = engine.full_params()                     # the same on every rank
    return full if zerolab.rank() == 0 else None


def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def verdict(diff, bounds=(ROUNDING, AMPLIFIED)):
    # The exact value is rounding noise: it changes with the CPU's SIMD kernels. What does not
    # change is which bound it is under. (Print max_diff(...) to see it on your machine.)
    for bound in bounds:
        if diff < bound:
            return f"< {bound:.0e}"
    return f"{diff:.1e} (!)"                     # a real difference: this would be a bug


reference = train_reference(make_model(), ds_config(0, 1, "fp32"), batches, lm_loss)
print("largest |zerolab − one process| over all 188,900 parameters after 3 fp32 AdamW steps")
print(f"{'':14}" + "".join(f"{f'N = {n}':>10}" for n in crews))
zero_runs = {}
for stage in range(4):
    for n, crew in crews.items():
        zero_runs[n, stage] = crew.run(train_fp32, stage)[0]
    print(f"{NAME[stage]:14}" + "".join(f"{verdict(max_diff(zero_runs[n, stage], reference)):>10}" for n in crews))
print(f"the smallest bound that holds:  < {ROUNDING:.0e}  a few fp32 rounding steps")
print(f"{'':31} < {AMPLIFIED:.0e}  rounding amplified by AdamW, far below one step (lr 3e-3)")
"""),
md(r"""
Not zero, and for N ≥ 2 well above the last bits of fp32 (a rounding step is about 6·10⁻⁸ for a
value near 1), though still far below what one step moves a parameter (lr = 3·10⁻³). The exact
values are not printed on purpose: they are rounding noise, and another CPU (another SIMD width
in torch's matrix kernels) gives other digits, while the bounds hold everywhere.

Is that ZeRO's doing? No: the four rows are alike, DDP (stage 0) included, and
**[appendix 3a](03a_appendix_adamw_rounding.ipynb)** finds the culprit. One process that adds up
its batch in N micro-batches lands just as far from the whole-batch run (the order of the sums
changes the last bits of each gradient element), and plain SGD stays within a rounding step or
two: it is AdamW that amplifies those last bits, in any data-parallel training.

## Who owns what: the shards

The rule behind all of it fits in one line. A flat buffer of `padded_numel` elements (a
multiple of N) is cut into N equal pieces, and **rank r owns the r-th piece**:
`[r · padded_numel / N, (r + 1) · padded_numel / N)`. Equal pieces, in rank order, because that
is what an all-gather collects (and what a reduce-scatter delivers).

Which buffer is cut is where DeepSpeed and the paper part. DeepSpeed's stages 1 and 2 lay every
trainable parameter in **one** flat buffer, in the order backward produces the gradients (the
last layer first), so a rank's partition is one stretch of the model; a gradient bucket (dashed
lines) is a stretch of `reduce_bucket_size` elements of that buffer, wherever the partitions
fall. The paper's layout (the switch) makes each bucket a flat buffer of its own, cut into N
shards: every rank owns a piece of every bucket, which is what lets a bucket be reduce-scattered.
Below, stage 1 on 3 ranks in both layouts, colored by owner. Black lines are parameter
boundaries; the dense black edges are the small parameters, biases and LayerNorms of 100 to 400
elements. The padding (at most N − 1 = 2 elements per buffer) is too thin to see.
"""),
code(r"""
from zerolab.viz import shard_map

n, layout, paper_layout = 3, runs[3, 1]["layout"], ideal[3, 1]["layout"]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 2.2 + 0.55 * len(paper_layout)),
                                  height_ratios=[1, len(paper_layout)], layout="constrained")
shard_map(top, layout, title=f"DeepSpeed's layout, stage 1 on {n} ranks: one flat buffer "
          "(red: where gradient buckets begin)")
top.vlines(runs[3, 1]["bucket_starts"][1:], -0.5, 0.5, colors="red", linestyles="--", linewidth=2)
top.get_legend().remove()                  # the same colours as below
top.set_xlabel("element offset in the flat buffer")
shard_map(bottom, paper_layout, title="The paper's layout (zerolab's switch): every bucket its own "
          "buffer, cut into N shards")
plt.show()
"""),
code(r"""
print("parameters cut between ranks (stage 1, N = 3, DeepSpeed's layout; ranges inside the parameter):")
for g in layout:
    offset = 0
    for name, numel in zip(g["names"], g["numels"]):
        owners = [(r, max(a, offset) - offset, min(b, offset + numel) - offset)
                  for r, (a, b) in enumerate(g["shards"]) if max(a, offset) < min(b, offset + numel)]
        if len(owners) > 1:
            print(f"  {name} ({numel:,} elements):")
            print("      " + ", ".join(f"rank {r} [{s:,}, {e:,})" for r, s, e in owners))
        offset += numel
per_rank = crews[3].run(train_and_measure, 1)
print("elements each rank's optimizer steps:", [r["master_numel"] for r in per_rank],
      f"(the padded buffer's {sum(g['padded'] for g in layout):,} / 3)")
"""),
md(r"""
A parameter cut in two is not a problem: Adam, AdamW and SGD update every element on its own,
so stepping a shard of the flat buffer is the same as stepping the parameters inside it. (An
optimizer that looks at a whole tensor at once, such as LAMB's trust ratio, would not be; this
is why zerolab, like DeepSpeed, wants `zero_allow_untested_optimizer` for anything else.)

We are done with the ranks:
"""),
code(r"""
for crew in crews.values():
    crew.close()
"""),
md(r"""
## What we measured

On a 188,900-parameter TinyLM, bf16 + AdamW, 1 to 4 ranks, per rank:

- **Memory** (bytes) at N = 4: DDP holds 3,022,406 (16Ψ = 3,022,400), stage 1 1,322,306
  (4Ψ + 12Ψ/N = 1,322,300), stage 2 1,038,956 (2Ψ + 14Ψ/N = 1,038,950), stage 3 755,638
  (16Ψ/N = 755,600). In all 16 runs the difference from the formula is exactly the padding, the
  one frozen parameter and AdamW's 4-byte step counters.
- **Traffic** (bytes per step, ring convention, in units of (N−1)/N·Ψ·2 bytes): DDP moves
  2.000; DeepSpeed's stages 1 and 2 move 3.000 (each bucket all-reduced, then one all-gather),
  the paper's 2.000 (each bucket reduce-scattered, zerolab's switch); stage 3 moves 3.136 when
  every module is gathered again for backward (3Ψ plus a second forward gather of the tied
  embedding) and 2.000 with DeepSpeed's default reuse distance, which keeps this small model
  gathered. Persistent parameters (`stage3_param_persistence_threshold`) bring stage 3 to the
  formula exactly; with DeepSpeed's default threshold they turn this small model's stage 3 into
  the paper's stage 2. With gradient accumulation 4, stage 2 pays every micro-step: 9 units
  DeepSpeed's way, 5 the paper's.
- **Correctness** (fp32): every stage differs from one whole-batch process just as much as
  any data-parallel run does: below 10⁻⁶ (a rounding step or two) with SGD, below 3·10⁻⁴ (a
  tenth of one step's move) with AdamW, which amplifies the last bits of the gradient sum; one
  process accumulating N micro-batches shows the same (appendix 3a).

The trade is the one the captain saw, with a twist: the paper's stages 1 and 2 are free in
traffic (the same 2Ψ as DDP), DeepSpeed's pay 1.5× for keeping one contiguous partition per
rank, and stage 3 buys its 1/N with 1.5× the traffic.

## Questions

1. With the paper's reduce-scatter, stage 2 keeps a quarter of the gradients at N = 4, yet moves
   the same bytes as DDP. Where in the step does each gradient byte go, and why is nothing saved
   or added? What does DeepSpeed's all-reduce add?
2. For a 7B model in bf16 on 64 GPUs, how many GB per step does each rank put on the wire at
   stage 2, DeepSpeed's way and the paper's way?
3. The memory table's "measured − formula" reaches 91 bytes at N = 3 but at most 38 at N = 4.
   Which of the three reasons grows when N does not divide the buffers?
4. Why is stage 3's traffic 3Ψ and not 2Ψ + Ψ/N? Count the gathers in forward, in backward,
   and the reduce-scatter. Then set `stage3_max_reuse_distance` back to DeepSpeed's default in
   `ds_config`: which of those gathers go away on this model?

## Your turn

Open **`exercises/03_stage1_shards.ipynb`**. You write the two pieces stage 1 rests on:
(a) the shard ownership rule `shard_range(padded_numel, world_size, rank)`, and (b) the
shard-only AdamW step. The checks plug your code into the real engine on 2 and 3 ranks (your
rule cuts DeepSpeed's flat buffer, and the paper's buckets) and compare the training with a
single process.

Then open **`exercises/03b_stage2_buckets.ipynb`**, the heart of stage 2: you write what
happens to a gradient bucket during backward (when it is complete, what it sends, what this
rank keeps), in the paper's pattern (each bucket reduce-scattered, zerolab's switch; DeepSpeed
all-reduces it), and the check trains stages 2 and 3 with it.
Last, **`exercises/03c_zero1_by_hand.ipynb`** has you build stage 1 whole in plain `torch.distributed`, no zerolab engine: a sharded optimizer that the check holds against PyTorch's DDP, bit for bit, on 2 and 3 ranks, with its traffic and memory measured.
"""),
]


# ----------------------------------------------------------------------------------------
# solutions/03_stage1_shards.ipynb (exercises/ is generated from it by tools/make_exercises.py)
# ----------------------------------------------------------------------------------------

SOLUTION = [
md(r"""
# Exercise 3 · Stage 1 from the inside: who owns what, and the shard-only Adam step

In stage 1 each worker keeps one part of the heavy notebook. Two small rules make that work,
and you write both here:

- **(a) the ownership rule**: which elements of a flat buffer rank r owns;
- **(b) the shard-only AdamW step**: the update each rank applies to its own shard, with
  only its own part of the optimizer states.

The checks do not test your code on toy inputs only: they plug it into zerolab's stage 1
engine, on 2 and 3 real ranks, train a small TinyLM, and compare the parameters with plain
single-process training. If something is off they tell you what, where, and why it matters.

**When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
names the likely mistake. To see the full Python traceback as well (through zerolab's own code,
and any rank's traceback), run `import zerolab.checks; zerolab.checks.full_tracebacks()` and run
the check cell again (`zerolab.checks.full_tracebacks(False)` makes failures short again), or
start Jupyter with the environment variable `ZEROLAB_FULL_TRACEBACK=1`.
"""),
md(r"""
## (a) The shard ownership rule

At stages 1 and 2 DeepSpeed lays the trainable parameters in one flat 1-D buffer of
`padded_numel` elements: the parameters end to end, padded with zeros to a multiple of
`world_size`. (The paper's layout, zerolab's `ideal_reduce_scatter` switch, makes one such
buffer per gradient bucket.) Rank `rank` owns one contiguous piece of it, its **partition**,
`[start, end)` in element offsets: the elements its optimizer steps.

What the engine needs from the rule:

- the pieces of all ranks **tile** the buffer: together they cover `[0, padded_numel)`, with no
  gap and no overlap (every element has exactly one owner);
- they are **equal**: the all-gather after the step collects (and the paper's reduce-scatter
  delivers) pieces of `padded_numel / world_size` elements;
- they are **in rank order**: the all-gather puts rank r's piece r-th in the buffer, so rank r
  must own the r-th piece.

Write `shard_range(padded_numel, world_size, rank) -> (start, end)`.
"""),
code(r"""
def shard_range(padded_numel, world_size, rank):
    # BEGIN SOLUTION: return (start, end), the elements of the flat buffer that `rank` owns
    shard_numel = padded_numel // world_size
    return rank * shard_numel, (rank + 1) * shard_numel
    # END SOLUTION
"""),
md(r"""
The check first tests that your ranges tile the buffer, for several sizes; then it replaces
the engine's own rule (`zerolab.flat.FlatGroup.shard_range`) by yours on every rank, trains
stage 1 on 2 and on 3 ranks, in DeepSpeed's layout (one flat buffer; some parameters straddle
two partitions) and in the paper's (one buffer per bucket), and compares every parameter with
single-process training.
"""),
code(r"""
from zerolab.checks.ch03 import check_shard_range

check_shard_range(shard_range)
""", "check"),
md(r"""
## (b) The shard-only AdamW step

Once the gradients are reduced (DeepSpeed all-reduces each bucket and rank r keeps the slices
in its partition), rank r holds the averaged gradient of its shard only, and the fp32 master
weights and Adam's momentum and variance of that shard only. The optimizer step uses
nothing else: AdamW updates every element on its own.

Write `adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)`. The
four tensors are 1-D fp32 shards of the same length; update `param`, `exp_avg` and
`exp_avg_sq` **in place** (they are the engine's own buffers; return nothing). `step` is the
number of this update, starting at 1. Follow torch's `AdamW` (decoupled weight decay):

1. `param ← param · (1 − lr · weight_decay)`
2. `exp_avg ← β₁ · exp_avg + (1 − β₁) · grad`
3. `exp_avg_sq ← β₂ · exp_avg_sq + (1 − β₂) · grad²`
4. `param ← param − lr / (1 − β₁^step) · exp_avg / (√exp_avg_sq / √(1 − β₂^step) + eps)`
"""),
code(r"""
import math


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    # BEGIN SOLUTION: update param, exp_avg and exp_avg_sq in place, as torch.optim.AdamW does
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
    # END SOLUTION
"""),
md(r"""
The check compares one step on a random shard with `torch.optim.AdamW` first; then it wraps
your function in an optimizer, passes it to `zerolab.initialize(..., optimizer=...)`, trains
stage 1 on 2 and 3 ranks (each rank steps only its shard, with your code) and compares with
single-process training with torch's AdamW.
"""),
code(r"""
from zerolab.checks.ch03 import check_adamw_step

check_adamw_step(adamw_step)
""", "check"),
md(r"""
## Where this lives in zerolab

Your rule is `FlatGroup.shard_range` in `zerolab/flat.py`; the stage that uses it is
stage 1: `ReduceScatterAtBoundary` in `zerolab/reduce.py` all-reduces each gradient bucket and
keeps the slices inside this rank's partition (DeepSpeed's way; with the switch it
reduce-scatters each bucket), the optimizer steps the owned partition, and
`ReplicatedParams.publish` in `zerolab/params.py` all-gathers the parameters. The optimizer zerolab steps is torch's own, over the shard tensors
(`zerolab/optim.py`), which is why only element-wise optimizers are allowed by default.

The checks kept their ranks running, so that a second try is quick. Stop them when you are done:
"""),
code(r"""
from zerolab.checks.ch03 import close_crews

close_crews()
"""),
]


# ----------------------------------------------------------------------------------------
# solutions/03b_stage2_buckets.ipynb (exercises/ is generated from it by tools/make_exercises.py)
# ----------------------------------------------------------------------------------------

SOLUTION5 = [
md(r"""
# Exercise 3b · Stage 2's buckets: reduce-scatter during backward

In stage 2 each worker keeps only his own door stickers (the gradients of his shard). Nobody
ever holds the whole set: while backward is still running, the stickers are packed into boxes
(**buckets**), and the moment a box is full it is sent out, each worker keeps the part that is
his, and the box is thrown away.

You write the two pieces of zerolab's `ReduceScatterInBackward` (in `zerolab/reduce.py`, shared by
stages 2 and 3) that do this, in **the paper's pattern**: each bucket is its own flat buffer,
cut into N shards, and is **reduce-scattered**, so each rank receives only the sum of its own
shard. That is what stage 3 does in DeepSpeed too; at stage 2 it is zerolab's switch
`"zerolab": {"ideal_reduce_scatter": true}`, which the check turns on. DeepSpeed's own stage 2
keeps one flat buffer and **all-reduces** each bucket instead, keeping the slices of its
partition (chapter 3 measures the difference: 3Ψ against the paper's 2Ψ). The check plugs your
functions into the real engine on every rank, trains TinyLM with stages 2 and 3 on 2 and 3
ranks, in fp32 and bf16, with gradient accumulation 1 and 2, and compares every parameter with
zerolab's own engine and (fp32) with single-process training.

**When a check fails** it says in a few lines what is wrong and names the likely mistake. For
the full traceback run `import zerolab.checks; zerolab.checks.full_tracebacks()` and run the
check cell again.
"""),
md(r"""
## (a) When is a bucket ready?

Backward produces gradients one parameter at a time, in reverse order of the forward. Each
bucket is a flat buffer of `padded_numel` elements holding several parameters end to end.
When the gradient of parameter `i` of a bucket arrives, the engine calls

    add_grad(bucket, where, grad, arrived, i, n_params)

- `bucket`: the bucket's flat buffer (1-D, zeros at the start of each backward);
- `where`: the slice of the bucket that belongs to parameter `i` (`bucket[where]`);
- `grad`: the gradient, shaped like the parameter;
- `arrived`: a set, shared by all calls for this bucket in this backward: the parameters
  whose gradient is already in;
- `n_params`: how many parameters the bucket holds.

Put the gradient in its place, note that it arrived, and **return True exactly when the bucket
is complete**; the engine then sends it (in the same bucket order on every rank).

*Predict first:* what goes wrong if a bucket is sent when its first gradient arrives?
"""),
code(r"""
def add_grad(bucket, where, grad, arrived, i, n_params):
    # BEGIN SOLUTION: fill bucket[where], note i; True when complete
    bucket[where] += grad.reshape(-1)
    arrived.add(i)
    return len(arrived) == n_params
    # END SOLUTION
"""),
md(r"""
## (b) What to send, what to keep

When a bucket's turn comes the engine calls

    reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard)

- **send**: the bucket in the **communication dtype** `comm_dtype` (bf16 training may
  communicate in fp32, DeepSpeed's `communication_data_type`), **pre-divided by
  `world_size`**, so that the sum over ranks is the average gradient (dividing before the sum
  also keeps fp16 sums from overflowing);
- `chunks = reduce_scatter(send)` is a real reduce-scatter on the ranks. Like
  `zerolab.comm.ring_reduce_scatter` (chapter 2's exercise), it returns all `world_size`
  chunks of the bucket, but only `chunks[rank]` holds the sum over all ranks; the others
  are partial sums on their way;
- **keep**: add this rank's chunk into `grad_shard`, this rank's gradient shard of the bucket
  (the engine's own buffer: change it in place). With gradient accumulation the engine calls
  `reduce_bucket` once per micro-step, and `grad_shard` must end with the sum of all of them.
"""),
code(r"""
def reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard):
    # BEGIN SOLUTION: send bucket in comm_dtype / world_size; keep chunks[rank]
    send = bucket.to(comm_dtype)
    send /= world_size
    chunks = reduce_scatter(send)
    grad_shard += chunks[rank]
    # END SOLUTION
"""),
md(r"""
The check replaces `ReduceScatterInBackward.accept` and `ReduceScatterInBackward.issue` with
versions that call your functions (on every rank, for the duration of the check only), trains,
and watches each call: when a bucket was said to be complete, what was sent (its dtype and
its size against the bucket's), and what the shard holds afterwards.
"""),
code(r"""
from zerolab.checks.stage2_buckets import check_stage2_buckets

check_stage2_buckets(add_grad, reduce_bucket)
""", "check"),
md(r"""
## Where this lives in zerolab

`ReduceScatterInBackward.accept` and `ReduceScatterInBackward.issue` in `zerolab/reduce.py` do
what you wrote; `GradReducer._reduce` sends the bucket (asynchronously when `overlap_comm` is
on, so backward goes on computing while it travels) with the collective DeepSpeed would use for
the config: a reduce-scatter here and at stage 3, an all-reduce at DeepSpeed's default stage 2.
Stage 3 uses the same switch, with buckets of whole modules; its parameters
(`zerolab/gather.py`) are told through `grads_done(g)` and reshard a module's gathered
parameters once all its gradients are in.

Questions:

1. With gradient accumulation 4, how many reduce-scatters does stage 2 make per optimizer
   step, and how many would stage 1 make? (Chapter 3 measures it, both ways.)
2. Why must every rank send its buckets in the same order, even if one rank's bucket is
   complete sooner?
3. Why divide before the sum rather than after, in fp16?

The check kept its ranks running; stop them when you are done:
"""),
code(r"""
from zerolab.checks.stage2_buckets import close_crews

close_crews()
"""),
]


# ----------------------------------------------------------------------------------------
# notebooks/03a_appendix_adamw_rounding.ipynb
# ----------------------------------------------------------------------------------------

APPENDIX = [
md(r"""
# Appendix 3a · Whose rounding is it? Data parallelism, the order of sums, and AdamW

Chapter 3 trained every stage in fp32 on 1 to 4 ranks and compared it with one process that
takes the whole batch at once. The difference was not zero: above 10⁻⁶ (a few fp32 rounding
steps) for N ≥ 2, though below 3·10⁻⁴, a tenth of what one AdamW step moves a parameter. This
appendix finds out whose doing that is. Two suspects: ZeRO (the shards, the reduce-scatter,
the gathers) or data parallelism itself, which splits the batch and adds the pieces up.

The experiment: make **one process** do the same arithmetic as N ranks, by splitting each
batch into N micro-batches and adding up their gradients (gradient accumulation,
`gradient_accumulation_steps = N` on a single rank), and then swap AdamW for plain SGD.
"""),
code(r"""
import torch

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.reference import train_engine, train_reference

torch.set_num_threads(1)   # one thread here, as on every rank below: the same arithmetic, run after run
VOCAB, SEQ, GLOBAL_BATCH = 257, 16, 12
batches = lm_batches(3, GLOBAL_BATCH, SEQ, VOCAB, seed=1)      # chapter 3's three global batches
ADAMW = {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}}
SGD = {"type": "SGD", "params": {"lr": 0.1}}
ROUNDING, AMPLIFIED = 1e-6, 3e-4     # a few fp32 rounding steps near 1; a tenth of one AdamW step (lr / 10)


def make_model():
    return TinyLM(vocab=VOCAB, d=100, hidden=400, layers=2, seq_len=SEQ, seed=0)   # chapter 3's model


def fp32_config(stage, world_size, optimizer=ADAMW, accumulate=1):
    return {"train_batch_size": GLOBAL_BATCH,
            "train_micro_batch_size_per_gpu": GLOBAL_BATCH // (world_size * accumulate),
            "gradient_accumulation_steps": accumulate,
            "optimizer": optimizer,
            "zero_optimization": {"stage": stage, "reduce_bucket_size": 50_000,
                                  "stage3_param_persistence_threshold": 0}}


def train_fp32(stage, optimizer=ADAMW, accumulate=1):
    engine = zerolab.initialize(make_model(), fp32_config(stage, zerolab.world_size(), optimizer, accumulate))
    train_engine(engine, batches, lm_loss)          # each rank takes its 12/N sequences of each batch
    full = engine.full_params()                     # the same on every rank
    return full if zerolab.rank() == 0 else None


def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def verdict(diff, bounds=(ROUNDING, AMPLIFIED), exact=False):
    # The exact value is rounding noise: it changes with the CPU's SIMD kernels. What does not
    # change is which bound it is under. (Print max_diff(...) to see it on your machine.)
    if exact and diff == 0:
        return "0 (bit-identical)"
    for bound in bounds:
        if diff < bound:
            return f"< {bound:.0e}"
    return f"{diff:.1e} (!)"                     # a real difference: this would be a bug


crews = {n: zerolab.Crew(n, threads=1) for n in (1, 2, 3, 4)}
reference = train_reference(make_model(), fp32_config(0, 1), batches, lm_loss)   # the whole batch at once
print("crews of", ", ".join(str(n) for n in crews), "ranks up; the whole-batch reference is trained")
"""),
md(r"""
## One process, N micro-batches

For N = 2, 3, 4: zerolab's stage 3 on N ranks (the stage that changes the most), and one
process accumulating N micro-batches of the same batch, each compared with the whole-batch run
and with each other.

**Predict, then run.** Is one process that accumulates N micro-batches closer to the
whole-batch run than the N ranks are, as far, or farther?
"""),
code(r"""
print("3 fp32 AdamW steps; largest |difference| over all 188,900 parameters:")
print(f"{'':8}{'ranks vs the whole batch':>26}{'accumulation vs the whole batch':>33}"
      f"{'ranks vs accumulation':>23}")
for n in (2, 3, 4):
    ranks = crews[n].run(train_fp32, 3)[0]                     # stage 3 on n ranks
    accumulated = crews[1].run(train_fp32, 0, ADAMW, n)[0]     # one rank, n micro-batches
    print(f"  N = {n}{verdict(max_diff(ranks, reference)):>26}{verdict(max_diff(accumulated, reference)):>33}"
          f"{verdict(max_diff(ranks, accumulated), (AMPLIFIED,), exact=True):>23}")
"""),
md(r"""
One process that adds up N micro-batches is just as far from the whole-batch run as the N
ranks are. At N = 2 it lands exactly where the 2 ranks land, bit for bit: halving a gradient
is exact in binary, and a + b = b + a. At N = 3 and 4 it lands close to them but not on them,
because the order of the sums differs (one process adds micro-batch after micro-batch, gloo's
collectives add the ranks' pieces in their own order, as NCCL's ring does), and at N = 3 even
the place of a division matters: gradient accumulation divides the loss by 3 before backward,
the ranks divide their gradients by 3 before adding them, and 1/3 is not exact in binary. So
the difference is not ZeRO's: it is the order of the sums and the place of a division, which
change each gradient element's last bits.

## SGD passes the last bits on; AdamW amplifies them

The same comparison with plain SGD (lr 0.1), zerolab's stage 3 against one whole-batch process:
"""),
code(r"""
reference_sgd = train_reference(make_model(), fp32_config(0, 1, SGD), batches, lm_loss)
print("SGD, zerolab stage 3 vs one process:",
      ", ".join(f"N = {n} {verdict(max_diff(crew.run(train_fp32, 3, SGD)[0], reference_sgd))}"
                for n, crew in crews.items()))
for crew in crews.values():
    crew.close()
"""),
md(r"""
SGD passes those last bits on as they are: a rounding step or two. AdamW amplifies them: it
divides each element's momentum by the root of its own variance, so an element whose gradient
nearly cancels (contributions of both signs summing to almost zero) still moves by about lr,
and the last bits of that small sum decide part of the move.

The smallest case shows it with three numbers. Three ranks contribute 1, 10⁻⁸ and −1 to one
gradient element; the true sum is 10⁻⁸. fp32 carries about 7 significant digits, so the order
of the additions decides whether 10⁻⁸ survives. Then one AdamW step and one SGD step with that
gradient (lr 3·10⁻³, torch's default eps of 10⁻⁸):
"""),
code(r"""
one, tiny = torch.tensor(1.0), torch.tensor(1e-8)
orders = {"(1 + 1e-8) - 1": (one + tiny) - one,      # 1e-8 is below half an fp32 step of 1: lost
          "(1 - 1) + 1e-8": (one - one) + tiny}      # the ones cancel first: 1e-8 survives


def first_step_move(grad, optimizer):
    p = torch.zeros(1, requires_grad=True)          # starts at 0: weight decay has nothing to decay
    opt = optimizer([p], lr=3e-3)
    p.grad = grad.reshape(1).clone()
    opt.step()
    return abs(float(p.detach()))


print("how far one step moves the parameter, in units of lr:")
print(f"{'order of the sum':<18}{'gradient':>10}{'AdamW':>14}{'SGD':>14}")
for order, grad in orders.items():
    adamw, sgd = first_step_move(grad, torch.optim.AdamW), first_step_move(grad, torch.optim.SGD)
    print(f"{order:<18}{float(grad):>10.0e}{adamw / 3e-3:>9.2f} x lr{sgd / 3e-3:>9.0e} x lr")
"""),
md(r"""
Same three numbers, two orders: SGD's step differs by 10⁻⁸ of lr, AdamW's by half of lr. At
its first step AdamW moves each element by lr · g / (|g| + eps), whatever the size of g, so a
gradient that is only rounding noise around zero still moves its parameter by a sizeable
fraction of lr. Over the following steps the momentum and variance average such elements out,
which is why chapter 3's differences stay below a tenth of lr.

Any data-parallel training has this, ZeRO or not: the order of the sums is the only thing
that changed, and no stage adds to it (in chapter 3's table the four stages' rows are alike).
Deterministic training across world sizes would need the same summation order everywhere,
which no ring or tree all-reduce promises.

Back to **[chapter 3](03_three_stages.ipynb)**.
"""),
]


NOTEBOOKS = {
    "notebooks/03_three_stages.ipynb": ("ch03", CHAPTER),
    "notebooks/03a_appendix_adamw_rounding.ipynb": ("ch03a", APPENDIX),
    "solutions/03_stage1_shards.ipynb": ("ex03", SOLUTION),
    "solutions/03b_stage2_buckets.ipynb": ("ex05", SOLUTION5),
}

if __name__ == "__main__":
    sys.exit(nbsource.main(NOTEBOOKS))
