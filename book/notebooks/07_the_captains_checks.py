# %% [markdown] id="ch07-00"
# # Chapter 7 · The captain's three checks (调优与排查): tuning and troubleshooting
#
# *Is any backpack over its limit? Is the shouting channel jammed? Is the warehouse holding us up?*
#
# Everything is ready: the crew knows how to split the household (ZeRO stages), where the
# warehouse is (offload) and how to pack the boxes (buckets). Before the move starts, the captain
# walks down the line and checks **three things**: is any worker's backpack over its limit, is
# the shouting channel jammed, is the trip to the warehouse holding the crew up? Training is tuned
# the same way: **first find the bottleneck, memory, communication or computation, then treat
# that one.** The crew's goal is not to make each trip as heavy as possible but to make the whole
# move as short as possible: computing, carrying and waiting in balance.
#
# | the captain checks | in training | what we read | what we turn |
# |---|---|---|---|
# | the backpack's limit | device memory per rank | `engine.memory()`, the budget's peak | `stage` 1 → 3, then `offload_optimizer`, or recompute activations |
# | the folding chair | activations kept for backward | the budget's `peak_activation_bytes` | `torch.utils.checkpoint` |
# | the shouting channel | communication | `engine.ledger` (calls, bytes), `engine.timeline` | `reduce_bucket_size`, batch size, accumulation steps |
# | waiting for the slowest | ranks out of step | the timeline of each rank | the straggler |
# | the warehouse | the host step and the copies | the timeline's host bars | offload only when memory demands it |
#
# The recipe practitioners give, which this chapter runs as an experiment: *when device memory
# is short, raise `zero_optimization.stage` step by step from 1 to 3; if that is still not
# enough, turn on `offload_optimizer` or activation recomputation. When throughput drops, check
# the communication bucket size and the bandwidth first, then adjust the batch size and the
# gradient accumulation steps.* A step's time is roughly three parts,
#
# $$T_{\text{step}} \approx T_{\text{compute}} + T_{\text{communication}} + T_{\text{waiting}},$$
#
# and *if a higher ZeRO stage makes throughput drop, suspect communication first*, rather than
# adding GPUs blindly. On a GPU cluster you would read the memory peak with `nvidia-smi`, the
# versions with `ds_report`, and throughput and latency in the logs; here the engine measures
# each of them on real ranks.

# %% id="ch07-01"
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

import zerolab
from zerolab.memory.budget import DeviceOutOfMemoryError
from zerolab.i18n import fill          # textwrap.fill that also wraps Chinese (the zh edition's messages)
from zerolab.memory import count_params
from zerolab.models import MLP, TinyLM, lm_batches, lm_loss, mse_loss, regression_batches
from zerolab.zero.reference import train_engine

crew = zerolab.Crew(2, threads=1)      # two ranks for the whole chapter (gloo, on this CPU)
N = crew.world_size


class FoldedLM(TinyLM):
    """TinyLM whose blocks fold their chairs: each block keeps only its input for backward
    and runs its forward again when backward reaches it (activation recomputation)."""

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(self.ln_f(x)) / self.temperature


def make_model(folded=False):
    return (FoldedLM if folded else TinyLM)(vocab=257, d=64, hidden=256, layers=4)


