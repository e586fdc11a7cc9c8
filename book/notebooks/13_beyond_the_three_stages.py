# %% [markdown] id="ch13-00"
# # Chapter 13 · Beyond the three stages: ZeRO++ on a crew in two buildings
#
# *The stairs are fast, the street is slow: send less down the street, and send it in shorthand.*
#
# The crew has grown out of its building. Half the workers now live across the street: inside a
# building they pass furniture on the stairs, fast; between the buildings everything goes by
# truck, slowly. Stage 3 still works as before (each worker keeps a share of every room's
# furniture, borrows the rest before working on a room, returns it after, and the door stickers
# are pooled at the end of each trip), but now most of that borrowing and pooling crosses the
# street. **ZeRO++** (Wang et al. 2023, *ZeRO++: Extremely Efficient Collective Communication for
# Giant Model Training*; in DeepSpeed since 0.10) is three tricks to load fewer trucks:
#
# | in the story | in training | DeepSpeed 0.19.8's key | in zerolab |
# |---|---|---|---|
# | two buildings, the stairs, the street | **nodes**: NVLink inside, InfiniBand between | (the launcher's nodes) | `Crew(4, nodes=2)`, `ledger.by_link()` |
# | furniture lists in **shorthand**: one number per box, then small integers | **qwZ**: parameter all-gathers as int8 blocks + one fp32 scale each | `zero_quantized_weights` | `gather.py`, `quant.py` |
# | door stickers in an even shorter shorthand, pooled inside the building first | **qgZ**: gradients as int4 through two all-to-alls (inside the node, then across) | `zero_quantized_gradients` | `reduce.py` (`QuantizedReduce`) |
# | a second copy of the furniture in each building | **hpZ**: a secondary parameter shard per node, so backward never gathers across | `zero_hpz_partition_size` | `hpz.py`, `gather.py` |
#
# Whose behaviour: the keys, the block quantizer, when each all-gather is quantized and the two
# all-to-alls are **DeepSpeed 0.19.8's** (`runtime/zero/partition_parameters.py`'s
# `CUDAQuantizer` and `all_gather_coalesced(..., quantize=True)`, `runtime/comm/coalesced_collectives.py`'s
# `all_to_all_quant_reduce`, kernels in `csrc/quantization/`; hpZ's secondary shards in
# `partition_parameters.py`'s `_partition_param_sec`); the byte ratios are the **paper's**;
# the virtual nodes on one machine and the ledger's link column are **zerolab's**. DeepSpeed's
# quantizer kernels are CUDA only, so on this CPU zerolab runs their arithmetic in torch
# (`zerolab/zeropp/quant.py`) and every collective through `torch.distributed` (gloo).
#
# The paper's headline: with all three, what crosses between nodes falls from ZeRO-3's **3M to
# 0.75M** (M the model's bytes in 16 bits), about **4× less cross-node traffic** (qwZ halves the
# forward gather, hpZ keeps the backward gather in the node, qgZ's int4 gradients cut the
# reduce-scatter's 2 bytes to about half a byte). Chapter 14 computes the same ratio for a large
# cluster; on this crew of two small nodes we measure each part of it.
#
# **What we measure:** the bytes each rank sends inside its building and across the street, with
# and without each option, beside the formula; the error each one costs, against its bound; a loss
# curve; and, for a real cluster, what `zerolab simulate` says each option is worth.

# %% id="ch13-01"
import pprint
import textwrap

import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab.tools import simulate
from zerolab.course.chapters import ch13          # this chapter's model, runs and pictures: zerolab/course/chapters/ch13.py
from zerolab.course.chapters.ch13 import config, curves, fetch_bytes, grad_bytes, one_step, param_gather_bytes
from zerolab.crew.topology import current

crew = zerolab.Crew(4, nodes=2)            # 4 ranks as 2 virtual nodes of 2 (gloo, on this CPU)


def where_am_i():
    me = zerolab.rank_info()
    return me.rank, current().node_of(me.rank), me.local_rank


for rank, node, local in crew.run(where_am_i):
    print(f"rank {rank}: building {node}, local rank {local}")

