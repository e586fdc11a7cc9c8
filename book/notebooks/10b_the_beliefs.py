# %% [markdown] id="ch10b-00"
# # Chapter 10b · Common misconceptions (2): six beliefs, measured (常见误区)
#
# *What the crew believed, and what the tally sheet says.*
#
# Part 1 (`10_misconceptions.ipynb`) found the faults of a numpy demo by measuring it. Here the
# crew's folklore: six beliefs about ZeRO that are repeated in talks and forums, each settled by a
# run on real ranks.
#
# 1. "ZeRO-3 is always better than ZeRO-2."
# 2. "Stages 1 and 2 cost no more traffic than DDP."
# 3. "More GPUs is always faster."
# 4. "bf16 needs loss scaling."
# 5. "ZeRO shards the activations."
# 6. "Offload is free."
#
# Each section is short: the claim, your prediction, a cell that measures it, what the numbers say.
# The measurements use chapter 3's TinyLM (Ψ = 188,900 trainable parameters), bf16 with AdamW, a
# global batch of 12 sequences. Each run trains one step (Adam's states appear at the first step)
# and measures the second, on every rank; we print rank 0's numbers. One crew of 4 ranks serves
# beliefs 1 to 3; it then makes way for a crew of 2 for the rest.

# %% id="ch10b-01"
import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab import precision as P
from zerolab.course.lm_runs import PSI_LM, SEQ, activations_per_stage, in_psi, measure, offload_run, train_20
from zerolab.models import MLP
from zerolab.tools.simulate import simulate

torch.set_num_threads(1)      # one thread here, as on every rank: the same arithmetic, run after run
crew = zerolab.Crew(4, threads=1)           # beliefs 1 to 3; then a crew of 2
print(f"Ψ = {PSI_LM:,}; {crew.world_size} ranks started")

# %% [markdown] id="ch10b-02"
# ## Belief 1 · "ZeRO-3 is always better than ZeRO-2"
#
# Stage 3 splits one more giant, the furniture itself, so each backpack is lighter. What does the
# crew pay for it?
#
# **Predict, then run.** On 4 ranks: how much less model-state memory does stage 3 hold than stage
# 2, and how many more bytes does it move per step? How many more collective calls?

# %% id="ch10b-03"
n = crew.world_size
lm4 = {stage: crew.run(measure, stage)[0] for stage in (2, 3)}      # DeepSpeed's collectives
paper2 = crew.run(measure, 2, ideal=True)[0]                          # zerolab's switch
print(f"N = {n}, one step, rank 0{'':13}{'stage 2':>11}{'stage 2':>11}{'stage 3':>11}{'3 / 2':>8}")
print(f"{'':38}{'DeepSpeed':>11}{'paper':>11}{'':>11}{'(DS)':>8}")
rows = [("model states, bytes", lambda r: r["memory"]["model_states"]),
        ("+ peak buffers, bytes", lambda r: r["memory"]["model_states"] + r["memory"]["peak_buffers"]),
        ("wire bytes per step", lambda r: r["wire"]),
        ("collective calls per step", lambda r: r["calls"])]
for label, get in rows:
    a, p, b = get(lm4[2]), get(paper2), get(lm4[3])
    print(f"  {label:36}{a:>11,.0f}{p:>11,.0f}{b:>11,.0f}{b / a:>8.2f}")
print(f"  traffic in Ψ units: stage 2 {in_psi(lm4[2]['wire'], n):.3f} (DeepSpeed), {in_psi(paper2['wire'], n):.3f}"
      f" (paper), stage 3 {in_psi(lm4[3]['wire'], n):.3f}")
print("    (formulas 3, 2; stage 3: 2 with DeepSpeed's prefetch)")
print(f"  stage 3's calls: {', '.join(f'{op} {c}' for op, (c, _) in sorted(lm4[3]['by_op'].items()))};")
print(f"    not among them: {lm4[3]['checks']} order checks of 16 bytes, zerolab's own (DeepSpeed sends none)")
no_prefetch = crew.run(measure, 3, stage3_prefetch_bucket_size=0)[0]
a, b = (r["memory"]["model_states"] + r["memory"]["peak_buffers"] for r in (lm4[2], no_prefetch))
print(f"  stage 3, stage3_prefetch_bucket_size 0: + peak buffers {b:,} ({b / a:.2f} of stage 2),\n"
      f"    {no_prefetch['calls']} calls, wire bytes {no_prefetch['wire']:,.0f}"
      f" = {in_psi(no_prefetch['wire'], n):.3f} Ψ (formula 3)")