def config(stage, opt=False, param=False, micro=8, gas=1, precision="fp16", **zero):
    """DeepSpeed's keys: AdamW, ZeRO `stage`, optional offload of optimizer / parameters."""
    # stage 3 without prefetch or reuse: one layer gathered at a time, as chapter 3 measured
    z = {"stage": stage, "reduce_bucket_size": 20_000, "stage3_param_persistence_threshold": 0,
         "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0, **zero}
    if opt:
        z["offload_optimizer"] = {"device": "cpu"}
    if param:
        z["offload_param"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas,
           "train_batch_size": micro * gas * N, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": z}
    if precision != "fp32":
        cfg[precision] = {"enabled": True, **({"initial_scale_power": 8} if precision == "fp16" else {})}
    return cfg


model = make_model()
psi = count_params(model) - sum(p.numel() for p in model.parameters() if not p.requires_grad)
print(f"{N} ranks started; TinyLM: psi = {psi:,} trainable parameters (and a frozen temperature);")
print("fp16 + AdamW, micro-batch 8 sequences of 16 tokens")

# %% [markdown] id="ch07-02"
# ## 1. The first check: the backpack's limit
#
# Each rank's device gets a **budget** of 1.5 MB (1,500,000 bytes): `zerolab.initialize(...,
# device_budget="1.5MB")` counts what the engine places on the device (model states, its buffers,
# the activations autograd keeps) and raises `DeviceOutOfMemoryError`, a `torch.OutOfMemoryError`,
# the moment the count would pass it (chapter 5). To see every config's need, we first run each
# under a generous budget and read its peak.
#
# The model states per rank, in mixed precision with Adam (2 bytes of parameter, 2 of gradient,
# 12 of optimizer state per parameter; chapters 1 and 3), with n = Ψ/N:
#
# | config | parameters | gradients | optimizer states | total |
# |---|---|---|---|---|
# | stage 0 | 2Ψ | 2Ψ | 12Ψ | 16Ψ |
# | stage 1 | 2Ψ | 2Ψ | 12n | 4Ψ + 12n |
# | stage 2 | 2Ψ | 2n | 12n | 2Ψ + 14n |
# | stage 3 | 2n | 2n | 12n | 16n |
# | stage 1 + offload_optimizer | 2Ψ | 2Ψ | (host) | 4Ψ |
# | stage 2 + offload_optimizer | 2Ψ | (host) | (host) | 2Ψ |
# | stage 3 + offload_optimizer | 2n | (host) | (host) | 2n |
# | stage 3 + both offloads | (host) | (host) | (host) | 0 |
#
# **Predict, then run.** Ψ ≈ 150,000, N = 2: stage 0 needs about 2.4 MB of model states. Which
# stage is the first whose model states fit in 1.5 MB? Does it still fit once the activations of a
# micro-batch of 8 are added?

# %% id="ch07-03"
BUDGET = 1_500_000
RUNGS = {"stage 0": dict(stage=0), "stage 1": dict(stage=1), "stage 2": dict(stage=2),
         "stage 3": dict(stage=3),
         "stage 2, recompute": dict(stage=2, folded=True), "stage 3, recompute": dict(stage=3, folded=True),
         "stage 1 + offload_optimizer": dict(stage=1, opt=True),
         "stage 3 + offload_optimizer": dict(stage=3, opt=True)}
n = psi / N
FORMULA = {"stage 0": ("16 psi", 16 * psi), "stage 1": ("4 psi + 12n", 4 * psi + 12 * n),
           "stage 2": ("2 psi + 14n", 2 * psi + 14 * n), "stage 3": ("16n", 16 * n),
           "stage 2, recompute": ("2 psi + 14n", 2 * psi + 14 * n), "stage 3, recompute": ("16n", 16 * n),
           "stage 1 + offload_optimizer": ("4 psi", 4 * psi), "stage 3 + offload_optimizer": ("2n", 2 * n)}


def peaks():
    out = {}
    for name, kw in RUNGS.items():
        kw = dict(kw)
        folded = kw.pop("folded", False)
        cfg = config(**kw)
        engine = zerolab.initialize(make_model(folded), cfg, device_budget="1GB")
        train_engine(engine, lm_batches(2, cfg["train_batch_size"], 16, 257, seed=0), lm_loss)
        m = engine.memory()
        out[name] = {"states": m["model_states"], "buffers": m["peak_buffers"],
                     "activations": engine.budget.peak_activation_bytes, "peak": engine.budget.peak_bytes}
        engine.close()
    return out


peak = crew.run(peaks)[0]
print(f"{'config':<27}{'formula':>12}{'= bytes':>11}{'measured':>11}{'buffers':>9}{'activations':>12}"
      f"{'peak':>11} fits")
for name, p in peak.items():
    f, fv = FORMULA[name]
    print(f"{name:<27}{f:>12}{fv:>11,.0f}{p['states']:>11,}{p['buffers']:>9,}{p['activations']:>12,}"
          f"{p['peak']:>11,} {p['peak'] <= BUDGET}")

# %% id="ch07-04"
fig, ax = plt.subplots(figsize=(9.5, 4))
names = list(peak)
left = [0] * len(names)
for part, colour in (("states", "#4c72b0"), ("buffers", "#937860"), ("activations", "#dd8452")):
    vals = [peak[k][part] / 1e6 for k in names]
    ax.barh(names, vals, left=left, color=colour, label={"states": "model states"}.get(part, part))
    left = [a + b for a, b in zip(left, vals)]
ax.axvline(BUDGET / 1e6, color="black", ls="--", label="device_budget 1.5 MB")
ax.invert_yaxis()
ax.set_xlabel("peak device bytes per rank (MB = 1e6 bytes), counted by the engine")
ax.set_title("Stages alone do not fit 1.5 MB; recomputation or the warehouse does")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown] id="ch07-05"
# The measured model states sit on the formula, a few bytes above it: TinyLM's frozen
# `temperature` (2 bytes on every rank: the whole parameter at stages 0-2; at stage 3 a shard, since
# stage 3 partitions it like the others, as DeepSpeed's `zero.Init` does, its one element padded to
# two) and Adam's step counters (4 bytes each: one at
# stages 0-2, whose trainable parameters form one flat buffer, and one per trained parameter
# tensor at stage 3, which partitions each parameter on its own, as DeepSpeed does: 28 here,
# 2 + 4 × 28 = 114 bytes over the formula). Raising the stage from 0 to 3 cuts the
# model states from 16Ψ to 16Ψ/N, but at N = 2 even stage 3 keeps 8Ψ, and the peak adds two
# things the formula leaves out: the **buffers** (stage 2's gradient bucket, stage 3's gathered
# layers with their gradients) and the **activations**. Peak = model states + buffers +
# activations, exactly, here: the engine counts the activations until backward ends.
#
# So the recipe's second move. Two ways to make room, at two different prices:
#
# - **Offload the optimizer** (chapter 5): the heavy notebook goes to the warehouse. Even stage 1
#   fits easily; the price is paid every step in copies and in a CPU Adam.
# - **Recompute the activations** (the folding chair): fold the chair during forward and unfold it
#   again when backward needs it. That keeps stage 2 or 3 without offload, at the price of computing
#   part of the forward twice.
#
# ## 2. The folding chair: what recomputation saves and what it costs
#
# `torch.utils.checkpoint` runs a block's forward without keeping its intermediate tensors, only its
# input; when backward reaches the block, it runs the block's forward again to rebuild them. The
# activations drop from every intermediate of every block to one input per block.
#
# **Predict, then run.** Forward costs F floating-point operations and backward about 2F (a
# gradient for the inputs and one for the weights), 3F in all. With the four blocks
# recomputed, how many F does a training step cost? More or less than 4F, given that the embedding,
# the final LayerNorm and the 257-wide output head are not recomputed?

# %% id="ch07-06"
tokens, targets = lm_batches(1, 8, 16, 257, seed=0)[0]      # one rank's micro-batch


def flops(folded, backward):
    model = make_model(folded)
    with FlopCounterMode(display=False) as counter:
        loss = lm_loss(model(tokens), targets)
        if backward:
            loss.backward()
    return counter.get_total_flops()


F = flops(False, False)
plain, folded = flops(False, True), flops(True, True)
act = {k: peak[k]["activations"] for k in ("stage 2", "stage 2, recompute")}
print(f"activations per rank (fp16, micro-batch 8): {act['stage 2']:,} bytes -> "
      f"{act['stage 2, recompute']:,} with recomputation ({act['stage 2, recompute'] / act['stage 2']:.0%})")
print(f"FLOPs (counted from the shapes): forward F = {F:,}")
print(f"  forward + backward           {plain:,} = {plain / F:.2f} F")
print(f"  with the blocks recomputed   {folded:,} = {folded / F:.2f} F "
      f"(+{folded - plain:,}: the blocks' forward once more)")

# %% id="ch07-07"
def step_times(steps=5):
    out = {}
    for folded in (False, True):
        cfg = config(2)
        engine = zerolab.initialize(make_model(folded), cfg)
        batches = lm_batches(steps + 1, cfg["train_batch_size"], 16, 257, seed=0)
        train_engine(engine, batches[:1], lm_loss)
        times = []
        for b in batches[1:]:
            t0 = time.perf_counter()
            train_engine(engine, [b], lm_loss)
            times.append(time.perf_counter() - t0)
        out[folded] = times
        engine.close()
    return out


times = crew.run(step_times)[0]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.3))
ax1.bar(["keep every activation", "recompute the blocks"],
        [act["stage 2"] / 1e3, act["stage 2, recompute"] / 1e3], color=["#dd8452", "#55a868"])