# %% [markdown] id="ch13-02"
# The layout is torchrun's: node *i* holds ranks *i·k … i·k + k − 1* (here k = 2 ranks per node),
# and each rank gets `LOCAL_RANK` and `LOCAL_WORLD_SIZE` as under `torchrun --nnodes 2
# --nproc-per-node 2`. Nothing is slower between our virtual buildings (it is all one CPU); what
# changes is the ledger, which files every collective under **intra** (all its ranks in one node)
# or **inter** (its group spans nodes).
#
# ## 1. A crew in two buildings
#
# The household: a small GPT (2 blocks, width 32, 75 characters of *Alice in Wonderland*, rounded
# up to 80 tokens so that every shard is a multiple of 8 elements, which qwZ's quantizer needs) in
# bf16 at stage 3, partitioned parameter by parameter as DeepSpeed does. Biases and LayerNorms (at
# most 200 elements each) are *persistent* (chapter 8): kept whole, and after the step each one is
# refreshed by an all-gather of its own (18 small calls). `stage3_max_reuse_distance` is 0 **and
# prefetch is off** (`stage3_prefetch_bucket_size` 0), so every weight is gathered in forward and
# **again in backward**, the paper's 3Ψ: this is the backward re-gather that hpZ (section 6) moves
# inside a building. With DeepSpeed's defaults there would be none to move on this small model:
# its reuse distance of 10⁹ keeps the model gathered across the turn, and even at distance 0 its
# default prefetch (5·10⁷) marks every weight fetched for its backward use and keeps it (chapter
# 8 measures both).
#
# Each rank runs `ch13.one_step(keys)` (in `zerolab/course/chapters/ch13.py`): a fresh engine with those
# ZeRO++ keys, a first step (it records the fetch order, and we keep its gradients and every block
# qwZ quantized), then a second step whose collectives we read from the ledger.

# %% id="ch13-03"
N, NODES = 4, 2
L = N // NODES                             # ranks per node
print(f"GPT: {ch13.TOKENIZER.vocab} characters -> {ch13.VOCAB} tokens, width {ch13.D}, 2 blocks; "
      f"{ch13.MICRO} sequences of {ch13.SEQ} per rank")
pprint.pprint(config(N), width=96, sort_dicts=False)     # + the ZeRO++ keys of each run

# %% [markdown] id="ch13-04"
# **Predict, then run.** Every stage-3 collective here is one ring over all 4 ranks, so it spans
# both buildings. How many bytes will rank 0 send **inside its building** in one step, and how many
# **across the street**? The gathered weights hold Ψ_g = 28,160 elements, the persistent ones 896,
# in bf16 (2 bytes); the ring has each rank send (N−1)/N of a collective's tensor (chapter 0).
# Write your guess down.

# %% id="ch13-05"
exact = crew.run(one_step, {})
e = exact[0]
print(e["table"])
gathers = [(tag, n) for op, _, n, _, _, tag in e["records"] if op == "all_gather" and "persistent" not in tag]
print(textwrap.fill("all-gathers: " + ", ".join(f"{tag[7:]} ({n:,})" for tag, n in gathers), 96,
                    subsequent_indent="    "))
psi_g = sum(n for _, n, p in e["groups"] if not p)
psi_p = sum(n for _, n, p in e["groups"] if p)
tied = {label: n for label, n, _ in e["groups"]}["tok.weight"]    # the token embedding, tied to the head
ring = (N - 1) / N
by_hand = {"gathers": ring * 2 * 2 * (psi_g + tied), "refresh": ring * 2 * psi_p,
           "gradients": ring * 2 * (psi_g + psi_p), "norm": ring * 2 * 8}
print(f"by hand: gathers 3/4 x 2 B x 2 x ({psi_g:,} + {tied:,}) = {by_hand['gathers']:,.0f}; "
      f"refresh 3/4 x 2 x {psi_p} = {by_hand['refresh']:,.0f}")
print(f"         gradients 3/4 x 2 B x {psi_g + psi_p:,} = {by_hand['gradients']:,.0f}; "
      f"norm all-reduce 2 x 3/4 x 8 = {by_hand['norm']:.0f}")
print(f"         total {sum(by_hand.values()):,.0f}; ledger: intra {e['links']['intra']:,.0f}, "
      f"inter {e['links']['inter']:,.0f}")

