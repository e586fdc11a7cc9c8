# %% [markdown] id="ch06-00"
# # Chapter 6 · The boxes (通信优化): buckets and overlap
#
# *Fewer shouts, bigger boxes, and shouting while you work.*
#
# The crew is mid-move, and the workers keep borrowing from one another across the house. At
# first every board, every screw, every roll of tape is its own shout down the stairwell: "one
# plank coming!" Each shout costs the same few seconds of attention whether it carries a screw or
# a sofa, and with dozens of small items the house is all noise and little moving.
#
# So the captain makes a rule: **pack the small items into a box first, and shout once per
# box.** Dozens of shouts become one. A box has a size limit (a box too big would block the
# stairs), an oversized item goes in a box of its own, and everyone packs in the same order so
# that the boxes match on both ends. Later the crew learns a second trick: don't stand still
# waiting for the answer to a shout, **keep packing the next box while the last one is carried
# down** (the waiting is hidden inside the work).
#
# | in the story | in training | in zerolab / DeepSpeed |
# |---|---|---|
# | one shout | one collective call (all-reduce, reduce-scatter, all-gather) | a record in `engine.ledger` |
# | the few seconds any shout costs | the latency **α** of a call | `zerolab.tools.bench`: T = α + S/β |
# | how fast the items travel | the bandwidth **β**, bytes per second | the same fit |
# | a box | a **bucket**: gradients laid end to end, a range of one flat buffer | `reduce_bucket_size` (elements) |
# | packing the next box while one travels | **overlap**: collectives issued asynchronously during backward | `overlap_comm` |
# | each worker keeps only his part of the box | **reduce-scatter** instead of all-reduce (the paper's) | DeepSpeed's stages 1-2 all-reduce each bucket and keep their part (`reduce_scatter`, `use_multi_rank_bucket_allreduce`: both true by default); zerolab's `ideal_reduce_scatter` for the paper's |
#
# Backward produces a gradient per parameter tensor, and a real model has hundreds or thousands
# of them, many small (biases, LayerNorm weights). Reduced one by one, the fixed cost of each call
# swamps the work. With n calls moving S bytes in total,
#
# $$T_{\text{comm}} \approx n\,\alpha + \frac{S}{\beta},$$
#
# and buckets shrink n while S stays the same.
#
# **What we measure here:** α and β of an all-reduce on this machine; calls, bytes and
# communication time per step as the bucket size changes, predicted and measured; the bytes of
# DeepSpeed's all-reduce against the paper's reduce-scatter (3Ψ against 2Ψ), and what gradient
# accumulation does to them; and overlap on the step's timeline, exposed against hidden.

# %% id="ch06-01"
import statistics

import matplotlib.pyplot as plt

import zerolab
from zerolab.tools import bench
from zerolab.models import MLP, mse_loss, regression_batches
from zerolab.zero.reference import train_engine

crew = zerolab.Crew(2, threads=1)      # two ranks for the whole chapter (gloo, on this CPU)
N = crew.world_size
print(f"{N} ranks started")

# %% [markdown] id="ch06-02"
# ## 1. What one shout costs: T = α + S/β
#
# `zerolab.tools.bench.measure` times an all-reduce of a float32 tensor on the ranks, at sizes from
# 1 KiB to 16 MiB (the median of 5 calls each, after a warm-up call; three rounds, of which we
# keep the fastest, since a machine shared with other work only ever adds time), and `bench.fit`
# fits a line T(S) = α + S/β, where S is the bytes one rank puts on the wire (for an all-reduce on N ranks,
# 2(N-1)/N times the tensor's bytes; on 2 ranks, the tensor's bytes).
#
# **Predict, then run.** An all-reduce of 1 MiB moves 1,024 times the bytes of one of 1 KiB.
# How many times longer do you think it takes on this machine: about 1,000 times? 100? 10?
# Write your guess down.