# %% [markdown] id="ch10b-04"
# Stage 3 holds about three quarters of stage 2's model states here (16Ψ/N = 4Ψ against
# 2Ψ + 14Ψ/N = 5.5Ψ at N = 4). But count the parameters it gathers (the peak buffers) and it
# holds **more** than stage 2 on this small model. From the third step on, stage 3
# **prefetches**, by DeepSpeed's rule: the second step records the order in which the modules asked
# for their parameters, and at every later module's fetch the engine starts one asynchronous
# all-gather of the next modules in that order, taking modules while fewer than
# min(`stage3_max_live_parameters` − available, `stage3_prefetch_bucket_size`) elements are taken
# (10⁹ and 5·10⁷ by default). Nothing else bounds what is in flight: on this 189k-parameter model
# the first fetch takes every module, the whole model is gathered at the peak, and the modules
# gathered ahead travel in one all-gather whose buffer is copied out module by module, which adds
# to the peak. With `stage3_prefetch_bucket_size` 0 (no prefetch) only the modules at work are
# gathered, and stage 3 holds about a tenth less than stage 2 (0.89 of it, printed above; the tied
# embedding is let go after the head's backward, as DeepSpeed does, until the embedding's own
# backward gathers it again).
# On a billion-parameter model the same budget holds a few layers: that is what it is sized for.
#
# What stage 3 pays depends on the stage 2 you compare it with, and on prefetch. DeepSpeed's stage 2
# already moves 3Ψ (each gradient bucket all-reduced, then the parameters all-gathered). Stage 3 at
# reuse distance 0 **without** prefetch moves 3Ψ too (plus the tied embedding gathered twice more:
# for the head in forward and again for the embedding's own backward). **With** DeepSpeed's default
# prefetch it moves about 2Ψ, fewer bytes than DeepSpeed's stage 2: by the end of forward its
# prefetcher has scanned every backward use and marked it fetched for, and DeepSpeed keeps those
# parameters gathered for backward (`__most_recent_step_id_param_fetched_for`): bytes saved,
# memory paid. Against the paper's stage 2 (2Ψ, zerolab's `ideal_reduce_scatter`) it moves as much
# with prefetch, half again as much without. It makes more calls than DeepSpeed's stage 2: without
# prefetch one all-gather per module in forward and one in backward (the embedding's two uses among
# them) and a reduce-scatter per `reduce_bucket_size` bucket of parameters (50,000 elements here).
# Each call costs a latency α whatever its size (chapter 6); prefetch takes the gathers' time off
# the critical path where compute can hide it, and here their backward bytes too, at the price of
# memory. (The calls count DeepSpeed's gradient-norm all-reduce, 4 bytes at stage 2 and 8 at
# stage 3. They leave out the 1-byte overflow flag that stage 2 sends before it in bf16, one more
# call in each stage-2 column, and zerolab's own order checks, which DeepSpeed does not send.)
#
# So stage 3 is the right choice when stage 2 **does not fit**: the model states of a very large
# model, or when the memory it frees buys a bigger micro-batch. When stage 2 fits, stage 3 is more
# calls (and, against the paper's stage 2, more bytes) for memory you did not need.
#
# ## Belief 2 · "Stages 1 and 2 cost no more traffic than DDP"
#
# The ZeRO paper says so, and it is true **if** stages 1 and 2 reduce-scatter their gradients: an
# all-reduce (2Ψ) is a reduce-scatter (Ψ) followed by an all-gather (Ψ), and ZeRO only moves the
# optimizer step in between. DeepSpeed 0.19.8's stages 1 and 2 do not (chapter 3): `reduce_scatter`
# is true by default, but with `use_multi_rank_bucket_allreduce` (also true by default) they issue
# no reduce-scatter; they all-reduce each gradient bucket (2Ψ), each rank keeps its part, and then
# the parameters are all-gathered (Ψ more). zerolab issues DeepSpeed's collectives, and the paper's
# reduce-scatter is its own switch (`"zerolab": {"ideal_reduce_scatter": true}`), so we can measure
# both, and stage 2 with gradient accumulation too.
#
# **Predict, then run.** In Ψ units: DDP moves 2. Stage 1 and stage 2, DeepSpeed's way and the
# paper's? Stage 2 with 4 micro-batches per step, each way?