ax1.set_ylabel("activations per rank (kB)")
ax1.set_title("The folded chair: activations kept for backward")
ax2.bar(["keep", "recompute"], [plain / F, folded / F], color=["#dd8452", "#55a868"], alpha=0.5,
        label="FLOPs / F (counted)")
base = statistics.median(times[False])
ax2.plot(["keep", "recompute"], [3 * statistics.median(t) / base for t in times.values()], "ko",
         label="step time, x 3 / keep's (median of 5)")
ax2.set_ylabel("cost of a step, in forwards (F)")
ax2.set_title("...paid for in compute")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] id="ch07-08"
# The FLOPs are exact (counted from the tensor shapes, the same on every machine); the time dots
# move from run to run, and on two shared CPU cores much of a step is not arithmetic at all
# (Python, the collectives), so they may sit closer to 3 than the bars. On a GPU, where the
# arithmetic dominates, recomputing every layer of a transformer costs about one forward more:
# 8Ψ FLOPs per token instead of 6Ψ, a third more time, for activations that shrink from every
# intermediate of every layer to one input per layer.
#
# ## 3. The second check: the shouting channel, and the waiting
#
# A step's time has three parts, and the timeline separates them on each rank:
#
# - **compute**: forward, backward, the optimizer step (the spans, less the time spent in
#   collectives);
# - **communication**: the collectives, as long as the bytes need (chapter 6: n·α + S/β);
# - **waiting**: the rest of the time inside the collectives. A collective ends only when every
#   rank has joined it, so a rank that arrives first **waits for the slowest**, and the timeline
#   books that wait as communication.
#
# **Predict, then run.** Stage 2, two ranks; rank 1 is a straggler: every forward takes 200 ms more
# on rank 1 only (a slow GPU, a noisy neighbour, a batch of longer sequences). Whose timeline
# shows the 200 ms, and as what?

# %% id="ch07-09"
DELAY = 0.2


