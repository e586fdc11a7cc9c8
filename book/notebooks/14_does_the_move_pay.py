# %% [markdown] id="ch14-00"
# # Chapter 14 · Does the move pay? When ZeRO-3's traffic hides behind compute
#
# *Pass the furniture while you carry, and nobody waits; pass more than you carry, and everybody does.*
#
# The crew has grown. It no longer fits in one building: eight workers live in each building,
# and the buildings stand along a street. Inside a building the workers hand furniture to each
# other on the stairs, fast; between buildings everything goes by truck down the street, slower.
# And at stage 3 nobody keeps the whole household: before working on a room, each worker borrows
# the room's furniture from the others (and hands it back), once on the way in and once on the way
# out, and at the end of every trip they pool their door stickers.
#
# The captain's question is not "does it fit?" any more (chapter 7 answered that) but **"does it
# pay?"**: while the workers carry boxes (compute), the furniture can travel at the same time
# (overlap). If each worker has enough to carry on each trip, the passing hides behind the
# carrying and costs nothing. If not, the crew stands in the street waiting for trucks.
#
# | in the story | in training | in zerolab |
# |---|---|---|
# | a worker's boxes on one trip | the **tokens** a GPU processes in one micro-step | `micro_batch × seq` |
# | carrying them | the **compute**: about 6Ψ FLOPs per token (forward 2Ψ, backward 4Ψ) | `Estimate.compute_s` |
# | borrowing and returning the furniture, pooling the stickers | stage 3's **parameter all-gathers** (forward, backward) and **gradient reduce-scatter** | `Estimate.comm_s`, `wire_bytes` |
# | the stairs inside a building | **NVLink** inside a node | `link` |
# | the trucks down the street | **InfiniBand** between nodes | `inter_link`, `ranks_per_node` |
# | the road to the company warehouse | **PCIe** to the host (offload) | `pcie_Bps`, `transfer_s` |
# | notes in shorthand; a second copy per building | **ZeRO++**: qwZ, qgZ; hpZ | `quantized_weights`, `quantized_gradients`, `hpz_partition_size` |
#
# This chapter works like a page of the JAX scaling book (*How to Scale Your Model*): two counts (FLOPs and bytes), two
# speeds (FLOP/s and bytes/s), and one ratio that says which one wins. Every number is computed
# **by hand** first, in a line you can read, and then by `zerolab.tools.simulate`, the course's scale
# simulator; the last section holds the simulator against real ranks on this machine.
#
# **What we compute:** the tokens per GPU at which stage 3's traffic hides behind compute, on
# published clusters; how nodes, ZeRO++ and offload move it; what happens from 8 to 1,024 GPUs,
# and where tensor and pipeline parallelism take over. Ψ is the parameter count, N the GPUs, k the
# GPUs per node; GB = 10⁹ bytes.

# %% id="ch14-01"
import textwrap

import matplotlib.pyplot as plt

from zerolab.tools import simulate
from zerolab.tools.simulate import CLUSTERS, GPUS, LINKS, SOURCES

for key in ("h100-80gb", "nvlink-h100", "ib-ndr-8x", "ib-ndr-1x", "pcie5-host"):
    what = (f"{GPUS[key][1] / 1e12:,.0f} TFLOP/s" if key in GPUS else
            f"{LINKS[key][1] / 1e9:,.0f} GB/s" if key in LINKS else f"{simulate.PCIE5_BYTES_PER_S / 1e9:.0f} GB/s")
    print(f"{key:<12} {what:>13}")
    print(textwrap.fill(SOURCES[key], 96, initial_indent="    ", subsequent_indent="    "))

# %% [markdown] id="ch14-02"
# (`simulate.SOURCES` names the source of every figure in `GPUS` and `LINKS`. "90 % assumed": a
# node's network cards are taken at 90 % of their line rate, zerolab's assumption, not a vendor's.)
# The clusters: `CLUSTERS["dgx-h100"]` is eight H100s per node on NVLink with **eight** 400 Gb/s
# ports per node (the DGX H100's compute fabric); `CLUSTERS["h100-thin"]` is the same node with
# **one** 400 Gb/s port, a thinner fabric common outside flagship clusters; `CLUSTERS["dgx-a100"]`
# the A100 generation.
#
# ## 1. Two counts: FLOPs against bytes
#
# A training step on T tokens costs about **6ΨT FLOPs**: the forward pass does a multiply and an
# add per parameter per token (2Ψ), backward twice that (4Ψ). With activation checkpointing the
# forward runs again in backward: 8ΨT. A GPU reaches a fraction of its peak, the **model-FLOPs
# utilisation** (MFU, 0.4 here, `simulate`'s default; good runs reach 0.4-0.55).
#
# Stage 3 keeps 1/N of every parameter, so each micro-step it **all-gathers the parameters in
# forward, all-gathers them again in backward** (DeepSpeed frees them in between, unless
# `stage3_max_reuse_distance` keeps them: chapter 8) and
# **reduce-scatters the gradients**: three tensors of Ψ elements, 2 bytes each in bf16, of which a
# rank sends (N−1)/N over the ring (chapter 0): **3 · 2Ψ · (N−1)/N bytes** per micro-step, whatever
# the tokens.
#
# **Predict, then run.** A 7B model on one DGX H100 (8 GPUs, NVLink), one sequence of 4,096 tokens
# per GPU per micro-step. How long is the compute, and how long the traffic? Which is longer, and
# by how much? Write your guess down.

