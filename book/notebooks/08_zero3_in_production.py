# %% [markdown] id="ch08-00"
# # Chapter 8 · ZeRO-3 in production (1): the knobs
#
# *The real move: a checklist from a crew that did it before, tried on a small house first.*
#
# The crew has learned every trick: split the notebooks (stage 1), the door stickers (stage 2), the
# furniture itself (stage 3), fetch each room's furniture only while working in it, keep the heavy
# notebooks in the warehouse (offload). Now the captain is handed a **checklist from another crew**,
# the config they say they used to move a 7-billion-parameter household with 8 workers. Before
# trusting it with the real move, the captain tries its knobs on a small house, one at a time, and
# writes down what each one changes.
#
# | in the story | in training | the key |
# |---|---|---|
# | small items nobody bothers to pack away | **persistent** parameters: kept whole on every rank | `stage3_param_persistence_threshold` |
# | fetching the next room's furniture before you need it | **prefetch**: all-gathers issued ahead of use, from the recorded order | `stage3_prefetch_bucket_size` |
# | how much furniture may stand in the hall at once | the **live-parameter** budget for prefetch | `stage3_max_live_parameters` |
# | "don't carry it back if you need it again soon" | **reuse distance** | `stage3_max_reuse_distance` |
# | doing the paperwork one folder at a time | the optimizer step **tiled** into sub-groups | `sub_group_size` |
#
# The checklist (a production ZeRO-3 config for Llama-2-7B on 8 GPUs, as published, comments
# translated; stored key for key as `configs/seed002_zero3_offload.json`):
#
# ```python
# ds_config = {
#     "zero_optimization": {
#         "stage": 3,
#         "overlap_comm": True,
#         "contiguous_gradients": True,
#         "reduce_bucket_size": 5e8,                   # gradient reduction bucket size
#         "stage3_prefetch_bucket_size": 5e8,          # parameter prefetch bucket size
#         "stage3_param_persistence_threshold": 1e5,   # small parameters are not partitioned
#         "stage3_max_live_parameters": 1e9,           # most parameters on the GPU at once
#         "stage3_max_reuse_distance": 1e9,            # parameter reuse distance
#         "offload_optimizer": {"device": "cpu", "pin_memory": True},   # CPU offload (optional)
#         "offload_param": {"device": "cpu", "pin_memory": True},
#         # communication optimisation
#         "sub_group_size": 1e8,
#         "round_robin_gradients": True,
#     },
#     "gradient_accumulation_steps": 4,
#     "train_batch_size": 128,
#     "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
# }
# ```
#
# **What we measure here**, on 2 ranks: what persistence, prefetch, the live-parameter budget, the
# reuse distance and `sub_group_size` change (all-gather calls, bytes, groups gathered ahead, peak
# gathered elements) and what they leave alone (every number the model computes). Every rule is
# DeepSpeed 0.19.8's, with the file it lives in. **Part 2** (`08b_the_launch.ipynb`) reads every
# key of the checklist beside DeepSpeed's real defaults, checks its tuning table and launches it.

# %% id="ch08-01"
import json
import statistics
from pathlib import Path

import matplotlib.pyplot as plt

import zerolab
from zerolab.course.knobs import LAYERS, PSI, WIDTH, llama2_7b_order, measure_all, replay, same_params

ROOT = Path(zerolab.__file__).resolve().parents[1]
seed = json.loads((ROOT / "configs" / "seed002_zero3_offload.json").read_text())    # the checklist
crew = zerolab.Crew(2, threads=1)          # two ranks for the whole chapter (gloo, on this CPU)
N = crew.world_size
print(f"{N} ranks started; the house: {LAYERS} x Linear({WIDTH}, {WIDTH}), psi = {PSI:,}")