# %% id="ch10b-05"
n = crew.world_size
DS, PAPER = "DeepSpeed's default", "paper (zerolab switch)"
cases = [("stage 0 (DDP)", 0, False, 1), (f"stage 1, {DS}", 1, False, 1), (f"stage 1, {PAPER}", 1, True, 1),
         (f"stage 2, {DS}", 2, False, 1), (f"stage 2, {PAPER}", 2, True, 1),
         ("stage 2, 4 micro-batches, DeepSpeed's", 2, False, 4), ("stage 2, 4 micro-batches, paper", 2, True, 4)]
print(f"N = {n}, bf16, Ψ = {PSI_LM:,}: one optimizer step, one rank's wire")
COLUMNS = ("all_gather", "all_reduce", "reduce_scatter")        # each: calls × wire bytes
print(f"{'':38}" + "".join(f"{op:>17}" for op in COLUMNS) + f"{'in Ψ':>7}")
traffic3 = {}
for label, stage, ideal, accumulate in cases:
    r = crew.run(measure, stage, accumulate=accumulate, global_batch=48, ideal=ideal)[0]
    ops = r["by_op"]
    wire = sum(w for _, w in ops.values())
    traffic3[label] = in_psi(wire, n)
    cols = "".join(f"{f'{ops[op][0]} × {ops[op][1]:,.0f}' if op in ops else '-':>17}" for op in COLUMNS)
    print(f"{label:38}{cols}{in_psi(wire, n):>7.3f}")

# %% [markdown] id="ch10b-06"
# (The all_reduce column holds the 4-byte gradient-norm all-reduce too: 6 bytes on the wire at N = 4.) Stages 1 and 2 with the
# paper's reduce-scatter move exactly DDP's 2Ψ. DeepSpeed's default moves **3Ψ**, as much as stage
# 3. And stage 2 with gradient accumulation pays the gradients in every micro-batch (it cannot keep
# the full gradient between them; that is the memory it saves): 4 × 2 + 1 = **9Ψ** DeepSpeed's way,
# 4 + 1 = 5Ψ the paper's. So the belief is true as the paper states it, false for DeepSpeed's
# default config, and false for stage 2 with accumulation. Check your config before quoting the
# paper; `benchmarks/results/side_by_side.txt` sets zerolab's calls and bytes beside DeepSpeed
# 0.19.8's own, config by config.
#
# ## Belief 3 · "More GPUs is always faster"
#
# Doubling the crew halves each worker's share of the *carrying* (compute, with a fixed global
# batch). It does not halve the *shouting*: in a ring, each rank of DeepSpeed's stage 2 sends
# 3(N−1)/N·Ψ elements (the all-reduce's 2, the all-gather's 1), which grows towards 3Ψ and then
# stays there, however many ranks join (towards 2Ψ with the paper's reduce-scatter). Measured,
# stage 2 at N = 4, then at N = 2 (the crew of 4 makes way for the crew of 2).
#
# **Predict, then run.** How many bytes does each rank put on the wire per step at N = 2, and at
# N = 4? And which is faster here, on this machine's few cores?

# %% id="ch10b-07"
scaling, step_ms = {}, {}
for n in (4, 2):
    if crew.world_size != n:
        crew.close()
        crew = zerolab.Crew(n, threads=1)    # the crew of 2 serves the rest of the chapter
    scaling[n] = crew.run(measure, 2)
    # for the time figure below: the fastest of three more runs (each: the slowest rank's step)
    step_ms[n] = 1e3 * min(max(r["seconds"] for r in crew.run(measure, 2)) for _ in range(3))
print(f"stage 2 (DeepSpeed's collectives), bf16, Ψ = {PSI_LM:,}; bytes each rank puts on the wire per step")
print(f"{'N':>2}{'measured':>12}{'3(N−1)/N · 2Ψ':>16}{'share of the limit 6Ψ':>24}")
for n, per_rank in sorted(scaling.items()):
    wire = per_rank[0]["wire"]
    print(f"{n:>2}{wire:>12,.0f}{3 * (n - 1) / n * 2 * PSI_LM:>16,.0f}{(n - 1) / n:>24.2f}")