# %% id="ch14-03"
PSI, N, T = 7e9, 8, 4096
F, MFU = GPUS["h100-80gb"][1], 0.4            # peak dense bf16 FLOP/s; model-FLOPs utilisation
ALPHA, BETA = LINKS["nvlink-h100"]            # seconds per call; bytes/s on the wire per rank
compute = 6 * PSI * T / (F * MFU)
traffic = 3 * 2 * PSI * (N - 1) / N / BETA
print(f"by hand:  compute 6 psi T / (F mfu) = {compute:.3f} s;  traffic 3 x 2 psi (N-1)/N / beta = {traffic:.3f} s")

e = simulate.simulate(PSI, layers=32, hidden=4096, seq=T, micro_batch=1, gpus=N, stage=3,
                      checkpointing=False, **CLUSTERS["dgx-h100"])
print(f"simulate: compute {e.compute_s:.3f} s;  communication {e.comm_s:.3f} s "
      f"({e.calls} calls x alpha = {e.calls * ALPHA * 1e3:.2f} ms of it)")
print(f"wire bytes per rank: simulate {e.wire_bytes:,.0f}, by hand {3 * 2 * PSI * (N - 1) / N:,.0f}; "
      f"compute / traffic = {compute / traffic:.1f}")

# %% [markdown] id="ch14-04"
# The compute is about four times the traffic: with overlap (`overlap_comm`, prefetch) the
# gathers run while the previous layer computes, and stage 3 costs this cluster (almost) nothing.
# The simulator's communication is the bytes over β plus one α per call (two gathers per layer,
# one reduce-scatter per bucket of `reduce_bucket_size` = 5·10⁸ elements), under a millisecond here.
#
# ## 2. The break-even: Ψ cancels
#
# Set the compute equal to the traffic and solve for the tokens T*:
#
# $$\frac{6\,\Psi\,T^*}{F \cdot \text{mfu}} = \frac{3 \cdot 2\Psi \cdot \frac{N-1}{N}}{\beta}
# \quad\Longrightarrow\quad T^* = \frac{N-1}{N}\cdot\frac{F\cdot\text{mfu}}{\beta}$$
#
# Both sides grow with Ψ, so **Ψ cancels**: the break-even is a ratio of two speeds, the GPU's
# FLOP/s over the link's bytes/s, and it is the same for a 1B and a 70B model. (With activation
# checkpointing the compute is 8ΨT, so T* shrinks to 3/4 of it: recomputation helps hide traffic, at
# the price of a third more FLOPs.) This is the arithmetic-intensity argument of the scaling book,
# applied to ZeRO: a GPU must do F·mfu/β FLOPs for each byte on the wire, and stage 3 gives it
# 6Ψ·T FLOPs for 6Ψ bytes, so T per GPU per micro-step must be at least F·mfu/β.
#
# **Predict, then run.** T* for 1.3B, 7B and 70B on the same DGX H100. Does the 70B model need more
# tokens per GPU than the 1.3B one to hide its traffic? (`Estimate.hide_tokens` is the simulator's
# T*: its bytes and calls over its compute per token.)

# %% id="ch14-05"
t_star = (N - 1) / N * F * MFU / BETA
print(f"by hand: T* = (N-1)/N x F mfu / beta = {N - 1}/{N} x {F * MFU:.4g} / {BETA:.3g} = {t_star:,.0f} tokens")
print(f"{'model':<6}{'layers':>7}{'hidden':>7}{'simulate: T*':>14}{'alpha adds':>12}{'with checkpointing':>20}")
for name, psi, layers, hidden in (("1.3B", 1.3e9, 24, 2048), ("7B", 7e9, 32, 4096), ("70B", 70e9, 80, 8192)):
    kw = dict(layers=layers, hidden=hidden, seq=1, micro_batch=1, gpus=N, stage=3, **CLUSTERS["dgx-h100"])
    plain = simulate.simulate(psi, checkpointing=False, **kw)
    ckpt = simulate.simulate(psi, checkpointing=True, **kw)
    print(f"{name:<6}{layers:>7}{hidden:>7}{plain.hide_tokens:>14,.0f}{plain.hide_tokens / t_star - 1:>12.1%}"
          f"{ckpt.hide_tokens:>20,.0f}")
print(f"checkpointing: T* x 6/8 = {t_star * 6 / 8:,.0f} (+ alpha)")

# %% [markdown] id="ch14-06"
# About a thousand tokens for every size: Ψ cancels. What is left is α: a model's calls
# (two gathers per layer) cost the same α whatever their size, so the smaller model, with fewer
# bytes per call, needs a few percent more tokens. One sequence of 4,096 tokens per GPU is far
# above T* on one DGX H100; stage 3 pays here as long as the overlap works.
#
# ## 3. Two buildings: the slowest link
#
# Now 16 GPUs in two nodes. Every stage-3 collective is one ring over all N ranks, so it crosses
# the street. The model (`simulate`'s docstring says it in full): a collective whose ranks span
# nodes runs at **the slower link**. Its ring enters and leaves each node once per channel, so a
# node's network cards together carry what one rank sends (NCCL spreads its channels over the
# node's ports): the inter-node β is the node's whole network bandwidth. A DGX H100 has eight
# 400 Gb/s ports, 8 × 50 GB/s, 360 GB/s at 90 %: as fast as its NVLink figure here. That equality
# is an **assumption** of this model, not a measurement: the NVLink figure is zerolab's assumed
# all-reduce bus bandwidth (nccl-tests often report more inside a DGX H100), the network's is 90 %
# of line rate, and on a real cluster the two differ; whichever is slower decides (measure both with
# `nccl-tests`, section 8). The thin fabric has one port: 45 GB/s, eight times less.
#
# **Predict, then run.** T* on 16 GPUs (two nodes) for DGX A100, DGX H100 and the thin H100
# fabric. Which needs the most tokens, and why does the H100 need more than the A100?