# %% [markdown] id="ch08-02"
# ## 1. The checklist on a small house
#
# Our house: an MLP of 8 `Linear(64, 64)` layers, so 8 weights of 4,096 elements and 8 biases of
# 64 (Ψ = 33,280 parameters), on 2 ranks. `zerolab.course.knobs.measure` trains a few steps on each rank
# and reads the **last** step (by then the order of the modules has been recorded and prefetch is
# on): the parameter gathers (each parameter's partition gathered for a module, and the
# persistent ones refreshed after the step), the all-gather calls that carried them (`params ...`
# in `engine.ledger.records`) and their bytes; from `engine.stage3_stats()`, the partitions gathered
# ahead of use (prefetched) and the most parameter elements gathered or in flight at once. Stage 3
# partitions **each parameter** on its own, as DeepSpeed does (its `ds_tensor`): a weight and a
# bias are two partitions, each padded to a multiple of N, each persistent or not. (zerolab also sends 16-byte order checks of its own at
# stage 3, so that ranks on different paths raise an error instead of hanging; DeepSpeed sends
# none. The ledger files them apart, in `engine.ledger.checks`, and no number here counts them.)
#
# **Predict, then run.** The checklist, unchanged (plus an Adam optimizer, which it leaves to the
# script), on this MLP: how many parameter all-gathers will forward and backward make per step?
# How many bytes of parameters will each rank hold? Write your guess down.

# %% id="ch08-03"
c = crew.run(measure_all, {"checklist": {"config": seed, "steps": 2}})[0]["checklist"]
print(f"the checklist on {N} ranks, one step (4 micro-batches):")
print(f"  persistent parameters: {len(c['persistent'])} of {2 * LAYERS} ({sum(c['persistent']):,} elements)")
refresh = sum("(persistent)" in t for t in c["order"])
print(f"  parameter all-gathers in forward and backward: {c['gathers'] - refresh}; "
      f"after the step: {refresh}, one per parameter")
print(f"    ({c['gathered_bytes']:,} bytes: the whole model in fp16, 2 x {PSI:,})")
print(f"  collectives: {', '.join(f'{op} {t}' for op, t in c['ops'])}")
print(f"  gradient reduce-scatters: {c['grad_calls']} (one per micro-batch: a single bucket)")
print(f"  parameter bytes per rank: {c['param_bytes']:,} = the whole fp16 model: "
      f"{c['param_bytes'] == 2 * PSI}")

# %% [markdown] id="ch08-04"
# **None.** Every parameter of this model has at most 10⁵ elements, so under the checklist's (and
# DeepSpeed's default) persistence threshold every one of them is persistent: kept whole in fp16
# on every rank, never gathered in forward or backward, and all-gathered after each step so that
# every rank's copy takes the update: **one call per parameter**, 16 calls (DeepSpeed's
# `_post_step` gathers its persistent parameters one by one). On a
# small model "ZeRO-3" with default settings behaves like stage 2 for its parameters: the
# threshold is sized for 7B models, where only the LayerNorm/RMSNorm weights (4,096 elements) fall
# under it. The optimizer states (in host memory here, with `offload_optimizer`) and the gradients
# stay sharded. With `gradient_accumulation_steps` 4, the gradients are reduce-scattered after each
# of the 4 micro-batches, a stage-2/3 habit (chapter 6): one call per `reduce_bucket_size` bucket
# of modules, and the checklist's 5·10⁸ holds this whole model in one. The two all-reduces are
# DeepSpeed's small ones at stage 3 (`zerolab/zero/norms.py`): with fp16, a 1-byte overflow flag
# (`overflow`), then the gradient norm as one sum (`grad`): 4 bytes of fp32 here, with
# `offload_optimizer` (DeepSpeed's offload path); 8 bytes of fp64 without it.
#
# ## 2. Persistence: which parameters never travel
#
# From here on every run sets `stage3_max_reuse_distance` to 0 (`measure`'s default); section 5
# measures DeepSpeed's default, which on a model this small changes a lot. In this section and in
# section 5 prefetch is off as well (`stage3_prefetch_bucket_size` 0): only then does DeepSpeed
# release each module right after each use and gather it again for backward, the paper's
# schedule, so that each knob shows alone. (With prefetch on, DeepSpeed keeps what its prefetcher
# has looked at, even at reuse distance 0: section 3.)
#
# **Predict, then run.** With `stage3_param_persistence_threshold` at 0, 64, 4,096 and 10⁵ (and
# 10⁵ with `stage3_model_persistence_threshold` 8,192, a cap on the *total* persistent elements):
# which parameters are persistent, and how many parameter all-gathers does a step make, and how
# many bytes? (The rule,
# DeepSpeed's `mark_persistent_parameters` in `parameter_offload.py`, is per parameter: persistent
# when its `numel <= threshold`; the cap is filled in the model's order.)

