# %% [markdown] id="ch11-00"
# # Interview questions (面试题): ZeRO, FSDP, mixed precision, offload
#
# Fifteen questions that come up when engineers are interviewed about training large models with
# DeepSpeed ZeRO or PyTorch FSDP. Each has three parts:
#
# 1. **the question**, with a prompt: answer it out loud, or on paper, before you read on. Where
#    the answer can be measured the prompt says **Predict, then run**: write your numbers down;
# 2. **a check**: a cell that runs the claim, on real ranks with `zerolab` (gloo on this CPU) or
#    with DeepSpeed's memory estimators, and prints the measurement beside the formula;
# 3. **a short answer**, the one you would give in the room, folded under *The answer*: open it
#    once you have written yours and run the check.
#
# The notation is the ZeRO paper's: **Ψ** is the number of parameters (elements), **N** the number
# of data-parallel ranks. Bytes and elements are always named; GB = 10⁹ bytes, GiB = 2³⁰ bytes.
# Traffic is counted as the bytes one rank puts on the wire in a ring (nccl-tests' *bus bandwidth*
# convention): an all-reduce of S bytes costs each rank 2(N−1)/N·S, a reduce-scatter or an
# all-gather (N−1)/N·S. The paper's "2Ψ" and "3Ψ" drop the factor (N−1)/N.
#
# The facts about DeepSpeed are those of its release 0.19.8; zerolab issues DeepSpeed's collectives
# for each config, and where the ZeRO paper differs (stages 1-2 move 3Ψ in DeepSpeed, 2Ψ in the
# paper) both are measured and labelled. The questions follow chapters 0 to 9, where each answer is
# taken apart at length (the last column).
#
# | # | question | checked with | chapter |
# |---|---|---|---|
# | 1 | Why 16 bytes per parameter? | `engine.memory()` on 4 ranks | 01 |
# | 2 | Memory per rank at each stage? | 4 stages on 4 ranks | 03 |
# | 3 | Traffic per stage: DeepSpeed's and the paper's; why 3Ψ? | the ledger | 03, 08 |
# | 4 | Reduce-scatter or all-reduce? | collectives + the engine | 00, 02, 06 |
# | 5 | Gradient accumulation with stage 2? | the ledger at 4 micro-steps | 03, 06 |
# | 6 | FSDP's names for the stages? | gathers per step | 03 |
# | 7 | Does ZeRO change the result? | parity with one process | 03, 03a |
# | 8 | Gradient clipping across shards? | `engine.last_grad_norm` | 04 |
# | 9 | Why fp32 master weights? | bf16 arithmetic + the engine | 04 |
# | 10 | Loss scaling in fp16 but not in bf16? | casts + the engine's scale | 04 |
# | 11 | How does the dynamic loss scaler move? | an injected overflow | 04 |
# | 12 | Activation checkpointing or ZeRO? | saved tensors + stage 3 | 01, 07 |
# | 13 | ZeRO-Offload and ZeRO-Infinity? | `engine.memory("host")` + DeepSpeed's estimators | 05, 09 |
# | 14 | Does a 7B / 70B model fit? | the formulas + estimators | 07 |
# | 15 | What is the α-β model? | a fit on 2 ranks | 06 |

# %% id="ch11-01"
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import zerolab
from zerolab.tools import bench
from zerolab.tools import estimate
from zerolab.tools import simulate
from zerolab import precision as P
from zerolab.comm import Comm, ring_all_reduce
from zerolab.memory import comm_volume, measure_activations, model_state_bytes, zero_paper_table
from zerolab.models import MLP, mse_loss, regression_batches
from zerolab.zero.reference import micro_batches, train_engine, train_reference

torch.set_num_threads(1)     # one thread here, as on every rank: the same arithmetic, run after run
WIDTH, LAYERS, BATCH = 64, 4, 16
PSI = LAYERS * (WIDTH * WIDTH + WIDTH)   # 4 Linear(64, 64) layers: 16,640 parameters


def make_model():
    # an MLP with no tied weights; 4,160 elements per layer divide by 2 and 4, so nothing is padded
    return MLP(sizes=(WIDTH,) * (LAYERS + 1), seed=0)


