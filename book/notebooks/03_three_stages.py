# %% [markdown] id="ch03-00"
# # Chapter 3 · The three stages (ZeRO 三阶段)
#
# At the end of chapter 2 the crew hit the wall. Every worker carried the whole household: the
# furniture (the **parameters**), the door stickers (the **gradients**) and the heavy notebook
# (the **optimizer states**). Hiring more workers added more copies of the same load, not more room.
#
# So the captain re-divides the load. Each worker still carries his share of boxes through the
# door (each rank runs forward and backward on its slice of the batch); what changes is what each
# worker must *keep*:
#
# 1. **First, the heavy notebooks.** For every piece of furniture the notebook holds an exact
#    register copy (the fp32 **master weights**) and two lines about how it has been moving (Adam's
#    **momentum** and **variance**): 12 bytes per parameter. The captain tears the notebooks into N
#    parts; each worker updates only the furniture his part describes, then tells the others the
#    new positions. **Stage 1.**
# 2. **Then the door stickers.** A worker needs the stickers only for his part of the notebook, so
#    as soon as a batch of stickers is written the crew adds them up and each keeps only his share.
#    **Stage 2.**
# 3. **Finally, the furniture itself.** Each worker carries 1/N of the household; before a room is
#    worked on, the crew lends each other the pieces it needs and hands them back after. **Stage 3.**
#
# Every cut makes each backpack lighter, and every cut means more shouting across the house. In
# this chapter we measure both on real ranks, beside the ZeRO paper's formulas.

# %% [markdown] id="ch03-01"
# ## What the paper claims, and what DeepSpeed does
#
# Ψ is the number of trainable parameters (elements), N the number of ranks. With mixed precision
# and Adam a parameter costs 2 bytes (bf16) + 2 (bf16 gradient) + 12 (fp32 master, momentum,
# variance) = **16 bytes**. Per rank:
#
# | stage | split among the N ranks | model-state bytes per rank | traffic per rank per step: the paper |
# |---|---|---|---|
# | 0 (DDP) | nothing | **16Ψ** | **2Ψ**: all-reduce the gradients |
# | 1 | optimizer states | 2Ψ + 2Ψ + 12Ψ/N = **4Ψ + 12Ψ/N** | **2Ψ**: reduce-scatter the gradients (Ψ), all-gather the parameters (Ψ) |
# | 2 | + gradients | 2Ψ + (2 + 12)Ψ/N = **2Ψ + 14Ψ/N** | **2Ψ**: the same two collectives |
# | 3 | + parameters | **16Ψ/N** | **3Ψ**: all-gather in forward (Ψ) and again in backward (Ψ), reduce-scatter (Ψ) |
#
# **DeepSpeed 0.19.8 does not move the paper's bytes at stages 1 and 2**: by default it
# **all-reduces** each gradient bucket (2Ψ), each rank keeps the slices it owns, and after the
# step it all-gathers the parameters (Ψ): **3Ψ**. zerolab runs DeepSpeed's collectives by default
# (`benchmarks/results/side_by_side.txt` sets them beside DeepSpeed's); the paper's reduce-scatter
# is zerolab's own switch, `"zerolab": {"ideal_reduce_scatter": true}`.
#
# **Counting bytes.** We count what each rank puts on the wire in a ring, as nccl-tests' *bus
# bandwidth* and `zerolab.comm` do: for S bytes an all-reduce costs each rank 2(N−1)/N·S, a
# reduce-scatter or an all-gather (N−1)/N·S; the paper counts elements and drops (N−1)/N. The
# folding chair (the **activations**) is not a model state: no stage splits it, and it is left out.
# In zerolab a stage is three switches (the table at the top of `zerolab/zero/stage.py`).

# %% id="ch03-02"
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