# %% id="ch08-05"
PERSIST = {"0": {"stage3_param_persistence_threshold": 0},
           "64": {"stage3_param_persistence_threshold": 64},
           "4,096": {"stage3_param_persistence_threshold": 4096},
           "1e5": {"stage3_param_persistence_threshold": 100_000},
           "1e5, cap 8,192": {"stage3_param_persistence_threshold": 100_000,
                              "stage3_model_persistence_threshold": 8192}}
persist = crew.run(measure_all, {k: {"zero": {**z, "stage3_prefetch_bucket_size": 0}}
                                 for k, z in PERSIST.items()})[0]
print(f"{'threshold':<16}{'persistent':>11}{'elements':>9}{'gathers':>8}{'bytes gathered':>15}"
      f"{'param bytes/rank':>17}")
for name, r in persist.items():
    print(f"{name:<16}{len(r['persistent']):>11}{sum(r['persistent']):>9,}{r['gathers']:>8}"
          f"{r['gathered_bytes']:>15,}{r['param_bytes']:>17,}")
print("trained parameters bit-identical in all five runs:", same_params(persist))

# %% [markdown] id="ch08-06"
# - **0**: nothing persistent; each of the 16 parameters is gathered in forward and again in
#   backward, 32 gathers (a module's weight and bias travel in one call: 16 calls), 266,240 bytes
#   (Ψ in fp32, twice: the "3Ψ" of stage 3 is these 2Ψ plus the reduce-scatter); each rank holds
#   half the model, 66,560 bytes.
# - **64**: the 8 biases persistent. 16 weight gathers, plus the 8 biases all-gathered after the
#   step, **one call each** (DeepSpeed's `_post_step`): 24. Each rank holds its half of the
#   weights plus all the biases, 1,024 bytes more.
# - **4,096 and 10⁵**: everything persistent: 16 all-gathers per step, one per parameter, all
#   after the step, of the whole model once (133,120 bytes), and each rank holds the whole model.
# - **The cap** (8,192 elements): filled in the model's order, the first weight and all 8 biases
#   fit (4,096 + 512), the second weight does not: 9 persistent, 7 weights gathered twice.
#
# The trade-off is memory against calls: persistence saves the many small gathers (each costs α,
# chapter 6) and costs memory on every rank. In a 7B model the parameters under 10⁵ elements are
# the norm weights, about 0.004% of the model: gathering them 2 × 65 times a step would cost far
# more in latency than keeping them costs in memory (and their refresh after the step is still 65
# small calls).
#
# ## 3. Prefetch: gathering ahead, from the recorded order
#
# In the first step DeepSpeed (and zerolab with it) records the order in which the modules gather
# their parameters. From the second step on, DeepSpeed's rule (`fetch_sub_module` in
# `partitioned_param_coordinator.py`): at **every module's fetch**, the modules without
# parameters of their own included (here the root `MLP`), it issues one asynchronous all-gather
# of the next parameters in the recorded order that are not gathered or in flight yet: it pops
# entries off the trace's queue (each entry a parameter and the fetch that uses it, forward and
# backward) while fewer than
#
#     min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size)
#
# elements are taken, where *available* counts what is gathered or in flight (the parameter that
# crosses the limit is taken too). A module that needs a parameter then waits for it instead of
# gathering it.
#
# One more line of that loop matters for the bytes. Every entry the prefetcher pops, taken or
# skipped because it is gathered already, is marked **fetched for** that later use
# (`__most_recent_step_id_param_fetched_for`), and the release rule (`__params_to_release`) does
# not release a parameter marked for a use still to come: "don't release params whose reuse was
# skipped by prefetch". So a prefetcher that looks as far as a weight's backward use keeps that
# weight gathered after its forward, **even at `stage3_max_reuse_distance` 0**.
#
# **Predict, then run.** Biases persistent (threshold 64), weights of 4,096 elements,
# `stage3_max_live_parameters` at its 10⁹, reuse distance 0. With `stage3_prefetch_bucket_size`
# at 0 (off), 4,096 (one weight), 8,192 (two), 16,384 (four) and DeepSpeed's 5·10⁷: how many
# weight gathers and all-gather calls per step, and how many bytes? Does the backward gather the
# weights again? How many elements gathered or in flight at once, at most?

