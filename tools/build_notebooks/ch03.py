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

At the end of chapter 2 the crew hit the wall. Every worker carried the whole household: the
furniture (the **parameters**), the door stickers (the **gradients**) and the heavy notebook
(the **optimizer states**). Hiring more workers added more copies of the same load, not more room.

So the captain re-divides the load. Each worker still carries his share of boxes through the
door (each rank runs forward and backward on its slice of the batch); what changes is what each
worker must *keep*:

1. **First, the heavy notebooks.** For every piece of furniture the notebook holds an exact
   register copy (the fp32 **master weights**) and two lines about how it has been moving (Adam's
   **momentum** and **variance**): 12 bytes per parameter. The captain tears the notebooks into N
   parts; each worker updates only the furniture his part describes, then tells the others the
   new positions. **Stage 1.**
2. **Then the door stickers.** A worker needs the stickers only for his part of the notebook, so
   as soon as a batch of stickers is written the crew adds them up and each keeps only his share.
   **Stage 2.**
3. **Finally, the furniture itself.** Each worker carries 1/N of the household; before a room is
   worked on, the crew lends each other the pieces it needs and hands them back after. **Stage 3.**

Every cut makes each backpack lighter, and every cut means more shouting across the house. In
this chapter we measure both on real ranks, beside the ZeRO paper's formulas.
"""),
md(r"""
## What the paper claims, and what DeepSpeed does

Ψ is the number of trainable parameters (elements), N the number of ranks. With mixed precision
and Adam a parameter costs 2 bytes (bf16) + 2 (bf16 gradient) + 12 (fp32 master, momentum,
variance) = **16 bytes**. Per rank:

| stage | split among the N ranks | model-state bytes per rank | traffic per rank per step: the paper |
|---|---|---|---|
| 0 (DDP) | nothing | **16Ψ** | **2Ψ**: all-reduce the gradients |
| 1 | optimizer states | 2Ψ + 2Ψ + 12Ψ/N = **4Ψ + 12Ψ/N** | **2Ψ**: reduce-scatter the gradients (Ψ), all-gather the parameters (Ψ) |
| 2 | + gradients | 2Ψ + (2 + 12)Ψ/N = **2Ψ + 14Ψ/N** | **2Ψ**: the same two collectives |
| 3 | + parameters | **16Ψ/N** | **3Ψ**: all-gather in forward (Ψ) and again in backward (Ψ), reduce-scatter (Ψ) |

**DeepSpeed 0.19.8 does not move the paper's bytes at stages 1 and 2**: by default it
**all-reduces** each gradient bucket (2Ψ), each rank keeps the slices it owns, and after the
step it all-gathers the parameters (Ψ): **3Ψ**. zerolab runs DeepSpeed's collectives by default
(`benchmarks/results/side_by_side.txt` sets them beside DeepSpeed's); the paper's reduce-scatter
is zerolab's own switch, `"zerolab": {"ideal_reduce_scatter": true}`.

**Counting bytes.** We count what each rank puts on the wire in a ring, as nccl-tests' *bus
bandwidth* and `zerolab.comm` do: for S bytes an all-reduce costs each rank 2(N−1)/N·S, a
reduce-scatter or an all-gather (N−1)/N·S; the paper counts elements and drops (N−1)/N. The
folding chair (the **activations**) is not a model state: no stage splits it, and it is left out.
In zerolab a stage is three switches (the table at the top of `zerolab/zero/stage.py`).
"""),
code(r"""
import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab.course.chapters import ch03          # this chapter's runs and tables: zerolab/course/chapters/ch03.py
from zerolab.course.chapters.ch03 import ds_config, make_model, train_and_measure

torch.set_num_threads(1)   # one thread here, as on every rank below: the same arithmetic, run after run
model = make_model()       # a TinyLM made wider; the output head shares the embedding matrix
PSI = sum(p.numel() for p in model.parameters() if p.requires_grad)
for name, p in model.named_parameters():
    print(f"{name:22} {str(tuple(p.shape)):11} {p.numel():>7,} elements" + ("" if p.requires_grad else " (frozen)"))
print(f"Ψ = {PSI:,} trainable parameters (the tied embedding counted once)")
print("the DeepSpeed config of stage 2 on 4 ranks, as every run below writes it:")
ch03.print_config(ds_config(2, 4))
crews = {n: zerolab.Crew(n, threads=1) for n in (1, 2, 3, 4)}    # started once, reused by every cell
print(f"{sum(c.world_size for c in crews.values())} ranks up, in crews of 1, 2, 3, 4")
"""),
md(r"""
## Memory per rank, measured beside the formula

`ch03.measure_all` runs `train_and_measure` on every rank, every crew, every stage: it builds the
engine with `zerolab.initialize(model, config)` as a DeepSpeed user would, trains two steps
(AdamW makes its states at the first) and measures the second: what the rank holds
(`engine.memory()`, read from the tensors) and what it sent (`engine.ledger`).

**Predict, then run.** At N = 4, DDP holds 16Ψ = 3,022,400 bytes of model states per rank. What
fraction of that will stage 1 keep? Stage 2? Stage 3? Write three fractions down.
"""),
code(r"""
runs, ideal = ch03.measure_all(crews)   # 16 runs; stages 1-2 again with the paper's reduce-scatter
ch03.print_memory_table(runs, PSI)
"""),
md(r"""
Most guess 1/4 for every stage: adding 4 workers, each should carry a quarter. Only stage 3
does: stage 1 keeps **0.438** of DDP's bytes (7Ψ of 16Ψ: it splits only the notebook, and the
bf16 parameters and gradients stay whole on every rank), stage 2 **0.344** (5.5Ψ). Stage 1
removes most of the weight at once because the notebook was 12 of the 16 bytes.