# %% id="ch06-03"
SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
rounds = [crew.run(bench.measure, SIZES, 5, ("all_reduce",))[0] for _ in range(3)]
# [op, wire bytes, seconds]: noise only ever adds time, so keep each size's fastest round
rows = [[op, s, min(r[i][2] for r in rounds)] for i, (op, s, _) in enumerate(rounds[0])]
fit = bench.fit(rows, N, crew.backend)
t = {int(r[1]): r[2] for r in rows}
print(f"measured: all-reduce at {len(rows)} sizes, {SIZES[0]:,} to {SIZES[-1]:,} bytes of float32")
print(f"1 KiB: {t[1 << 10] * 1e3:.3f} ms; 1 MiB (1,024x the bytes): {t[1 << 20] * 1e3:.3f} ms "
      f"(the ratio is in the figure's title)")

# %% id="ch06-04"
a, b = fit.ops["all_reduce"]["alpha_s"], fit.ops["all_reduce"]["beta_Bps"]
xs = [r[1] for r in rows]
fig, ax = plt.subplots(figsize=(7.5, 3.8))
ax.loglog(xs, [r[2] * 1e6 for r in rows], "o", label="measured (median of 5, fastest of 3 rounds)")
grid = [SIZES[0] * 1.3 ** k for k in range(60) if SIZES[0] * 1.3 ** k <= SIZES[-1] * 1.2]
ax.loglog(grid, [(a + s / b) * 1e6 for s in grid], "-",
          label=f"fit: alpha = {a * 1e6:.0f} us, beta = {b / 1e9:.2f} GB/s")
ax.axvline(a * b, ls=":", color="grey", label=f"alpha x beta = {a * b / 1024:.0f} KiB: below it, alpha dominates")
ax.set_xlabel("S: bytes on the wire per rank")
ax.set_ylabel("time per all-reduce (us)")
ax.set_title(f"1 MiB took {t[1 << 20] / t[1 << 10]:.0f}x as long as 1 KiB, for 1,024x the bytes")
ax.legend(fontsize=8)
plt.show()

# %% [markdown] id="ch06-05"
# (On a busy machine a point or two may still sit far above the line: the fit weighs each point
# by its relative error, so one stray point moves it little.) Below about α·β bytes (the dotted
# line) the line is flat: a call costs α whatever it carries.
# Only past it does the size start to matter. Here, two processes on one CPU talking through
# gloo (`torch.distributed`'s CPU backend, over the loopback network), α is the cost of Python,
# the gloo library and the operating system waking the other rank. (zerolab also has an opt-in
# shared-memory transport, `zerolab.Crew(2, backend="shm")`, with a smaller α on one machine;
# `benchmarks/transport_floor.py` measures both.) On GPUs with NCCL α is a few microseconds to
# tens of microseconds, and β hundreds of GB/s inside a node, but the shape is the same and so is
# the lesson: **many small calls pay α many times.**
#
# ## 2. The boxes: a bucket-size sweep
#
# Our model has many small gradients: an MLP of 40 `Linear` layers of width 64, so 80 parameter
# tensors, 40 weights of 4,096 elements and 40 biases of 64 (Ψ = 166,400 parameters). At stages 1
# and 2, DeepSpeed lays all parameters end to end in **one flat buffer** (in reverse model order)
# and cuts it into N contiguous partitions, one per rank. zerolab does the same, and packs the
# gradients into buckets the way DeepSpeed does: in **gradient order** (backward produces the last
# layer's gradients first), a bucket takes parameters until the next would make it hold more than
# `reduce_bucket_size` elements, and a parameter larger than a bucket gets a bucket of its own;
# each bucket is a range of the flat buffer. At stage 2, with DeepSpeed's defaults, each bucket is
# **one all-reduce**, after which each rank keeps the slices of its own partition; after the
# optimizer step one all-gather of the flat buffer brings the updated parameters to everyone.
# (Stage 0 ignores `reduce_bucket_size`: DeepSpeed all-reduces its gradients in buckets of 5·10⁸
# elements, here one call; section 4 shows it.)
#
# **Predict, then run.** How many all-reduces per step will stage 2 make with
# `reduce_bucket_size` = 100, 5,000, 20,000, 50,000 and 200,000? (A weight with its bias is
# 4,160 elements.) And will the bytes on the wire change?