# %% id="ch08-07"
WINDOWS = [0, 4096, 8192, 16384, 50_000_000]
prefetch = crew.run(measure_all, {w: {"zero": {"stage3_param_persistence_threshold": 64,
                                               "stage3_prefetch_bucket_size": w}, "steps": 7}
                                  for w in WINDOWS})[0]
print(f"{'prefetch_bucket_size':>20}{'weight gathers':>15}{'all-gather calls':>17}{'bytes gathered':>15}"
      f"{'prefetched':>11}{'peak elements':>14}")
for w, r in prefetch.items():                 # (gathers, less the 8 biases' refresh after the step)
    print(f"{w:>20,}{r['gathers'] - LAYERS:>15}{r['calls']:>17}{r['gathered_bytes']:>15,}"
          f"{r['prefetched']:>11}{r['peak']:>14,}")
print(f"bytes: off {prefetch[0]['gathered_bytes']:,} (every weight twice), "
      f"5e7 {prefetch[50_000_000]['gathered_bytes']:,} (every weight once)")
print("trained parameters bit-identical in every run:", same_params(prefetch))
print(f"apart, zerolab's own order checks (ledger.checks; DeepSpeed sends none): "
      f"{prefetch[0]['checks']} per step off, {prefetch[50_000_000]['checks']} at 5e7")

# %% [markdown] id="ch08-08"
# - **In DeepSpeed prefetch changes the bytes, not only the calls**, at reuse distance 0. Off, 16
#   weight gathers: each weight in forward and again in backward (264,192 bytes with the biases'
#   refresh). At 5·10⁷ the root's fetch pops the whole trace, forward and backward: it takes the
#   8 weights in **one** call and marks each one fetched for its backward use, so none is released
#   after its forward and the backward gathers nothing: 8 weight gathers, 9 calls with the 8
#   persistent refreshes, 133,120 bytes, half. At 4,096 each top-up pops one entry; only at the
#   turn does it reach a weight's backward use (the last layer's), which therefore stays: 15
#   weight gathers. 8,192 and 16,384 pop further and keep more (11 and 9).
# - The calls: the parameters one top-up takes travel in one call (DeepSpeed's coalesced
#   all-gather), each copied out of it when its module needs it.
# - **The peak: the prefetch bucket bounds one top-up, not what is gathered.** What the marks keep
#   stays gathered until its backward use: from 8,192 on the whole model (32,768 elements) is
#   gathered at the turn. Only `stage3_max_live_parameters` (10⁹ here) bounds what prefetch adds
#   (section 4); with the whole model prefetched, stage 3 holds for a moment what stage 2 always
#   holds.
# - Without prefetch at reuse distance 0, the backward gathers every weight again: the paper's
#   3Ψ. It is what `zerolab compare` shows beside real DeepSpeed in part 2.
#
# On GPUs the point of prefetch is **time**: the next module's all-gather runs on its own stream
# while this module computes. On this CPU the gathers are cheap and the cores shared, so what shows
# is mostly the saved calls. The step times, for what they are worth here:

