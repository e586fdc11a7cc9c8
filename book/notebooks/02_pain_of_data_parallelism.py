# %% [markdown] id="ch02-00"
# # Chapter 2 · The pain of data parallelism (数据并行之痛)
#
# *Everyone carries everything, and everyone stops to agree.*
#
# Suppose the crew keeps its old rule: **every worker carries a complete set** of the furniture,
# the door stickers and the captain's heavy notebook. Hire a second worker and the house is now
# carried twice over, identically; hire four and it is carried four times. Nobody's backpack gets
# any lighter.
#
# There is a second cost. The workers each unpack a different room, so each learns something
# different about where things go. After every room they stop and **compare notes**: every
# worker's stickers are added up and everyone copies down the total, so that all the copies of the
# plan stay exactly the same.
#
# That old rule is **data parallelism** (PyTorch's DDP). Every rank (GPU) holds the *whole* model,
# takes its own slice of the batch, and computes its own gradients; then an **all-reduce** sums the
# gradients of all ranks (and divides by N), so every rank takes the same optimizer step and the
# copies never drift apart. For a small model it is simple, and it works. For a large one it hits
# a wall: in mixed precision with Adam every rank holds **16Ψ bytes** of model states (chapter 1),
# whatever N is. Adding GPUs adds speed, never room. This is the **memory wall**; chapter 3 breaks
# it, and this chapter measures why it must.
#
# **In this chapter**, on real ranks (gloo on CPU here; NCCL on GPUs): DDP from scratch trains like
# one process; the ring all-reduce weighed in its two halves; the engine's ledger for one step;
# memory per rank as ranks are added; and the wall on 40 GB and 80 GB GPUs.
#
# **Units.** Ψ = number of parameters (elements); N = number of ranks; b = bytes per element
# (2 for fp16/bf16, 4 for fp32); sizes in bytes (B); **GB = 10⁹ B**, **GiB = 2³⁰ B**.

# %% id="ch02-01"
import matplotlib.pyplot as plt

import zerolab
from zerolab.course.chapters import ch02          # this chapter's runs, tables and pictures: zerolab/course/chapters/ch02.py
from zerolab.course.chapters.ch02 import one_step, ring_bytes, train_ddp_and_single
from zerolab.memory import count_params, model_state_bytes
from zerolab.models import TinyLM, lm_batches

model = TinyLM()
PSI = sum(p.numel() for p in model.parameters() if p.requires_grad)   # trainable elements
print(f"TinyLM: Ψ = {PSI:,} trainable parameters "
      f"(+ {count_params(model) - PSI} frozen; the output head shares the embedding's weights)")
crews = {n: zerolab.Crew(n) for n in (1, 2, 3, 4)}     # started once (seconds each), reused below
print("crews ready:", ", ".join(f"{n} rank{'s' if n > 1 else ''}" for n in crews))

# %% [markdown] id="ch02-02"
# ## 1 · DDP from scratch
#
# zerolab's **stage 0** is DDP's algorithm written out by hand (`AllReduceAtBoundary` in
# `zerolab/zero/reduce.py`, `ReplicatedParams` in `zerolab/zero/params.py`), reducing the gradients the way
# DeepSpeed's stage 0 does. On every rank: the parameters live in one flat buffer, copied from rank
# 0 at start-up; backward adds each gradient into a flat gradient buffer; at the step the gradient
# is divided by N and **all-reduced**, so every rank holds the *average* gradient of the global
# batch and runs the same AdamW step on it.
#
# One difference from PyTorch's DDP, whose defining optimization is to all-reduce each bucket
# (`bucket_cap_mb`, 25 MB) as soon as backward has filled it, *overlapping* communication with the
# rest of backward: DeepSpeed's stage 0 all-reduces after backward, in buckets of 5·10⁸ elements.
# The bytes on the wire are the same either way; only the time differs.
#
# We train 3 steps in fp32 on one global batch of 12 sequences for every N (12, 6, 4 or 3 per
# rank), and on every rank also train one process on all 12 at once (`ch02.train_ddp_and_single`).
#
# **Predict, then run.** After 3 steps, will the 3 ranks of N = 3 hold exactly the parameters of
# the one process? Close to them? And will the 3 ranks' copies be bit-identical to *each other*?