# %% [markdown] id="ch03-03"
# ## Memory per rank, measured beside the formula
#
# `ch03.measure_all` runs `train_and_measure` on every rank, every crew, every stage: it builds the
# engine with `zerolab.initialize(model, config)` as a DeepSpeed user would, trains two steps
# (AdamW makes its states at the first) and measures the second: what the rank holds
# (`engine.memory()`, read from the tensors) and what it sent (`engine.ledger`).
#
# **Predict, then run.** At N = 4, DDP holds 16Ψ = 3,022,400 bytes of model states per rank. What
# fraction of that will stage 1 keep? Stage 2? Stage 3? Write three fractions down.

# %% id="ch03-04"
runs, ideal = ch03.measure_all(crews)   # 16 runs; stages 1-2 again with the paper's reduce-scatter
ch03.print_memory_table(runs, PSI)

# %% [markdown] id="ch03-05"
# Most guess 1/4 for every stage: adding 4 workers, each should carry a quarter. Only stage 3
# does: stage 1 keeps **0.438** of DDP's bytes (7Ψ of 16Ψ: it splits only the notebook, and the
# bf16 parameters and gradients stay whole on every rank), stage 2 **0.344** (5.5Ψ). Stage 1
# removes most of the weight at once because the notebook was 12 of the 16 bytes.
#
# The column "left" is not noise: each flat buffer is **padded** to a multiple of N (16 bytes per
# padding element, each state divided by N once split), the one **frozen** parameter (`temperature`,
# 2 bytes: whole on every rank at stages 0-2; at stage 3 partitioned like the others, as DeepSpeed's
# `zero.Init` does, padded to N elements, one per rank, so again 2 bytes), and AdamW keeps a 4-byte
# **step counter** per tensor it steps: one flat buffer at stages 0-2, and at stage 3, which
# partitions (and pads) each parameter on its own as DeepSpeed does, one per trained parameter,
# 16 here. The next cell adds those up, then draws the table.

# %% id="ch03-06"
print(f"bytes left once padding, the frozen parameter and AdamW's step counters are counted:"
      f" {ch03.unexplained_bytes(runs, PSI):.0f}")
fig, ax = plt.subplots(figsize=(7.5, 4.5))
ch03.memory_figure(ax, runs, PSI)
plt.show()

# %% [markdown] id="ch03-07"
# DDP stays at 16Ψ whatever N is: the wall of chapter 2. Stage 1 never goes below 4Ψ, stage 2
# never below 2Ψ; only stage 3 keeps falling as 1/N. These are DeepSpeed's numbers with its default
# bf16 settings. (With `"data_types": {"grad_accum_dtype": "fp32"}` its stage 1 runs
# `BF16_Optimizer`, which adds a full fp32 gradient buffer: **8Ψ + 12Ψ/N**; at stage 0 DeepSpeed
# 0.19.8 refuses that mix of bf16 parameters and fp32 accumulation with a `NotImplementedError`
# (`runtime/engine.py`, `_do_optimizer_sanity_check`, lines 2305-2323). zerolab refuses the block at
# every stage.)
#
# Model states are not all a rank holds: stage 2 keeps a **gradient bucket** in flight during
# backward, stage 3 the **gathered parameters** of the modules in use and of those gathered ahead;
# `engine.memory()` reports them as `peak_buffers`. (*On a GPU cluster* DeepSpeed allocates its
# bucket buffers once and reuses them; here a buffer is made when a bucket fills.)

# %% id="ch03-08"
for stage in (2, 3):
    m = runs[4, stage]["memory"]
    print(f"stage {stage}, N = 4: model states {m['model_states']:>9,} bytes,"
          f" peak transient buffers {m['peak_buffers']:>9,} bytes")
print(f"stage 3: most parameter elements gathered (or in flight) at once:"
      f" {runs[4, 3]['peak_gathered']:,} of Ψ = {PSI:,}")