# %% id="ch08-09"
fig, ax = plt.subplots(figsize=(7.5, 3.4))
for i, r in enumerate(prefetch.values()):
    ms = [s * 1e3 for s in r["seconds"]]
    ax.plot([i] * len(ms), ms, "o", alpha=0.5, color="C0")
    ax.plot([i - 0.2, i + 0.2], [statistics.median(ms)] * 2, "-", color="C1", lw=2)
ax.set_xticks(range(len(WINDOWS)), [f"{w:,}" for w in WINDOWS])
ax.set(xlabel="stage3_prefetch_bucket_size (elements)", ylabel="step time on rank 0 (ms)", ylim=(0, None),
       title="Step time by prefetch bucket size (dots: 6 steps, bar: median); a noisy 2-core CPU")
fig.tight_layout()
plt.show()

# %% [markdown] id="ch08-10"
# ## 4. The live-parameter budget is not a cap
#
# **Predict, then run.** Prefetch at DeepSpeed's default `stage3_prefetch_bucket_size` (5·10⁷),
# biases persistent, and `stage3_max_live_parameters` at 0, 1,000, 4,096, 6,144, 16,384 and 10⁹.
# 1,000 is below the size of a single weight (4,096): what is the peak, and is anything prefetched?
# And at 6,144, one and a half weights?

# %% id="ch08-11"
LIVES = [0, 1000, 4096, 6144, 16384, 1_000_000_000]
live = crew.run(measure_all, {m: {"zero": {"stage3_param_persistence_threshold": 64,
                                           "stage3_max_live_parameters": m}} for m in LIVES})[0]
print(f"{'max_live_parameters':>20}{'peak elements':>14}{'prefetched':>11}{'all-gather calls':>17}")
for m, r in live.items():
    print(f"{m:>20,}{r['peak']:>14,}{r['prefetched']:>11}{r['calls']:>17}")
print(f"at max_live 1,000 the peak is {live[1000]['peak']:,} elements, above the 'cap': "
      f"{live[1000]['peak'] > 1000}")
print(f"peak at most max_live + one weight (the group that crosses the budget) in every run: "
      f"{all(r['peak'] <= m + 4096 for m, r in live.items())}")

# %% [markdown] id="ch08-12"
# Two things make the budget less than a cap, both DeepSpeed's rule. A module's own parameters
# are always gathered, whatever the budget: fetching the current module is never blocked, only
# prefetch. And a top-up takes parameters while the allowance `max_live − available` is not yet
# used up, **the one that crosses it included**: when nothing is gathered (available 0), any
# budget above 0, even 1,000, prefetches a whole weight (twice a step here); at 6,144 the top-ups
# take two weights where one and a half were allowed. Only a budget of 0 switches prefetch off
# entirely. So the most a rank holds gathered or in flight is below budget + the largest
# parameter (or the one module it needs, if that is larger), plus whatever reuse and the
# prefetcher's marks keep (section 3, next section): with the checklist's 10⁹ on a 7B model in
# fp16, about 2 GB of gathered parameters per GPU, on top of the 1.75 GB shard. The calls fall
# with the budget's reach for the same reason as in section 3: a top-up that pops a weight's
# backward use keeps it gathered (24 calls at 0 and 1,000, 9 at 10⁹).
#
# ## 5. Reuse distance: don't carry it back if you need it again soon
#
# When a module's forward ends, each of its parameters is a candidate for release. DeepSpeed's rule
# (`partitioned_param_coordinator.py`, `__params_to_release`), which zerolab follows: walk the
# recorded order forward from the next use, through the rest of the forward *and the backward that
# follows*, adding up the elements of the modules passed, until `stage3_max_reuse_distance`
# elements have been passed; a candidate met on the way **stays gathered**. The obvious winners:
# the last modules of forward are the first of backward. Only a pass that follows a recorded
# order keeps anything (step 1 records), and the end of backward releases everything: the
# optimizer step is about to change the shards.
#
# **Predict, then run.** Biases persistent, prefetch off (so that only the reuse distance keeps
# anything), the distance at 0, 4,096, 16,384 and DeepSpeed's 10⁹ (more than this whole model):
# gathers, bytes and peak per step?

