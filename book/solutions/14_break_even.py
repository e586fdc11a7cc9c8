# %% [markdown] id="ex14-00"
# # Exercise 14 · Does the move pay? Three numbers
#
# *Count the carrying, count the passing, and find the trip at which they are equal.*
#
# In chapter 14 you computed when stage 3's traffic hides behind compute. Here **you write the
# three computations as functions**, and each check holds your numbers against `zerolab.tools.simulate`
# (the model the chapter used) at several GPUs, links, world sizes and node sizes, within 1 %.
# Everything is per GPU and per micro-step, ZeRO stage 3, bf16/fp16 on the wire (2 bytes per
# element), α (the latency per call) left out.
#
# **When a check fails** it says what it expected, what you gave, and a hint that names the likely
# mistake. To see the full traceback as well, run `import zerolab.course.checks;
# zerolab.course.checks.full_tracebacks()` and run the check cell again.

# %% id="ex14-01"
from zerolab.course.checks.ch14 import check_inter_node_bytes, check_offload_hide_tokens, check_tokens_to_hide

# %% [markdown] id="ex14-02"
# ## 1. The break-even tokens
#
#     tokens_to_hide(peak_flops, mfu, beta_Bps, gpus, checkpointing=False) -> tokens
#
# The tokens T per GPU per micro-step at which the compute, 6ΨT FLOPs (8ΨT with activation
# checkpointing) at `mfu × peak_flops` FLOP/s, takes as long as stage 3's traffic over a link of
# `beta_Bps` bytes per second (bytes one rank sends, ring convention). Ψ is not an argument: it
# cancels.

# %% id="ex14-03"
def tokens_to_hide(peak_flops, mfu, beta_Bps, gpus, checkpointing=False):
    # BEGIN SOLUTION: compute 6 psi T / (mfu peak) = traffic 3 x 2 psi (N-1)/N / beta; solve for T
    flops_per_token = 8 if checkpointing else 6                # x psi
    traffic_s = 3 * 2 * (gpus - 1) / gpus / beta_Bps           # x psi: two gathers and a reduce-scatter
    return traffic_s * mfu * peak_flops / flops_per_token
    # END SOLUTION

# %% [markdown] id="ex14-04"
# Try it by hand first: one DGX H100 (989 TFLOP/s, MFU 0.4, NVLink at 360 GB/s, 8 GPUs). **Predict**
# the number before you run the cell, then check it.

# %% id="ex14-05"
print(f"{tokens_to_hide(989e12, 0.4, 360e9, 8):,.0f} tokens per GPU per micro-step")

# %% id="ex14-06" tags=["check"]
check_tokens_to_hide(tokens_to_hide)

# %% [markdown] id="ex14-07"
# ## 2. What leaves the node, with ZeRO++
#
#     inter_node_bytes(psi, gpus, ranks_per_node, qwz=False, hpz=False, qgz=False) -> bytes
#
# The bytes that leave **each node** per micro-step (N = `gpus`, k = `ranks_per_node`, m = N/k
# nodes), by the chapter's model:
#
# - a ring all-gather or reduce-scatter over all N ranks carries across each node what one rank
#   sends: (N−1)/N of the tensor; with one node, nothing leaves it;
# - `qwz`: every parameter gather in int8, 1 byte per element (the scales may be left out);
# - `hpz` (secondary partition = one node): the backward gather stays inside the node;
# - `qgz`: the gradients in 4 bits, 0.5 bytes per element: an all-to-all inside the node, then one
#   between nodes in which each node sends (m−1)/m of its Ψ.

# %% id="ex14-08"
def inter_node_bytes(psi, gpus, ranks_per_node, qwz=False, hpz=False, qgz=False):
    # BEGIN SOLUTION: forward gather + backward gather (0 with hpZ) + gradients, across the node boundary
    nodes = gpus // ranks_per_node
    if nodes == 1:
        return 0.0
    ring = (gpus - 1) / gpus
    gather = (1 if qwz else 2) * psi
    forward = ring * gather
    backward = 0.0 if hpz else ring * gather
    gradients = (nodes - 1) / nodes * 0.5 * psi if qgz else ring * 2 * psi
    return forward + backward + gradients
    # END SOLUTION

# %% [markdown] id="ex14-09"
# **Predict**, then run: 70B on 1,024 GPUs in nodes of 8, plain stage 3 and with all three options.
# How many Ψ leave each node, and what is the ratio?

# %% id="ex14-10"
plain, pp = inter_node_bytes(70e9, 1024, 8), inter_node_bytes(70e9, 1024, 8, True, True, True)
print(f"stage 3: {plain / 70e9:.3f} psi; with qwZ + hpZ + qgZ: {pp / 70e9:.3f} psi; {plain / pp:.2f}x less")

# %% id="ex14-11" tags=["check"]
check_inter_node_bytes(inter_node_bytes)

# %% [markdown] id="ex14-12"
# ## 3. When offload's PCIe transfers hide
#
#     offload_hide_tokens(peak_flops, mfu, pcie_Bps, gpus, offload_param=False) -> tokens
#
# Stage 3 with `offload_optimizer` (and, if `offload_param`, the parameters too), one micro-step
# per step, no checkpointing: the tokens per GPU at which the compute (6ΨT FLOPs) takes as long as
# this GPU's PCIe transfers in one direction's bandwidth `pcie_Bps`. Per step each GPU sends its
# gradient shard down and gets its updated parameter shard back: DeepSpeed converts the gradients
# to fp32 on the GPU before the copy (`runtime/zero/stage3.py` line 1457), so **4 + 2 bytes** per
# element of its shard of Ψ/N (the ZeRO-Offload paper's design sends fp16 down: 2 + 2); with
# `offload_param` it also brings its 16-bit parameter shard up for the forward gather and again for
# the backward one (2 + 2 more).

# %% id="ex14-13"
def offload_hide_tokens(peak_flops, mfu, pcie_Bps, gpus, offload_param=False):
    # BEGIN SOLUTION: PCIe bytes of this GPU's shard over pcie_Bps = 6 psi T / (mfu peak); solve for T
    bytes_per_element = 4 + 2 + (2 + 2 if offload_param else 0)   # of this GPU's shard: fp32 grads down
    pcie_s = bytes_per_element / gpus / pcie_Bps                   # x psi
    return pcie_s * mfu * peak_flops / 6
    # END SOLUTION

# %% id="ex14-14" tags=["check"]
check_offload_hide_tokens(offload_hide_tokens)

# %% [markdown] id="ex14-15"
# ## Where this lives in zerolab
#
# `zerolab.tools.simulate.simulate` computes all three: `Estimate.hide_tokens` is the first and the
# third (the tokens at which the compute meets the slower of the network and PCIe), and
# `Estimate.link_bytes["inter"]` the second; the module's docstring states the two-link model and
# the ZeRO++ formulas, and `simulate.SOURCES` where each figure comes from.
#
# Questions:
#
# 1. Your `tokens_to_hide` has no Ψ argument. Which term of `zerolab.tools.simulate`'s communication
#    time *does* depend on the model's shape, and when does it matter?
# 2. `offload_hide_tokens` falls as 1/N, `tokens_to_hide` does not. What does that say about
#    offload at 8 GPUs against offload at 512?