# %% id="ch14-07"
print(f"{'cluster':<10}{'GPU TFLOP/s':>12}{'NVLink GB/s':>12}{'network GB/s':>13}{'T* by hand':>11}"
      f"{'simulate':>10}")
for name, c in CLUSTERS.items():
    f, b_in, b_out = GPUS[c["gpu"]][1], LINKS[c["link"]][1], LINKS[c["inter_link"]][1]
    by_hand = 15 / 16 * f * MFU / min(b_in, b_out)            # 16 GPUs: the slower link
    e = simulate.simulate(PSI, 32, 4096, 1, 1, 16, 3, checkpointing=False, **c)
    print(f"{name:<10}{f / 1e12:>12,.0f}{b_in / 1e9:>12,.0f}{b_out / 1e9:>13,.0f}{by_hand:>11,.0f}"
          f"{e.hide_tokens:>10,.0f}")
one = simulate.simulate(PSI, 32, 4096, 1, 1, 8, 3, checkpointing=False, **CLUSTERS["h100-thin"])
print(f"h100-thin on one node (8 GPUs, NVLink only): {one.hide_tokens:,.0f} tokens")

# %% [markdown] id="ch14-08"
# - **The thin fabric needs eight times the tokens** (its β is an eighth): about two sequences of
#   4,096 tokens per GPU per micro-step before stage 3 hides, against a quarter of one on a DGX.
#   On one node the same GPUs need only NVLink's T*: the street is what costs.
# - **The H100 needs more than the A100**: its FLOP/s grew about 3.2× from the A100's, its network
#   2× (400 against 200 Gb/s per port). Faster GPUs need *more* tokens per GPU to hide the same
#   bytes. Every generation of GPU raises the bar.
#
# ## 4. Notes in shorthand, and a copy per building: ZeRO++
#
# ZeRO++ (Wang et al. 2023; DeepSpeed's `zero_quantized_weights`, `zero_hpz_partition_size`,
# `zero_quantized_gradients`) cuts exactly the bytes that cross the street:
#
# - **qwZ**: parameter all-gathers carry **int8** blocks (1 byte per element) plus an fp32 scale
#   per group of at most 8,000 elements (DeepSpeed's `CUDAQuantizer`), instead of 2 bytes; every
#   weight gather, forward and backward.
# - **hpZ**: after the forward gather each rank keeps a **secondary shard** of Ψ/k (its node's k
#   ranks hold the whole model between them), so the **backward gather stays inside the node**.
#   It costs 2Ψ/k bytes of GPU memory per rank.
# - **qgZ**: gradients travel in **4 bits** (0.5 bytes) plus scales, by two all-to-alls: inside the
#   node first (each rank ends with its node's sum over Ψ/k), then between nodes among the ranks
#   of the same local index, where each node sends (m−1)/m of its Ψ (m = N/k nodes).
#
# Bytes that **leave each node** per micro-step (`Estimate.link_bytes["inter"]`), in Ψ:
#
# | | forward gather | backward gather | gradients | total (many nodes) |
# |---|---|---|---|---|
# | stage 3 | 2·(N−1)/N | 2·(N−1)/N | 2·(N−1)/N | → 6 |
# | + qwZ | 1·(N−1)/N | 1·(N−1)/N | 2·(N−1)/N | → 4 |
# | + hpZ (k) | 1·(N−1)/N | 0 | 2·(N−1)/N | → 3 |
# | + qgZ | 1·(N−1)/N | 0 | 0.5·(m−1)/m | → 1.5 |
#
# (the scales add 0.05 % to qwZ and 4/`hidden` bytes per element to qgZ.) 6Ψ → 1.5Ψ: the
# paper's "3M → 0.75M", **4× less across nodes**. The bytes inside the node grow instead.
#
# **Predict, then run.** 64 GPUs (8 nodes of 8) on the thin fabric, 70B: T* with each option
# added in turn. Does T* fall by the same factor as the inter-node bytes?

# %% id="ch14-09"
PSI70, N64, K = 70e9, 64, 8
m, f = N64 // K, (N64 - 1) / N64
by_hand = {"stage 3": 3 * 2 * f, "+ qwZ": 2 * f + 2 * f, "+ hpZ": 1 * f + 2 * f, "+ qgZ": 1 * f + 0.5 * (m - 1) / m}
options = {"stage 3": {}, "+ qwZ": dict(quantized_weights=True),
           "+ hpZ": dict(quantized_weights=True, hpz_partition_size=K),
           "+ qgZ": dict(quantized_weights=True, hpz_partition_size=K, quantized_gradients=True)}