# %% [markdown] id="ch13-06"
# **Nothing stays inside a building.** Each collective's group is all four ranks, so the ledger
# files all of it under *inter*: the gathers, the gradients' reduce-scatter, even the 8-byte
# all-reduce of the gradient norm (one fp64 sum: in bf16, DeepSpeed's stage 3 sends no overflow
# flag). Each module's weight is one call, in forward and again in backward: 22 calls, plus the 18
# persistent refreshes. The token embedding (2,560 elements) is
# gathered **twice more**: the GPT's head is tied to it, so forward gathers it for the embedding
# and again for the head, and backward gathers it for the head's backward and again for the
# embedding's own. DeepSpeed releases a module's parameters after its backward
# (`post_sub_module_backward_function` in `runtime/zero/parameter_offload.py`), and with reuse
# distance 0 and no prefetch nothing is kept; its pre-backward hook then gathers every parameter of
# the next module, even the embedding, whose backward reads no weight. (DeepSpeed's default reuse
# distance keeps it gathered from the one use to the other: question 1.)
#
# What the ledger's *inter* column means for a real network: this rank's ring bytes, (N−1)/N of
# each tensor. A ring over two nodes enters and leaves each node once, so what one rank sends is
# also what a **node's** network cards carry (chapter 14's model, where a node's β is its whole
# network). On a cluster these bytes go over InfiniBand at a tenth or less of NVLink's speed
# (chapter 14 has the figures): stage 3 on several nodes is as fast as its slowest street.
#
# ## 2. qwZ: the furniture lists in shorthand
#
# With `zero_quantized_weights`, DeepSpeed's stage 3 quantizes every parameter all-gather, forward
# and backward, prefetched or not (`all_gather_coalesced(..., quantize=True)`): each rank converts
# its shard to fp16, cuts it into **blocks** (DeepSpeed's `CUDAQuantizer` picks the count: blocks of
# a multiple of 8 elements, near a target of 8,000; `quant.qwz_groups`) and sends, per block, **one
# fp32 scale** and **one int8 value per element**: two all-gathers, the values then the scales. Every
# rank dequantizes what arrives to fp16, then to the model's dtype. The shards and the fp32 master
# weights are never quantized: only the copies used in forward and backward are. The persistent
# parameters' refresh after the step is not quantized either (DeepSpeed's `_post_step` gathers them
# with a plain all-gather).
#
# **Predict, then run.** The model's dtype is bf16, 2 bytes per element. How many bytes will the
# parameter all-gathers take with qwZ: exactly half, a little more, or less? What does a scale cost
# here, where each shard is one block?

# %% id="ch13-07"
qwz = crew.run(one_step, {"zero_quantized_weights": True})
w = qwz[0]
print(w["table"])


plain, values, scales = fetch_bytes(e, "bfloat16"), fetch_bytes(w, "int8"), fetch_bytes(w, "float32")
n_scales = sum(n for op, dt, n, *_ in w["records"] if dt == "float32")
print(f"parameter all-gathers, rank 0, one step: {plain:,.0f} B in bf16 (exact run)")
print(f"  qwZ: {values:,.0f} B of int8 + {scales:,.0f} B of scales ({n_scales} fp32 scales: "
      f"{len(gathers)} gathers x {N} ranks x 1 block)")
print(f"  by hand: int8 = bf16 / 2 = {plain / 2:,.0f}; scales 3/4 x 4 B x {n_scales} = {ring * 4 * n_scales:,.0f}")
print(f"  qwZ / bf16 = {(values + scales) / plain:.5f}; across the street: {w['links']['inter']:,.0f} B "
      f"of {e['links']['inter']:,.0f} B")

# %% [markdown] id="ch13-08"
# **Half, plus the scales.** One byte instead of bf16's (or fp16's) two: 0.5×. The scales cost 4
# bytes per block; DeepSpeed's blocks hold at most 8,000 elements (its quantizer asserts under
# 16,000), so on a real model they add about 4/8,000 = 0.05 %. Here each rank's shard of a gather is one block, 16
# bytes of scales per gather (4 ranks × 4 B), 22 gathers of small weights, so the ratio is 0.5029. (A model kept in fp32 would gather 4 bytes per element
# without qwZ; qwZ converts to fp16 and int8 first, so it would send about a quarter.) The
# gradients (reduce-scatter) are untouched: the step's bytes fall by a third, not a half.
#
# **The shorthand, exactly** (DeepSpeed's symmetric quantizer, `csrc/includes/quantization_utils.h`):
# for a block whose largest magnitude is *m*, `q_scale = 2⁸ / (2m)`; each value becomes
# `q = clamp(round(x · q_scale), −128, 127)` (round half to even), and `scale = 1 / q_scale = m / 128`
# is what travels. The receiver computes `x' = q · scale`. So every value comes back within half a
# step, **scale/2 = m/256**: 0.4 % of the block's largest weight.
#
# **Predict, then run.** Is every weight within half a step? Which element of a block comes back
# worst, and by how much?