def straggler(delay, steps=5):
    model = make_model()
    if delay and zerolab.rank() == 1:
        model.blocks[0].register_forward_hook(lambda *args: time.sleep(delay))
    cfg = config(2, overlap_comm=False)
    engine = zerolab.initialize(model, cfg)
    batches = lm_batches(steps + 1, cfg["train_batch_size"], 16, 257, seed=0)
    train_engine(engine, batches[:1], lm_loss)
    out = []
    for b in batches[1:]:
        mark = engine.timeline.mark()
        train_engine(engine, [b], lm_loss)
        out.append(engine.timeline.since(mark))
    engine.close()
    return out


runs = {d: crew.run(straggler, d) for d in (0, DELAY)}   # [rank 0's timelines, rank 1's]
med = {(d, r, k): statistics.median(tl.summary()[k] for tl in runs[d][r])
       for d in runs for r in range(N) for k in ("compute", "exposed_comm")}

fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": [1, 2]})
labels = [f"rank {r}\n{'with' if d else 'no'} straggler" for d in runs for r in range(N)]
comp = [med[d, r, "compute"] * 1e3 for d in runs for r in range(N)]
comm = [med[d, r, "exposed_comm"] * 1e3 for d in runs for r in range(N)]
axes[0].bar(labels, comp, color="#4c72b0", label="compute")
axes[0].bar(labels, comm, bottom=comp, color="#dd8452", label="in collectives (communication + waiting)")
axes[0].set_ylabel("ms per step (median of 5)")
axes[0].tick_params(axis="x", labelsize=7)
axes[0].legend(fontsize=7)
axes[0].set_title("Rank 1 computes longer; rank 0 waits", fontsize=9)
t0 = min(e.start for r in range(N) for e in runs[DELAY][r][-1].events)
for r in range(N):
    tl = runs[DELAY][r][-1]
    for e in tl.events:
        if e.kind in ("compute", "comm"):
            row = 2 * r + (e.kind == "comm")
            axes[1].broken_barh([((e.start - t0) * 1e3, e.seconds * 1e3)], (row - 0.35, 0.7),
                                color="#4c72b0" if e.kind == "compute" else "#dd8452")
axes[1].set_yticks(range(4), ["rank 0 compute", "rank 0 collectives", "rank 1 compute", "rank 1 collectives"],
                   fontsize=8)
axes[1].set_xlabel("ms since the step began (one step with the straggler)")
axes[1].set_title("The first gradient all-reduce ends only when rank 1 joins it", fontsize=9)
fig.tight_layout()
plt.show()

# within the run with the straggler (the same machine load for both ranks); times, not verdicts
gap_compute = med[DELAY, 1, "compute"] - med[DELAY, 0, "compute"]
gap_comm = med[DELAY, 0, "exposed_comm"] - med[DELAY, 1, "exposed_comm"]
print(f"the delay: {DELAY * 1e3:.0f} ms per forward on rank 1. With the straggler (medians of 5 steps):")
print(f"  rank 1 computes {gap_compute * 1e3:.0f} ms more than rank 0;")
print(f"  rank 0 sits in collectives {gap_comm * 1e3:.0f} ms longer than rank 1")

# %% [markdown] id="ch07-10"
# The straggler's own timeline shows the delay as compute; the **punctual rank's** timeline shows
# it as communication, since it sits in the first collective until rank 1 arrives. So "this rank
# spends most of its step communicating" can mean a slow link or a slow peer: compare the ranks'
# timelines before buying a faster network. Everyone moves at the pace of the slowest worker.
#
# ### The boxes, the batch and the accumulation
#
# What the shouting channel carries per step is exact, in the ledger. Three knobs from the recipe:
# `reduce_bucket_size` (chapter 6) changes the number of calls, not the bytes; a larger micro-batch
# carries the same bytes for more samples; accumulation over k micro-batches reduces once per
# optimizer step at stage 1, but every micro-batch at stage 2 (chapter 6: DeepSpeed all-reduces
# each bucket, 2Ψ, so (2k + 1)Ψ with the all-gather after the step; the paper's reduce-scatter
# would make it (k + 1)Ψ).
#
# **Predict, then run.** Sixteen sequences per rank per optimizer step, as one micro-batch of 16,
# or 4 of 4. How many bytes per rank per optimizer step at stage 1, and at stage 2? And per
# sequence?

# %% id="ch07-11"
def traffic(stage, micro, gas, bucket=20_000):
    engine = zerolab.initialize(make_model(), config(stage, micro=micro, gas=gas, reduce_bucket_size=bucket,
                                                     overlap_comm=False))       # DeepSpeed's defaults
    cfg_batch = micro * gas * N
    batches = lm_batches(2, cfg_batch, 16, 257, seed=0)
    train_engine(engine, batches[:1], lm_loss)
    mark = engine.ledger.mark()
    train_engine(engine, batches[1:], lm_loss)
    recs = [r for r in engine.ledger.since(mark).records if r.tag.startswith(("grads", "params"))]
    engine.close()
    return len(recs), sum(r.wire_bytes for r in recs)


KNOBS = [(1, 16, 1, 20_000), (1, 4, 4, 20_000), (2, 16, 1, 20_000), (2, 4, 4, 20_000),
         (2, 16, 1, 200_000), (2, 4, 1, 20_000)]