print(f"70B on {N64} GPUs, {m} nodes of {K}, h100-thin; per micro-step, in psi (by hand / simulate)")
print(f"{'':<9}{'leave each node':>18}{'per rank on NVLink':>20}{'T* tokens':>11}{'GPU params GB':>15}")
pp_rows = {}
for name, kw in options.items():
    e = pp_rows[name] = simulate.simulate(PSI70, 80, 8192, 1, 1, N64, 3, checkpointing=False,
                                       **CLUSTERS["h100-thin"], **kw)
    print(f"{name:<9}{by_hand[name]:>8.3f} / {e.link_bytes['inter'] / PSI70:.3f}"
          f"{e.link_bytes['intra'] / PSI70:>20.3f}{e.hide_tokens:>11,.0f}{e.gpu_bytes['params'] / 1e9:>15.2f}")
cut = pp_rows["stage 3"].link_bytes["inter"] / pp_rows["+ qgZ"].link_bytes["inter"]
print(f"ZeRO++ cuts the inter-node bytes {cut:.2f}x and T* "
      f"{pp_rows['stage 3'].hide_tokens / pp_rows['+ qgZ'].hide_tokens:.2f}x")

# %% [markdown] id="ch14-10"
# The simulator agrees with the table to the third decimal (the scales). T* falls a little less
# than the bytes: what crosses the street is now so small that the NVLink side, whose bytes grew
# (hpZ's backward gather and qgZ's first all-to-all run inside the node) and the α of the extra
# calls (the scales travel in calls of their own) begin to count. hpZ's price is memory: 2Ψ/k,
# 17.5 GB more per GPU for 70B on nodes of 8, on top of the 2Ψ/N shard.
#
# What the formulas do not show is the **error**: int8 weights and 4-bit gradients are
# approximations (the master weights stay exact in fp32). Chapter 13 (ZeRO++ on real ranks)
# measures these bytes in the ledger on a crew with nodes, and the error each option costs.
#
# **hpZ's node size.** `zero_hpz_partition_size` need not be the node: a smaller group keeps a
# bigger secondary shard, a group of two nodes lets the backward gather cross the street again.
#
# **Predict, then run.** With qwZ + hpZ + qgZ on the thin fabric, 64 GPUs: hpZ size 2, 4, 8, 16.
# Which sizes keep the backward gather off the street, and what does each cost in memory?

# %% id="ch14-11"
print(f"{'hpZ size':>8}{'leave each node, psi':>22}{'secondary shard GB':>20}{'T* tokens':>11}")
for h in (2, 4, 8, 16):
    e = simulate.simulate(PSI70, 80, 8192, 1, 1, N64, 3, checkpointing=False, **CLUSTERS["h100-thin"],
                          quantized_weights=True, hpz_partition_size=h, quantized_gradients=True)
    print(f"{h:>8}{e.link_bytes['inter'] / PSI70:>22.3f}{2 * PSI70 / h / 1e9:>20.2f}{e.hide_tokens:>11,.0f}")

# %% [markdown] id="ch14-12"
# Any group inside the node keeps the backward gather off the street (the same inter-node bytes
# for 2, 4 and 8); only its memory changes, 2Ψ/h. A group of 16 spans two nodes: half the memory of
# 8, but the backward gather crosses the street again (in int8). The usual choice is the node: the
# least memory that still keeps backward at home. DeepSpeed requires the size to divide the world
# size; `simulate` also requires it to divide the node or be a multiple of it, and says so.
#
# ## 5. The warehouse: offload over PCIe
#
# With `offload_optimizer` the optimizer step runs on the CPU: each step every GPU sends its
# gradient shard down and gets its updated 16-bit parameters back (2 bytes per element). DeepSpeed
# converts the gradients to fp32 on the GPU before the copy (`runtime/zero/stage3.py` line 1457;
# stages 1-2 copy with `non_blocking=True`, which converts on the GPU too, `stage_1_and_2.py` line
# 1909), so they cross as 4 bytes, not the ZeRO-Offload paper's 2: 6Ψ/N bytes over each GPU's own
# PCIe link. With `offload_param` too, stage 3 brings each 16-bit parameter shard up from the host
# for the forward gather and again for the backward one: 4Ψ/N more per micro-step.
# These transfers overlap with compute like the network's; **the CPU's Adam step does not**: the
# GPUs wait for it (DeepSpeed's CPU Adam; `simulate` takes 10⁹ elements per second per GPU's
# share of the host, a round figure of zerolab's own).
#
# **Predict, then run.** 70B, stage 3 + offload of the optimizer on 8 and on 64 H100s (PCIe 5.0,
# 50 GB/s each way): the PCIe seconds per step against the network's, and the CPU step. Which one
# decides whether offload pays?