# %% id="ch13-09"
ratios, tops = ch13.block_errors(w["blocks"])     # |x' - x| / scale of every block rank 0 quantized
print(f"rank 0, step 1: {len(w['blocks'])} quantized gathers, {ratios.numel() + tops.numel():,} weights")
half_ok, top_ok = bool(ratios.max() <= 0.5 + 1e-6), bool((tops - 1).abs().max() < 1e-4)
print(f"  every weight but the blocks' positive maxima within scale/2: {half_ok}")
print(f"  the {tops.numel()} positive maxima: 128 steps clamped to 127, one step off "
      f"(within 1e-4): {top_ok}")
ch13.plot_qwz_error(w["blocks"], ratios, tops)
plt.show()

# %% [markdown] id="ch13-10"
# The error is a saw-tooth between ±½ step; the one exception sits at the right end of the left
# picture: the block's **largest positive** weight lands on 128 steps, which int8 cannot hold, and is
# clamped to 127, one full step low (a largest *negative* weight lands on −128 exactly). So the bound
# is **scale/2 for all but one weight per block, one scale for that one**: m/256 and m/128. The
# weights the forward pass uses carry this error; the optimizer's fp32 masters never do, so the
# error does not accumulate from step to step.
#
# ## 3. qgZ: door stickers in 4 bits, pooled inside the building first
#
# With `zero_quantized_gradients` (and more than one node: DeepSpeed uses it only then), stage 3
# replaces each gradient's reduce-scatter by DeepSpeed's `all_to_all_quant_reduce`:
#
# 1. each rank quantizes its gradient to **int4** (two values per byte), one fp32 scale per block;
# 2. an **all-to-all inside the node**: local rank *j* receives, from each rank of its node, the
#    parts of the gradient that it and its counterparts in the other nodes will own;
# 3. it dequantizes, sums the node's copies, and quantizes the sum to int4 again;
# 4. an **all-to-all across nodes** among the ranks with the same local rank: each receives its own
#    partition, summed within every node;
# 5. it dequantizes, adds the nodes' sums, and divides by the number of nodes.
#
# 1-D parameters (biases, LayerNorms: here the persistent group) fall back to the plain
# reduce-scatter, as in DeepSpeed; so does a gradient whose size is not a multiple of **2N** (two
# int4 values per byte, split N ways): DeepSpeed logs a warning and reduce-scatters it in bf16
# (`runtime/comm/coalesced_collectives.py`, `all_to_all_quant_reduce`, lines 43-52), and zerolab
# does the same (`zerolab/zeropp/qgz.py`). A model whose sizes are not multiples of 2N quietly loses qgZ's
# saving on those gradients: the ledger's reduce-scatters under qgZ show it.
#
# **Predict, then run.** For a gradient of M elements, the reduce-scatter sends 3/4 · 2M bytes per
# rank, all across the street. With qgZ, how many bytes does a rank send inside its building, and how
# many across? (Ignore the scales first: int4 is half a byte.)

# %% id="ch13-11"
qgz = crew.run(one_step, {"zero_quantized_gradients": True})
g = qgz[0]


by_hand = {"intra": 0.0, "inter": 0.0}
for (label, m, persistent), k in zip(g["groups"], g["qgz_blocks"]):
    if k is None:                                 # 1-D parameters: the bf16 reduce-scatter
        by_hand["inter"] += ring * 2 * m
    else:                                         # int4 values + fp32 scales, k blocks per partition
        by_hand["intra"] += (L - 1) / L * (m / 2 + 4 * N * k)
        by_hand["inter"] += (NODES - 1) / NODES * (m / (2 * L) + 4 * NODES * k)
print(f"gradient bytes, rank 0, one step ({psi_g + psi_p:,} elements):")
print(f"  exact: reduce-scatter {grad_bytes(e, 'inter'):,.0f} B across, {grad_bytes(e, 'intra'):,.0f} B inside")
print(f"  qgZ:   {grad_bytes(g, 'intra'):,.0f} B inside (by hand {by_hand['intra']:,.0f}), "
      f"{grad_bytes(g, 'inter'):,.0f} B across (by hand {by_hand['inter']:,.0f})")