# %% id="ch08-13"
DISTANCES = [0, 4096, 16384, 10 ** 9]
reuse = crew.run(measure_all, {d: {"zero": {"stage3_param_persistence_threshold": 64,
                                            "stage3_prefetch_bucket_size": 0,
                                            "stage3_max_reuse_distance": d}} for d in DISTANCES})[0]
print(f"{'max_reuse_distance':>19}{'gathers':>8}{'bytes gathered':>15}{'peak elements':>14}")
for d, r in reuse.items():
    print(f"{d:>19,}{r['gathers']:>8}{r['gathered_bytes']:>15,}{r['peak']:>14,}")
print("trained parameters bit-identical in every run:", same_params(reuse))

# %% [markdown] id="ch08-14"
# The same rule, **replayed** (`zerolab.course.knobs.replay`) on the order recorded at distance 0 (the
# parameter all-gathers of one step, prefetch off): a computation beside the measurement, which it
# must match.

# %% id="ch08-15"
order = [t.split()[1] for t in prefetch[0]["order"] if "(persistent)" not in t]     # the weights
print(f"the recorded order ({len(order)} gathers): {' '.join(t.split('.')[1] for t in order)}  (layer numbers)")
print(f"{'max_reuse_distance':>19}{'gathers':>8}{'peak elements':>14}{'as measured':>12}")
for d in DISTANCES:
    g, p, _ = replay(order, {t: WIDTH * WIDTH for t in order}, d)
    measured = (reuse[d]["gathers"] - LAYERS, reuse[d]["peak"])   # (less the 8 biases' refresh)
    print(f"{d:>19,}{g:>8}{p:>14,}{str((g, p) == measured):>12}")

# %% [markdown] id="ch08-16"
# Distance 0 releases every module after each use: 16 weight gathers (24 with the biases'
# refresh), one weight at a time, and the "3Ψ" of stage 3. 4,096 keeps the last layer across the
# turn from forward to backward (15 weight gathers). The checklist's 10⁹, larger than this whole
# model, keeps **everything** gathered from its first use to its last: 8 weight gathers, half the
# bytes (stage 3 then moves 2Ψ: Ψ gathered, Ψ reduce-scattered), and the whole model gathered at
# once. This is what DeepSpeed does by default on a small model (and, section 3, what its default
# prefetch does even at distance 0). On a large one?
#
# **Predict, then run.** Llama-2-7B (hidden 4,096, MLP 11,008, 32 layers, vocabulary 32,000; each
# `Linear` and the embedding a module, the norm weights persistent): 226 modules, 452 gathers per
# step at distance 0. How many does the checklist's 10⁹ save?

# %% id="ch08-17"
llama, size = llama2_7b_order()            # forward, then backward in reverse
total = sum(size.values())
print(f"Llama-2-7B: {total:,} elements in gathered modules, {len(size)} modules")
print(f"{'max_reuse_distance':>19}{'gathers':>8}{'skipped':>8}{'elements gathered':>18}"
      f"{'of 2 x total':>13}{'peak (fp16 GB)':>16}")
for d in (0, 5 * 10 ** 7, 10 ** 9):
    g, p, moved = replay(llama, size, d)
    print(f"{d:>19,}{g:>8}{2 * len(size) - g:>8}{moved:>18,}{moved / (2 * total):>13.3f}"
          f"{2 * p / 1e9:>16.2f}")