# %% id="ch14-13"
PCIE = simulate.PCIE5_BYTES_PER_S
print(f"70B, stage 3 + offload, dgx-h100, PCIe {PCIE / 1e9:.0f} GB/s; seconds per step, one sequence of 4,096")
print(f"{'N':>4}{'offload':>20}{'PCIe by hand':>13}{'simulate':>10}{'network':>9}{'CPU Adam':>10}{'compute':>9}")
for n in (8, 64):
    for par in (False, True):
        e = simulate.simulate(PSI70, 80, 8192, 4096, 1, n, 3, checkpointing=False, offload_optimizer=True,
                              offload_param=par, **CLUSTERS["dgx-h100"])
        pcie = (4 + 2 + (2 + 2 if par else 0)) * PSI70 / n / PCIE       # fp32 grads down, 16-bit params up
        print(f"{n:>4}{'optimizer + params' if par else 'optimizer':>20}{pcie:>13.3f}{e.transfer_s:>10.3f}"
              f"{e.comm_s:>9.3f}{e.cpu_step_s:>10.3f}{e.compute_s:>9.3f}")

# %% [markdown] id="ch14-14"
# PCIe is never the problem here: 6Ψ/N (10Ψ/N with the parameters) shrinks with N while stage 3's
# network bytes do not, and each GPU has its own PCIe link. What does not shrink enough is the
# **CPU step**: Ψ/N elements of Adam on the host, which the GPUs wait for (8.75 s per step at 8
# GPUs, twice the compute of a 4,096-token sequence). Offload pays when memory is the
# constraint and the step is long (many tokens per step, gradient accumulation); chapter 5b (the
# corridor to the warehouse) measured the same mechanism on this machine.
#
# ## 6. From 8 to 1,024 GPUs at a fixed batch
#
# Training runs fix the **global batch** (how many tokens per optimizer step the optimization
# tolerates), say 1,024 sequences of 4,096 tokens, 4.2M tokens. On N GPUs each gets B/N tokens
# per step, and stage 3 does best with no gradient accumulation (it re-gathers the parameters every
# micro-step: accumulation multiplies its traffic), so B/N is the most a micro-step can hold. T*
# jumps once, when the crew first crosses the street (8 → 16 GPUs: more than eightfold on the thin fabric),
# and after that hardly moves with N; B/N falls as 1/N. Stage 3 hides only while **B/N ≥ T***,
# that is up to **N = B / T*** GPUs.
#
# **Predict, then run.** Up to how many GPUs does stage 3 hide its traffic on the DGX H100, on
# the thin fabric, and on the thin fabric with ZeRO++?

# %% id="ch14-15"
B = 1024 * 4096                                         # tokens per optimizer step
GPU_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024]
ZPP = dict(quantized_weights=True, hpz_partition_size=8, quantized_gradients=True)
configs = {"dgx-h100, stage 3": CLUSTERS["dgx-h100"], "h100-thin, stage 3": CLUSTERS["h100-thin"],
           "h100-thin, stage 3 + ZeRO++": {**CLUSTERS["h100-thin"], **ZPP}}
t_of = {name: [simulate.simulate(PSI70, 80, 8192, 1, 1, n, 3, checkpointing=False, **kw).hide_tokens
               for n in GPU_COUNTS] for name, kw in configs.items()}
fig, ax = plt.subplots(figsize=(8.5, 4.2))
ax.loglog(GPU_COUNTS, [B / n for n in GPU_COUNTS], "k-o", lw=2, label="B / N: tokens per GPU per step")
for (name, ts), style in zip(t_of.items(), ("s--", "^--", "v--")):
    ax.loglog(GPU_COUNTS, ts, style, label=f"T*: {name}")
ax.set(xlabel="N, GPUs", ylabel="tokens per GPU per micro-step", xticks=GPU_COUNTS,
       xticklabels=[str(n) for n in GPU_COUNTS])
limit = {name: B / ts[-1] for name, ts in t_of.items()}
ax.set_title(f"70B, 4.2M tokens per step: stage 3 hides up to ~{limit['h100-thin, stage 3']:,.0f} GPUs "
             f"on one port per node,\n~{limit['h100-thin, stage 3 + ZeRO++']:,.0f} with ZeRO++", fontsize=10)
ax.legend(fontsize=8)
plt.show()
for name, ts in t_of.items():
    print(f"{name:<28} T* {ts[0]:>6,.0f} at 8 GPUs, {ts[-1]:>6,.0f} at 1,024: hides up to N = B / T* = "
          f"{B / ts[-1]:>5,.0f}")

# Does it fit? Activations per GPU at the thin fabric's limit, kept for backward (no recomputation)
n_lim = limit["h100-thin, stage 3"]
tok = B / n_lim                                           # tokens per GPU per micro-step
flash = 34 * tok * 8192 * 80                              # Korthikanti et al.: 34 s b h bytes per layer
scores = simulate.simulate(PSI70, 80, 8192, 4096, 1, 1024, 3, checkpointing=False).gpu_bytes["activations"]
print(f"at N = {n_lim:,.0f}: {tok:,.0f} tokens per GPU; activations without recomputation, 80 layers:")
print(f"  34 bytes x tokens x 8,192 x 80 (attention scores not stored): {flash / 1e9:>6,.0f} GB")
print(f"  with the scores stored (simulate's formula, 64 heads):          {scores * tok / 4096 / 1e9:>6,.0f} GB")
print(f"  one sequence of 4,096 per GPU (N = 1,024), scores not stored:   {34 * 4096 * 8192 * 80 / 1e9:>6,.0f} GB")
ck = simulate.simulate(PSI70, 80, 8192, 4096, 2, 512, 3, checkpointing=True, **CLUSTERS["h100-thin"])
ck_t = simulate.simulate(PSI70, 80, 8192, 1, 1, 1024, 3, checkpointing=True, **CLUSTERS["h100-thin"]).hide_tokens
print(f"with checkpointing, 512 GPUs x 2 sequences: {ck.gpu_bytes['activations'] / 1e9:.1f} GB of activations, "
      f"{ck.gpu_bytes['total'] / 1e9:.1f} GB in all")