# %% id="ch02-03"
BATCHES = lm_batches(3, ch02.GLOBAL_BATCH, seed=0)   # 3 global batches of 12 sequences x 16 tokens
parity = {n: crew.run(train_ddp_and_single, BATCHES) for n, crew in crews.items()}
ch02.print_parity(parity)

# %% [markdown] id="ch02-04"
# Equal to the one process up to float32 rounding, not bit for bit: summing the same numbers in a
# different order (per rank, then across ranks) rounds differently in the last bit (one float32
# step near 1 is about 10⁻⁷). But the copies are **bit-identical to each other**, at every N:
# every rank applies the same update to the same all-reduced gradient, so they cannot drift.
#
# ## 2 · Comparing notes: the ring all-reduce, weighed in two halves
#
# Chapter 0 built the ring the crew uses to compare notes: N−1 **reduce-scatter** steps, after
# which rank r holds chunk r summed over everyone, then N−1 **all-gather** steps that carry the
# finished chunks round once more; every step each rank sends one chunk of Ψ/N elements. We weigh
# its two halves apart, because ZeRO (chapter 3) pulls them apart. On each crew, `ch02.ring_bytes`
# all-reduces a bf16 gradient of Ψ = 7,204 elements (14,408 B) with chapter 0's ring
# (point-to-point send/recv only), gives each half its own ledger, and checks the sum against the
# library's `dist.all_reduce`.
#
# **Predict, then run.** On 4 ranks, how many bytes will each rank send to all-reduce those
# 14,408 B: 14,408? four times that? less? Write a number down.

# %% id="ch02-05"
ring = {n: crew.run(ring_bytes, PSI) for n, crew in crews.items()}
ch02.print_ring_table(ring, PSI)

# %% [markdown] id="ch02-06"
# 21,612 B at N = 4, one and a half times the gradient: each half is (N−1)/N·Ψ·b, the all-reduce
# **2(N−1)/N·Ψ·b**. Many guess N times the gradient, since every rank must hear from every other;
# but in a ring each rank forwards partial sums, one chunk per step, so it never sends more than 2Ψ·b
# however big the crew. No all-reduce can send fewer bytes per rank (Patarasuk and Yuan, 2009), and
# NCCL's ring algorithm sends exactly these. At N = 3 the ranks differ by 2 bytes: 7,204 elements
# split into chunks of 2,402 + 2,401 + 2,401, so the formula's 19,210.7 B is an average.
#
# Per rank, 2(N−1)/N only creeps up towards 2. The crew as a whole moves N times that every step,
# and the 2(N−1) steps of the ring each pay a latency, so an all-reduce's *time* grows with N even
# where its bytes per rank barely do:

# %% id="ch02-07"
ch02.ring_figure(ring, PSI)

# %% [markdown] id="ch02-08"
# ## 3 · The engine's own ledger: one step of DDP
#
# The engine does not use the teaching ring: it calls the library's collectives through
# `torch.distributed` (gloo here, NCCL on GPUs, each choosing its own algorithm inside) through its
# `Comm`, which writes **every call into a ledger**. Its "wire bytes" count what a ring would send
# per rank, so the engine's traffic can be set beside the formula. `ch02.one_step` trains one step
# in **mixed precision** (bf16 parameters and gradients, fp32 master weights and Adam states) on
# every crew and keeps the step's ledger and the memory each rank holds afterwards.
#
# **Predict, then run.** TinyLM has 16 trainable parameter tensors. How many all-reduce calls will
# one stage-0 step make on 2 ranks, and of how many elements?