def config(stage, precision="bf16", gas=1, optimizer=None, ideal=False, **zero):
    # stage3_param_persistence_threshold 0: DeepSpeed's default (100,000 elements) would keep
    # every parameter of this small model whole, and stage 3 would behave like stage 2;
    # stage3_max_reuse_distance 0 and stage3_prefetch_bucket_size 0: its default reuse distance
    # (10^9) would keep the model gathered from forward to backward, and so would its default
    # prefetch even at reuse distance 0 (2 Psi; chapter 8), where the paper's stage 3 gathers
    # again (3 Psi).
    # ideal=True: zerolab's own switch, the paper's reduce-scatter at stages 1-2 (not DeepSpeed's)
    cfg = {"train_batch_size": BATCH, "gradient_accumulation_steps": gas,
           "optimizer": optimizer or {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                                 "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0, **zero}}
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    if ideal:
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg


def measured_step(stage, precision="bf16", gas=1, ideal=False, **zero):
    # runs on every rank: one warm-up step (AdamW creates its states), then the measured step
    engine = zerolab.initialize(make_model(), config(stage, precision, gas, ideal=ideal, **zero))
    batches = regression_batches(2, BATCH, d_in=WIDTH, d_out=WIDTH)
    train_engine(engine, batches[:1], mse_loss)
    mark = engine.ledger.mark()
    train_engine(engine, batches[1:], mse_loss)
    step = [r for r in engine.ledger.since(mark).records if r.tag.startswith(("grads", "params"))]
    return {"memory": engine.memory(), "groups": len(engine.stage.groups),
            "records": [(r.op, r.tag, r.numel, r.wire_bytes) for r in step]}


def wire(run, op=None, what=None):
    # bytes on this rank's wire in the measured step, by collective and/or purpose
    return sum(b for o, tag, _, b in run["records"]
               if (op is None or o == op) and (what is None or tag.startswith(what)))


crew = zerolab.Crew(4, threads=1)
N = crew.world_size
UNIT = (N - 1) / N * 2 * PSI             # "1Ψ" of bf16 traffic on the wire, in bytes
print(f"{N} ranks up (gloo); the model: Ψ = {PSI:,} parameters")

# %% [markdown] id="ch11-02"
# ## Q1. Why does mixed-precision training with Adam cost 16 bytes per parameter?
#
# **Predict, then run.** List every copy of a parameter that exists during training, with its
# dtype, and add up the bytes. What will `engine.memory()` show per parameter in bf16, and in fp32?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# Five numbers per parameter: the fp16/bf16 **weight** the forward uses (2 bytes), its
# fp16/bf16 **gradient** (2), and the optimizer's state: an fp32 **master copy** of the weight (4),
# Adam's **momentum** (4) and **variance** (4). 2 + 2 + 12 = 16. The 12 bytes of optimizer state
# (the paper's K = 12) are three quarters of it, which is why ZeRO shards them first. Activations
# and temporary buffers come on top. A trick follow-up: fp32 training with Adam costs 16 bytes
# too (4 + 4 + 8): mixed precision does not shrink the model states, it moves 4 bytes into the
# optimizer state and halves what is computed and communicated.
#
# </details>
#
# ## Q2. How much memory does each rank need at each ZeRO stage, for Ψ parameters on N ranks?
#
# **Predict, then run.** Write the four formulas, then evaluate them for this chapter's model
# (Ψ = 16,640) on N = 4: bytes per rank at stages 0 to 3. And for Ψ = 7.5 billion on N = 64?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# Each stage shards one more of the three model states:
#
# | stage | shards | bytes per rank | Ψ = 7.5B, N = 64 |
# |---|---|---|---|
# | 0 (DDP) | nothing | 2Ψ + 2Ψ + 12Ψ = 16Ψ | 120 GB |
# | 1 | optimizer states | 2Ψ + 2Ψ + 12Ψ/N | 31.4 GB |
# | 2 | + gradients | 2Ψ + (2 + 12)Ψ/N | 16.6 GB |
# | 3 | + parameters | (2 + 2 + 12)Ψ/N | 1.9 GB |
#
# Stage 1 can never go below 4Ψ and stage 2 never below 2Ψ, whatever N is; only stage 3 keeps
# falling as 1/N. (DeepSpeed's own estimator counts a little more: see Q14.)
#
# </details>

# %% id="ch11-03"
for precision, formula in (("bf16", (2, 2, 12)), ("fp32", (4, 4, 8))):
    r = crew.run(measured_step, 0, precision)[0]           # stage 0 (DDP): nothing sharded
    m = r["memory"]
    counters = 4 * r["groups"]          # AdamW keeps a 4-byte step counter per tensor it steps
    print(f"{precision}, stage 0, rank 0: params {m['params']:,} B, grads {m['grads']:,} B, "
          f"optimizer states {m['optimizer_states']:,} B")
    print(f"    (the optimizer states include {counters} B of step counters)")
    got = (m["params"] / PSI, m["grads"] / PSI, (m["optimizer_states"] - counters) / PSI)
    print(f"    bytes per parameter {' + '.join(f'{x:g}' for x in got)} = {sum(got):g}; "
          f"formula {' + '.join(map(str, formula))} = 16: {got == formula}")

runs = {s: crew.run(measured_step, s)[0] for s in range(4)}      # bf16 + AdamW, on 4 ranks
print(f"bytes per rank, N = {N}, Ψ = {PSI:,}")
print(f"{'stage':>5}{'params':>9}{'grads':>9}{'optimizer':>11}{'measured':>11}{'formula':>11}"
      f"   == formula + 4 B per step counter")
for s, r in runs.items():
    m, f = r["memory"], model_state_bytes(PSI, s, N)["total"]
    print(f"{s:>5}{m['params']:>9,}{m['grads']:>9,}{m['optimizer_states']:>11,}{m['model_states']:>11,}"
          f"{f:>11,.0f}   {m['model_states'] == f + 4 * r['groups']}")
print("the paper's example, 7.5B parameters on 64 GPUs:",
      ", ".join(f"{row['total'] / 1e9:.1f} GB" for row in zero_paper_table(7.5e9, 64)))

# %% [markdown] id="ch11-04"
# ## Q3. How much does each stage communicate per step, compared with DDP? Why is stage 3 3Ψ?
#
# **Predict, then run.** For each stage, name the collectives of one step and their sizes in Ψ,
# DeepSpeed's way and the paper's.
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# DDP all-reduces the gradients: 2Ψ (an all-reduce is a reduce-scatter plus an
# all-gather). **The paper**'s stages 1 and 2 split that all-reduce in two and put the optimizer
# step in the middle: reduce-scatter the gradients (Ψ; each rank gets the sum of its own shard),
# step the shard, all-gather the updated parameters (Ψ). Also 2Ψ: no extra traffic, for up to 4×
# (stage 1) or 8× (stage 2) less memory. **DeepSpeed 0.19.8 does not, by default**: it all-reduces
# each gradient bucket (2Ψ), each rank keeps the slices it owns, then it all-gathers the
# parameters (Ψ): **3Ψ, 1.5× DDP** at stages 1 and 2 (Q4 says why).
# Stage 3 holds no full parameters, so it must all-gather each layer before its forward (Ψ),
# **again** before its backward, because the gathered copy was freed after the forward (Ψ), and
# then reduce-scatter the gradients (Ψ): **3Ψ**, in the paper and in DeepSpeed. There is no
# all-gather after the step: each rank updates its own shard, and the next forward gathers it.
# In the room: "the paper says 2Ψ, 2Ψ, 3Ψ; DeepSpeed's defaults move 3Ψ at every stage from 1 on".
#
# Stages 1 and 2 moved DeepSpeed's 3Ψ (all-reduce 2Ψ + all-gather Ψ) by default, and the paper's
# 2Ψ (reduce-scatter Ψ + all-gather Ψ) only with zerolab's `ideal_reduce_scatter` switch; stage 3
# moved 3Ψ either way. Read the last line as stage 3's step. This chapter's config turns prefetch
# off (`stage3_prefetch_bucket_size` 0) at reuse distance 0: the paper's schedule, which DeepSpeed
# runs with those two keys. Forward gathers each layer just before it runs; backward gathers each
# again, in reverse, just before its own backward (each was freed after its forward). The
# gradients are packed into buckets of `reduce_bucket_size` elements (5·10⁸ by default: here the
# whole model is one bucket), each reduce-scattered in one call: `rs(0)`, not one call per layer.
# DeepSpeed's defaults move less: at reuse distance 10⁹, or with its default prefetch even at reuse
# distance 0, a layer used again soon stays gathered (its prefetcher marks every backward use it
# scans as fetched for), and stage 3 moves 2Ψ; chapter 8 measures it. (zerolab's own order checks,
# 16-byte all-gathers DeepSpeed does not send, are filed apart in `ledger.checks` and not shown.)
#
# </details>

# %% id="ch11-05"
runs_ideal = {s: crew.run(measured_step, s, ideal=True)[0] for s in (1, 2)}   # zerolab's switch
DS = {0: 2, 1: 3, 2: 3, 3: 3}                      # DeepSpeed's pattern, in Ψ
print(f"bytes on one rank's wire in one step, N = {N}; 1Ψ = (N-1)/N x 2 B x Ψ = {UNIT:,.0f} B")
print(f"{'stage':>5}  {'pattern':<16}{'all-reduce':>11}{'reduce-scatter':>16}{'all-gather':>12}{'total':>8}"
      f"{'formula':>9}   ==")
rows = [(s, "DeepSpeed's", runs[s], DS[s] * UNIT) for s in range(4)]
rows[2:2] = [(1, "paper (switch)", runs_ideal[1], comm_volume(PSI, 1, N))]
rows[4:4] = [(2, "paper (switch)", runs_ideal[2], comm_volume(PSI, 2, N))]
for s, who, r, formula in rows:
    ops = [wire(r, op) for op in ("all_reduce", "reduce_scatter", "all_gather")]
    total = sum(ops)
    print(f"{s:>5}  {who:<16}" + "".join(f"{b / UNIT:>{w}.0f}Ψ" for b, w in zip(ops, (10, 15, 11)))
          + f"{total / UNIT:>7.0f}Ψ{formula / UNIT:>8.0f}Ψ   {total == formula}")
print("stage 3, one step in ledger order (g = the all-gather of one layer's weight and bias, digit =")
print("  layer; rs(b): the reduce-scatter of gradient bucket b):")


def short(op, tag):      # "params layers.1.weight + 1 more" -> g1; "grads bucket 0" -> rs(0)
    if op == "reduce_scatter":
        return f"rs({tag.split()[-1]})"
    name = tag.partition(" + ")[0].split()[-1]              # layers.1.weight
    return f"g{name.split('.')[1]}"


order = [short(op, tag) for op, tag, _, _ in runs[3]["records"]]
print("   ", " ".join(order))

# %% [markdown] id="ch11-06"
# ## Q4. What is the difference between a reduce-scatter and an all-reduce, and which does ZeRO use?
#
# *Try first:* what does each rank hold afterwards, and how many bytes does each rank send?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# After an **all-reduce** every rank holds the whole sum; after a **reduce-scatter**
# rank r holds only the r-th 1/N of it. In a ring, the all-reduce *is* a reduce-scatter followed
# by an all-gather, so it costs twice as much: 2(N−1)/N·S against (N−1)/N·S. ZeRO stages 1-3 need
# only their own shard of the gradient, so the paper reduce-scatters. A catch for the interview:
# DeepSpeed 0.19.8's stages 1 and 2 issue **no** reduce-scatter by default: each bucket is
# all-reduced (`use_multi_rank_bucket_allreduce`, true by default) and each owner keeps its slice,
# so they move about **3Ψ**, as much as stage 3. Why: the parameters form one flat buffer cut
# into N contiguous partitions, and a bucket is a range of it that cuts those partitions unevenly,
# not the N equal pieces a reduce-scatter hands out. Only DeepSpeed's stage 3 calls a real
# reduce-scatter. zerolab issues DeepSpeed's collectives; the paper's reduce-scatter is zerolab's
# own switch, `"zerolab": {"ideal_reduce_scatter": true}` (each bucket then its own N shards).
#
# </details>

# %% id="ch11-07"
def collectives():
    comm, r, n = Comm(), zerolab.rank(), zerolab.world_size()
    x = torch.arange(1024, dtype=torch.float32) * (r + 1)   # integers: every sum is exact
    summed = comm.all_reduce(x.clone(), tag="all-reduce")
    mine = torch.empty(1024 // n)
    comm.reduce_scatter(mine, x.clone(), tag="reduce-scatter")
    full = comm.all_gather(torch.empty(1024), mine, tag="all-gather")
    ring = ring_all_reduce(x)                               # the ring, written with send/recv
    return {"rs_is_my_part": torch.equal(mine, summed.view(n, -1)[r]),
            "rs_then_ag_is_ar": torch.equal(full, summed), "ring_is_ar": torch.equal(ring, summed),
            "wire": {rec.tag: rec.wire_bytes for rec in comm.ledger.records}}


out = crew.run(collectives)
print("every rank: reduce-scatter leaves it its part of the sum:", all(o["rs_is_my_part"] for o in out))
print("every rank: reduce-scatter + all-gather == all-reduce:", all(o["rs_then_ag_is_ar"] for o in out))
print("every rank: a ring of send/recv == the library's all-reduce:", all(o["ring_is_ar"] for o in out))
w, S = out[0]["wire"], 1024 * 4
print(f"wire bytes per rank for S = {S:,} B on {N} ranks:")
print("    " + ", ".join(f"{k} {v:,.0f} B" for k, v in w.items()))
print(f"    all-reduce == 2(N-1)/N S: {w['all-reduce'] == 2 * (N - 1) / N * S}; "
      f"reduce-scatter == (N-1)/N S: {w['reduce-scatter'] == (N - 1) / N * S}")
for who, r in (("DeepSpeed's default", runs[2]), ("paper's, zerolab switch", runs_ideal[2])):
    how = ", ".join(sorted({op for op, tag, _, _ in r["records"] if tag.startswith("grads")}))
    print(f"engine, stage 2, {who}: gradients by {how} {wire(r, what='grads') / UNIT:.0f}Ψ "
          f"+ parameters {wire(r, what='params') / UNIT:.0f}Ψ = {wire(r) / UNIT:.0f}Ψ")

# %% [markdown] id="ch11-08"
# ## Q5. With gradient accumulation, why does stage 2 communicate more than stage 1?
#
# **Predict, then run.** With 4 micro-batches per optimizer step, how many Ψ does each of stages
# 1 and 2 move, DeepSpeed's way and the paper's?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# Stage 1 keeps full gradients, so it can add the 4 micro-batches' gradients locally
# and reduce them once at the boundary, whatever the accumulation: DeepSpeed all-reduces them (2Ψ)
# and all-gathers the parameters (Ψ), 3Ψ per step; the paper's reduce-scatter, 2Ψ. Stage 2 keeps
# only its shard of the gradient, so it cannot hold a micro-batch's full gradient until the end: it
# reduces every bucket in every micro-step, as backward fills it. With k micro-steps DeepSpeed's
# all-reduce moves 2kΨ + Ψ, **9Ψ** at k = 4; the paper's reduce-scatter kΨ + Ψ, 5Ψ. DeepSpeed's
# stage 2 cannot skip it (its `no_sync()` refuses stages 2 and 3); stage 3 pays k × 3Ψ. Remedies:
# fewer, larger micro-batches, or stage 1 when the gradients fit.
#
# </details>

# %% id="ch11-09"
print(f"N = {N}, gradient_accumulation_steps 4, bytes per optimizer step in Ψ units")
FORMULA = {(1, False): 2 + 1, (1, True): 1 + 1, (2, False): 2 * 4 + 1, (2, True): 4 + 1}
for s in (1, 2):
    for ideal in (False, True):
        r = crew.run(measured_step, s, gas=4, ideal=ideal)[0]
        grads = [op for op, tag, _, _ in r["records"] if tag.startswith("grads")]
        who = "paper, zerolab switch" if ideal else "DeepSpeed's default"
        print(f"stage {s}, {who:<21}: {len(grads)} {grads[0]}, {wire(r, what='grads') / UNIT:.0f}Ψ + "
              f"parameters {wire(r, what='params') / UNIT:.0f}Ψ = {wire(r) / UNIT:.0f}Ψ; "
              f"formula {FORMULA[s, ideal]}Ψ: {wire(r) == FORMULA[s, ideal] * UNIT}")

# %% [markdown] id="ch11-10"
# ## Q6. How do PyTorch FSDP's sharding strategies map to ZeRO stages?
#
# **Predict, then run.** FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD: which stage is each?
# How many elements does stage 2 all-gather per step, and stage 3, in Ψ?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# | FSDP (`ShardingStrategy`) | ZeRO | what it does |
# |---|---|---|
# | `NO_SHARD` | stage 0 (DDP) | all-reduce the gradients |
# | `SHARD_GRAD_OP` | ≈ stage 2 | parameters gathered once per step and kept until the end of backward |
# | `FULL_SHARD` (the default) | ≈ stage 3 | parameters freed after forward, gathered again for backward |
# | `HYBRID_SHARD` | stage 3 inside a node | FULL_SHARD within each node, replicas across nodes |
#
# FSDP has no stage 1; PyTorch's `ZeroRedundancyOptimizer` is one. In FSDP2 (`fully_shard`) the
# switch is `reshard_after_forward`: True ≈ stage 3, False ≈ stage 2. The difference the names
# hide is the one of Q3: whether the parameters are gathered once per step or twice, so 2Ψ or 3Ψ.
# (One real difference: between steps, FSDP's SHARD_GRAD_OP keeps only parameter shards, where
# DeepSpeed's stage 2 keeps the 16-bit parameters whole.)
#
# </details>

# %% id="ch11-11"
for s, fsdp in ((2, "SHARD_GRAD_OP"), (3, "FULL_SHARD")):
    gathered = sum(numel for op, _, numel, _ in runs[s]["records"] if op == "all_gather")
    print(f"stage {s} (~{fsdp:<13}): parameters all-gathered per step {gathered:,} elements "
          f"= {gathered // PSI}Ψ; expected {s - 1}Ψ: {gathered == (s - 1) * PSI}")

# %% [markdown] id="ch11-12"
# ## Q7. Does ZeRO change the training result, compared with plain data parallelism?
#
# *Try first:* is stage 3 an approximation of data parallelism?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# No. ZeRO only changes **where** the model states are kept; every rank computes the
# same forward and backward as under DDP, every gradient is averaged over all ranks, and the
# optimizer applies the same element-wise update, each rank to its shard. The result equals
# data-parallel training, up to the order in which floating-point sums are added (the last bits).
# The exception is an optimizer that looks at whole tensors, such as LAMB's trust ratio, applied
# to a shard: that is why DeepSpeed's ZeRO accepts only the optimizers it has tested (torch's
# Adam, AdamW and Adagrad; its own fused and CPU Adam, Adagrad and Lion) unless
# `zero_allow_untested_optimizer` is set.
#
# </details>

# %% id="ch11-13"
SGD = {"type": "SGD", "params": {"lr": 0.1}}
batches = regression_batches(3, BATCH, d_in=WIDTH, d_out=WIDTH, seed=1)


def train_fp32(stage):
    engine = zerolab.initialize(make_model(), config(stage, "fp32", optimizer=SGD))
    train_engine(engine, batches, mse_loss)     # each rank takes its 4 of the 16 rows per step
    return engine.full_params()                 # the zero_to_fp32 view, the same on every rank


reference = train_reference(make_model(), config(0, "fp32", optimizer=SGD), batches, mse_loss)
for s in range(4):
    full = crew.run(train_fp32, s)[0]
    diff = max(float((full[k] - reference[k]).abs().max()) for k in reference)
    print(f"stage {s} on {N} ranks vs one process on the whole batch, 3 fp32 SGD steps: "
          f"max |diff| < 1e-6: {diff < 1e-6}")

# %% [markdown] id="ch11-14"
# ## Q8. With gradients sharded, how is gradient clipping's global norm computed?
#
# **Predict, then run.** Rank r holds only its shard g_r of the gradient. What does it send, to
# whom, and how many bytes?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# The global L2 norm is √(Σ over all elements of g²), and a sum splits over shards:
# each rank computes the sum of squares of its own shard, one all-reduce (SUM) of that single
# number gives Σ_r ‖g_r‖², and every rank takes the square root. Clipping each shard by its own
# norm would be wrong: every rank would scale by a different factor. DeepSpeed fuses this with
# the fp16 unscale: gradients are multiplied once by 1 / (scale · max(1, norm / clip)), where the
# norm is the unscaled one. Its default `gradient_clipping` is 1.0 (0 turns it off). The number is
# one fp32 (4 bytes) at stages 1-2 and one fp64 (8 bytes) at stage 3, and zerolab sends it as
# DeepSpeed 0.19.8 does; the overflow flag is a separate 1-byte all-reduce before it (stages 1-2 in
# fp16 and bf16, stage 3 in fp16 only).
#
# </details>

# %% id="ch11-15"
CLIPPED = {**config(2, "fp32", optimizer=SGD), "gradient_clipping": 0.05}   # a top-level key


def clipped_step():
    engine = zerolab.initialize(make_model(), CLIPPED)
    (x, y), = micro_batches(batches[0], zerolab.rank(), zerolab.world_size(), 1)
    engine.backward(mse_loss(engine(x), y))
    shard_sq = sum(float(g.double().square().sum()) for g in engine.stage.grads_for_step())
    mark = engine.ledger.mark()
    engine.step()
    norm_record = [(r.numel, r.bytes) for r in engine.ledger.since(mark).records if "norm" in r.tag]
    return {"shard_sq": shard_sq, "norm": engine.last_grad_norm, "record": norm_record,
            "full": engine.full_params()}


out = crew.run(clipped_step)
one = make_model()                                  # one process, the whole batch
mse_loss(one(batches[0][0]), batches[0][1]).backward()
true_norm = float(torch.cat([p.grad.reshape(-1) for p in one.parameters()]).norm())
from_shards = sum(o["shard_sq"] for o in out) ** 0.5
below = all(o["shard_sq"] ** 0.5 < true_norm for o in out)
print(f"each rank's shard norm is below the global norm: {below}")
print(f"sqrt(sum of the {N} shards' squares) == one process's norm (rel. < 1e-6): "
      f"{abs(from_shards / true_norm - 1) < 1e-6}")
print(f"engine.last_grad_norm the same on every rank: {len({o['norm'] for o in out}) == 1}; "
      f"== one process's (rel. < 1e-6): {abs(out[0]['norm'] / true_norm - 1) < 1e-6}")
numel, nbytes = out[0]["record"][0]
print(f"the all-reduce that carried it: {numel} float64 numbers, {nbytes} bytes")
clipped = train_reference(make_model(), CLIPPED, batches[:1], mse_loss)  # clip_grad_norm_, one process
diff = max(float((out[0]["full"][k] - clipped[k]).abs().max()) for k in clipped)
print(f"clipped to 0.05 (the norm was above it: {true_norm > 0.05}): stage 2 on {N} ranks against")
print(f"    clip_grad_norm_ in one process, max |diff| < 1e-6: {diff < 1e-6}")

# %% [markdown] id="ch11-16"
# ## Q9. Why keep fp32 master weights at all? The model runs in bf16.
#
# *Try first:* what is 1.0 + 0.001 in bf16?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# Because updates are small relative to the weights, and a 16-bit format rounds them
# away. bf16 has 8 significant bits: near 1.0 its numbers are 2⁻⁷ ≈ 0.0078 apart, so adding
# anything below half of that gives 1.0 back. Adam moves each weight by about the learning rate
# per step, often 10⁻⁴ to 10⁻⁵: in bf16 most of those updates would vanish, every step. So the
# optimizer steps an fp32 copy (the master, 4 bytes of the 16), where the updates accumulate, and
# the 16-bit weights are re-rounded from it after each step. bf16 needs this more than fp16 does
# (7 stored mantissa bits against 10).
#
# The update is kept in the master even where the bf16 weight did not change; after enough steps
# the master crosses a rounding boundary and the bf16 weight follows. Without the master the
# update would be lost for good.
#
# </details>

# %% id="ch11-17"
w16, w32 = torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(1.0)
for _ in range(100):
    w16, w32 = w16 + 0.001, w32 + 0.001
print(f"1.0 + 100 x 0.001: in bf16 {float(w16):g}, in fp32 {float(w32):.4f}")


def tiny_update():
    # bf16 + AdamW with lr 1e-5: Adam's first step moves every weight by about lr
    opt = {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.0}}
    engine = zerolab.initialize(make_model(), config(2, "bf16", optimizer=opt))
    before16 = [p.detach().clone() for p in engine.module.parameters()]
    before32 = {k: v.clone() for k, v in engine.full_params().items()}
    train_engine(engine, batches[:1], mse_loss)
    after32 = engine.full_params()
    names = [k for k, _ in engine.module.named_parameters()]
    moved32 = sum(int((after32[k] != before32[k]).sum()) for k in names)
    moved16 = sum(int((p != b).sum()) for p, b in zip(engine.module.parameters(), before16))
    rounded = all(torch.equal(p, after32[k].to(torch.bfloat16))
                  for k, p in zip(names, engine.module.parameters()))
    return moved32, moved16, rounded, str(engine.stage.masters[0].dtype)


moved32, moved16, rounded, dtype = crew.run(tiny_update)[0]
print(f"one step, stage 2 on {N} ranks: the masters are {dtype}")
print(f"    master elements that moved: more than 99%: {moved32 > 0.99 * PSI}")
print(f"    bf16 weights that moved: fewer than 10%: {moved16 < 0.10 * PSI}")
print(f"    the bf16 weights are exactly the masters rounded to bf16: {rounded}")

# %% [markdown] id="ch11-18"
# ## Q10. Why does fp16 training need loss scaling, and bf16 does not?
#
# *Try first:* compare the exponent bits of fp16, bf16 and fp32.
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# **Range.** fp16 has 5 exponent bits: its smallest number is 2⁻²⁴ ≈ 6·10⁻⁸ (a
# subnormal) and its largest 65,504. Many gradients are smaller than that and round to 0. Scaling
# the loss by S scales every gradient by S (chain rule), lifting them into range; the optimizer
# divides by S again, in fp32. Too large an S overflows to inf instead, so S must be tuned (Q11).
# bf16 has fp32's 8 exponent bits, so the same range as fp32 (normal numbers down to about
# 10⁻³⁸): gradients practically never underflow, and its loss scale is 1. bf16 pays in
# precision instead (Q9). DeepSpeed 0.19.8 uses a fixed scale of 1.0 for bf16 and a dynamic
# scaler for fp16 (starting at 2¹⁶).
#
# </details>
#
# ## Q11. How does DeepSpeed's dynamic loss scaler behave?
#
# **Predict, then run.** S = 2¹⁶, `loss_scale_window` 2, `hysteresis` 1; one rank overflows at
# step 1 only. What S is used at each of steps 0 to 8? Write the nine numbers down.
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# On an overflow (an inf or NaN in *any* rank's gradients, found with an all-reduce
# MAX) the step is **skipped on every rank** (no update, no scheduler step) and, once the
# hysteresis is used up, S is halved, but not below `min_loss_scale` (at the minimum, another
# overflow stops the run). After `loss_scale_window` clean steps in a row (1000 by default) S
# doubles. `hysteresis` (default 2) is how many overflows are tolerated before a cut; it is
# refilled only when S grows (or on every clean step with `consecutive_hysteresis`). In 0.19.8
# the doubling comes at the (window + 1)-th clean step after an overflow. The expected trace below
# was recorded from DeepSpeed 0.19.8's own `DynamicLossScaler`.
#
# </details>

# %% id="ch11-19"
grads = torch.tensor([1e-2, 1e-4, 1e-6, 1e-7, 1e-8, 1e-9, 1.0], dtype=torch.float64)
print(f"{'gradient':>10}{'fp16':>12}{'fp16 x 2^16':>14}{'bf16':>12}")
for g in grads:
    cells = (g.to(torch.float16), (g * 2 ** 16).to(torch.float16), g.to(torch.bfloat16))
    print(f"{float(g):>10.0e}" + "".join(f"{float(c):>{w}.3g}" for c, w in zip(cells, (12, 14, 12))))
for name, scale, dtype in (("fp16", 1, torch.float16), ("fp16 x 2^16", 2 ** 16, torch.float16),
                           ("bf16", 1, torch.bfloat16)):
    rep = P.underflow_report(grads, scale, dtype)
    print(f"{name:>12}: {rep['zero']} of {rep['nonzero']} lost to 0, {rep['overflow']} overflowed")


def scale_of(precision):
    return zerolab.initialize(make_model(), config(2, precision)).loss_scale


print(f"engine.loss_scale by default: fp16 {crew.run(scale_of, 'fp16')[0]:g}, "
      f"bf16 {crew.run(scale_of, 'bf16')[0]:g}")


def scaler_trace(steps=9, bad_step=1):
    fp16 = {"enabled": True, "initial_scale_power": 16, "loss_scale_window": 2, "hysteresis": 1}
    engine = zerolab.initialize(make_model(), {**config(2, "fp32"), "fp16": fp16})
    rank, n = zerolab.rank(), zerolab.world_size()
    for step, batch in enumerate(regression_batches(steps, BATCH, d_in=WIDTH, d_out=WIDTH)):
        (x, y), = micro_batches(batch, rank, n, 1)
        loss = mse_loss(engine(x.half()), y)
        if step == bad_step and rank == 1:
            loss = loss * float("inf")              # an overflow on rank 1 only
        engine.backward(loss)
        engine.step()
    return [h[1] for h in engine.scaler.history], engine.skipped_steps


DEEPSPEED = [65536, 32768, 32768, 32768, 65536, 65536, 131072, 131072, 262144]
out = crew.run(scaler_trace)
trace, _ = out[0]
print("scale after each step:", [int(s) for s in trace])
print(f"== DeepSpeed 0.19.8's trace: {trace == DEEPSPEED}")
print(f"steps skipped, per rank: {[skipped for _, skipped in out]} (the overflow was on rank 1 only)")

# %% [markdown] id="ch11-20"
# ## Q12. Activation checkpointing and ZeRO: what does each save, and do they combine?
#
# *Try first:* which of the four memory giants does each one shrink?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# ZeRO shards the **model states** (parameters, gradients, optimizer states) across
# ranks; it does nothing for **activations**, which each rank keeps for its own micro-batch and
# which grow with batch × sequence × hidden × layers. (The paper's ZeRO-R partitions activation
# checkpoints only under tensor parallelism.) **Activation checkpointing** keeps only each
# block's input in forward and recomputes the rest during backward: activation memory drops from
# every tensor of every block to one tensor per block, for about one extra forward (roughly 33%
# more compute). They are independent and are used together; with ZeRO-3 the recomputation runs
# while the block's parameters are gathered for its backward, so the parameters and gradients
# still move 3Ψ, in DeepSpeed and in zerolab. (zerolab's own order checks, 16-byte all-gathers
# that DeepSpeed does not send, are filed apart in `ledger.checks`, outside this count.)
#
# </details>

# %% id="ch11-21"
class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.ln(x))))