# %% [markdown] id="ch08-18"
# With the checklist's 10⁹, DeepSpeed skips re-gathering the 13 modules at the end of forward
# whose next use (in backward) comes within 10⁹ elements, about the last two layers and the output
# head: under 4% of the step's parameter all-gathers, paid for with a peak of gathered
# parameters of about half a billion elements (1 GB in fp16) at the turn. (A replay of the rule on
# a simplified order, the norms left out, prefetch left out: a prefetcher that pops a module's
# backward use keeps it too, section 3; not a measurement of DeepSpeed.) Note that
# `stage3_max_live_parameters` does **not** limit this retention, in DeepSpeed or in zerolab; it
# only limits prefetch.
#
# ## 6. Two keys filed under "communication": `sub_group_size` and `round_robin_gradients`
#
# The checklist files these two under "communication optimisation". **Predict, then run.** Stage 3
# with `offload_optimizer` on the CPU, `sub_group_size` 10⁸ (the checklist's) against 4,096, then
# `round_robin_gradients` true: will the ledger change? The trained numbers?

# %% id="ch08-19"
OFF = {"stage3_param_persistence_threshold": 64, "offload_optimizer": {"device": "cpu"}}
tiles = crew.run(measure_all, {
    "sub_group_size 1e8": {"zero": {**OFF, "sub_group_size": 10 ** 8}},
    "sub_group_size 4,096": {"zero": {**OFF, "sub_group_size": 4096}},
    "round_robin true": {"zero": {**OFF, "sub_group_size": 10 ** 8, "round_robin_gradients": True}},
})[0]
KEY = ("gathers", "calls", "ops", "gathered_bytes")
base = tiles["sub_group_size 1e8"]
print(f"{'':<22}{'host-step bars':>15}{'collectives as the first run':>30}")
for name, r in tiles.items():
    print(f"{name:<22}{r['host_steps']:>15}{str([r[k] for k in KEY] == [base[k] for k in KEY]):>30}")
print("trained parameters bit-identical in all three runs:", same_params(tiles))
print(f"rank 0's shard: {PSI // N:,} elements in 16 parameter shards of 2,048 (weights) and 32 (biases)")

# %% [markdown] id="ch08-20"
# Neither key sends anything. `sub_group_size` changes only how the host optimizer step is cut
# (1 sub-group, or 8 at 4,096: the host-step bars on the timeline; zerolab closes a sub-group
# before it would pass 4,096 elements, so each weight shard and its bias make one, where
# DeepSpeed's `_create_fp16_sub_groups` closes one once it reaches the size, the parameter that
# crosses included, which would make 5 here), which
# bounds the memory the step works in, the fp32 copies, Adam moments and gradients of one tile at
# a time, in host memory or streamed from NVMe. `round_robin_gradients` is read by DeepSpeed only
# at stages 1 and 2 (`stage_1_and_2.py`); its stage 3 never reads it. zerolab accepts it everywhere
# and changes nothing (it decides only which rank owns which gradient, never a number).
#
# ## What we measured

# %% id="ch08-21"
pt, pf = persist, prefetch
print(f"checklist   the {PSI:,}-parameter MLP all persistent: "
      f"{c['gathers'] - refresh} gathers in forward/backward,")
print(f"            {refresh} after the step (one per parameter)")
print(f"persistence gathers per step at threshold 0 / 64 / 4,096: {pt['0']['gathers']} / "
      f"{pt['64']['gathers']} / {pt['4,096']['gathers']};")
print(f"            param bytes per rank {pt['0']['param_bytes']:,} / {pt['64']['param_bytes']:,} / "
      f"{pt['4,096']['param_bytes']:,}")
print(f"prefetch    all-gather calls per step {pf[0]['calls']} (off) -> {pf[50_000_000]['calls']} (5e7); "
      f"peak {pf[0]['peak']:,} -> {pf[50_000_000]['peak']:,} elements;")
print(f"            bytes {pf[0]['gathered_bytes']:,} -> {pf[50_000_000]['gathered_bytes']:,} at reuse "
      f"distance 0")