# %% [markdown] id="ch10b-08"
# The traffic per rank approaches a constant; the compute per rank keeps
# shrinking as 1/N. So past some N every step is as long as its communication, and more GPUs buy nothing.
#
# Time depends on the machine, so it is only drawn, never printed. Left: step time measured here,
# stage 2, the same global batch of 12 sequences. What you see depends on your machine: on a
# laptop the ranks share a few CPU cores and the model is tiny, so a step is mostly fixed overhead
# (Python, the collectives) and extra ranks rarely make it faster; past the number of cores
# they slow each other down. That is a fact about *this* machine, not about ZeRO. Right: zerolab's
# scale simulator (`zerolab.tools.simulate`, the same formulas, published link and GPU figures) for a
# 1.3-billion-parameter model on A100s over 100 Gb/s Ethernet, global batch 64 sequences of 2,048
# tokens, stage 2 with DeepSpeed's traffic, communication overlapped with compute.

# %% id="ch10b-09"
gpus = [1, 2, 4, 8, 16, 32, 64]      # 64 sequences per step in all: 64 / N on each GPU
sim = [simulate(1.3e9, 24, 2048, 2048, 64 // g, g, 2, link="ethernet-100g") for g in gpus]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
ns = sorted(scaling)
ax1.plot(ns, [step_ms[n] for n in ns], "o-", label="step time (slowest rank, best of 3)")
ax1.set(xlabel="N, ranks (on this machine)", ylabel="ms per step", xticks=ns, ylim=(0, None),
        title="Here: a few CPU cores shared by N ranks")
ax1.legend(fontsize=8)
ax2.loglog(gpus, [s.compute_s for s in sim], "s--", label="compute per GPU")
ax2.loglog(gpus[1:], [s.comm_s for s in sim[1:]], "^--", label="communication per GPU")
ax2.loglog(gpus, [s.step_s for s in sim], "o-", lw=2, label="step (the slower)")
ax2.set(xlabel="N, GPUs", ylabel="seconds per step", xticks=gpus, xticklabels=[str(g) for g in gpus],
        title="Simulated: 1.3B params, 100 Gb/s Ethernet")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()
floor = next(g for s, g in zip(sim, gpus) if s.comm_s >= s.compute_s)
print(f"simulated: from N = {floor} GPUs on, each step waits for communication")
print("simulated step time at 16 / 32 / 64 GPUs: "
      + " / ".join(f"{s.step_s:.2f} s" for s, g in zip(sim, gpus) if g in (16, 32, 64)))

# %% [markdown] id="ch10b-10"
# In the simulation, compute falls as 1/N but communication levels off near DeepSpeed's 3Ψ of
# bf16 per GPU per step; from the crossing point on, the step time stops falling: twice the GPUs, the same time
# per step, half the work per GPU. Whether a machine reaches that point at 8 GPUs or at 500
# depends on its links (NVLink, InfiniBand, Ethernet) and on the batch; that it reaches one does
# not. Change `link="ethernet-100g"` to `"nvlink-a100"` and see where the crossing moves.
#
# ## Belief 4 · "bf16 needs loss scaling"
#
# Loss scaling exists because fp16's **range** is narrow: gradients below about 6·10⁻⁸ become 0,
# values above 65,504 become inf. bf16 keeps fp32's 8 exponent bits and so fp32's range; what it
# gives up is **precision** (7 mantissa bits instead of 10). Cast a few values.
#
# **Predict, then run.** Which of 10⁻¹⁰, 10⁻⁸, 10⁻⁶, 1, 7·10⁴ and 10¹⁰ survive a cast to fp16, and
# which a cast to bf16?

# %% id="ch10b-11"
values = torch.tensor([1e-10, 1e-8, 1e-6, 1.0, 7e4, 1e10], dtype=torch.float64)
print(f"{'value':>10}{'fp16':>12}{'bf16':>12}")
for v in values:
    print(f"{float(v):>10.0e}{float(v.half()):>12.4g}{float(v.bfloat16()):>12.4g}")

# %% [markdown] id="ch10b-12"
# fp16 flushes the small ones to 0 and turns the large ones into inf; bf16 keeps every one, to 2
# or 3 significant digits. Now real gradients: the deep MLP of chapter 4 (25 layers, where the
# gradients of the first layers are tiny), one backward in fp64, and what each format does to
# every gradient entry (a multiplication by S = 2¹⁶ is what a loss scaler would do).
#
# **Predict, then run.** What share of the gradient entries becomes exactly 0 in fp16 without a
# scale? With S = 2¹⁶? In bf16?

# %% id="ch10b-13"
deep = MLP(sizes=(13,) + (64,) * 24 + (7,), seed=0).double()
data = torch.Generator().manual_seed(0)
x_deep = torch.randn(256, 13, generator=data, dtype=torch.float64)
y_deep = torch.randn(256, 7, generator=data, dtype=torch.float64)
torch.nn.functional.mse_loss(deep(x_deep), y_deep).backward()
grads = P.grad_magnitudes(deep)
print(f"{grads.numel():,} gradient entries; how many become exactly 0:")
for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
    for scale in (1, 2 ** 16):
        rep = P.underflow_report(grads, scale=scale, dtype=dtype)
        print(f"  {name}, scale {scale:>6}: {rep['zero']:>6,} lost ({100 * rep['zero_fraction']:5.1f} %), "
              f"{rep['overflow']} overflow")
x = torch.randn(100_000, dtype=torch.float64)
scaled = (x * 2 ** 16).bfloat16().double() / 2 ** 16
print("bf16(x · 2¹⁶) / 2¹⁶ == bf16(x) for all 100,000 values:", bool((scaled == x.bfloat16().double()).all()))

# %% [markdown] id="ch10b-14"
# fp16 loses a large share of these gradients unless they are scaled; bf16 loses none, with or
# without a scale. A scale would not help bf16's real weakness either: multiplying by a power of
# two shifts the exponent and leaves the mantissa, and so the precision, exactly as it was.
#
# So zerolab, like DeepSpeed, trains bf16 with no loss scaler: the scale is 1, and a step is
# skipped only if a gradient really is inf or NaN (`bf16.check_grad_overflow`). Twenty steps of
# TinyLM on 2 ranks, bf16 beside fp32:

# %% id="ch10b-15"
runs4 = {p: crew.run(train_20, p)[0] for p in ("bf16", "fp32")}
b, f = runs4["bf16"], runs4["fp32"]
print(f"bf16: loss scale {b['scale']:g}, skipped steps {b['skipped']}, scaler messages {len(b['log'])}")
print("bf16 loss fell by more than 20 % over the 20 steps:", b["losses"][-1] < 0.8 * b["losses"][0])
gap = max(abs(x - y) / y for x, y in zip(b["losses"], f["losses"]))
print("bf16's loss within 2 % of fp32's at every step:", gap < 0.02)

# %% [markdown] id="ch10b-16"
# ## Belief 5 · "ZeRO shards the activations"
#
# The folding chair is not a model state. ZeRO splits the parameters, gradients and optimizer
# states; the activations that each rank's forward saves for its backward depend on that rank's
# **micro-batch** and the model's shape, and on nothing else. Below, on 2 ranks, for each stage:
# the model states (`engine.memory()`) and the activations saved during one training step's
# forward, at micro-batches of 2, 4 and 6 sequences per rank.
#
# **Predict, then run.** At a micro-batch of 4, how will stage 3's activations compare with
# stage 0's: a quarter, a half, the same? And when the micro-batch doubles?
#
# How we count the activations (`zerolab.course.lm_runs.activations_per_stage`): every tensor autograd saves passes through
# `torch.autograd.graph.saved_tensors_hooks`, and we add up their storages, leaving out the
# parameters themselves. (`zerolab.memory.measure_activations` does the same for a plain model.
# It recognises parameters by their storage *before* the forward; at stage 3 the parameters are
# gathered into new storage during the forward, so it would count them as activations. Here each
# saved tensor is checked against the parameters at the moment it is saved.)

# %% id="ch10b-17"
print(f"2 ranks, bf16, TinyLM (Ψ = {PSI_LM:,}), sequences of {SEQ} tokens; bytes on rank 0")
print(f"{'stage':>5}{'model states':>14}   {'activations at a micro-batch of 2, 4, 6 sequences':<50}")
chair = {}
for stage in range(4):
    per_micro = [crew.run(activations_per_stage, stage, m)[0] for m in (2, 4, 6)]
    chair[stage] = per_micro
    print(f"{stage:>5}{per_micro[0]['model_states']:>14,}   "
          + "".join(f"{r['activations']:>12,}" for r in per_micro))

# %% id="ch10b-18"
fig, ax = plt.subplots(figsize=(8, 3.6))
stages = list(chair)
ax.bar([s - 0.2 for s in stages], [chair[s][1]["model_states"] / 1e6 for s in stages], width=0.4,
       label="model states (furniture, stickers, notebook)")
ax.bar([s + 0.2 for s in stages], [chair[s][1]["activations"] / 1e6 for s in stages], width=0.4,
       label="activations (folding chair), micro-batch 4")
ax.set(xticks=stages, xticklabels=[f"stage {s}" for s in stages], ylabel="MB per rank (10⁶ bytes)",
       title="ZeRO shrinks the model states; the activations stay the same")
ax.legend(fontsize=8)
plt.show()

# %% [markdown] id="ch10b-19"
# Each column of activations is the same for all four stages, and grows in step with the
# micro-batch. What does shrink the chair: a smaller micro-batch per rank (more ranks at a fixed
# global batch, or gradient accumulation), activation checkpointing (recompute instead of store:
# DeepSpeed's `activation_checkpointing` block, which zerolab does not implement), and, across
# GPUs, sequence or tensor parallelism: other tools than ZeRO. (DeepSpeed's
# `partition_activations` splits the *checkpointed* activations of tensor-parallel models; it is
# part of activation checkpointing, not of the ZeRO stages.)
#
# ## Belief 6 · "Offload is free"
#
# ZeRO-Offload (chapter 5) takes the heavy notebook off the device: with
# `"offload_optimizer": {"device": "cpu"}` the fp32 master weights, Adam's two moments and the fp32
# gradients they are stepped with live in host memory, and the optimizer step runs on the CPU. The
# device keeps the 16-bit parameters and a gradient bucket in flight. The belief: this memory costs
# nothing, because the CPU and its memory sit idle anyway.
#
# On this machine the test is rigged in offload's favour: the "device" *is* the CPU, and host
# memory is the same RAM. A copy "down" to the host or "up" to the device is a memory copy, and Adam
# runs on the same cores either way. Stage 2 on 2 ranks, TinyLM in bf16, with and without
# `offload_optimizer` on the CPU: where the bytes are after 6 steps (`engine.memory()` and
# `engine.memory("host")`), and the step time (median of 5 steps after a warm-up step, the slower
# rank, the better of 2 runs of each).
#
# **Predict, then run.** How many of a rank's device bytes does offload remove? Does host memory
# receive exactly those bytes, more, or fewer? How much slower is a step here?

# %% id="ch10b-20"
OFFLOAD = {"stage 2": None, "stage 2 + offload cpu": "cpu"}
runs6 = {label: [] for label in OFFLOAD}
for _ in range(2):                                   # alternate the two, twice
    for label, device in OFFLOAD.items():
        runs6[label].append(crew.run(offload_run, device))
r6 = {label: per_run[0][0] for label, per_run in runs6.items()}       # rank 0, first run: bytes
KEYS = ("params", "grads", "optimizer_states", "model_states")
print(f"stage 2, bf16, 2 ranks, Ψ = {PSI_LM:,}: bytes on rank 0 after 6 steps")
print(f"{'':31}" + "".join(f"{k:>17}" for k in KEYS))
for label, r in r6.items():
    for where in ("device", "host"):
        print(f"{label + ', ' + where:31}" + "".join(f"{r[where][k]:>17,}" for k in KEYS))
plain, off = r6["stage 2"], r6["stage 2 + offload cpu"]
freed = plain["device"]["model_states"] - off["device"]["model_states"]
taken = off["host"]["model_states"] - plain["host"]["model_states"]
print(f"device bytes freed by offload: {freed:,} of {plain['device']['model_states']:,}"
      f" ({freed / plain['device']['model_states']:.1%})")
print(f"host bytes taken by offload:   {taken:,} ({taken - freed:+,} against the device's)")
print("the 6 losses with and without offload agree within 1e-5 (relative):",
      all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(off["losses"], plain["losses"])))

# %% id="ch10b-21"
best = {label: min(max(r["seconds"] for r in per_rank) for per_rank in per_run)
        for label, per_run in runs6.items()}
host_step = max(r["host_step"] for r in runs6["stage 2 + offload cpu"][0])
base = best["stage 2"]
fig, ax = plt.subplots(figsize=(8, 2.8))
labels = list(best)
ax.barh(labels, [best[k] / base for k in labels], color=["#4c72b0", "#55a868"], label="step")
ax.barh(labels[1:], [host_step / base], color="#8172b3", label="of which the host optimizer step")
ax.axvline(1, color="black", lw=0.8)
ax.invert_yaxis()
ax.set_xlim(0, max(2.0, 1.15 * max(best[k] / base for k in labels)))
ax.set_xlabel("step time / stage 2's (median of 5 steps, slower rank, better of 2 runs)")
ax.set_title("Here the device is the host: no PCIe to cross, Adam on the same CPU")
ax.legend(fontsize=8, loc="upper right")          # beside stage 2's bar, which ends at 1
fig.tight_layout()
plt.show()
crew.close()                       # done with the ranks: the rest is the simulator

# %% [markdown] id="ch10b-22"
# Offload takes the whole notebook off the device: the fp32 masters and Adam's moments (12 bytes
# per owned parameter) and stage 2's gradient shard; what stays is the bf16 parameters, which stage
# 2 keeps whole on every rank. Host memory takes more than the device gave up: the gradient shard
# it steps with is fp32 there (4 bytes per owned element, not bf16's 2). On a GPU that is a good
# trade, host memory is larger and cheaper; on this machine the two are the same RAM, so offload
# here *adds* bytes. The arithmetic does not change: the same losses.
#
# And the time (the bars move from run to run): a step with offload takes somewhat longer than one
# without, by the share the figure shows, not by a multiple. There is no link to cross, and the
# optimizer runs on the same CPU either way; the host step in the figure is the same Adam that
# stage 2 runs on its "device"; what offload adds here is bookkeeping and the fp32 gradient copy.
#
# ## The same switch on a GPU cluster
#
# On GPUs neither shortcut holds. Each step, every rank copies its reduced gradients down over
# PCIe and its updated 16-bit parameters back up. DeepSpeed converts the gradients to fp32 on the
# GPU before the copy (`runtime/zero/stage_1_and_2.py` line 1909 copies with `non_blocking=True`,
# which converts on the GPU; `stage3.py` line 1457 converts explicitly), so that is **4 + 2 bytes
# per owned parameter**, not the ZeRO-Offload paper's 2 + 2, over a link of about 25 GB/s a
# direction, against some 2,000 GB/s of GPU memory; and Adam runs on the
# CPU, which steps far fewer elements per second than the GPU would. `zerolab.tools.simulate` (chapter 5)
# models both from published figures: PCIe 4.0 at 25 GB/s, a CPU Adam of 10⁹ elements per second per
# GPU's share. A 13-billion-parameter model (40 layers, width 5,120, sequences of 2,048 tokens) on 8
# A100-80GB, stage 2, with and without `offload_optimizer`, one micro-batch per step of 1 to 16
# sequences:

# %% id="ch10b-23"
MICRO = [1, 2, 4, 8, 16]
big = dict(params=13e9, layers=40, hidden=5120, seq=2048, gpus=8, gpu="a100-80gb", stage=2)
gpu_runs = {mb: (simulate(micro_batch=mb, **big), simulate(micro_batch=mb, offload_optimizer=True, **big))
            for mb in MICRO}
slow_cpu = {mb: simulate(micro_batch=mb, offload_optimizer=True, cpu_adam_elems_per_s=0.5e9, **big)
            for mb in MICRO}
print("13B, 8 x A100-80GB, stage 2 (simulated)")
print(f"PCIe per GPU per step with offload: 4 + 2 bytes × {13e9 / 8:,.0f} owned parameters"
      f" = {6 * 13e9 / 8 / 1e9:.2f} GB")
print("    (DeepSpeed: fp32 gradients down, 16-bit parameters up)")
print(f"{'micro-batch':>11}{'GB per GPU':>12}{'+ offload':>11}{'compute s':>11}{'PCIe s':>8}"
      f"{'host Adam s':>13}{'offload / stage 2':>19}")
for mb in (1, 8):
    a, b = gpu_runs[mb]
    print(f"{mb:>11}{a.gpu_bytes['total'] / 1e9:>12.1f}{b.gpu_bytes['total'] / 1e9:>11.1f}{b.compute_s:>11.2f}"
          f"{b.transfer_s:>8.2f}{b.cpu_step_s:>13.2f}{f'{b.step_s / a.step_s:.1f}x':>19}")
mb1 = gpu_runs[1][0].step_s
print(f"micro-batch 1 with a CPU Adam half as fast: {slow_cpu[1].step_s / mb1:.1f}x")
fig, ax = plt.subplots(figsize=(8, 3.4))
ax.plot(MICRO, [b.step_s / a.step_s for a, b in gpu_runs.values()], "o-",
        label="simulated: CPU Adam 10⁹ elements/s per GPU")
ax.plot(MICRO, [slow_cpu[mb].step_s / gpu_runs[mb][0].step_s for mb in MICRO], "s--",
        label="simulated: CPU Adam half as fast")
ax.axhline(best["stage 2 + offload cpu"] / base, color="#55a868", lw=1.5, label="measured here: TinyLM, 2 CPU ranks")
ax.set_xscale("log", base=2)
ax.set_xticks(MICRO, [str(mb) for mb in MICRO])
ax.set(xlabel="sequences per micro-batch", ylabel="step time, offload / stage 2", ylim=(0, 3.5),
       title="13B on 8 A100-80GB: offload costs most when a step has little compute")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] id="ch10b-24"