class Net(nn.Module):
    def __init__(self, blocks=4, recompute=False):
        super().__init__()
        torch.manual_seed(0)
        self.blocks, self.recompute = nn.ModuleList(Block(WIDTH) for _ in range(blocks)), recompute

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.recompute else b(x)
        return x


x = torch.randn(BATCH, WIDTH)
plain, ckpt = (measure_activations(Net(recompute=r), x)["activation_bytes"] for r in (False, True))
print(f"activations kept for backward, batch {BATCH}: {plain:,} B without checkpointing, {ckpt:,} B with")
print(f"    with == one input per block (4 x {BATCH} x {WIDTH} x 4 B): {ckpt == 4 * BATCH * WIDTH * 4}")


def stage3_net(recompute):
    engine = zerolab.initialize(Net(recompute=recompute), config(3, "fp32", optimizer=SGD))
    g = torch.Generator().manual_seed(0)
    data = [tuple(torch.randn(BATCH, WIDTH, generator=g) for _ in "xy") for _ in range(2)]
    mark = engine.ledger.mark()
    train_engine(engine, data, mse_loss)
    moved = sum(r.wire_bytes for r in engine.ledger.since(mark).records if r.tag.startswith(("params", "grads")))
    return engine.full_params(), moved, engine.memory()["model_states"]