print(f"         of which the 1-D fallback's reduce-scatter: {grad_bytes(g, 'inter', 'reduce_scatter'):,.0f} B")
print(f"  across the street: {grad_bytes(g, 'inter') / grad_bytes(e, 'inter'):.3f}x the exact run's; "
      f"calls: {sum(o == 'all_to_all' for o, *_ in g['records'])} all-to-alls")

# %% [markdown] id="ch13-12"
# Per gradient of M elements: inside the building (L−1)/L · M/2 bytes (int4), across the street
# (K−1)/K · M/(2L), with L = 2 ranks per node and K = 2 nodes: M/4 and M/8, against the
# reduce-scatter's 3M/2 across. A **node** sends L times what one rank sends across, (K−1)/K · M/2:
# a sixth of what the ring's reduce-scatter puts through the node's network cards here, and
# 0.5·(m−1)/m against 2·(N−1)/N of Ψ on a big cluster (chapter 14's table). The scales are one
# fp32 per block, and DeepSpeed's blocks for gradients are small (a 2-D parameter of shape (a, b)
# is cut into max(a, b, N) blocks), so here they are a fifth of qgZ's bytes; on a wide model they
# are 4/`hidden` bytes per element. And qgZ makes 4 calls per gradient instead of part of one
# bucket: on a CPU that is what its time is made of (benchmarks/zeropp_quant.py measures it).
#
# **Predict, then run.** Step 5 divides the sum by the number of *nodes*. The reduce-scatter
# divides by the number of *ranks*, N = 4. What will qgZ's gradients be, compared with the exact
# run's: the same, half, twice?

# %% id="ch13-13"
for text in g["warnings"]:
    print(textwrap.fill("rank 0 warned: " + text, 96, subsequent_indent="    "))
ch13.plot_qgz_gradients(exact, qgz, L)
plt.show()
fits = ch13.gradient_fits(exact, qgz, L)          # per group: (int4?, slope, |qgZ/L - exact| / |exact|)
quantized = [f for f in fits if f[0]]
print(f"int4 groups ({len(quantized)}): qgZ / exact, least squares, within 1.8-2.1 (= L = {L}): "
      f"{all(1.8 < s < 2.1 for _, s, _ in quantized)}")
print(f"  after dividing by L: |qgZ/L - exact| / |exact| < 0.2 per group (int4's 16 levels): "
      f"{all(r < 0.2 for *_, r in quantized)}")
same_1d = all(abs(s - 1) < 1e-6 for q, s, _ in fits if not q)
print(f"1-D group (reduce-scatter): the same as exact, within 1e-6: {same_1d}")
print(f"reported gradient norm, step 1: qgZ's above the exact run's, below {L}x: {1 < g['norm'] / e['norm'] < L}")

# %% [markdown] id="ch13-14"
# **Twice the mean**, as the warning says. DeepSpeed 0.19.8's qgZ sums all N ranks' gradients and
# divides by the K nodes only, so its gradients are N/K = L (ranks per node) times what the
# reduce-scatter gives, while 1-D parameters, still reduce-scattered, get the true mean. zerolab
# reproduces this on purpose (the ledger and the numbers must be DeepSpeed's) and warns. What sees
# it: **Adam** barely (its update divides by the gradient's own scale), **gradient clipping** and
# the **reported gradient norm** do (here it grows, by less than 2×: the 2-D groups' gradients
# doubled, the 1-D ones, the LayerNorms' large gradients among them, did not), and so would SGD's
# step size. Beyond the scale, int4 costs
# precision: each value is off by up to half of a step of m/8 in each of the two quantizations,
# about a tenth of the gradient's norm here.
#
# ## 4. The loss curve
#
# **Predict, then run.** 20 steps on *Alice*, 4 ranks in 2 buildings: the exact run, the same run
# with every ZeRO++ key written out as `false`, qwZ, and qgZ. Which curves will be identical, and
# how far apart will the others be?

# %% id="ch13-15"
STEPS, TOL = 20, {"qwZ": 0.02, "qgZ": 0.08}
VARIANTS = {"exact": {}, "keys off": {"zero_quantized_weights": False, "zero_quantized_gradients": False},
            "qwZ": {"zero_quantized_weights": True}, "qgZ": {"zero_quantized_gradients": True}}
runs = crew.run(curves, VARIANTS, STEPS, timeout=240)   # every rank: each variant, the same 20 batches
                                                          # (about 30 s here; 240: a busy machine)