# These ratios are the simulator's estimates, not measurements: at one sequence per micro-batch, a
# step with offload is about twice as long as stage 2's on the GPUs, and with a CPU Adam half as fast
# (eight GPUs sharing one host's cores and memory bandwidth) about three times. A "3 to 5 times
# slower" circulates for CPU offload; we found no measurement behind it, and the simulator says there
# is no fixed factor: it depends on the compute per step. Both PCIe copies hide behind the compute
# here (9.75 GB per GPU takes 0.39 s); the CPU optimizer step does not hide: it comes after
# the backward and before the next forward. It does not grow with the micro-batch while the compute
# does, so a bigger micro-batch (or gradient accumulation) makes offload cheaper per sample; that is
# why offload comes with the advice to use large batches. What offload buys: the 13B model drops from
# 51.8 to 29.0 GB per GPU, room for a larger micro-batch or a model that did not fit.
#
# So the belief is false as stated. Offload trades device memory for host traffic and CPU time; it is
# free only when the device **is** the host, as on this machine. On a GPU cluster, use it when the
# model states do not fit, not by default.
#
# ## What we measured
#
# **The six beliefs**, each false as stated:
#
# 1. Stage 3 against stage 2 (N = 4): less model-state memory (on this small model more at the
#    peak, with DeepSpeed's default prefetch budget), about the bytes of DeepSpeed's stage 2 (3Ψ
#    each; the paper's stage 2 moves 2Ψ) but more calls (about four times as many without prefetch).
#    Worth it when stage 2 does not fit.
# 2. Stages 1 and 2 move DDP's 2Ψ only with the paper's reduce-scatter (zerolab's switch);
#    DeepSpeed's default (an all-reduce per bucket) moves 3Ψ, and stage 2 with 4 micro-batches 9Ψ
#    (5Ψ the paper's way).
# 3. Traffic per rank of DeepSpeed's stage 2 grows as 3(N−1)/N·Ψ towards a constant while compute
#    shrinks as 1/N: past the crossing, more GPUs do not shorten a step.
# 4. bf16 has fp32's range: no gradient of the deep MLP underflows, zerolab trains it with a
#    loss scale of 1 and no skipped step, and a loss scale could not improve its precision anyway.
# 5. Activations per rank are identical at stages 0 to 3 and grow with the micro-batch.
# 6. Offload to the CPU frees 1,322,304 of a rank's 1,700,106 device bytes here (stage 2, bf16)
#    and puts 1,511,204 in host memory (the gradient shard is fp32 there), at a somewhat longer
#    step, because here the device is the host. On 8 A100-80GB the simulator puts a 13B model's step
#    at 2.0x with offload at micro-batch 1 (4 + 2 bytes per owned parameter over PCIe, Adam on the
#    CPU), 1.1x at 8. Offload trades device memory for host traffic and CPU time.
#
# ## Questions
#
# 1. Run belief 1 at N = 2 (the crew of 2). Does stage 3's memory advantage over stage 2 grow or
#    shrink, and its traffic penalty?
# 2. In belief 3's simulation, change the link to `"nvlink-a100"` and the global batch to 512. At
#    what N does communication now take over?
# 3. With `gradient_accumulation_steps` 4, DeepSpeed's stage 1 moves 3Ψ and its stage 2 9Ψ. If
#    stage 2 fits but stage 1 does not, what does that cost per step, and when would you rather use
#    a bigger micro-batch instead of accumulation?
# 4. In belief 6's simulation, offload the 13B model at stage 3 instead (`stage=3`, then also
#    `offload_param=True`). How many GB per GPU does each save, and what does each cost per step at
#    one sequence per micro-batch?