(p0, w0, m0), (p1, w1, m1) = crew.run(stage3_net, False)[0], crew.run(stage3_net, True)[0]
same = all(torch.equal(p0[k], p1[k]) for k in p0)
print(f"ZeRO-3 on {N} ranks, 2 steps, with and without checkpointing:")
print(f"    the same model states per rank: {m0 == m1}, the same parameter and gradient traffic: {w0 == w1},")
print(f"    bit-identical weights: {same}")

# %% [markdown] id="ch11-22"
# ## Q13. What do ZeRO-Offload and ZeRO-Infinity do, and what do they cost?
#
# *Try first:* with the optimizer offloaded, what is left on the GPU, and what crosses PCIe?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# **ZeRO-Offload** (`offload_optimizer.device: "cpu"`, stages 1-3) keeps the fp32
# master weights and Adam's moments in host memory and runs the optimizer step **on the CPU**
# (DeepSpeed's vectorised CPUAdam). Each step the reduced gradients go down and the updated 16-bit
# parameters come back up. DeepSpeed converts the gradients to fp32 on the GPU before the copy
# (chapter 10b), so that is 4Ψ + 2Ψ bytes over PCIe, not the ZeRO-Offload paper's 2Ψ + 2Ψ, split
# over the ranks. With stage 2 the GPU
# keeps only the 2-byte parameters, 2Ψ. **ZeRO-3 offload** adds `offload_param` (stage 3 only):
# the parameter shards live on the host too, and the GPU needs about one gathered layer at a time.
# **ZeRO-Infinity** extends both to **NVMe** (`device: "nvme"`, stage 3), with the host as a
# staging buffer. The cost is time: PCIe (about 25 GB/s per direction for PCIe 4.0 x16) and the
# CPU's Adam are far slower than the GPU, so offload is for fitting a model that does not fit
# otherwise.
#
# zerolab runs offload too (chapter 5 measures it, chapter 9 trains with it): the first lines
# below check the answer's bytes on 4 real ranks. DeepSpeed's estimators (reproduced in
# `zerolab.tools.estimate`, same signatures) give the bytes for sizes no laptop holds, with L the
# largest layer's parameters and a 1.5× host buffer factor. *On a GPU cluster* DeepSpeed copies
# through pinned host buffers and steps with its vectorised CPUAdam; here the "device" is the CPU
# too, so only the bytes, not the times, carry over.
#
# </details>