# %% id="ch06-06"
WIDTH, LAYERS = 64, 40
BUCKETS = [100, 5_000, 20_000, 50_000, 200_000]


def make_engine(stage, gas=1, ideal=False, **zero):
    """DeepSpeed's keys; ideal=True adds zerolab's opt-in switch for the paper's reduce-scatter."""
    model = MLP(sizes=(WIDTH,) * (LAYERS + 1), seed=0)
    return zerolab.initialize(model, {
        "train_batch_size": 8 * gas, "gradient_accumulation_steps": gas,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": stage, "overlap_comm": False, **zero},
        **({"zerolab": {"ideal_reduce_scatter": True}} if ideal else {})})


def measure_steps(engine, steps):
    """Train one warm-up step, then `steps` steps; per step, the ledger and the timeline."""
    batches = regression_batches(steps + 1, 8 * engine.gradient_accumulation_steps,
                                 d_in=WIDTH, d_out=WIDTH)
    train_engine(engine, batches[:1], mse_loss)
    out = []
    for batch in batches[1:]:
        mark, tmark = engine.ledger.mark(), engine.timeline.mark()
        train_engine(engine, [batch], mse_loss)
        led = engine.ledger.since(mark)
        led.records = [r for r in led.records if r.tag.startswith(("grads", "params"))]
        out.append((led, engine.timeline.since(tmark)))
    return out


def sweep(buckets, steps=7):
    return {size: measure_steps(make_engine(2, reduce_bucket_size=size), steps) for size in buckets}


def grads(led):
    return [r for r in led.records if r.tag.startswith("grads")]


runs = crew.run(sweep, BUCKETS)[0]                 # rank 0's ledgers and timelines
psi = WIDTH * WIDTH * LAYERS + WIDTH * LAYERS
print(f"MLP: {LAYERS} layers, {2 * LAYERS} parameter tensors, psi = {psi:,}; stage 2 on {N} ranks")
print(f"{'reduce_bucket_size':>18}{'all-reduces':>12}{'elements':>10}{'wire bytes':>12}"
      f"{'2(N-1)/N x 4 psi':>18}")  # bytes
for size, steps in runs.items():
    g = grads(steps[0][0])
    print(f"{size:>18,}{len(g):>12}{sum(r.numel for r in g):>10,}"
          f"{sum(r.wire_bytes for r in g):>12,.0f}{2 * (N - 1) / N * 4 * psi:>18,.0f}")
ag = {(r.op, r.numel) for steps in runs.values() for r in steps[0][0].records if r.tag.startswith("params")}
print(f"and after each step, at every size: {', '.join(f'one {op} of {n:,} elements' for op, n in ag)}")

# %% [markdown] id="ch06-07"
# The bytes do not move: every bucket size sends the whole gradient, Ψ elements, once. Only
# the number of calls changes: 80 at 100 elements (every tensor alone: even a 64-element bias
# cannot share with a 4,096-element weight), 40 at 5,000 (a weight and its bias), then 10, 4 and 1.
#
# Now the time. For each bucket size, the ledger's records of one step (the all-reduces and the
# all-gather) go into the α-β model (`fit.predict(ledger)`), and beside it the time the ranks
# actually spent in those calls (the sum of the records' `seconds`, the median of 7 steps).

# %% id="ch06-08"
pred = {s: fit.predict(steps[0][0]) for s, steps in runs.items()}
meas = {s: statistics.median(sum(r.seconds for r in led.records) for led, _ in steps)
        for s, steps in runs.items()}