def traffic_table():
    return {k: traffic(*k) for k in KNOBS}


table = crew.run(traffic_table)[0]
unit = 2 * psi * (N - 1) / N            # one psi of fp16 over the ring, bytes per rank
print(f"1 psi on the wire (fp16, N = {N}) = {unit:,.1f} bytes per rank")
print(f"{'stage':>5}{'micro':>6}{'accum':>6}{'bucket':>9}{'calls':>7}{'wire bytes':>12}{'psi':>6}"
      f"{'sequences':>10}{'bytes per sequence':>20}")
for (stage, micro, gas, bucket), (calls, wire) in table.items():
    print(f"{stage:>5}{micro:>6}{gas:>6}{bucket:>9,}{calls:>7}{wire:>12,.0f}{wire / unit:>6.2f}"
          f"{micro * gas:>10}{wire / (micro * gas):>20,.0f}")

# %% [markdown] id="ch07-12"
# (DeepSpeed's defaults: each bucket all-reduced, one all-gather after the step, 3Ψ. The flat
# buffer, 150,464 elements, splits evenly over 2 ranks, so the Ψ column is exactly 3 and 9.)
#
# - **Bucket size** (20,000 against 200,000 elements): fewer calls, the same bytes; on a real
#   network each call saved is one α saved (chapter 6).
# - **Batch size**: 4 or 16 sequences per micro-batch, the same bytes per step (a gradient is the
#   size of the model, whatever the batch): a bigger batch spreads them over more sequences.
# - **Accumulation**: at stage 1, 4 micro-batches of 4 move what one micro-batch of 16 moves; at
#   stage 2 they move 9Ψ instead of 3Ψ. When accumulation is how you reach the batch size, stage 1
#   (or stage 2 with fewer, larger micro-batches) keeps the channel quieter.
#
# ## 4. The third check: is the warehouse holding us up?
#
# With `offload_optimizer` the optimizer step runs on the host, after the last gradient has come
# down: the timeline books it as **host** bars inside the step (chapter 5b). It adds to the step
# unless something hides it.
#
# **Predict, then run.** Stage 2 with and without `offload_optimizer`: where do the host bars sit,
# and does anything overlap them?

# %% id="ch07-13"
def warehouse(steps=3):
    out = {}
    for opt in (False, True):
        cfg = config(2, opt=opt)
        engine = zerolab.initialize(make_model(), cfg)
        batches = lm_batches(steps + 1, cfg["train_batch_size"], 16, 257, seed=0)
        train_engine(engine, batches[:1], lm_loss)
        tls = []
        for b in batches[1:]:
            mark = engine.timeline.mark()
            train_engine(engine, [b], lm_loss)
            tls.append(engine.timeline.since(mark))
        out[opt] = tls
        engine.close()
    return out


wh = crew.run(warehouse)[0]
fig, axes = plt.subplots(2, 1, figsize=(10, 4.6))
for ax, (opt, tls) in zip(axes, wh.items()):
    tls[-1].plot(ax=ax, title=f"stage 2{' + offload_optimizer' if opt else ''}: {tls[-1].describe()}")
    ax.title.set_fontsize(8)
fig.tight_layout()
plt.show()
for opt, tls in wh.items():
    ends = [max(e.end for e in tl.events if e.name == "backward") for tl in tls]
    host = [[e for e in tl.events if e.kind == "host"] for tl in tls]
    print(f"stage 2{' + offload_optimizer' if opt else '                  '}: host bars in every step "
          f"{all(host)}, in none {not any(host)}; all after backward: "
          f"{all(e.start >= end for h, end in zip(host, ends) for e in h)}")

# %% [markdown] id="ch07-14"
# The host step starts only after backward and adds to the step: here it is cheap (the host and the
# "device" are the same CPU), on a GPU it is a CPU Adam against a GPU one plus the PCIe copies:
# chapter 5b simulates a step of a 13B model at about three times stage 3's with one micro-batch,
# far less with more compute per step. Hence the order of the
# recipe: raise the stage first, and go to the warehouse only when memory demands it.
#
# ## 5. Troubleshooting: four cases you will meet
#
# Each case below is a real failure on real ranks, caught, with what the engine says.
#
# ### 5a. Out of memory
#
# **Predict, then run.** Stage 2 under the 1.5 MB budget, micro-batch 8 (section 1 measured its peak
# at about 2.1 MB). Where does it fail: at set-up, in forward, in backward? What does the message
# suggest?

# %% id="ch07-15"
def oom():
    cfg = config(2)
    try:
        engine = zerolab.initialize(make_model(), cfg, device_budget=BUDGET)
        train_engine(engine, lm_batches(2, cfg["train_batch_size"], 16, 257, seed=0), lm_loss)
    except DeviceOutOfMemoryError as e:
        return {"message": str(e), "is_torch_oom": isinstance(e, torch.OutOfMemoryError)}
    return {"message": None}


res = crew.run(oom)
print(f"both ranks raised DeviceOutOfMemoryError (a torch.OutOfMemoryError): "
      f"{all(r['message'] and r['is_torch_oom'] for r in res)}")