# %% id="ch11-23"
def offloaded():
    engine = zerolab.initialize(make_model(), config(2, offload_optimizer={"device": "cpu"}))
    train_engine(engine, regression_batches(1, BATCH, d_in=WIDTH, d_out=WIDTH), mse_loss)
    return engine.memory(), engine.memory("host"), len(engine.stage.groups)


dev, host, groups = crew.run(offloaded)[0]
print(f"stage 2 + offload_optimizer cpu on {N} ranks, rank 0: device params {dev['params']:,} B == 2Ψ: "
      f"{dev['params'] == 2 * PSI};")
print(f"    device grads {dev['grads']} B, optimizer states {dev['optimizer_states']} B; host: fp32 master "
      f"+ moments + fp32 gradient")
print(f"    shard {host['model_states']:,} B == 16Ψ/N + 4 B per step counter: "
      f"{host['model_states'] == 16 * PSI // N + 4 * groups}")
GIB = 2 ** 30
rows = estimate.zero3_rows(2851e6, 32e6, num_gpus_per_node=8)       # DeepSpeed's t5-3b example
got = [(round(r["cpu_bytes"] / GIB, 2), round(r["gpu_bytes"] / GIB, 2)) for r in rows]
docs = [(71.69, 0.12), (127.45, 0.12), (63.72, 0.78), (127.45, 0.78), (1.43, 6.09), (127.45, 6.09)]
print(f"ZeRO-3 estimator, t5-3b on 8 GPUs == DeepSpeed's published table (GiB): {got == docs}")