print(f"  (fits 80 GB: {ck.fits}); T* {ck_t:,.0f}: hides up to N = {B / ck_t:,.0f}, for a third more FLOPs")

# %% [markdown] id="ch14-16"
# On the DGX H100 stage 3 alone hides up to about 3,800 GPUs: at 1,024 it has nearly four times
# the tokens it needs. On the thin fabric it stops at about 480 GPUs: past it, every doubling of N halves the
# compute per GPU and leaves the traffic where it is, so the step stops getting shorter. ZeRO++
# moves the limit about 3.6 times further, to about 1,700. (From 8 to 16 GPUs T* jumps: the first
# step onto the street, more than eightfold on the thin fabric, a little on the DGX, whose network is
# taken as fast as its NVLink; after that (N−1)/N barely moves.)
#
# **But does it fit?** The break-even counts FLOPs and bytes, not memory. At the thin fabric's
# limit each GPU holds about 8,800 tokens in one micro-step, and without recomputation it keeps
# every layer's activations for backward: even with FlashAttention-style kernels, which do not
# store the attention scores, Korthikanti et al.'s 34 bytes per token per unit of width per layer
# come to about 196 GB, and storing the scores (the simulator's formula) to about 1,100 GB. Neither
# fits on an 80 GB H100: "about 480 GPUs" is the bandwidth's answer only. More GPUs do not rescue
# it: one sequence per GPU still needs about 91 GB. What fits is **activation checkpointing**
# (each layer keeps only its input, one layer is recomputed at a time: about 30 GB per GPU in all at
# 512 GPUs), and it even helps the traffic: the forward runs twice, so T* falls to 3/4 and stage 3
# hides up to about 640 GPUs, at the price of a third more FLOPs per step. (Splitting the
# activations over GPUs is the other way: tensor and sequence parallelism, next section.)
#
# ## 7. Where tensor and pipeline parallelism take over
#
# Past N = B/T*, data parallelism with stage 3 cannot hide its traffic, and a bigger batch may not
# be an option. Here the usual answer, Megatron-DeepSpeed's "3D parallelism", is stage 1 (or 2)
# over the data-parallel ranks, **tensor parallelism** (TP: each layer's matrices split over t
# GPUs) and **pipeline parallelism** (PP: the layers split over p stages). We do not simulate them;
# the same two counts say why each works, with the figures above (the inequalities are derived
# in the cell's comments):
#
# - **Stage 1 pays once per optimizer step.** Its traffic (DeepSpeed's 3Ψ elements: the gradient
#   all-reduce and the parameter all-gather) does not grow with micro-steps; stage 3's does. With
#   PP's many micro-batches per step the cost spreads over all of them. But stage 1 keeps the
#   whole 2-byte parameters and gradients on each GPU: 4Ψ = 280 GB for 70B, far beyond 80 GB.
#   TP and PP cut that to 4Ψ/(t·p).
# - **TP moves activations, per token**: Megatron's layer does two all-reduces of the layer's
#   activations in forward and two in backward. Its bytes grow with the tokens like the compute,
#   so the condition is on the width h, not on the tokens; it holds on NVLink, not on the street:
#   TP stays inside a node.
# - **PP moves one activation per token per stage boundary** (and its gradient back), against
#   6Ψ/p FLOPs per token of each stage's compute: tiny traffic, fit for the slow street.
#   DeepSpeed's pipeline engine accepts ZeRO stage 0 or 1 only ("ZeRO-2 and ZeRO-3 are incompatible
#   with pipeline parallelism", `runtime/pipe/engine.py`).
#
# **Predict, then run.** On the thin fabric at 1,024 GPUs with TP = 8 (a node) and PP = 4: how many
# bytes leave each node per step with stage 3 alone, and with stage 1 + TP + PP?