# %% [markdown] id="ch03-09"
# Stage 3's peak holds the **whole model** here, and a little more than Ψ: the frozen `temperature`
# is gathered too (1 element, padded to N = 4). DeepSpeed's defaults are sized for billions of
# parameters (`stage3_prefetch_bucket_size` = 5·10⁷ elements gathered ahead,
# `stage3_max_live_parameters` = 10⁹ at once); on a small model, saving memory needs smaller values.
#
# ## Traffic per step: DeepSpeed's 3Ψ beside the paper's 2Ψ
#
# The ledger's bytes on one rank's wire, split into **gradients** and **parameters**; the last
# column divides by (N−1)/N·2Ψ bytes, so it reads as the paper's 2Ψ and 3Ψ. Stage 3 runs at reuse
# distance 0 with prefetch off (every module gathered again for backward, the paper's count) and at
# DeepSpeed's default reuse distance.
#
# **Predict, then run.** Stage 2 keeps a quarter of DDP's gradients at N = 4. Does it move fewer
# bytes than DDP, the same, or more, the paper's way? DeepSpeed's way? And stage 3? Write a
# multiple of Ψ for each row.

# %% id="ch03-10"
reuse = {n: crews[n].run(train_and_measure, 3, stage3_max_reuse_distance=10**9)[0] for n in (2, 3, 4)}
rows = ch03.traffic_rows(runs, ideal, reuse)
ch03.print_traffic_table(rows, PSI)

# %% [markdown] id="ch03-11"
# Most guess that keeping less means sending less. It does not. **The paper's way**, stages 1 and
# 2 move exactly DDP's 2Ψ: an all-reduce *is* a reduce-scatter followed by an all-gather, and ZeRO
# only moves the optimizer step in between, so the memory is **free in traffic**. **DeepSpeed's
# way** they move **3Ψ**: its stages 1-2 keep one flat buffer cut into N contiguous partitions
# (pictured at the end), a bucket lies in one or two ranks' partitions and cannot be
# reduce-scattered into N equal pieces, so each bucket is all-reduced (2Ψ) and the parameters are
# all-gathered after the step (Ψ). (`"use_multi_rank_bucket_allreduce": false` sends one `reduce`
# to each owner instead.)
#
# Stage 3 at reuse distance 0, prefetch off, moves **3.272 Ψ**: the extra 0.272 Ψ is the embedding gathered
# **twice more** (2 × 25,700 / 188,900), because the output head shares it. It is gathered for the
# head in forward, and again for the embedding's own backward: DeepSpeed releases a module's
# parameters after its backward (`post_sub_module_backward_function`), so the head's backward lets
# it go, and at reuse distance 0 nothing is kept. The frozen `temperature` (1 element, padded to N)
# is gathered in both passes too, and each parameter is padded to a multiple of N (DeepSpeed
# partitions every parameter on its own). With DeepSpeed's
# default `stage3_max_reuse_distance` (10⁹ elements) this small model stays gathered from forward to
# backward and moves 2Ψ (and the padded temperature's few bytes). The check and the picture:

# %% id="ch03-12"
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

# %% [markdown] id="ch03-13"
# ### Gradient accumulation: stage 2 pays per micro-step
#
# With `gradient_accumulation_steps = 4` a rank runs 4 forward/backward passes per optimizer step.
# Stage 1 keeps full gradients and can add the micro-steps up locally; stage 2 keeps only its shard.
#
# **Predict, then run.** At N = 3 with accumulation 4, how many Ψ units does each row move per
# optimizer step? (Accumulation 1 gives 2, 3, 2, 3, 2 and 3.272, as above.)

# %% id="ch03-14"
ch03.print_accumulation_table(crews[3], PSI)