calls = {s: len(grads(steps[0][0])) for s, steps in runs.items()}

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
ax1.plot(BUCKETS, [calls[s] for s in BUCKETS], "o-")
ax1.set_xscale("log")
ax1.set_yscale("log")
ax1.set_xlabel("reduce_bucket_size (elements)")
ax1.set_ylabel("all-reduce calls per step")
ax1.set_title("Bigger boxes, fewer shouts")
ax2.plot(BUCKETS, [meas[s] * 1e3 for s in BUCKETS], "o-", label="measured (median of 7 steps)")
ax2.plot(BUCKETS, [pred[s] * 1e3 for s in BUCKETS], "s--", label="alpha-beta: n alpha + S / beta")
ax2.set_xscale("log")
ax2.set_ylim(bottom=0)
ax2.set_xlabel("reduce_bucket_size (elements)")
ax2.set_ylabel("gradient communication per step (ms)")
ax2.set_title("Same bytes, fewer calls: less time")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()
for s in BUCKETS:
    print(f"reduce_bucket_size {s:>7,}: {calls[s]:>2} all-reduce{'s' if calls[s] > 1 else ' '}, "
          f"measured {meas[s] * 1e3:.2f} ms, predicted {pred[s] * 1e3:.2f} ms")

# %% [markdown] id="ch06-09"
# The prediction uses only the ledger (calls and bytes) and the two numbers fitted in section 1,
# and it tells the same story as the measurement: the time per step is mostly n·α until the
# buckets are large. The two lines need not lie on each other. Inside a training step the two
# ranks rarely reach a call at the same moment, and a call's `seconds` include waiting for the
# later rank (the benchmark of section 1 lines them up with a barrier first); and a call in a
# tight benchmark loop does not cost exactly what the same call costs between two layers'
# computations. On two shared cores the waiting is also most of the scatter you see from run to
# run.
#
# Why not one huge bucket, then? Two reasons. A bucket is a buffer: the bigger it is, the more
# memory every rank spends on it (DeepSpeed's default `reduce_bucket_size` is 5·10⁸ elements, 2 GB
# in fp32, sized for billion-parameter models). And a bucket can only be sent once it is
# complete: with one bucket for the whole model, nothing can travel until backward ends, so
# nothing can be hidden behind backward (section 4).
#
# **Two bandwidths, as nccl-tests prints them.** NVIDIA's benchmark of collectives reports two
# numbers per call. The *algorithm bandwidth* is what the caller sees: the tensor's bytes over the
# time. The *bus bandwidth* multiplies it by what a ring must put on each link per byte of the
# tensor: 2(N−1)/N for an all-reduce, (N−1)/N for an all-gather or a reduce-scatter. Only the bus
# bandwidth can be set against a link's datasheet speed, or compared across operations and crew
# sizes; it is the β fitted in section 1 (the ledger's wire bytes over the time).
#
# **Predict, then run.** For one step at 200,000 elements per bucket (one all-reduce of the
# gradients, one all-gather of the parameters, on N = 2), what is busbw / algbw for each call?

# %% id="ch06-10"
led = runs[200_000][0][0]                          # the ledger of one step: 1 all-reduce, 1 all-gather
print(bench.format_bandwidths(bench.bandwidths(led)))
busbw = 230e9                                      # nccl-tests, all-reduce, 8 GPUs (an example figure)
print(f"an all-reduce at {busbw / 1e9:.0f} GB/s bus bandwidth on 8 GPUs: the caller sees "
      f"{busbw / bench.wire_factor('all_reduce', 8) / 1e9:.0f} GB/s of tensor per second")