# %% id="ch14-17"
F_GPU, B_NET, B_NV = GPUS["h100-80gb"][1] * MFU, LINKS["ib-ndr-1x"][1], LINKS["nvlink-h100"][1]
H, TP, PP, N_ALL = 8192, 8, 4, 1024
per_gpu = B / N_ALL                                     # 4,096 tokens per GPU per step
compute_step = 6 * PSI70 * per_gpu / F_GPU               # the same split any way: 6 psi B / N per GPU
# stage 3 alone: 3 x 2 psi leave each node per micro-step (one micro-step of 4,096 tokens per GPU)
z3 = 3 * 2 * PSI70 * (N_ALL - 1) / N_ALL
# stage 1 + TP + PP: each node holds 1/PP of the layers; its 8 GPUs (one TP group) send, per
# optimizer step, DeepSpeed's 3 x 2 bytes per element of those layers over the data-parallel ring
z1 = 3 * 2 * PSI70 / PP
print(f"70B, {N_ALL} GPUs, h100-thin ({B_NET / 1e9:.0f} GB/s per node), {per_gpu:,.0f} tokens per GPU per step")
print(f"  compute per step:                               {compute_step:6.2f} s")
print(f"  stage 3 alone:      {z3 / 1e9:6.1f} GB leave each node: {z3 / B_NET:6.2f} s")
print(f"  stage 1, TP {TP}, PP {PP}: {z1 / 1e9:6.1f} GB leave each node: {z1 / B_NET:6.2f} s (once per step)")
s1 = simulate.simulate(PSI70, 80, 8192, 4096, 1, N_ALL, 1, checkpointing=False, **CLUSTERS["h100-thin"])
held = s1.gpu_bytes["params"] + s1.gpu_bytes["grads"]
print(f"  stage 1 keeps 2 psi + 2 psi = {held / 1e9:.0f} GB of parameters and gradients per GPU (simulate);")
print(f"  split by TP x PP = {TP * PP}: {held / (TP * PP) / 1e9:.2f} GB")
# TP: per token and layer, 4 all-reduces of h 2-byte values, 2(t-1)/t each on the ring, against
# 6 x 12 h^2 / t FLOPs (a layer holds about 12 h^2 parameters): hides when h >= 2 (t-1)/9 F mfu / beta
for where, beta in (("on NVLink", B_NV), ("across nodes, a port shared by 8 GPUs", B_NET / 8)):
    print(f"  TP {TP} hides when h >= 2(t-1)/9 x F mfu / beta = {2 * (TP - 1) / 9 * F_GPU / beta:>9,.0f}"
          f"  ({where})")
# PP: per token, each stage boundary sends h 2-byte activations forward and their gradients back
# (4h bytes) against 6 psi / p FLOPs: hides when psi / p >= (2/3) h F mfu / beta
print(f"  PP hides when each stage holds psi/p >= (2/3) h F mfu / beta = "
      f"{2 / 3 * H * F_GPU / (B_NET / 8) / 1e9:.2f}B parameters")
print(f"     (across nodes, a port shared by 8 GPUs); here psi/p = {PSI70 / PP / 1e9:.1f}B")

# %% [markdown] id="ch14-18"
# Stage 3 alone would keep each node's port busy for twice the compute of a step; stage 1 with
# TP inside the node and PP across nodes sends a quarter of that (1/p), once per step. TP on NVLink
# hides for any width above about 1,700 (70B's is 8,192), but across nodes it would need widths
# over 100,000: TP stays inside the node. PP needs each stage to hold only 0.4B parameters to
# hide its activations on the slow street; 70B in 4 stages holds 17.5B each. That is why large
# runs on thin fabrics use TP inside the node, PP across nodes, and stage 1 across replicas,
# while stage 3 (or FSDP) shines where the network is fast or the tokens per GPU are many.
#
# ## 8. The simulator against real ranks, here
#
# Everything above came from formulas. Do they describe what the engine really sends?
# `simulate.calibrate` trains a small bf16 MLP on 2 real ranks (gloo, this CPU) at stages 0, 1
# and 3, reads the ledger, and puts beside it what `simulate` predicts for the same Ψ, layers,
# ranks and bucket size, with this machine's own α-β fit (`zerolab.tools.bench`, chapter 6) as the
# link.
#
# **Predict, then run.** Will the wire bytes and the number of calls match exactly? Will the
# times?

# %% id="ch14-19"
rows = simulate.calibrate(2, layers=4, hidden=128, steps=3, reduce_bucket_size=20_000, stages=(0, 1, 3))
psi_mlp = rows[0]["psi"]
print(f"bf16 MLP, 4 x Linear(128, 128), psi = {psi_mlp:,}, 2 ranks; one step, gradients and parameters")
print(f"{'stage':<6}{'wire bytes':>11}{'simulated':>11}{'calls':>6}{'simulated':>10}   communication time")
for r in rows:                     # times unpadded: their digits change from run to run (nbval masks them)
    print(f"{r['stage']:<6}{r['wire_bytes']:>11,.0f}{r['sim_wire_bytes']:>11,.0f}{r['calls']:>6}{r['sim_calls']:>10}"
          f"   measured {r['seconds'] * 1e3:.2f} ms, simulated {r['sim_seconds'] * 1e3:.2f} ms")
exact = all(r["wire_bytes"] == r["sim_wire_bytes"] and r["calls"] == r["sim_calls"] for r in rows)
print(f"bytes and calls equal at every stage: {exact}; stage 3 moves 3 x 2 psi x (2-1)/2 = "
      f"{3 * 2 * psi_mlp * (2 - 1) // 2:,} bytes")
fig, ax = plt.subplots(figsize=(6.5, 3.2))
xs = range(len(rows))
ax.bar([x - 0.2 for x in xs], [r["seconds"] * 1e3 for r in rows], 0.4, label="measured (ledger)")
ax.bar([x + 0.2 for x in xs], [r["sim_seconds"] * 1e3 for r in rows], 0.4, label="simulated (alpha-beta fit)")
ax.set(xticks=list(xs), xticklabels=[f"stage {r['stage']}" for r in rows], ylabel="ms per step")
ax.set_title(f"Here, the collectives took {simulate.comm_factor(rows):.1f}x the alpha-beta time "
             "(comm_factor)", fontsize=10)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)  # below the bars
fig.tight_layout()
plt.show()