# %% [markdown] id="ch03-15"
# Stages 0 and 1 send the summed gradient once per optimizer step, whatever the accumulation.
# Stage 2 must reduce every bucket in every micro-step, as backward fills it: DeepSpeed's way
# 4 × 2 + 1 = 9 units instead of 3, the paper's 4 × 1 + 1 = 5 instead of 2. That is the price of
# never holding a full gradient. Stage 3 pays 4 times everything (4 × 3.272).
#
# ### Stage 3 over one step: gather, use, release
#
# For stage 3 on 2 ranks the ledger reads like the crew's day: each module's parameters are
# all-gathered for its forward and released after (a release sends nothing); backward gathers them
# again in reverse order; the gradients go out in buckets, each reduce-scattered in one call; last,
# one small all-reduce (the 8-byte gradient norm).
#
# **Prefetch** is DeepSpeed's rule (`fetch_sub_module` in `partitioned_param_coordinator.py`): the
# second step records the order in which modules are fetched, forward and backward in one trace;
# from the third on, each fetch also pops the next entries of that order and starts one
# asynchronous all-gather of those not gathered yet, within min(`stage3_max_live_parameters` −
# elements gathered, `stage3_prefetch_bucket_size`), and marks every entry it pops as *fetched for*
# its later use. A module's parameters (its own and those tied to it) come in one all-gather. The
# timeline below runs with prefetch off, this chapter's setting: every module just in time.
# (*On a GPU cluster* these run on a CUDA stream of their own, beside the module's kernels.)

# %% id="ch03-16"
records = crews[2].run(train_and_measure, 3)[0]["records"]     # ZeRO's calls (no order checks)
fig, ax = plt.subplots(figsize=(11, 3.8))
lanes = collective_timeline(ax, records, title="Stage 3, one step on 2 ranks: gather before use, "
                            "reduce-scatter and release after backward")
plt.show()
kinds = {}
for _, lane, _, _ in lanes:
    kinds[lane] = kinds.get(lane, 0) + 1
print("collectives in the step:", ", ".join(f"{k} {v}" for k, v in kinds.items()))

# %% [markdown] id="ch03-17"
# Two kinds of small collectives stay out of the tables. DeepSpeed's, as 0.19.8 sends them: at
# stages 1-2 in bf16 a 1-byte overflow flag (`bf16.check_grad_overflow`) and the 4-byte gradient
# norm; at stage 3 only the norm, 8 bytes in fp64 (it checks overflow there in fp16 only); at
# stage 0 the norm only when clipping in fp32. And **zerolab's own** 16-byte **headers** at stage 3, before each unit
# of parameter gathers, so that ranks on different paths through the model raise
# `ModuleOrderError` instead of hanging; DeepSpeed sends no such thing, the ledger files them apart
# (`ledger.checks`), and `"zerolab": {"order_checks": false}` turns them off.
#
# **Predict, then run.** With prefetch off (this chapter's setting) the measured step of stage 3
# gathers each module's parameters when it runs, in forward and again in backward. With DeepSpeed's
# default prefetch (`stage3_prefetch_bucket_size` 5·10⁷), how many all-gathers, how many headers,
# and how many parameter bytes?

# %% id="ch03-18"
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

# %% [markdown] id="ch03-19"
# Without prefetch, one all-gather per module fetch and one header each. (Stage 2's one header is
# the ranks' single agreement on the order backward's gradient hooks fire in, which DeepSpeed's
# buckets follow: zerolab's own, sent once, at the second backward.) With DeepSpeed's default
# prefetch the **bytes** fall too, not only the calls: at reuse distance 0 its prefetcher marks
# every later use it pops as fetched for (`__most_recent_step_id_param_fetched_for` in
# `partitioned_param_coordinator.py`), and DeepSpeed does not release a parameter fetched for a
# later use, so the backward's gathers are gone: about 2Ψ, as at reuse distance 10⁹. Chapter 8
# measures it knob by knob; chapter 6 what a call costs.
#
# ### Stage 3's small parameters: `stage3_param_persistence_threshold`
#
# Gathering a LayerNorm weight of 100 elements costs a whole call to save 200 bytes. DeepSpeed
# keeps every parameter of at most `stage3_param_persistence_threshold` elements **persistent**
# (within `stage3_model_persistence_threshold`, unlimited by default): whole on every rank,
# refreshed after each step (one all-gather per parameter, DeepSpeed's `_post_step`), gradients
# still reduce-scattered. The formula becomes
# 3(N−1)/N·(Ψ−P) + 2(N−1)/N·P for P persistent elements. Thresholds 0, 30,000 (the position table,
# the embedding, every LayerNorm and bias) and DeepSpeed's default, 100,000:
#
# **Predict, then run.** With DeepSpeed's default threshold, how many modules will stage 3 gather
# in forward and backward on this model, and how many bytes will it move: 3Ψ units, 2Ψ, less?