loss = {k: ch13.mean_losses(runs, k) for k in VARIANTS}
same = all(r["exact"]["losses"] == r["keys off"]["losses"] and
           all(torch.equal(r["exact"]["params"][n], r["keys off"]["params"][n]) for n in r["exact"]["params"])
           for r in runs)
print(f"keys off: every rank's losses and trained weights bit-identical to the exact run: {same}")
within = {k: max(abs(a - b) for a, b in zip(loss[k], loss["exact"])) < tol for k, tol in TOL.items()}
for k, tol in TOL.items():
    print(f"{k}: max |loss gap| to the exact run over {STEPS} steps < {tol}: {within[k]}; "
          f"the curves differ: {loss[k] != loss['exact']}")
ch13.plot_curves(loss, TOL)
plt.show()

# %% [markdown] id="ch13-16"
# With every key `false` the run is the exact one **bit for bit**: the same collectives in the
# same order, the same weights. qwZ stays within a few thousandths of the exact curve; qgZ, with
# 4-bit gradients and its doubled gradients going through clipping, wanders further but learns
# just as well. The tolerances (0.02 and 0.08 in loss, at every step) are empirical, about four
# times the gaps seen on this model (there is no closed form through Adam), and `tests/test_zeropp_engine.py`
# holds tighter ones on a shorter run. A real model over many thousand steps is the test that
# matters: the paper reports the same convergence as the exact run for GPT models up to 13B (qwZ,
# hpZ, qgZ together).
#
# ## 5. When to use which
#
# | option | cuts | costs | use it when |
# |---|---|---|---|
# | qwZ (`zero_quantized_weights`) | the parameter all-gathers, forward and backward: 2 → 1 byte per element (+4 B per ~8,000) | weights in forward/backward off by up to m/256 per block; a quantize and a dequantize per gather | stage 3 across nodes, when the gathers dominate the traffic |
# | qgZ (`zero_quantized_gradients`) | the gradients leaving each node: 2·(N−1)/N → 0.5·(m−1)/m of Ψ | int4 error; 4 calls per gradient; in 0.19.8, gradients (ranks per node)× the mean (clipping, norms, SGD) | more than one node, a slow network; retune clipping |
# | hpZ (`zero_hpz_partition_size` = ranks per node) | the backward gather: it stays inside the node | a secondary shard, 2Ψ/k more GPU memory per rank | memory to spare, a slow network |
# | none of them | | | one node (NVLink is fast; qgZ does nothing there), or enough tokens per GPU to hide the traffic (chapter 14) |
#
# Inside one node none of this helps much: the stairs are fast. The question is how much each
# option saves on **your** street. `zerolab simulate` (chapter 14) answers it with published figures.
#
# **Predict, then run.** 70B on 64 H100s in nodes of 8, one sequence of 4,096 tokens per GPU: on a
# DGX H100 fabric (eight 400 Gb/s ports per node) and on a thin one (one port per node), which gains
# more from ZeRO++, and does any of them make the traffic hide?

# %% id="ch13-17"
from zerolab.tools.simulate import CLUSTERS, SOURCES

for key in ("h100-80gb", "ib-ndr-8x", "ib-ndr-1x"):
    print(textwrap.fill(f"{key}: {SOURCES[key]}", 96, subsequent_indent="    "))
OPTIONS = {"stage 3": {}, "+ qwZ": dict(quantized_weights=True), "+ qgZ": dict(quantized_gradients=True),
           "+ qwZ + qgZ": dict(quantized_weights=True, quantized_gradients=True),
           "+ qwZ + qgZ + hpZ": dict(quantized_weights=True, quantized_gradients=True, hpz_partition_size=8)}
print(f"{'70B, 64 GPUs, seq 4,096':<24}{'leave each node':>17}{'comm s':>8}{'compute s':>10}{'T* tokens':>11}")
for cluster in ("dgx-h100", "h100-thin"):
    for name, kw in OPTIONS.items():
        est = simulate.simulate(70e9, 80, 8192, 4096, 1, 64, 3, checkpointing=False, **CLUSTERS[cluster], **kw)
        print(f"{cluster + ', ' + name:<28}{est.link_bytes['inter'] / 70e9:>11.2f} psi{est.comm_s:>8.2f}"
              f"{est.compute_s:>10.2f}{est.hide_tokens:>11,.0f}")