psi, L, n = 7e9, 32000 * 4096, 8                  # a 7B model, largest layer a 32k x 4096 embedding
cpu, gpu = estimate.estimate_zero2_model_states_mem_needs(psi, n, 1, cpu_offload=True)
print(f"7B, ZeRO-2 + offload_optimizer, 8 GPUs: GPU {gpu / 1e9:.0f} GB == 2Ψ: {gpu == 2 * psi};")
print(f"    host {cpu / 1e9:.0f} GB == Ψ max(4N, 16) x 1.5: {cpu == psi * max(4 * n, 16) * 1.5}")
cpu, gpu, _ = estimate.estimate_zero3_model_states_mem_needs(psi, L, n, 1, cpu_offload=True,
                                                            cpu_offload_params=True)
print(f"7B, ZeRO-3 + offload_param + offload_optimizer: GPU {gpu / 1e9:.2f} GB == 4L: {gpu == 4 * L};")
print(f"    host {cpu / 1e9:.0f} GB == 18Ψ x 1.5: {cpu == 18 * psi * 1.5}")
print(f"PCIe per step with the optimizer offloaded: 4Ψ down (fp32) + 2Ψ up = {6 * psi / 1e9:.0f} GB in all,")
print(f"    {6 * psi / n / 1e9:.2f} GB per GPU: {6 * psi / n / 25e9:.2f} s at 25 GB/s")