# %% [markdown] id="ch06-11"
# At N = 2 an all-reduce's two bandwidths are equal (2(N−1)/N = 1) and an all-gather's bus
# bandwidth is half its algorithm bandwidth: each rank sends only its own half, the one the other lacks. As N grows the
# all-reduce's factor tends to 2, because a ring all-reduce moves every byte about twice (a
# reduce-scatter, then an all-gather). So an all-reduce of 1 GB on 8 GPUs that nccl-tests reports
# at 230 GB/s bus bandwidth takes 1 GB / 131 GB/s ≈ 7.6 ms, not 1 GB / 230 GB/s. (The values measured
# here are printed as `~x GB/s`: they depend on the machine and its load.)
#
# ## 3. Keep only your part: the paper's reduce-scatter against DeepSpeed's all-reduce
#
# At stages 1 and 2 a rank needs only **its partition** of the averaged gradient. A
# reduce-scatter delivers exactly that: Ψ on the wire (in the paper's units, elements per rank
# over the ring); add the all-gather of the updated parameters, Ψ, and the ZeRO paper's step
# moves **2Ψ**. DeepSpeed 0.19.8 does not do that: a bucket is a range of the flat buffer and may
# straddle two partitions, so with its defaults (`reduce_scatter: true` with
# `use_multi_rank_bucket_allreduce: true`, or `reduce_scatter: false`) each bucket is
# **all-reduced**, 2Ψ, and each rank keeps the slices of its partition: **3Ψ** per step, half
# again as much, for the same result. zerolab does what DeepSpeed does; the paper's layout (each
# bucket its own buffer in N shards, reduce-scattered) is zerolab's opt-in,
# `"zerolab": {"ideal_reduce_scatter": true}`.
#
# **Predict, then run.** Stage 2, one step: how many bytes per rank DeepSpeed's way, and the
# paper's? Now with gradient accumulation over 4 micro-batches: stage 1 reduces the gradients
# once, at the end; stage 2 reduces them during every backward (it cannot keep the full gradient
# between micro-batches; that is the memory it saves). How many Ψ for each?

# %% id="ch06-12"
def traffic(stage, gas=1, ideal=False):
    led, _ = measure_steps(make_engine(stage, gas, ideal, reduce_bucket_size=50_000), 1)[0]
    return {op: (int(t["calls"]), t["wire_bytes"]) for op, t in led.totals().items()}


def traffic_table():
    return {(stage, ideal, gas): traffic(stage, gas, ideal)
            for stage, ideal, gas in [(1, False, 1), (1, True, 1), (2, False, 1), (2, True, 1),
                                      (1, False, 4), (2, False, 4), (2, True, 4)]}


table = crew.run(traffic_table)[0]
unit = 4 * psi * (N - 1) / N                 # one psi of fp32 over the ring, bytes per rank
formula = {(1, False, 1): 3, (1, True, 1): 2, (2, False, 1): 3, (2, True, 1): 2,
           (1, False, 4): 3, (2, False, 4): 9, (2, True, 4): 5}
print(f"one optimizer step, {N} ranks, psi = {psi:,}; 1 psi on the wire = {unit:,.0f} bytes per rank")
print(f"{'stage':>5}{'layout':>10}{'micro':>6}  {'collectives: calls, wire bytes':<52}"
      f"{'psi':>6}{'formula':>8}")
for (stage, ideal, gas), ops in table.items():
    total = sum(w for _, w in ops.values())
    what = ", ".join(f"{op} {c} {w:,.0f}" for op, (c, w) in sorted(ops.items()))
    print(f"{stage:>5}{'paper' if ideal else 'DeepSpeed':>10}{gas:>6}  {what:<52}{total / unit:>6.2f}"
          f"{formula[stage, ideal, gas]:>7}P")