for line in res[0]["message"].splitlines():
    print(fill(line, 98, subsequent_indent="      ", drop_whitespace=False))

# %% [markdown] id="ch07-16"
# The first step fits (Adam's moments do not exist yet); the second fails in forward, while the
# activations pile up on top of the full model states, and the message names the
# giants biggest first. Its list of configs that would fit is computed from the formula plus what
# it measured so far (the activations up to the failure), smallest change first; read it as a
# starting point, and confirm with a run: section 1 is exactly that run. On a GPU, the same
# `torch.OutOfMemoryError` comes from the CUDA allocator; `torch.cuda.max_memory_allocated()` (or
# `nvidia-smi`) gives the peak.
#
# ### 5b. Ranks on divergent paths
#
# Every rank must run the same collectives in the same order. A model whose forward depends on the
# rank (a skipped layer on one rank, a branch on data that differs between ranks) breaks that.
# With stage 3, a rank that skips a block gathers the next block's parameters while the others
# gather the skipped one's: mismatched collectives. On NCCL, gathers of different sizes **hang**
# until a timeout; gathers of the same size pair up and hand each rank the wrong parameters,
# **silently**. DeepSpeed 0.19.8 compares the module order across ranks once, when a step completes
# the trace it records (the first step: an assertion in `reset_step`,
# `runtime/zero/partitioned_param_coordinator.py` line 260); a first step that hangs never gets
# there, and later steps are not compared (its per-gather check, `safe_mode`, is off by default).
# zerolab, on its own, checks each unit of gathers first (a 16-byte header with the groups' ids,
# filed apart in `ledger.checks`; `"zerolab": {"order_checks": false}` turns it off) and raises on
# every rank instead.
# At stages 0-2 the gradients are reduced in buckets that do not depend on the path, so a skipped
# block just has no gradient on that rank, which is reduced as zero, as DDP's
# `find_unused_parameters=True` does. At stage 0 DeepSpeed fills the missing gradient with zeros
# whatever `ignore_unused_parameters` says (`runtime/engine.py` lines 3857-3863); at stages 1-2
# DeepSpeed 0.19.8 reads the key in its CPU-offload gradient-norm path, where false is an assertion
# error (`runtime/zero/stage_1_and_2.py` line 1934). zerolab raises at stages 0-2 whenever the key is
# false, right after backward: at stage 0 stricter than DeepSpeed.
#
# **Predict, then run.** Rank 1 skips block 2. What happens at stage 3? At stage 2 with
# `ignore_unused_parameters` false? At stage 2 with the default?

# %% id="ch07-17"
class SkippingLM(TinyLM):
    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for i, b in enumerate(self.blocks):
            if not (i == 2 and zerolab.rank() == 1):       # rank 1 skips block 2
                x = b(x)
        return self.head(self.ln_f(x)) / self.temperature


def divergent(stage, ignore_unused):
    cfg = config(stage, micro=2, ignore_unused_parameters=ignore_unused)
    engine = zerolab.initialize(SkippingLM(vocab=257, d=64, hidden=256, layers=4), cfg)
    try:
        train_engine(engine, lm_batches(2, cfg["train_batch_size"], 16, 257, seed=0), lm_loss)
    except (zerolab.ModuleOrderError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    return f"no error: {engine.global_steps} steps"


for stage, ignore in ((3, True), (2, False), (2, True)):
    t0 = time.perf_counter()
    res = crew.run(divergent, stage, ignore)
    print(f"stage {stage}, ignore_unused_parameters {ignore}: (answered in {time.perf_counter() - t0:.1f} s)")
    for r, text in enumerate(res):
        print(fill(text, 98, initial_indent=f"  rank {r}: ", subsequent_indent="          "))

# %% [markdown] id="ch07-18"
# An error in well under a second, on every rank, naming the modules or the parameters: not a
# hang. The fix is in the model: the same modules on every rank (to skip work on one rank, multiply
# by zero instead of branching), or, for parameters some ranks legitimately do not use, the default
# `ignore_unused_parameters: true` at stages 1-2 (stage 0 never complains in DeepSpeed).
#
# ### 5c. An fp16 loss-scale collapse
#
# fp16 ends at 65,504. The dynamic loss scale (chapter 4) halves after an overflow and skips the
# step; if **every** step overflows, it halves all the way down to `min_loss_scale` and the run
# stops. That is rarely a scale problem: something overflows whatever the scale, here inputs of
# about 10⁵ that become inf the moment they are cast to fp16.
#
# **Predict, then run.** `initial_scale_power` 8 (a scale of 256), `hysteresis` 1: how many steps
# until the run stops? And with bf16 instead?

# %% id="ch07-19"
def collapse(precision, steps=12):
    prec = ({"bf16": {"enabled": True}} if precision == "bf16" else
            {"fp16": {"enabled": True, "initial_scale_power": 8, "hysteresis": 1}})
    cfg = {"train_batch_size": 4 * N, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2}, **prec}
    engine = zerolab.initialize(MLP(sizes=(16, 64, 64, 4)), cfg)
    batches = [(x * 1e5, y) for x, y in regression_batches(steps, 4 * N, 16, 4)]   # unnormalised inputs
    try:
        train_engine(engine, batches, mse_loss)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    out = {"error": error, "log": list(engine.log), "scales": [s for _, s, _ in engine.scaler.history],
           "steps": engine.global_steps, "skipped": engine.skipped_steps}
    engine.close()
    return out