# %% [markdown] id="ch11-24"
# ## Q14. Will a 7B model train on 8 GPUs of 80 GB? A 70B model?
#
# **Predict, then run.** At 16 bytes per parameter, which stages fit a 7B model on 8 GPUs of
# 80 GB, and how many GPUs does a 70B model need at stage 3?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# Model states first. 7B: 16Ψ = 112 GB, so DDP does not fit on an 80 GB GPU; stage 1
# needs 4Ψ + 12Ψ/8 = 38.5 GB, stage 2 26.25 GB, stage 3 14 GB per GPU: all fit, leaving room for
# activations. 70B: 16Ψ = 1,120 GB in all; even stage 3 needs 16Ψ/N ≤ 80 GB, so N ≥ 14 before any
# activation; DeepSpeed's estimator (18Ψ/N + 4L, it also counts an fp32 gradient partition) puts
# it at 16 GPUs with nothing left over, so say 32 GPUs, or offload the optimizer (Q13). Then add
# **activations** (with checkpointing, about 2·seq·batch·hidden bytes per layer plus one layer in
# full), the gradient buckets, stage 3's gathered layers and fragmentation. Then check the host
# RAM if you offload.
#
# </details>

# %% id="ch11-25"
CAP = simulate.GPUS["a100-80gb"][0]              # 80 GB = 80e9 bytes
for name, psi, L in (("7B", 7e9, 32000 * 4096), ("70B", 70e9, 32000 * 8192)):
    per_stage = [model_state_bytes(psi, s, 8)["total"] for s in range(4)]
    print(f"{name} on 8 GPUs, model states per GPU (the paper's formulas; 'no': more than 80 GB):")
    print("    " + ", ".join(f"stage {s} {b / 1e9:g} GB{'' if b <= CAP else ' (no)'}"
                            for s, b in enumerate(per_stage)))
    _, ds3, _ = estimate.estimate_zero3_model_states_mem_needs(psi, L, 8, 1, cpu_offload=False,
                                                              cpu_offload_params=False)
    need = next(n for n in range(1, 1024) if 16 * psi / n <= CAP)
    ds_need = next(n for n in range(1, 1024)     # its GPU bytes depend on the total GPU count only
                   if estimate.estimate_zero3_model_states_mem_needs(psi, L, n, 1, cpu_offload=False,
                                                                    cpu_offload_params=False)[1] <= CAP)
    print(f"    DeepSpeed's ZeRO-3 estimator on 8 GPUs: {ds3 / 1e9:.1f} GB per GPU")
    print(f"    GPUs needed for stage 3's states: {need} by the paper, {ds_need} by DeepSpeed's estimator")