# %% [markdown] id="ch06-13"
# (`P` is Ψ. "DeepSpeed": zerolab with DeepSpeed's default keys; "paper": the same run with
# `"zerolab": {"ideal_reduce_scatter": true}`. The flat buffer, or each bucket's buffer in the
# paper's layout, is padded to a multiple of N elements; here every size is already even, so the
# measurement meets the formula exactly.)
#
# - **DeepSpeed's way**: 2Ψ of all-reduced gradients plus Ψ for the parameters, **3Ψ**, at stages
#   1 and 2 alike. **The paper's**: Ψ + Ψ = **2Ψ**, a third less, for the same result.
# - With **4 micro-batches**, stage 1 still reduces once per optimizer step (it keeps the full
#   gradient until the boundary, 3Ψ in all), while stage 2 reduces every micro-batch's gradient:
#   4 × 2Ψ + Ψ = **9Ψ** DeepSpeed's way, 4Ψ + Ψ = 5Ψ the paper's. Stage 2 saves the memory of the
#   full gradient and pays for it in traffic when you accumulate.
#
# `benchmarks/side_by_side.py` runs the same model and config in zerolab and in DeepSpeed 0.19.8
# and prints both ledgers per collective; `benchmarks/results/side_by_side.txt` holds the
# committed result (bytes within 2 %, zerolab making no more calls than DeepSpeed).
#
# ## 4. Packing while the box travels: overlap
#
# Without overlap, a rank computes the whole backward and then sends its buckets, one blocking
# call after another: every millisecond of communication is **exposed** (the rank stands still).
# With `overlap_comm` a bucket is sent asynchronously the moment it is complete, and backward goes
# on producing the next buckets' gradients while it travels: that communication is **hidden**.
# `engine.timeline` records each rank's spans (forward, backward, step), each blocking
# collective, each asynchronous one and each wait for it; `timeline.summary()` splits a step into
# compute, exposed and hidden communication, and `timeline.plot()` draws it as a Gantt chart.
#
# **Predict, then run.** On this machine (2 CPU cores, gloo), stage 0 and stage 2 with
# `overlap_comm` on and off, `reduce_bucket_size` 20,000: how many gradient all-reduces per step
# at each stage, and how many of them are issued while backward still computes? Will the step be
# faster with overlap?

# %% id="ch06-14"
def overlap_runs(steps=5):
    return {(stage, ov): measure_steps(make_engine(stage, reduce_bucket_size=20_000, overlap_comm=ov), steps)
            for stage in (0, 2) for ov in (False, True)}


timelines = crew.run(overlap_runs)[0]
fig, axes = plt.subplots(4, 1, figsize=(10, 8.4))
for ax, ((stage, ov), steps) in zip(axes, timelines.items()):
    tl = steps[-1][1]
    tl.plot(ax=ax, title=f"stage {stage}, overlap_comm {ov}: {tl.describe()}")
    ax.title.set_fontsize(9)
fig.tight_layout()
plt.show()

def issued_in_backward(tl):
    """Gradient collectives on this timeline: (asynchronous, begun before backward ended; blocking)."""
    end = max(e.end for e in tl.events if e.name == "backward")
    g = [e for e in tl.events if " grads" in e.name and e.kind in ("async", "comm")]
    return sum(e.kind == "async" and e.start < end for e in g), sum(e.kind == "comm" for e in g)


for (stage, ov), steps in timelines.items():
    led, tl = steps[-1]
    ops = sorted({r.op for r in grads(led)})
    early, blocking = issued_in_backward(tl)
    n = len(grads(led))
    print(f"stage {stage}, overlap_comm {ov!s:<5}: {n:>2} gradient {', '.join(ops)}{'s' if n > 1 else ' '}, "
          f"{early:>2} issued async in backward, {blocking:>2} blocking")

# %% [markdown] id="ch06-15"
# What this machine shows, honestly:
#
# - **Stage 0** sends one all-reduce per step: DeepSpeed's stage 0 packs its gradients in buckets
#   of 5·10⁸ elements, whatever `reduce_bucket_size` says, and that one bucket is complete only
#   when backward ends. With overlap it is issued asynchronously by the last gradient's hook,
#   still inside backward, but no computation is left to hide it behind.
# - **Stage 2 with overlap**: each bucket's all-reduce is issued asynchronously the moment the
#   bucket is complete (gloo runs it on a thread of its own) and backward goes on computing the
#   next buckets' gradients (the green *async* row beside the blue *backward* span; the red *wait*
#   marks are what was left to wait for). As in DeepSpeed's stages 1-2, at most two buckets are in
#   flight (its two IPG bucket buffers): before the rank sends a third, it waits for the oldest.
#   Without overlap every call is blocking (orange) and exposed.
# - **Hidden is not free here.** On two shared CPU cores, gloo's thread and the backward
#   computation compete for the same cores, so a "hidden" all-reduce still slows the computation
#   beside it, and the step may not be faster at all; compare the totals in the titles, and run
#   the cell again to see how much they move.
#
# On a GPU with NCCL the picture changes: the collective runs on its own CUDA stream and on the
# network hardware, the backward kernels keep the compute units busy, and an overlapped bucket
# really costs (almost) nothing as long as backward has work left to do. Only the last bucket,
# completed at the very end of backward, stays exposed, which is one more reason not to make
# buckets too big.
#
# ## What we measured