fp16 = crew.run(collapse, "fp16")[0]
bf16 = crew.run(collapse, "bf16")[0]
print(f"fp16: {fp16['steps']} steps, {fp16['skipped']} skipped; engine.log has {len(fp16['log'])} lines,")
print(f"  the last: {fp16['log'][-1]!r}")
print(fill(fp16["error"], 98, subsequent_indent="  "))
print(f"bf16: {bf16['steps']} steps, {bf16['skipped']} skipped, error {bf16['error']}")

fig, ax = plt.subplots(figsize=(7, 2.8))
ax.semilogy(range(len(fp16["scales"])), fp16["scales"], "o-", color="#c44e52", label="fp16, every step overflows")
ax.semilogy(range(len(bf16["scales"])), bf16["scales"], "s-", color="#55a868", label="bf16: no loss scale (1)")
ax.set_xlabel("optimizer step")
ax.set_ylabel("loss scale after the step")
ax.set_title("A collapse: the scale halves every step down to its minimum")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown] id="ch07-20"
# Eight halvings from 256 to 1, eight skipped steps (so the model never trained at all), then the
# error. The lines `[rank 0] overflow: ...` above are `engine.log`, printed by rank 0 as they
# happen; in a DeepSpeed run the same lines appear in its log, and **a log full of skipped steps
# is the symptom to look for**, long before the scale reaches its minimum. The fixes, from the
# message: normalise the inputs (or find the operation that overflows), lower the learning rate if
# the model diverged, or use bf16, which has fp32's range and needs no loss scale.
#
# ### 5d. A higher stage that is slower: communication-bound
#
# Stage 3 gathers each layer's parameters in forward and again in backward. With many small layers
# and little compute per layer, the calls dominate.
#
# **Predict, then run.** An MLP of 24 layers of width 32 (Ψ = 25,344), 4 samples per rank,
# DeepSpeed's default `reduce_bucket_size` (5·10⁸: the whole model in one bucket). How many
# collectives per step at stage 1, and at stage 3? How many bytes? How much slower will stage 3 be?
# (zerolab's order checks of section 5b are turned off here, `"zerolab": {"order_checks": false}`:
# the engine issues only the collectives DeepSpeed issues, and the times compare like for like.)