The column "left" is not noise: each flat buffer is **padded** to a multiple of N (16 bytes per
padding element, each state divided by N once split), the one **frozen** parameter (`temperature`,
2 bytes: whole on every rank at stages 0-2; at stage 3 partitioned like the others, as DeepSpeed's
`zero.Init` does, padded to N elements, one per rank, so again 2 bytes), and AdamW keeps a 4-byte
**step counter** per flat group it steps. The next cell adds those up, then draws the table.
"""),
code(r"""
print(f"bytes left once padding, the frozen parameter and AdamW's step counters are counted:"
      f" {ch03.unexplained_bytes(runs, PSI):.0f}")
fig, ax = plt.subplots(figsize=(7.5, 4.5))
ch03.memory_figure(ax, runs, PSI)
plt.show()
"""),
md(r"""
DDP stays at 16Ψ whatever N is: the wall of chapter 2. Stage 1 never goes below 4Ψ, stage 2
never below 2Ψ; only stage 3 keeps falling as 1/N. These are DeepSpeed's numbers with its default
bf16 settings. (With `"data_types": {"grad_accum_dtype": "fp32"}` its stage 1 runs
`BF16_Optimizer`, which adds a full fp32 gradient buffer: **8Ψ + 12Ψ/N**; at stage 0 DeepSpeed
0.19.8 refuses that mix of bf16 parameters and fp32 accumulation with a `NotImplementedError`
(`runtime/engine.py`, `_do_optimizer_sanity_check`, lines 2305-2323). zerolab refuses the block at
every stage.)

Model states are not all a rank holds: stage 2 keeps a **gradient bucket** in flight during
backward, stage 3 the **gathered parameters** of the modules in use and of those gathered ahead;
`engine.memory()` reports them as `peak_buffers`. (*On a GPU cluster* DeepSpeed allocates its
bucket buffers once and reuses them; here a buffer is made when a bucket fills.)
"""),
code(r"""
for stage in (2, 3):
    m = runs[4, stage]["memory"]
    print(f"stage {stage}, N = 4: model states {m['model_states']:>9,} bytes,"
          f" peak transient buffers {m['peak_buffers']:>9,} bytes")
print(f"stage 3: most parameter elements gathered (or in flight) at once:"
      f" {runs[4, 3]['peak_gathered']:,} of Ψ = {PSI:,}")
"""),
md(r"""
Stage 3's peak holds the **whole model** here, and a little more than Ψ: the frozen `temperature`
is gathered too (1 element, padded to N = 4). DeepSpeed's defaults are sized for billions of
parameters (`stage3_prefetch_bucket_size` = 5·10⁷ elements gathered ahead,
`stage3_max_live_parameters` = 10⁹ at once); on a small model, saving memory needs smaller values.