# %% id="ch02-09"
step = {n: crew.run(one_step, BATCHES) for n, crew in crews.items()}
print("everything rank 0 of the 2-rank crew sent in one step:")
ch02.print_ledger(step[2][0]["records"])

# %% [markdown] id="ch02-10"
# **One all-reduce** carries the whole gradient, not 16: DeepSpeed's stage 0 packs the gradients
# into buckets of 5·10⁸ elements, far more than this model has, and all-reduces each bucket as one
# message (fewer, larger messages waste less time on per-call latency; chapter 6 measures it).
# Nothing else goes out. The step is checked for an inf or NaN (zerolab follows DeepSpeed 0.19.8,
# where bf16 steps are checked by default, `bf16.check_grad_overflow`), but at stage 0 every rank
# holds the same averaged gradient after the all-reduce, so each checks it on its own, without a
# collective; the gradient norm for clipping would be all-reduced only when clipping in fp32
# (chapter 10 lists the small collectives of every stage). The flat buffer, and the same step on
# every crew:

# %% id="ch02-11"
for label, params, numel, padded in step[3][0]["buffers"]:
    print(f"{label}: {params} parameters, {numel:,} elements (padded to {padded:,} for N = 3)")
ch02.print_gradient_calls(step)

# %% [markdown] id="ch02-12"
# One call per step at every N, of exactly Ψ = 7,204 elements: the gradients, without the flat
# buffer's **padding** (padded to a multiple of N, 7,206 at N = 3, because every ZeRO stage shares
# that layout and chapter 3 cuts it into N equal partitions). The wire bytes are 2(N−1)/N of the
# gradient's bytes: the ring formula again, on the engine's own traffic.
#
# ## 4 · Memory per rank: nobody's backpack gets lighter
#
# Chapter 1 weighed one backpack: in mixed precision with Adam, each parameter costs 2 B (bf16
# parameter) + 2 B (bf16 gradient) + 12 B (fp32 master, momentum and variance) = **16 B**.
#
# **Predict, then run.** With Ψ = 7,204, how many bytes of model states does one rank hold on a
# crew of 1? And on a crew of 4: a quarter of that, the same, or more? The next cell prints what
# `engine.memory()` measured on every rank after the step above, against the formula:

# %% id="ch02-13"
formula = model_state_bytes(PSI, stage=0, world_size=1)["total"]    # 16 Ψ bytes
print(f"16Ψ = 16 x {PSI:,} = {formula:,.0f} B per rank (formula)")
crew_total = ch02.print_memory_table(step, formula, frozen=count_params(model) - PSI)
fig, ax = plt.subplots(figsize=(6.5, 3.8))
ch02.memory_bars(ax, step, crew_total, formula)
plt.show()

# %% [markdown] id="ch02-14"
# The same, give or take a few dozen bytes: **per rank it does not shrink** as ranks join, and the
# crew as a whole carries N copies. Every extra byte is accounted for: 16 B for each padding element
# (it has a parameter, a gradient and optimizer states like any other), Adam's 4-byte `step` counter
# for the flat buffer's optimizer state, and the frozen `temperature` scalar (2 B in bf16, no
# gradient, no optimizer state).
#
# ## 5 · The memory wall
#
# TinyLM's 115 kB fits anywhere. Scale Ψ up and the same 16 bytes per parameter meet the size of a
# GPU. Real ZeRO runs train on **A100 GPUs sold as "40GB" and "80GB"**. Two warnings: memory chips
# come in binary sizes, so a "40GB" card is closer to 40 **GiB** (CUDA's deviceQuery reports about
# 42.3 GB on an A100-SXM4-40GB; the exact figure depends on the card, driver and ECC); and model
# states are not all a GPU holds (activations, temporary buffers, the CUDA context and
# fragmentation take their share), so the real limit sits lower.
#
# **Predict, then run.** What is the largest model, in parameters, whose model states fit on one
# 80 GB GPU under DDP? And on 64 of them?