# %% id="ch06-16"
print(f"alpha-beta  all-reduce on {N} ranks (gloo) fitted at {len(rows)} sizes: alpha and beta in "
      f"the figure")
print(f"buckets     MLP, {2 * LAYERS} tensors, psi = {psi:,}; stage-2 all-reduces per step by bucket size:")
print("            " + ", ".join(f"{calls[s]} at {s:,}" for s in BUCKETS))
print(f"            the same {sum(r.wire_bytes for r in grads(runs[BUCKETS[0]][0][0])):,.0f} wire bytes "
      f"of gradients at every size")
row = {k: sum(w for _, w in v.values()) / unit for k, v in table.items()}
print(f"traffic     stage 2: DeepSpeed's all-reduce {row[2, False, 1]:.2f} psi, the paper's "
      f"reduce-scatter {row[2, True, 1]:.2f} psi (3 and 2);")
print(f"            4 micro-batches: stage 1 {row[1, False, 4]:.2f} psi, stage 2 {row[2, False, 4]:.2f} psi "
      f"(paper {row[2, True, 4]:.2f})")
early = {k: issued_in_backward(v[-1][1])[0] for k, v in timelines.items()}
print(f"overlap     all-reduces issued during backward: stage 0 on {early[0, True]}, off "
      f"{early[0, False]}; stage 2 on {early[2, True]}, off {early[2, False]}")

# %% [markdown] id="ch06-17"
# - A collective costs **α + S/β**: a fixed price per call plus the bytes over the bandwidth. Below
#   α·β bytes the fixed price dominates.
# - **Buckets** (`reduce_bucket_size`) cut the number of calls without changing the bytes, so they
#   cut n·α. Bigger buckets cost memory and leave less to overlap.
# - **DeepSpeed's stages 1-2 all-reduce** each bucket (a range of the one flat buffer): 3Ψ per
#   step; the paper's **reduce-scatter** (zerolab's `ideal_reduce_scatter`) moves 2Ψ. Stage 2
#   with gradient accumulation reduces every micro-batch and moves more than stage 1.
# - **Overlap** (`overlap_comm`) issues each bucket's collective during backward, at most two in
#   flight at stages 1-2; it hides communication when the collective has resources of its own:
#   on GPUs with NCCL, its own stream and hardware; here, gloo's thread on the same two cores.
#   Stage 0's single 5·10⁸ bucket leaves nothing to overlap.
#
# ## Questions
#
# 1. Re-run section 2 with `BUCKETS = [4_160, 4_224, 8_320]`. Predict the calls first. What does
#    the step from 4,160 to 4,224 elements change, and why?
# 2. Using your fitted α and β, at what bucket size would α and S/β be equal for one bucket? How
#    does that compare with DeepSpeed's default of 5·10⁸ elements, and why might GPU clusters
#    want buckets that large?
# 3. With 8 micro-batches, how many Ψ does stage 2 move per optimizer step, DeepSpeed's way and
#    the paper's? Change `traffic_table` and check.
# 4. In section 4 only the last bucket's communication must stay exposed even on a perfect GPU.
#    Why? What does that say about the size of the *first* bucket backward fills?
#
# **Your turn:** in `exercises/06_bucket_params.ipynb` you write the bucket assignment itself
# (gradient order, a limit in elements, an oversized parameter alone), and the check plugs it into
# zerolab's engine on 2 ranks in place of its own and compares every collective in the ledger.

# %% id="ch06-18"
crew.close()