# %% id="ch07-21"
def comm_bound(stage, steps=5, width=32, layers=24):
    cfg = {"train_batch_size": 4 * N, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "overlap_comm": False, "stage3_param_persistence_threshold": 0,
                                 "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0},
           "zerolab": {"order_checks": False}}         # off: only DeepSpeed's collectives, as it runs
    engine = zerolab.initialize(MLP(sizes=(width,) * (layers + 1)), cfg)
    batches = regression_batches(steps + 1, 4 * N, width, width)
    train_engine(engine, batches[:1], mse_loss)
    mark, times = engine.ledger.mark(), []
    for b in batches[1:]:
        t0 = time.perf_counter()
        train_engine(engine, [b], mse_loss)
        times.append(time.perf_counter() - t0)
    led = engine.ledger.since(mark)
    out = {op: (int(t["calls"]) // steps, t["wire_bytes"] / steps) for op, t in led.totals().items()}
    checks = len(led.checks) // steps          # zerolab's own order checks: off here, so 0
    engine.close()
    return out, statistics.median(times), checks


cb = {s: crew.run(comm_bound, s)[0] for s in (1, 3)}
for s, (ops, seconds, checks) in cb.items():
    calls = sum(c for c, _ in ops.values())
    wire = sum(w for _, w in ops.values())
    what = ", ".join(f"{op} {c}" for op, (c, _) in sorted(ops.items()))
    print(f"stage {s}: {calls:>3} collectives per step, {wire:>8,.0f} wire bytes")
    print(f"    ({what}); step {seconds * 1e3:.1f} ms (median of 5);")
    print(f"    zerolab's own order checks (off, as DeepSpeed runs): {checks}")

fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh(["stage 1", "stage 3"], [cb[1][1] * 1e3, cb[3][1] * 1e3], color=["#4c72b0", "#c44e52"])
ax.set_xlabel("step time, ms (median of 5)")
ax.set_title("Less memory, many more shouts: the step times on this machine")
fig.tight_layout()
plt.show()

# %% [markdown] id="ch07-22"
# Stage 3 moves about the bytes of DeepSpeed's stage 1 (3Ψ each: stage 1 all-reduces the
# gradients and all-gathers the parameters once; stage 3 gathers every layer in forward and again
# in backward and reduce-scatters the gradients), but the calls are what hurt: 2 all-gathers per
# layer per step, against one of the whole model, while the gradients travel in one
# reduce-scatter per `reduce_bucket_size` bucket (here one: DeepSpeed fills a bucket of modules and
# reduce-scatters it in one call). Each call pays the latency α, and 24 tiny layers give α
# nothing to hide behind. (In both, one more small all-reduce: the gradient norm, which DeepSpeed
# sums every step, 4 bytes of fp32 at stage 1 and 8 of fp64 at stage 3; in fp32 there is no
# overflow flag to send, chapter 10. That is why stage 3's wire bytes are 4 more than stage 1's. The
# times were measured with zerolab's order checks off, as DeepSpeed runs: with them on, stage 3
# would also send one 16-byte header per gather, and its step would be slower still.) `benchmarks/results/side_by_side.txt`
# holds the same counts measured in DeepSpeed 0.19.8 itself. This is the recipe's
# warning: *if a higher stage makes throughput drop, suspect communication*. The treatments: stay
# at the lowest stage that fits (here stage 1 fits easily), raise
# `stage3_param_persistence_threshold` so small layers stay whole (chapter 3), prefetch and larger
# buckets on real hardware, or more work per call (a larger micro-batch).
#
# ## What we measured

# %% id="ch07-23"
print(f"memory     budget 1.5 MB, micro-batch 8: peak stage 0 {peak['stage 0']['peak']:,}, stage 3 "
      f"{peak['stage 3']['peak']:,} bytes;")
print(f"           stage 2 with recomputation {peak['stage 2, recompute']['peak']:,}, stage 1 + offload_optimizer "
      f"{peak['stage 1 + offload_optimizer']['peak']:,}")
print(f"recompute  activations {act['stage 2']:,} -> {act['stage 2, recompute']:,} bytes; FLOPs "
      f"{plain / F:.2f} F -> {folded / F:.2f} F")
print(f"waiting    a {DELAY * 1e3:.0f} ms straggler shows on the punctual rank as time in collectives "
      f"({gap_comm * 1e3:.0f} ms more)")
print(f"channel    stage 2, 4 micro-batches of 4: {table[2, 4, 4, 20_000][1] / unit:.2f} psi per step; "
      f"stage 1: {table[1, 4, 4, 20_000][1] / unit:.2f} psi")
print(f"troubles   out of memory, divergent paths, an fp16 collapse after {fp16['skipped']} skipped steps,")
print(f"           stage 3 with {sum(c for c, _ in cb[3][0].values())} collectives per step against "
      f"{sum(c for c, _ in cb[1][0].values())}")
print("           (zerolab's order checks off, as DeepSpeed runs)")

# %% [markdown] id="ch07-24"
# - **Find the bottleneck first.** Memory: the engine's peak against the budget. Communication:
#   calls and bytes in the ledger, time in collectives on the timeline. Waiting: the same timeline on
#   every rank. The warehouse: the host bars.
# - **Memory short?** Raise the stage (16Ψ → 16Ψ/N of model states), then recompute activations
#   (they shrank to about a seventh here, for about 15 % more FLOPs; a third more on a transformer) or
#   offload the optimizer (paid in copies and a host step every step).
# - **Peak = model states + buffers + activations**, and the buffers (buckets, gathered layers) grow
#   with the stage's machinery: the formula alone under-counts.
# - **Throughput short?** Fewer, larger calls (buckets); more samples per byte (larger micro-batches);
#   accumulation is free at stage 1 and costs 2Ψ per micro-batch at stage 2 (DeepSpeed's
#   all-reduce).
# - **Time in collectives is communication plus waiting**: a straggler shows on the *other* ranks.
# - **Four failures you can now read:** the budget's (or CUDA's) out-of-memory message; divergent
#   paths as an error rather than a hang; a log of skipped steps before an fp16 collapse; a higher
#   stage that is slower because it makes many more calls.
#
# ## Questions
#
# 1. In section 1, set the micro-batch to 2 (`config(..., micro=2)` in `peaks`). Predict first:
#    which configs fit 1.5 MB now, and is recomputation still worth its FLOPs?
# 2. In section 3, delay rank 1 only in *backward* (a `register_full_backward_hook`). Does rank 0 still
#    wait, and in which collective?
# 3. The table of section 3 shows stage 2 moving 9Ψ with 4 micro-batches. From how many
#    micro-batches on does stage 2 move at least twice what stage 1 moves? Change `KNOBS` and
#    check.
# 4. In 5d, set `stage3_param_persistence_threshold` to 2,000 (every layer of 1,056 parameters
#    stays whole). Predict the collectives per step at stage 3, then run.
# 5. A colleague's fp16 run logs "overflow: skipping step" once every few hundred steps and the loss
#    falls. Is that a collapse? What would you look for in `engine.log` before worrying?
#
# **Your turn:** in `exercises/07_captains_pick.ipynb` you write the captain's pick: from Ψ, N, the
# precision and the measured activations and buffers, the device bytes of every config and the
# first config of the rule that fits a budget. The check runs your pick in the real engine under
# the budget, and runs every cheaper config to make sure none of them would have fitted.

# %% id="ch07-25"
crew.close()