# %% id="ch02-15"
BYTES_PER_PARAM = formula / PSI            # 16 in mixed precision with Adam
ch02.print_wall(BYTES_PER_PARAM)
fig, ax = plt.subplots(figsize=(7.5, 4.2))
ch02.wall_figure(ax, BYTES_PER_PARAM)
fig.tight_layout()
plt.show()

# %% [markdown] id="ch02-16"
# **5 billion parameters**, on one GPU or on 64: DDP's line is flat in N. With the labels read as GB
# it stops at 2.5 billion on a 40 GB GPU and 5 billion on an 80 GB one, before a single activation;
# read as GiB, at 2.68 and 5.37 billion. A 7-billion-parameter model needs 112 GB on *every* GPU; a
# 70B model would need 1,120 GB on each. Only splitting the load, as the dotted ZeRO-3 line does,
# moves it.
#
# ## What we measured
#
# On TinyLM, Ψ = 7,204 trainable parameters, crews of N = 1 to 4 ranks:
#
# - DDP (zerolab stage 0) trained to the single-process parameters at every N, within float32
#   rounding; the ranks' copies were bit-identical.
# - A ring all-reduce of Ψ bf16 elements = reduce-scatter + all-gather, N−1 sends each:
#   2(N−1)/N·Ψ·2 B per rank (0, 14,408, 19,210-19,212 and 21,612 B at N = 1-4).
# - One engine step: one gradient all-reduce of Ψ elements at every N (DeepSpeed's stage 0, buckets
#   of 5·10⁸ elements), and nothing else: each rank checks the averaged gradient for overflow on
#   its own.
# - Model states per rank: 16Ψ = 115,264 B plus a few dozen bytes of padding, step counters and a
#   frozen scalar, flat in N; the whole crew holds N times that.
# - The memory wall at 16 B/param: 2.5 billion parameters fit 40 GB, 5 billion fit 80 GB.
#
# In the story's words: the old rule makes every worker carry the whole house and stop after every
# room to pass the sticker totals round the ring. The ring is as frugal as passing notes can be
# (about 2Ψ per worker, however many workers), so traffic is not what breaks DDP. **Memory is**:
# 16Ψ on every rank, flat in N. Chapter 3 stops carrying duplicates.
#
# ### Questions
#
# 1. The ring's bytes per rank approach 2Ψ·2 B as N grows. Why does adding ranks not make each
#    rank's traffic grow, and what does grow with N?
# 2. Run section 3 again with `crew.run(one_step, BATCHES, reduce_bucket_size=500)`: does stage 0
#    make more all-reduces? Then add `stage=1` too: how many gradient all-reduces per step now, do
#    the bytes change, and what else appears on the ledger? (Chapter 3 explains.)
# 3. Here stage 0 all-reduces after backward, as DeepSpeed's does; PyTorch's DDP overlaps its
#    buckets with backward. Which measurements in this chapter would overlap change?
# 4. Read the memory wall for a 13B model: how many GB of model states per GPU under DDP? How
#    many 80 GB GPUs would ZeRO-3 need just for the model states?
#
# ### Your turn: write the ring yourself
#
# Open [**`exercises/02_ring_reduce_scatter.ipynb`**](../exercises/02_ring_reduce_scatter.ipynb)
# (its worked answer is in [`solutions/`](../solutions/02_ring_reduce_scatter.ipynb)). You
# write the reduce-scatter half of the ring, given only a `send_recv(send_tensor, recv_tensor)`
# that passes one chunk to the right while receiving one from the left. The check runs your
# function on real crews of 2, 3 and 4 ranks with chunks of uneven size, counts the bytes you send,
# and then trains DDP with *your* ring as its gradient all-reduce.

# %% id="ch02-17"
for crew in crews.values():
    crew.close()
print("crews closed")