# %% id="ch03-20"
ch03.print_persistence_table(crews[4], PSI)

# %% [markdown] id="ch03-21"
# None in forward or backward: every parameter here is under 100,000 elements, so stage 3 quietly
# becomes the paper's stage 2 (377,808 bytes of parameters per rank: 2Ψ, and the frozen
# `temperature` padded to 4 elements, 8 bytes; 2Ψ of traffic, less than DeepSpeed's own stage 2).
# The all-gathers after the step refresh every persistent parameter, one call each, the frozen one
# included (DeepSpeed's `_post_step`). On a model of billions of
# parameters 100,000 elements is a LayerNorm or a bias; on a small model, set the threshold
# yourself. At 30,000 the embedding is persistent, so its extra gathers are gone, and the
# measurement meets the formula but for 6 bytes: the frozen `temperature`, refreshed with the
# persistent parameters ((3/4)·2·4 bytes; the formula counts only the Ψ trainable elements).
#
# ## Correct first: every stage trains like one process
#
# We train 3 steps in **fp32** with each stage on 1 to 4 ranks and compare every parameter with
# single-process training on the same global batches (`engine.full_params()` gathers the fp32
# values, as DeepSpeed's `zero_to_fp32` would). Both run without gradient clipping: DeepSpeed
# computes the clipping factor in fp32 at stages 0-2 and in fp64 at stage 3, and one ulp of it,
# amplified by AdamW, would be a difference of its own.
#
# **Predict, then run.** Will stage 3 on 4 ranks be bit-identical to one process? If not, how far
# off: a few rounding steps (below 10⁻⁶), a tenth of one AdamW step (below 3·10⁻⁴), or a step?
# And will DDP (stage 0) be any closer than stage 3?

# %% id="ch03-22"
reference = ch03.reference_fp32(clip=0.0)   # one process, the whole batch at once, unclipped like the runs
ch03.print_parity_table(crews, reference)

# %% [markdown] id="ch03-23"
# Not bit-identical for N ≥ 2, and above the last bits of fp32 (a rounding step is about 6·10⁻⁸ near
# 1), though far below one step (lr = 3·10⁻³). The exact values are rounding noise that another
# CPU's SIMD kernels change; the bounds hold everywhere. DDP is no closer: it is not ZeRO's doing.
# **[Appendix 3a](03a_appendix_adamw_rounding.ipynb)** finds the culprit: the order of the sums,
# amplified by AdamW, in any data-parallel training.
#
# This table shows the partitioning alone: the chapter's config sets `"memory_efficient_linear":
# false`. By default DeepSpeed's stage 3 computes every `nn.Linear` with a function of its own (on
# 3-D inputs it adds the bias after the matmul and sums the weight's gradient its own way), and
# zerolab does the same. Its last bits can differ from torch's, depending on the CPU's kernels,
# and AdamW amplifies what differs: with the default, stage 3 on one rank can land up to a tenth
# of a step away from one process.
#
# ## Who owns what: the shards
#
# A flat buffer of `padded_numel` elements (a multiple of N) is cut into N equal pieces, and **rank
# r owns the r-th piece**, `[r · padded_numel / N, (r + 1) · padded_numel / N)`: equal pieces in
# rank order, because that is what an all-gather collects and a reduce-scatter delivers.
#
# DeepSpeed's stages 1 and 2 cut **one** flat buffer of every parameter, in gradient order (the last
# layer first), so a rank's partition is one stretch of the model and a bucket (red lines) falls
# where it falls. The paper's layout (the switch) makes each bucket its own buffer cut into N shards.
# Stage 1 on 3 ranks, colored by owner; black lines are parameter boundaries.