e = simulate.simulate(7e9, layers=32, hidden=4096, seq=4096, micro_batch=1, gpus=8, stage=3)
act, total = e.gpu_bytes["activations"], e.gpu_bytes["total"]
print(f"7B, stage 3 on 8, seq 4096, micro-batch 1, checkpointing (zerolab.tools.simulate):")
print(f"    activations {act / 1e9:.1f} GB, total {total / 1e9:.1f} GB per GPU: fits in 80 GB: {e.fits}")

# %% [markdown] id="ch11-26"
# ## Q15. What is the α-β model of communication, and what does it tell you to do?
#
# **Predict, then run.** 64 all-reduces of 16 KiB, or 1 all-reduce of 1 MiB (the same bytes):
# which takes longer on this machine? Why do frameworks pack gradients into buckets?
#
# <details><summary><b>The answer</b> (open it once you have written yours and run the check)</summary>
#
# A collective moving S bytes (per rank, on the wire) takes T(S) ≈ α + S/β: α is the
# fixed cost of a call (latency: launch, synchronisation, hops), β the bandwidth. n calls moving S
# bytes in all cost n·α + S/β. Below α·β bytes a call is all latency, so many small tensors
# waste time: **bucket** them (DeepSpeed's `reduce_bucket_size`, DDP's `bucket_cap_mb`), and
# **overlap** the calls with backward (`overlap_comm`). Looking inside a ring all-reduce of a
# tensor of B bytes on N ranks, with α and β now per ring step: 2(N−1)·α + 2(N−1)/N·B/β. The
# latency term grows with N, the bandwidth term hardly does. We fit it on 2 ranks of this machine
# (times differ from machine to machine and from run to run: they are printed, never judged;
# chapter 6 draws the fit).
#
# </details>

# %% id="ch11-27"
crew.close()                       # four ranks on two cores are too noisy to time
pair = zerolab.Crew(2, threads=1)
SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20]
rounds = [pair.run(bench.measure, SIZES, 5, ("all_reduce",))[0] for _ in range(3)]
# [op, wire bytes, seconds]: a busy machine only ever adds time, so keep each size's fastest round
rows = [[op, s, min(r[i][2] for r in rounds)] for i, (op, s, _) in enumerate(rounds[0])]
fit = bench.fit(rows, 2, "gloo")
t = {int(s): sec for _, s, sec in rows}
print(f"1 all-reduce of 1 KiB: {t[1 << 10] * 1e3:.3f} ms; of 1 MiB (1,024x the bytes): "
      f"{t[1 << 20] * 1e3:.3f} ms")
print(f"64 all-reduces of 16 KiB: {64 * t[16 << 10] * 1e3:.2f} ms; 1 of 1 MiB, the same bytes: "
      f"{t[1 << 20] * 1e3:.2f} ms")
alpha = fit.ops["all_reduce"]["alpha_s"]
print(f"the fit: alpha = {alpha * 1e3:.3f} ms a call, so 64 calls pay {64 * alpha * 1e3:.2f} ms of latency "
      f"where 1 pays {alpha * 1e3:.3f} ms")
pair.close()

# %% [markdown] id="ch11-28"
# ## Two more to practise
#
# On your own, each answerable by changing a number above and re-running:
#
# - Run `crew.run(measured_step, 2, use_multi_rank_bucket_allreduce=False)[0]` and read it as Q4's
#   last lines do: which collective does DeepSpeed issue for each bucket now, and how many Ψ?
# - In Q5, run stage 3 with 4 micro-steps: how many Ψ per optimizer step, and why 12?