# %% [markdown] id="ch13-18"
# On the DGX fabric stage 3 already hides: its communication takes a quarter of the compute and
# T* is a quarter of a sequence, so ZeRO++ buys little there but error. On the thin fabric the
# plain run needs about twice the tokens it has; qwZ or qgZ alone are not enough, the two together
# bring the traffic under the compute. Where the street is the bottleneck ZeRO++ is the cheapest
# fix; where it is not, it only adds error. (The last rows add the simulator's formula for hpZ;
# the next section measures it.) Chapter 14 works these numbers out by hand, from 8 to 1,024
# GPUs, with offload.
#
# ## 6. hpZ: a second copy in each building
#
# With `zero_hpz_partition_size` = k (the ranks per node), each worker keeps, besides its 1/N
# share of every room's furniture, a **second share over its own building**: 1/k of each gathered
# module, in the parameters' dtype. DeepSpeed 0.19.8 makes it from the full module whenever the
# module is released after a gather (and once at initialization), and drops it at every optimizer
# step that is not skipped. While a module has one, its all-gather runs **inside the node**, over k
# ranks: the backward re-gather, always (here every weight's, with prefetch off at reuse distance
# 0; a configuration that keeps the weights for backward has none to move); the first step's
# forward; the later micro-steps' forwards
# under gradient accumulation (`partition_parameters.py`, `_partition_param_sec`; the rules file by
# file in `zerolab/zeropp/hpz.py`, DeepSpeed's groups measured on its CPU build by
# `benchmarks/ds_reference/ds_hpz.py`). The gradients still reduce-scatter over all N ranks: the
# master weights and the optimizer's states stay ZeRO-3's.
#
# **Predict, then run.** Same crew, `zero_hpz_partition_size` 2, a steady step. The gathered
# weights are Ψ_g = 28,160 elements in bf16, and the tied token embedding (2,560) is gathered
# twice in forward and twice in backward. How many parameter all-gather bytes will rank 0 send across the street, and how
# many inside its building? How much more memory does each rank hold between backward and the step?

# %% id="ch13-19"
h = crew.run(one_step, {"zero_hpz_partition_size": L})[0]
all3 = crew.run(one_step, {"zero_hpz_partition_size": L, "zero_quantized_weights": True,
                           "zero_quantized_gradients": True})[0]
tok = tied
print(f"{'parameter all-gathers, B':<26}{'inside':>10}{'across':>10}   by hand")
print(f"{'stage 3':<26}{param_gather_bytes(e, 'intra'):>10,.0f}{param_gather_bytes(e, 'inter'):>10,.0f}"
      f"   across: 3/4 x 2 x 2 x ({psi_g:,} + {tok:,}) = {ring * 2 * 2 * (psi_g + tok):,.0f}")
print(f"{'+ hpZ 2':<26}{param_gather_bytes(h, 'intra'):>10,.0f}{param_gather_bytes(h, 'inter'):>10,.0f}"
      f"   across (forward): 3/4 x 2 x {psi_g:,} = {ring * 2 * psi_g:,.0f}")
print(f"{'':<26}{'':>20}   inside: 1/2 x 2 x ({psi_g:,} + 2 x {tok:,}) = {0.5 * 2 * (psi_g + 2 * tok):,.0f}")
print(f"gradients across: {grad_bytes(e, 'inter'):,.0f} B without hpZ, {grad_bytes(h, 'inter'):,.0f} B with it")
print(f"secondary shards held from backward to the step: {h['secondary']:,} B = 2 B x {psi_g:,} / {L}; "
      f"after the step: {h['secondary_after_step']}")
print(f"+ qwZ + qgZ: across the street {all3['links']['inter']:,.0f} B per step, "
      f"against {e['links']['inter']:,.0f} B for stage 3")

# %% [markdown] id="ch13-20"
# The backward's gathers left the street: they run over the two ranks of a building, half a
# module's bytes each instead of three quarters, and nothing of them crosses, the token embedding's
# two (for the head, then for the embedding itself) included. The forward still
# gathers over all four ranks (the secondary was dropped at the last step), except the token
# embedding's second gather in forward: its first release made a secondary, so the head's gather
# stays inside. The price is the secondary shards, 2Ψ_g/k bytes per rank for the time between a
# module's first release and the step (the paper's 2Ψ/k). With qwZ and qgZ on top, what crosses
# the street per step is about a fifth of plain stage 3's: the forward gathers in int8, the
# gradients in int4.
#
# FSDP2's hybrid sharding (HSDP) answers the same slow street differently: it shards inside a node
# and replicates across nodes, so only the gradient all-reduce crosses, but every parameter,
# gradient and optimizer state is held N/k times over. `benchmarks/hsdp_vs_hpz.py` (README, "hpZ
# beside FSDP2's hybrid sharding") measures both on a crew like this one.
#
# ## What we measured