## Traffic per step: DeepSpeed's 3Ψ beside the paper's 2Ψ

The ledger's bytes on one rank's wire, split into **gradients** and **parameters**; the last
column divides by (N−1)/N·2Ψ bytes, so it reads as the paper's 2Ψ and 3Ψ. Stage 3 runs at reuse
distance 0 with prefetch off (every module gathered again for backward, the paper's count) and at
DeepSpeed's default reuse distance.

**Predict, then run.** Stage 2 keeps a quarter of DDP's gradients at N = 4. Does it move fewer
bytes than DDP, the same, or more, the paper's way? DeepSpeed's way? And stage 3? Write a
multiple of Ψ for each row.
"""),
code(r"""
reuse = {n: crews[n].run(train_and_measure, 3, stage3_max_reuse_distance=10**9)[0] for n in (2, 3, 4)}
rows = ch03.traffic_rows(runs, ideal, reuse)
ch03.print_traffic_table(rows, PSI)
"""),
md(r"""
Most guess that keeping less means sending less. It does not. **The paper's way**, stages 1 and
2 move exactly DDP's 2Ψ: an all-reduce *is* a reduce-scatter followed by an all-gather, and ZeRO
only moves the optimizer step in between, so the memory is **free in traffic**. **DeepSpeed's
way** they move **3Ψ**: its stages 1-2 keep one flat buffer cut into N contiguous partitions
(pictured at the end), a bucket lies in one or two ranks' partitions and cannot be
reduce-scattered into N equal pieces, so each bucket is all-reduced (2Ψ) and the parameters are
all-gathered after the step (Ψ). (`"use_multi_rank_bucket_allreduce": false` sends one `reduce`
to each owner instead.)

Stage 3 at reuse distance 0, prefetch off, moves **3.272 Ψ**: the extra 0.272 Ψ is the embedding gathered
**twice more** (2 × 25,700 / 188,900), because the output head shares it. It is gathered for the
head in forward, and again for the embedding's own backward: DeepSpeed releases a module's
parameters after its backward (`post_sub_module_backward_function`), so the head's backward lets
it go, and at reuse distance 0 nothing is kept. The frozen `temperature` (1 element, padded to N)
is gathered in both passes too, and each parameter is padded to a multiple of N (DeepSpeed
partitions every parameter on its own). With DeepSpeed's
default `stage3_max_reuse_distance` (10⁹ elements) this small model stays gathered from forward to
backward and moves 2Ψ (and the padded temperature's few bytes). The check and the picture:
"""),
code(r"""
from zerolab.memory import comm_ops
from zerolab.course.viz import collective_timeline, traffic_bars

frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
for n in (2, 3, 4):
    extra = (runs[n, 3]["wire"]["params"] - comm_ops(PSI, 3, n)["all_gather"]) / ((n - 1) / n * 2)
    groups = runs[n, 3]["layout"]                   # trainable groups, padded to a multiple of N
    embed = next(g["padded"] for g in groups if g["label"] == "embed.weight")
    padding = sum(g["padded"] - sum(g["numels"]) for g in groups)
    temperature = -(-frozen // n) * n               # the frozen parameter, padded to N
    print(f"N = {n}: {extra:,.0f} elements beyond 2Ψ; 2 × ({embed:,} embedding + {temperature}"
          f" temperature + {padding} padding) = {2 * (embed + temperature + padding):,}")
n, unit = 4, 3 / 4 * PSI * 2
bars = rows[:6]
fig, ax = plt.subplots(figsize=(8.5, 4.2))
traffic_bars(ax, {i: by_n[n]["wire"] for i, (_, by_n, _) in enumerate(bars)},
             {i: k * unit for i, (_, _, k) in enumerate(bars)}, unit=unit,
             names={i: label.replace(" ", "\n", 1).split(":")[0] for i, (label, _, _) in enumerate(bars)},
             title=f"DeepSpeed's stages 1-2 move 3Ψ, the paper's 2Ψ; stage 3 3Ψ (N = {n})")
ax.lines[0].set_label("formula: 2Ψ or 3Ψ")
ax.legend(loc="upper left", fontsize=8, frameon=False)
plt.show()
"""),
md(r"""
### Gradient accumulation: stage 2 pays per micro-step

With `gradient_accumulation_steps = 4` a rank runs 4 forward/backward passes per optimizer step.
Stage 1 keeps full gradients and can add the micro-steps up locally; stage 2 keeps only its shard.

**Predict, then run.** At N = 3 with accumulation 4, how many Ψ units does each row move per
optimizer step? (Accumulation 1 gives 2, 3, 2, 3, 2 and 3.272, as above.)
"""),
code(r"""
ch03.print_accumulation_table(crews[3], PSI)
"""),
md(r"""
Stages 0 and 1 send the summed gradient once per optimizer step, whatever the accumulation.
Stage 2 must reduce every bucket in every micro-step, as backward fills it: DeepSpeed's way
4 × 2 + 1 = 9 units instead of 3, the paper's 4 × 1 + 1 = 5 instead of 2. That is the price of
never holding a full gradient. Stage 3 pays 4 times everything (4 × 3.272).

### Stage 3 over one step: gather, use, release

For stage 3 on 2 ranks the ledger reads like the crew's day: each module's parameters are
all-gathered for its forward and released after (a release sends nothing); backward gathers them
again in reverse order; the gradients go out in buckets, each reduce-scattered in one call; last,
one small all-reduce (the 8-byte gradient norm).

**Prefetch** is DeepSpeed's rule (`fetch_sub_module` in `partitioned_param_coordinator.py`): the
second step records the order in which modules are fetched, forward and backward in one trace;
from the third on, each fetch also pops the next entries of that order and starts one
asynchronous all-gather of those not gathered yet, within min(`stage3_max_live_parameters` −
elements gathered, `stage3_prefetch_bucket_size`), and marks every entry it pops as *fetched for*
its later use. A module's parameters (its own and those tied to it) come in one all-gather. The
timeline below runs with prefetch off, this chapter's setting: every module just in time.
(*On a GPU cluster* these run on a CUDA stream of their own, beside the module's kernels.)
"""),
code(r"""
records = crews[2].run(train_and_measure, 3)[0]["records"]     # ZeRO's calls (no order checks)
fig, ax = plt.subplots(figsize=(11, 3.8))
lanes = collective_timeline(ax, records, title="Stage 3, one step on 2 ranks: gather before use, "
                            "reduce-scatter and release after backward")
plt.show()
kinds = {}
for _, lane, _, _ in lanes:
    kinds[lane] = kinds.get(lane, 0) + 1
print("collectives in the step:", ", ".join(f"{k} {v}" for k, v in kinds.items()))
"""),
md(r"""
Two kinds of small collectives stay out of the tables. DeepSpeed's, as 0.19.8 sends them: at
stages 1-2 in bf16 a 1-byte overflow flag (`bf16.check_grad_overflow`) and the 4-byte gradient
norm; at stage 3 only the norm, 8 bytes in fp64 (it checks overflow there in fp16 only); at
stage 0 the norm only when clipping in fp32. And **zerolab's own** 16-byte **headers** at stage 3, before each unit
of parameter gathers, so that ranks on different paths through the model raise
`ModuleOrderError` instead of hanging; DeepSpeed sends no such thing, the ledger files them apart
(`ledger.checks`), and `"zerolab": {"order_checks": false}` turns them off.

**Predict, then run.** With prefetch off (this chapter's setting) the measured step of stage 3
gathers each module's parameters when it runs, in forward and again in backward. With DeepSpeed's
default prefetch (`stage3_prefetch_bucket_size` 5·10⁷), how many all-gathers, how many headers,
and how many parameter bytes?
"""),
code(r"""
for stage in range(4):
    r = runs[4, stage]
    small = r['wire'].get('overflow', 0) + r['wire'].get('grad', 0)
    print(f"N = 4, stage {ch03.NAME[stage]:8} overflow + grad norm {small:>3.0f} bytes;"
          f" zerolab's headers {r['headers']:>2} calls, {r['header_bytes']:>3.0f} bytes")
with_prefetch = crews[4].run(train_and_measure, 3, stage3_prefetch_bucket_size=50_000_000)[0]
for label, r in (("prefetch off (0)", runs[4, 3]), ("default prefetch", with_prefetch)):
    print(f"stage 3, N = 4, {label}: {r['groups_gathered']} groups gathered, {r['prefetched']:>2} prefetched,"
          f"\n    in {r['param_gathers']:>2} all-gathers (+ {r['headers']:>2} headers, zerolab's),"
          f" {r['wire']['params']:,.0f} parameter bytes on the wire")
"""),
md(r"""
Without prefetch, one all-gather per module fetch and one header each. (Stage 2's one header is
the ranks' single agreement on the order backward's gradient hooks fire in, which DeepSpeed's
buckets follow: zerolab's own, sent once, at the second backward.) With DeepSpeed's default
prefetch the **bytes** fall too, not only the calls: at reuse distance 0 its prefetcher marks
every later use it pops as fetched for (`__most_recent_step_id_param_fetched_for` in
`partitioned_param_coordinator.py`), and DeepSpeed does not release a parameter fetched for a
later use, so the backward's gathers are gone: about 2Ψ, as at reuse distance 10⁹. Chapter 8
measures it knob by knob; chapter 6 what a call costs.

### Stage 3's small parameters: `stage3_param_persistence_threshold`

Gathering a LayerNorm weight of 100 elements costs a whole call to save 200 bytes. DeepSpeed
keeps every parameter of at most `stage3_param_persistence_threshold` elements **persistent**
(within `stage3_model_persistence_threshold`, unlimited by default): whole on every rank,
refreshed after each step (one all-gather per parameter, DeepSpeed's `_post_step`), gradients
still reduce-scattered. The formula becomes
3(N−1)/N·(Ψ−P) + 2(N−1)/N·P for P persistent elements. Thresholds 0, 30,000 (the position table,
the embedding, every LayerNorm and bias) and DeepSpeed's default, 100,000:

**Predict, then run.** With DeepSpeed's default threshold, how many modules will stage 3 gather
in forward and backward on this model, and how many bytes will it move: 3Ψ units, 2Ψ, less?
"""),
code(r"""
ch03.print_persistence_table(crews[4], PSI)
"""),
md(r"""
None in forward or backward: every parameter here is under 100,000 elements, so stage 3 quietly
becomes the paper's stage 2 (377,808 bytes of parameters per rank: 2Ψ, and the frozen
`temperature` padded to 4 elements, 8 bytes; 2Ψ of traffic, less than DeepSpeed's own stage 2).
The all-gathers after the step refresh every persistent parameter, one call each, the frozen one
included (DeepSpeed's `_post_step`). On a model of billions of
parameters 100,000 elements is a LayerNorm or a bias; on a small model, set the threshold
yourself. At 30,000 the embedding is persistent, so its extra gathers are gone, and the
measurement meets the formula but for 6 bytes: the frozen `temperature`, refreshed with the
persistent parameters ((3/4)·2·4 bytes; the formula counts only the Ψ trainable elements).

## Correct first: every stage trains like one process

We train 3 steps in **fp32** with each stage on 1 to 4 ranks and compare every parameter with
single-process training on the same global batches (`engine.full_params()` gathers the fp32
values, as DeepSpeed's `zero_to_fp32` would).

**Predict, then run.** Will stage 3 on 4 ranks be bit-identical to one process? If not, how far
off: a few rounding steps (below 10⁻⁶), a tenth of one AdamW step (below 3·10⁻⁴), or a step?
And will DDP (stage 0) be any closer than stage 3?
"""),
code(r"""
reference = ch03.reference_fp32()        # one process, the whole batch at once
ch03.print_parity_table(crews, reference)
"""),
md(r"""
Not bit-identical for N ≥ 2, and above the last bits of fp32 (a rounding step is about 6·10⁻⁸ near
1), though far below one step (lr = 3·10⁻³). The exact values are rounding noise that another
CPU's SIMD kernels change; the bounds hold everywhere. DDP is no closer: it is not ZeRO's doing.
**[Appendix 3a](03a_appendix_adamw_rounding.ipynb)** finds the culprit: the order of the sums,
amplified by AdamW, in any data-parallel training.

## Who owns what: the shards

A flat buffer of `padded_numel` elements (a multiple of N) is cut into N equal pieces, and **rank
r owns the r-th piece**, `[r · padded_numel / N, (r + 1) · padded_numel / N)`: equal pieces in
rank order, because that is what an all-gather collects and a reduce-scatter delivers.

DeepSpeed's stages 1 and 2 cut **one** flat buffer of every parameter, in gradient order (the last
layer first), so a rank's partition is one stretch of the model and a bucket (red lines) falls
where it falls. The paper's layout (the switch) makes each bucket its own buffer cut into N shards.
Stage 1 on 3 ranks, colored by owner; black lines are parameter boundaries.
"""),
code(r"""
from zerolab.course.viz import shard_map

layout, paper_layout = runs[3, 1]["layout"], ideal[3, 1]["layout"]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 2.2 + 0.55 * len(paper_layout)),
                                  height_ratios=[1, len(paper_layout)], layout="constrained")
shard_map(top, layout, title="DeepSpeed's layout, stage 1 on 3 ranks: one flat buffer "
          "(red: where gradient buckets begin)")
top.vlines(runs[3, 1]["bucket_starts"][1:], -0.5, 0.5, colors="red", linestyles="--", linewidth=2)
top.get_legend().remove()                  # the same colours as below
top.set_xlabel("element offset in the flat buffer")
shard_map(bottom, paper_layout, title="The paper's layout (zerolab's switch): every bucket its own "
          "buffer, cut into N shards")
plt.show()
print("parameters cut between ranks (DeepSpeed's layout; ranges inside the parameter):")
ch03.print_cut_parameters(layout)
print("elements each rank's optimizer steps:", [r["master_numel"] for r in crews[3].run(train_and_measure, 1)],
      f"(the padded buffer's {sum(g['padded'] for g in layout):,} / 3)")
"""),
md(r"""
A parameter cut in two is not a problem: Adam, AdamW and SGD update every element on its own,
so stepping a shard of the flat buffer is the same as stepping the parameters inside it. (An
optimizer that looks at a whole tensor at once, such as LAMB's trust ratio, would not be; this is
why zerolab, like DeepSpeed, wants `zero_allow_untested_optimizer` for anything else.)

We are done with the ranks:
"""),
code(r"""
for crew in crews.values():
    crew.close()
"""),
md(r"""
## What we measured

On a 188,900-parameter TinyLM, bf16 + AdamW, 1 to 4 ranks, per rank:

- **Memory** at N = 4: stage 1 keeps 0.438 of DDP's bytes, stage 2 0.344, stage 3 0.25, each
  the formula to the byte once padding, the frozen parameter and AdamW's step counters are counted.
- **Traffic**, in (N−1)/N·2Ψ units: DDP 2; DeepSpeed's stages 1-2 3 (each bucket all-reduced), the
  paper's 2 (zerolab's switch); stage 3 3.272 at reuse distance 0 with prefetch off (the tied
  embedding gathered twice more: for the head in forward, and again for its own backward, as
  DeepSpeed releases after each module's backward), about 2 with DeepSpeed's defaults. At reuse
  distance 0 DeepSpeed's prefetch changes the bytes too: what its prefetcher scanned stays
  gathered for backward.
  With accumulation 4, stage 2 pays every micro-step: 9 DeepSpeed's way, 5 the paper's.
- **Correctness** (fp32): every stage as close to one process as DDP is, below 3·10⁻⁴ with AdamW
  (appendix 3a says why not closer).

## Questions

1. With the paper's reduce-scatter, stage 2 keeps a quarter of the gradients at N = 4, yet moves
   the same bytes as DDP. Where in the step does each gradient byte go, and why is nothing saved
   or added? What does DeepSpeed's all-reduce add?
2. For a 7B model in bf16 on 64 GPUs, how many GB per step does each rank put on the wire at
   stage 2, DeepSpeed's way and the paper's way?
3. The memory table's "left" reaches 91 bytes at N = 3 but at most 38 at N = 4.
   Which of the three reasons grows when N does not divide the buffers?
4. Why is stage 3's traffic 3Ψ and not 2Ψ + Ψ/N? Count the gathers in forward, in backward,
   and the reduce-scatter. Then, before the crews close, run `crews[4].run(train_and_measure, 3,
   stage3_max_reuse_distance=10**9)` (DeepSpeed's default): which of those gathers go away here?

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
and any rank's traceback), run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run
the check cell again (`zerolab.course.checks.full_tracebacks(False)` makes failures short again), or
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
the engine's own rule (`zerolab.memory.flat.FlatGroup.shard_range`) by yours on every rank, trains
stage 1 on 2 and on 3 ranks, in DeepSpeed's layout (one flat buffer; some parameters straddle
two partitions) and in the paper's (one buffer per bucket), and compares every parameter with
single-process training.
"""),
code(r"""
from zerolab.course.checks.ch03 import check_shard_range

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
from zerolab.course.checks.ch03 import check_adamw_step

check_adamw_step(adamw_step)
""", "check"),
md(r"""
## Where this lives in zerolab

Your rule is `FlatGroup.shard_range` in `zerolab/memory/flat.py`; the stage that uses it is
stage 1: `ReduceScatterAtBoundary` in `zerolab/zero/reduce.py` all-reduces each gradient bucket and
keeps the slices inside this rank's partition (DeepSpeed's way; with the switch it
reduce-scatters each bucket), the optimizer steps the owned partition, and
`ReplicatedParams.publish` in `zerolab/zero/params.py` all-gathers the parameters. The optimizer zerolab steps is torch's own, over the shard tensors
(`zerolab/zero/optim.py`), which is why only element-wise optimizers are allowed by default.

The checks kept their ranks running, so that a second try is quick. Stop them when you are done:
"""),
code(r"""
from zerolab.course.checks.ch03 import close_crews

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

You write the two pieces of zerolab's `ReduceScatterInBackward` (in `zerolab/zero/reduce.py`, shared by
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
the full traceback run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the
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
from zerolab.course.checks.stage2_buckets import check_stage2_buckets

check_stage2_buckets(add_grad, reduce_bucket)
""", "check"),
md(r"""
## Where this lives in zerolab

`ReduceScatterInBackward.accept` and `ReduceScatterInBackward.issue` in `zerolab/zero/reduce.py` do
what you wrote; `GradReducer._reduce` sends the bucket (asynchronously when `overlap_comm` is
on, so backward goes on computing while it travels) with the collective DeepSpeed would use for
the config: a reduce-scatter here and at stage 3, an all-reduce at DeepSpeed's default stage 2.
Stage 3 uses the same class, its buckets filled in the order backward finishes the modules; its parameters
(`zerolab/zero/stage3/gather.py`) are told through `grads_done(g)` and reshard a module's gathered
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
from zerolab.course.checks.stage2_buckets import close_crews

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
The runs are chapter 3's (`zerolab/course/chapters/ch03.py`): its TinyLM of 188,900 parameters, its
three global batches of 12 sequences, 3 fp32 steps.
"""),
code(r"""
import torch

import zerolab
from zerolab.course.chapters.ch03 import AMPLIFIED, SGD, max_diff, reference_fp32, train_fp32, verdict

torch.set_num_threads(1)   # one thread here, as on every rank below: the same arithmetic, run after run
crews = {n: zerolab.Crew(n, threads=1) for n in (1, 2, 3, 4)}
reference = reference_fp32()          # one process, the whole batch at once, AdamW
print("crews of", ", ".join(str(n) for n in crews), "ranks up; the whole-batch reference is trained")
"""),
md(r"""
## One process, N micro-batches

For N = 2, 3, 4: zerolab's stage 3 on N ranks (the stage that changes the most), and one
process accumulating N micro-batches of the same batch (`train_fp32(0, accumulate=n)` on the
crew of 1), each compared with the whole-batch run and with each other.

**Predict, then run.** Is one process that accumulates N micro-batches closer to the
whole-batch run than the N ranks are, as far, or farther? Does it land on the ranks' result?
"""),
code(r"""
print("3 fp32 AdamW steps; largest |difference| over all 188,900 parameters:")
print(f"{'':8}{'ranks vs the whole batch':>26}{'accumulation vs the whole batch':>33}"
      f"{'ranks vs accumulation':>23}")
for n in (2, 3, 4):
    ranks = crews[n].run(train_fp32, 3)[0]                          # stage 3 on n ranks
    accumulated = crews[1].run(train_fp32, 0, accumulate=n)[0]      # one rank, n micro-batches
    print(f"  N = {n}{verdict(max_diff(ranks, reference)):>26}{verdict(max_diff(accumulated, reference)):>33}"
          f"{verdict(max_diff(ranks, accumulated), (AMPLIFIED,), exact=True):>23}")
"""),
md(r"""
Most expect the single process to be closer: no shards, no collectives. It is just as far from
the whole-batch run as the N ranks are. At N = 2 it lands exactly where the 2 ranks land, bit for
bit: halving a gradient is exact in binary, and a + b = b + a. At N = 3 and 4 it lands close to
them but not on them, because the order of the sums differs (one process adds micro-batch after
micro-batch, gloo's collectives add the ranks' pieces in their own order, as NCCL's ring does),
and at N = 3 even the place of a division matters: gradient accumulation divides the loss by 3
before backward, the ranks divide their gradients by 3 before adding them, and 1/3 is not exact
in binary. So the difference is not ZeRO's: it is the order of the sums and the place of a
division, which change each gradient element's last bits.

## SGD passes the last bits on; AdamW amplifies them

The same comparison with plain SGD (lr 0.1), zerolab's stage 3 against one whole-batch process.

**Predict, then run.** The sums are just as reordered with SGD. Will its difference from one
process stay as large as AdamW's (below 3·10⁻⁴ but above 10⁻⁶), or shrink to a rounding step
(below 10⁻⁶)?
"""),
code(r"""
reference_sgd = reference_fp32(SGD)
print("SGD, zerolab stage 3 vs one process:",
      ", ".join(f"N = {n} {verdict(max_diff(crew.run(train_fp32, 3, SGD)[0], reference_sgd))}"
                for n, crew in crews.items()))
for crew in crews.values():
    crew.close()
"""),
md(r"""
SGD passes those last bits on as they are: a rounding step or two, at every N. So the optimizer
is what makes them grow. AdamW divides each element's momentum by the root of its own variance,
so an element whose gradient nearly cancels (contributions of both signs summing to almost zero)
still moves by about lr, and the last bits of that small sum decide part of the move.

The smallest case shows it with three numbers. Three ranks contribute 1, 10⁻⁸ and −1 to one
gradient element; the true sum is 10⁻⁸. fp32 carries about 7 significant digits.

**Predict, then run.** In fp32, what is (1 + 10⁻⁸) − 1? And (1 − 1) + 10⁻⁸?
"""),
code(r"""
one, tiny = torch.tensor(1.0), torch.tensor(1e-8)
orders = {"(1 + 1e-8) - 1": (one + tiny) - one,      # 1e-8 is below half an fp32 step of 1: lost
          "(1 - 1) + 1e-8": (one - one) + tiny}      # the ones cancel first: 1e-8 survives
for order, total in orders.items():
    print(f"{order} = {float(total):.0e}")
"""),
md(r"""
0 and 10⁻⁸: the same three numbers, two orders, two sums. 10⁻⁸ is below half the gap between 1
and the next fp32 number (about 6·10⁻⁸), so added to 1 first it is lost.

**Predict, then run.** Take one AdamW step and one SGD step (lr 3·10⁻³, torch's default eps of
10⁻⁸) from a parameter at 0, once with each of those gradients. How far does each step move the
parameter, in units of lr? Does the 10⁻⁸ difference in the gradient matter?
"""),
code(r"""
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
SGD's step differs by 10⁻⁸ of lr, AdamW's by **half of lr**. At its first step AdamW moves each
element by lr · g / (|g| + eps), whatever the size of g: with g = 10⁻⁸ = eps that is lr / 2, with
g = 0 nothing. So a gradient that is only rounding noise around zero still moves its parameter by
a sizeable fraction of lr. Over the following steps the momentum and variance average such
elements out, which is why chapter 3's differences stay below a tenth of lr.

Any data-parallel training has this, ZeRO or not: the order of the sums is the only thing that
changed, and no stage adds to it (in chapter 3's table the four stages' rows are alike).
Deterministic training across world sizes would need the same summation order everywhere, which
no ring or tree all-reduce promises.

**Questions.** (1) Set eps to 10⁻⁶ in `first_step_move` (`optimizer([p], lr=3e-3, eps=1e-6)`):
how far does AdamW move now, and what does that say about eps's role? (2) Why is N = 2 the one
world size where accumulation and ranks agree bit for bit?

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