# %% id="ch03-24"
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

# %% [markdown] id="ch03-25"
# A parameter cut in two is not a problem: Adam, AdamW and SGD update every element on its own,
# so stepping a shard of the flat buffer is the same as stepping the parameters inside it. (An
# optimizer that looks at a whole tensor at once, such as LAMB's trust ratio, would not be; this is
# why zerolab, like DeepSpeed, wants `zero_allow_untested_optimizer` for anything else.)
#
# We are done with the ranks:

# %% id="ch03-26"
for crew in crews.values():
    crew.close()

# %% [markdown] id="ch03-27"
# ## What we measured
#
# On a 188,900-parameter TinyLM, bf16 + AdamW, 1 to 4 ranks, per rank:
#
# - **Memory** at N = 4: stage 1 keeps 0.438 of DDP's bytes, stage 2 0.344, stage 3 0.25, each
#   the formula to the byte once padding, the frozen parameter and AdamW's step counters are counted.
# - **Traffic**, in (N−1)/N·2Ψ units: DDP 2; DeepSpeed's stages 1-2 3 (each bucket all-reduced), the
#   paper's 2 (zerolab's switch); stage 3 3.272 at reuse distance 0 with prefetch off (the tied
#   embedding gathered twice more: for the head in forward, and again for its own backward, as
#   DeepSpeed releases after each module's backward), about 2 with DeepSpeed's defaults. At reuse
#   distance 0 DeepSpeed's prefetch changes the bytes too: what its prefetcher scanned stays
#   gathered for backward.
#   With accumulation 4, stage 2 pays every micro-step: 9 DeepSpeed's way, 5 the paper's.
# - **Correctness** (fp32): every stage as close to one process as DDP is, below 3·10⁻⁴ with AdamW
#   (appendix 3a says why not closer).
#
# ## Questions
#
# 1. With the paper's reduce-scatter, stage 2 keeps a quarter of the gradients at N = 4, yet moves
#    the same bytes as DDP. Where in the step does each gradient byte go, and why is nothing saved
#    or added? What does DeepSpeed's all-reduce add?
# 2. For a 7B model in bf16 on 64 GPUs, how many GB per step does each rank put on the wire at
#    stage 2, DeepSpeed's way and the paper's way?
# 3. The memory table's "left" reaches 231 bytes at N = 3 (stage 3) but at most 66 at N = 4.
#    Which of the three reasons grows when N does not divide the buffers?
# 4. Why is stage 3's traffic 3Ψ and not 2Ψ + Ψ/N? Count the gathers in forward, in backward,
#    and the reduce-scatter. Then, before the crews close, run `crews[4].run(train_and_measure, 3,
#    stage3_max_reuse_distance=10**9)` (DeepSpeed's default): which of those gathers go away here?
#
# ## Your turn
#
# Open **`exercises/03_stage1_shards.ipynb`**. You write the two pieces stage 1 rests on:
# (a) the shard ownership rule `shard_range(padded_numel, world_size, rank)`, and (b) the
# shard-only AdamW step. The checks plug your code into the real engine on 2 and 3 ranks (your
# rule cuts DeepSpeed's flat buffer, and the paper's buckets) and compare the training with a
# single process.
#
# Then open **`exercises/03b_stage2_buckets.ipynb`**, the heart of stage 2: you write what
# happens to a gradient bucket during backward (when it is complete, what it sends, what this
# rank keeps), in the paper's pattern (each bucket reduce-scattered, zerolab's switch; DeepSpeed
# all-reduces it), and the check trains stages 2 and 3 with it.
# Last, **`exercises/03c_zero1_by_hand.ipynb`** has you build stage 1 whole in plain `torch.distributed`, no zerolab engine: a sharded optimizer that the check holds against PyTorch's DDP, bit for bit, on 2 and 3 ranks, with its traffic and memory measured.