# %% id="ch13-21"
print(f"crew        {N} ranks as {NODES} nodes of {L}; every stage-3 collective spans both:")
print(f"            {e['links']['inter']:,.0f} B across the street, {e['links']['intra']:,.0f} inside a building")
print(f"qwZ         parameter all-gathers {plain:,.0f} B -> {values + scales:,.0f} B "
      f"({(values + scales) / plain:.4f}x: int8 + fp32 scales)")
print(f"            every weight within scale/2 = m/256 of its block, the clamped maxima one step: "
      f"{half_ok and top_ok}")
print(f"qgZ         gradients across: {grad_bytes(e, 'inter'):,.0f} B -> {grad_bytes(g, 'inter'):,.0f} B "
      f"(+ {grad_bytes(g, 'intra'):,.0f} B inside); gradients {L}x the mean")
print(f"loss        {STEPS} steps: keys off bit-identical: {same}; qwZ within {TOL['qwZ']}: {within['qwZ']}, "
      f"qgZ within {TOL['qgZ']}: {within['qgZ']}")
print(f"hpZ         parameter gathers across {param_gather_bytes(e, 'inter'):,.0f} B -> "
      f"{param_gather_bytes(h, 'inter'):,.0f} B (backward inside the building);")
print(f"            {h['secondary']:,} B of secondary shards per rank until the step")
crew.close()

# %% [markdown] id="ch13-22"
# - A crew in several nodes: every stage-3 collective over all ranks crosses the street; the ledger
#   files it under *inter*, and a rank's ring bytes are what its node's network carries.
# - **qwZ** sends int8 values and one fp32 scale per block of up to ~8,000 elements: 0.5× the
#   bf16 (or fp16) gathers plus 0.05 %; each weight used in forward and backward is off by at most
#   scale/2 = m/256 (the clamped block maximum: m/128); the masters stay exact.
# - **qgZ** quantizes gradients to int4 and reduces them by two all-to-alls, inside the node, then
#   across: what leaves a node falls from 2·(N−1)/N to 0.5·(m−1)/m of Ψ plus scales. In DeepSpeed
#   0.19.8 its gradients are (ranks per node)× the mean: clipping and the reported norm see it.
# - With every ZeRO++ key off the run is bit-identical to plain stage 3; qwZ and qgZ stay within
#   their tolerances of it over a short run.
# - **hpZ** keeps a secondary shard of each gathered module inside the node: the backward's
#   gathers (and, under accumulation, the later micro-steps' forwards) stay off the street, for
#   2Ψ/k bytes per rank until the step.
# - Together the three cut what crosses between nodes about 4× on a large cluster (the paper's
#   3M → 0.75M; chapter 14's table); gradients whose size is not a multiple of 2N, and 1-D ones,
#   fall back to the bf16 reduce-scatter.
# - ZeRO++ pays where the network between nodes is the bottleneck (chapter 14 computes when).
#
# ## Questions
#
# 1. Run section 2 with DeepSpeed's default reuse distance: `crew.run(one_step,
#    {"zero_quantized_weights": True, "stage3_max_reuse_distance": 10**9})`. Which all-gathers
#    disappear, and does qwZ's ratio change?
# 2. qwZ's scales: for a 7B model with hidden size 4,096 on 64 GPUs, how many elements does a
#    rank's shard of one 4,096 × 4,096 weight hold, how many blocks does `quant.qwz_groups` cut it
#    into, and what do the scales add in percent?
# 3. Run section 3 with `zerolab.Crew(4, nodes=4)` (one rank per node). What does the warning say
#    now, and what is qgZ's gradient compared with the mean? Why?
# 4. Why does DeepSpeed quantize gradients to 4 bits but weights to 8? (Think about where each
#    error goes: into one step's update, through Adam, or into every layer's forward.)
# 5. Your cluster has one node of 8 GPUs. Which ZeRO++ option would you turn on, and why?
#
# **Your turn:** in `exercises/13_block_quantizer.ipynb` you write qwZ's block quantizer, quantize
# and dequantize, as DeepSpeed's kernel computes them; the check runs yours alone on tensors that
# expose the usual mistakes and then **inside the engine**, as the quantizer of qwZ's all-gathers on
# 4 ranks in 2 buildings, beside zerolab's.