# %% [markdown] id="ch14-20"
# The bytes and the calls are exact: the simulator counts what the engine issues (DeepSpeed's
# collectives: stage 0's one all-reduce, stage 1's all-reduced buckets plus one all-gather,
# stage 3's two gathers per layer plus a reduce-scatter per bucket). The times are not: inside a
# training step the ranks wait for each other, share two cores with the computation, and pay
# Python's cost per call, so a call costs more than the same call in a tight benchmark. That
# ratio, `simulate.comm_factor(rows)` (in the figure's title; it changes from run to run), is what
# `simulate(..., comm_factor=...)` multiplies the link model by, and `zerolab simulate
# --calibrate` measures it from the shell. On a GPU cluster, measure the same way: run
# `nccl-tests` for β and α, and one training step for the factor.
#
# What this machine cannot show: two nodes, and NVLink beside InfiniBand. The two-link model
# is checked against its formulas (`tests/test_simulate_nodes.py`); chapter 13 (ZeRO++ on real
# ranks) measures the bytes per link on a crew split into virtual nodes.
#
# ## What we computed

# %% id="ch14-21"
thin = simulate.simulate(PSI70, 80, 8192, 1, 1, 64, 3, checkpointing=False, **CLUSTERS["h100-thin"])
print(f"break-even  T* = (N-1)/N x F mfu / beta: {t_star:,.0f} tokens per GPU per micro-step on one "
      f"DGX H100 (any psi)")
print(f"nodes       64 GPUs: dgx-h100 {t_of['dgx-h100, stage 3'][3]:,.0f}, h100-thin {thin.hide_tokens:,.0f} "
      f"(one port per node: 8x)")
print(f"ZeRO++      inter-node bytes {pp_rows['stage 3'].link_bytes['inter'] / PSI70:.2f} psi -> "
      f"{pp_rows['+ qgZ'].link_bytes['inter'] / PSI70:.2f} psi (64 GPUs); T* on the thin fabric "
      f"{t_of['h100-thin, stage 3 + ZeRO++'][3]:,.0f}")
print(f"scale       4.2M tokens per step hide stage 3 up to ~{limit['h100-thin, stage 3']:,.0f} GPUs (thin), "
      f"~{limit['h100-thin, stage 3 + ZeRO++']:,.0f} with ZeRO++")
print(f"memory      there, ~{flash / 1e9:,.0f} GB of activations per GPU without recomputation;")
print(f"            with checkpointing {ck.gpu_bytes['total'] / 1e9:.0f} GB in all at 512 GPUs")
print(f"here        bytes and calls of stages 0, 1, 3 equal to the simulator's on 2 ranks: {exact}")

# %% [markdown] id="ch14-22"
# - Stage 3 moves **3 · 2Ψ · (N−1)/N bytes per micro-step** against **6ΨT FLOPs**: it hides when the
#   tokens per GPU per micro-step reach **T* = (N−1)/N · F·mfu/β**. Ψ cancels: it is a property of
#   the cluster, not of the model. Checkpointing lowers it by 3/4.
# - Across nodes the collective runs at **the slower link**, whose β is the node's whole network
#   (all its ports). One port per node instead of eight needs eight times the tokens; faster GPUs
#   need more tokens, not fewer.
# - **ZeRO++** cuts what leaves each node from 6Ψ to about 1.5Ψ (qwZ halves the gathers, hpZ keeps
#   the backward gather in the node for 2Ψ/k of memory, qgZ sends 4-bit gradients), and T* nearly
#   as much; the price is memory (hpZ) and quantization error (chapter 13).
# - **Offload's PCIe** traffic (6Ψ/N in DeepSpeed, whose gradients go down as fp32; 10Ψ/N with the
#   parameters) shrinks with N; the **CPU step** does not overlap and decides whether offload pays.
# - At a **fixed global batch**, stage 3 hides up to **N = B/T*** GPUs, if the activations fit:
#   70B at that limit needs activation checkpointing on 80 GB GPUs. Beyond, stage 1 with TP
#   inside the node and PP across nodes sends less per step (once per step, 1/p of the model per
#   node); TP's own traffic needs NVLink, PP's fits the slow street.
# - The simulator's **bytes and calls equal the engine's** on real ranks; its times need this
#   machine's `comm_factor`.
#
# ## Questions
#
# 1. In section 2, change `MFU` to 0.55. What happens to T*, and why is a *better* utilisation
#    harder to hide behind?
# 2. A B200 has about twice the H100's dense bf16 FLOP/s. With the same network as `h100-thin`,
#    how many tokens per GPU per micro-step does stage 3 need? (Compute it by hand first.)
# 3. In section 4, add `quantized_gradients` alone (without qwZ and hpZ). By how much do the
#    inter-node bytes fall, and why less than with qwZ alone?
# 4. In section 6, double the global batch. Where do the three limits move? And with gradient
#    accumulation of 4 at the same batch: does stage 3 hide better or worse, and why?
# 5. Why does TP inside a node not reduce the bytes that leave the node for stage 3's gathers?
#    (Count the eight data-parallel rings that cross each node.)
#
# **Your turn:** in `exercises/14_break_even.ipynb` you compute three numbers as functions (the
# tokens that hide stage 3's traffic, the bytes that leave a node with each ZeRO++ option, the
# tokens that hide offload's PCIe transfers); each check holds yours against `zerolab.tools.simulate`
# on several clusters and names the mistake if it finds one.