print("            (the prefetcher's marks keep each weight for backward)")
print(f"max_live    a budget of 1,000 still gathers a {live[1000]['peak']:,}-element module;")
print(f"            groups prefetched {live[0]['prefetched']} at 0, {live[1000]['prefetched']} at 1,000, "
      f"{live[10 ** 9]['prefetched']} at 1e9")
print(f"reuse       gathers per step {reuse[0]['gathers']} at 0 -> {reuse[10 ** 9]['gathers']} at 1e9, "
      f"bytes {reuse[0]['gathered_bytes']:,} -> {reuse[10 ** 9]['gathered_bytes']:,};")
print(f"            peak {reuse[0]['peak']:,} -> {reuse[10 ** 9]['peak']:,} elements; DeepSpeed's rule "
      f"replayed gives the same gathers")
print(f"sub_group   host-step bars {tiles['sub_group_size 1e8']['host_steps']} vs "
      f"{tiles['sub_group_size 4,096']['host_steps']}, collectives and parameters unchanged")
print("every knob: trained parameters bit-identical to the run without it")

# %% [markdown] id="ch08-22"
# - **Persistence** trades memory on every rank against many small gathers; the default 10⁵ makes
#   a small model entirely persistent, so that "ZeRO-3" behaves like stage 2 for its parameters
#   (and refreshes them after each step, one all-gather per parameter).
# - **Prefetch** gathers earlier, in fewer all-gather calls, with a higher peak of gathered
#   parameters; and in DeepSpeed it also **changes the bytes**: what the prefetcher has popped is
#   marked fetched for its later use and not released, so at reuse distance 0 with DeepSpeed's
#   default prefetch the backward gathers nothing again (half the bytes here). Without prefetch
#   the backward re-gathers. `stage3_prefetch_bucket_size` bounds one top-up; top-ups repeat at
#   every module's fetch.
# - **`stage3_max_live_parameters`** bounds prefetch, not memory: a module's own gather always
#   happens, and the group that crosses the budget is taken too.
# - **Reuse distance** keeps parameters gathered across the forward-to-backward turn; with
#   DeepSpeed's 10⁹ on a small model, everything (2Ψ instead of 3Ψ, the whole model at once); on
#   Llama-2-7B a few percent of the gathers.
# - `sub_group_size` and `round_robin_gradients` are not communication settings.
# - No knob changes a number the model computes.
#
# ## Questions
#
# 1. In section 3, `stage3_prefetch_bucket_size` 8,192 (two weights) gave 11 weight gathers in
#    14 calls. Walk the trace fetch by fetch (the root, layers 0 to 7, then backward): which
#    entries does each top-up pop, and which backward uses does it mark fetched for? Which
#    weights are therefore gathered only once? Then set `stage3_max_live_parameters` to 8,192 as
#    well and predict the calls and the peak.
# 2. Re-run section 2 with `stage3_model_persistence_threshold` at 4,608. Predict which parameters
#    are persistent first.
# 3. For Llama-2-7B, what `stage3_max_reuse_distance` keeps exactly the last layer's MLP `down`
#    projection across the turn, and nothing more? Check with `replay`.
# 4. On 8 GPUs with the checklist, how many bytes of gathered parameters can a GPU hold at most at
#    the forward-to-backward turn, counting prefetch, the current module and reuse? Which key would
#    you lower first if the GPU ran out of memory there?
#
# **Next:** part 2, `08b_the_launch.ipynb`, reads the checklist line by line beside DeepSpeed's
# defaults and launches it. **Your turn:** in `exercises/08_stage3_knobs.ipynb` you choose
# prefetch, persistence, live-parameter and reuse values to meet three stated goals (all-gather
# calls per step, peak gathered elements, no prefetch with the default
# `stage3_prefetch_bucket_size`), and the check runs your values in the real engine on 2 ranks.
# **Build it:** in `exercises/08c_gather_hooks.ipynb` you write stage 3's gather and release
# yourself, as module hooks, checked inside the engine on a model with shared and external weights.

# %% id="ch08-23"
crew.close()
