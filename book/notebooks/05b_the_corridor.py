# %% [markdown] id="ch05b-00"
# # Chapter 5b · The corridor (卸载的代价): what offload costs in time
#
# *Every trip to the warehouse takes time; don't jam the corridor.*
#
# In chapter 5 the heavy notebook went to the company warehouse and the backpacks got light. Now
# the bill. Once a day, when the crew updates its plans, each worker walks the corridor to the
# warehouse with the day's door stickers, updates his pages of the notebook there, and carries the
# new plans back. He cannot carry the whole notebook at once: he brings it **shelf by shelf**. With
# the notebook on the back shelves, every shelf must first be fetched and afterwards put back. The
# corridor is narrow, the walk is slow, and while a worker is in the warehouse nobody is moving
# furniture: **time traded for space**.
#
# | in the story | in training | in zerolab / DeepSpeed |
# |---|---|---|
# | the corridor to the warehouse | the PCIe link between GPU and host, ~25 GB/s a direction | the copies of gradients down and parameters up |
# | updating the notebook in the warehouse | the **host step**: Adam on the CPU | `StateHome.step` (`zerolab/offload/offload.py`); DeepSpeed's `DeepSpeedCPUAdam` |
# | a shelf carried at once | a **sub-group** of the optimizer step | `sub_group_size` (elements) |
# | fetching a shelf from the back, putting it back | NVMe reads and writes, on I/O threads | `pipeline_read`, `pipeline_write` |
#
# **What we measure here:** how `sub_group_size` cuts the host step and bounds its host memory; one
# step on the timeline, with the host step sub-group by sub-group and the NVMe reads and writes
# counted; what offload costs on GPUs (simulated from published figures); and what it costs on
# this machine.

# %% id="ch05b-01"
import shutil
import tempfile

import matplotlib.pyplot as plt

import zerolab
from zerolab.course.chapters import ch05       # chapters 5 and 5b's runs, tables and figures

crew = zerolab.Crew(2, threads=1)      # two ranks for the whole chapter (gloo, on this CPU)
N = crew.world_size
NVME = tempfile.mkdtemp(prefix="zerolab-nvme-")   # stands in for an NVMe mount
print(f"{N} ranks started; TinyLM as in chapter 5 (psi = 150,465), fp16 + AdamW, ZeRO stage 3")

# %% [markdown] id="ch05b-02"
# ## 1. The host step, one sub-group at a time
#
# The optimizer step with offload runs on the host, after backward. It does not take the whole
# notebook at once: DeepSpeed's stage 3 (`deepspeed/runtime/zero/stage3.py`, `step`) walks the
# rank's states **sub-group by sub-group**, at most `sub_group_size` elements each (default 10⁹);
# for each it brings the states in (from NVMe, if there), unscales the fp32 gradients, steps,
# copies the updated parameters up and lets the states go. zerolab's `StateHome` does the same: it
# cuts each group's shard into **tiles** of at most `sub_group_size` elements and packs
# consecutive tiles into sub-groups that stay within the size.
#
# With NVMe the states live in files, and only the sub-group being stepped is in host memory: its
# fp32 masters and Adam's two moments, 12 bytes per element. Rank 0 owns n = 75,232 elements in
# 28 groups (one per trained parameter, since stage 3 partitions each parameter on its own as
# DeepSpeed does; from 32 to 8,224 elements).
#
# **Predict, then run.** Both offloads to NVMe. How many bytes of swap buffers will the host need
# at most during the step, at `sub_group_size` 10⁹ (DeepSpeed's default), 20,000 and 5,000? And
# what does the smaller size cost in return?

# %% id="ch05b-03"
runs = crew.run(ch05.sub_group_runs, NVME, [10**9, 20_000, 5_000])[0]     # rank 0, 2 steps each
ch05.print_sub_groups(runs)
n = runs[20_000]["n"]
print(f"every run: the notebook in files {runs[20_000]['in_files']:,} bytes (12n): "
      f"{all(r['in_files'] == 12 * n for r in runs.values())}")
for size, r in runs.items():      # Adam's step counters: a 4-byte tensor per tile, kept in host memory
    print(f"between steps, sub_group_size {size:>13,}: the host keeps {r['buffers']:>3} bytes "
          f"= 4 x {r['tiles']} tiles: {r['buffers'] == 4 * r['tiles']}")

# %% [markdown] id="ch05b-04"
# The bound is 12 bytes times the **largest sub-group**, not times `sub_group_size`: at 20,000 the
# packing leaves at most 17,120 elements in a sub-group (the next tile would overflow it), so the
# host needs 205,440 bytes, not 240,000. At DeepSpeed's default the whole shard is one sub-group and
# the host holds all of it during the step: on a real model 10⁹ elements are 12 GB of swap buffers,
# which is why DeepSpeed's docs say to lower `sub_group_size` when host memory is short. The price
# is in the count: at 5,000 the groups are cut into 37 tiles (the nine shards of more than 5,000
# elements, the embedding's and the eight weight matrices', in two each) and 19 sub-groups, each an
# optimizer call and, with NVMe, three files read and written per tile. (With `offload_optimizer: cpu` the
# states stay in host memory; the size then bounds the fp32 gradients unscaled at once.)
#
# Between steps the host keeps only Adam's step counters, one 4-byte tensor per tile, which are not
# written to the files: 112 bytes at 10⁹ and at 20,000 (28 tiles), 148 at 5,000 (37 tiles).

# %% [markdown] id="ch05b-05"
# ## 2. The step on the timeline: the slowest link
#
# With offload, one training step has three kinds of work that can run at the same time:
#
# - **compute** on the device: forward and backward;
# - **transfer** between device and host: the gradients copied down as backward produces them, the
#   updated 16-bit parameters copied up after the step (and with `offload_param`, every gathered
#   layer's parameters up, in forward and in backward);
# - the **host step**: Adam on the CPU, sub-group by sub-group (with NVMe, each sub-group read from
#   its files before and written back after).
#
# Where they overlap, a step takes as long as its slowest link: T ≈ max(T_compute, T_comm,
# T_transfer). The copies overlap backward, and the NVMe reads and writes overlap the host step
# (`pipeline_read`: the next sub-group is read while this one steps; `pipeline_write`: the last
# one is written meanwhile). The host step itself must wait for the last gradient, so it adds:
# T ≈ max(T_compute, T_comm, T_transfer) + T_host, unless the parameter update is delayed by one
# step (the ZeRO-Offload paper's "delayed parameter update", which neither DeepSpeed 0.19.8 nor
# zerolab implements). What DeepSpeed 0.19.8 offers instead, both at stage 3 only (its config
# validators, `runtime/zero/config.py` `offload_ratio_check` and `offload_config.py`):
# `offload_optimizer.ratio` (ZeRO-Offload++'s partial offload: only that fraction of the optimizer
# states steps on the CPU, the rest stays and steps on the GPU, shrinking T_host and T_transfer
# for device memory) and `offload_optimizer.super_offload` (SuperOffload, CUDA only, for
# CPU-GPU "superchips": the CPU's Adam steps each sub-group as soon as its gradients arrive, so the
# host step overlaps backward instead of following it). zerolab implements neither.
#
# `engine.timeline` records, besides forward, backward, step and every collective, each sub-group
# of the host step (`host`) and each NVMe read or write (`io`, on the I/O threads).
#
# **Predict, then run.** Stage 3, optimizer states and parameters on NVMe, `sub_group_size`
# 20,000, pipelined. In one step, how many host-step bars? How many NVMe reads of optimizer state,
# knowing that AdamW keeps two moments per element and each tile has a master? And how many reads
# and writes of the parameter shards: 28 trained ones and the frozen `temperature`'s, which the
# root module owns (each module is gathered for forward and again for backward, and with
# `stage3_max_reuse_distance: 0` released after each; the step writes the updated values)?

# %% id="ch05b-06"
step = crew.run(ch05.one_step_timeline, NVME)[0]          # rank 0: the third step of a run
c = ch05.timeline_counts(step)
print(f"{step['tiles']} tiles in {step['sub_groups']} sub-groups; host-step bars: {len(c['host'])}")
print(f"NVMe, optimizer states: {len(c['opt_reads'])} reads, {len(c['opt_writes'])} writes "
      f"(master + 2 moments per tile: {3 * step['tiles']})")
print(f"NVMe, parameter shards: {len(c['param_reads'])} reads, {len(c['param_writes'])} writes")
print(f"every host-step bar starts after backward ends: {c['host_after_backward']}")

# %% [markdown] id="ch05b-07"
# The counts are exact: 5 sub-groups, 5 host bars; 3 files per tile each way. The parameter
# shards are 29 files, one per parameter: the 28 trained ones and the frozen `temperature`'s
# (stage 3 partitions it too, as DeepSpeed's `zero.Init` does, and offloads it with the others).
# Forward reads 30: each file once (the root module's two, `pos` and `temperature`, in the same
# all-gather), and the embedding a second time for the tied output head. Backward reads 30 again:
# each file once, and the embedding a second time (once for the head's backward, again for its
# own), because DeepSpeed releases a module's parameters after its backward
# (`post_sub_module_backward_function`) and reuse distance 0 keeps nothing: 60 reads. The step
# reads none of them: it overwrites each trained shard with the new values, 28 writes (the frozen
# one never changes). (`max_in_cpu: 0`
# keeps no shard in host memory between its uses; DeepSpeed's default, 10⁹ elements, would keep
# all of this model's there.)
#
# The timeline of the same step, whole (top) and zoomed into the optimizer step (bottom):

# %% id="ch05b-08"
ch05.plot_step_timeline(step)
plt.show()

# %% [markdown] id="ch05b-09"
# On this machine the timeline is dominated by what every stage-3 run pays here: the gathers of
# the parameters (blocking collectives, the ranks waiting for each other). The host step
# sits at the end, inside the `step` span, a bar per sub-group, with the NVMe reads and writes of
# the sub-groups running beside it on the I/O threads (the zoomed panel, sub-groups numbered):
# with `pipeline_read` the next sub-group's files are read while this one steps, and with
# `pipeline_write` the last writes are waited for only at the end of the step.
#
# ## 3. What offload costs on GPUs
#
# `zerolab.tools.simulate` models a step from published GPU, link and PCIe figures (its constants are in
# `zerolab.tools.simulate`: a 40 GB A100 at 312 TFLOP/s bf16 and 40 % utilisation, NVLink, PCIe 4.0 at
# 25 GB/s a direction, a CPU Adam of 10⁹ elements per second per GPU's share). Take a
# 13-billion-parameter model (40 layers, width 5,120, 2,048 tokens a sequence, one sequence per
# micro-batch) on 4 A100-40GB: ZeRO-3 alone needs 56 GB a GPU and does not fit; with both offloads
# it needs about 4 GB. Here is one step of each (as if ZeRO-3 alone fitted, for comparison), as
# the number of micro-batches per step grows.
#
# **Predict, then run.** With one micro-batch per step, how many times as long as ZeRO-3's will the
# offloaded step take: 1.2, 3, 10? Which part of the step will be the slowest link? And with 8
# micro-batches per step?

# %% id="ch05b-10"
GAS = [1, 2, 4, 8, 16]
plain, off = ch05.simulate_offload(GAS)
ch05.print_simulated(GAS, plain, off)

# %% id="ch05b-11"
ch05.plot_simulated(GAS, plain, off)
plt.show()

# %% [markdown] id="ch05b-12"
# With one micro-batch per step the host's Adam over its quarter of 13 billion parameters (about 3
# seconds) is the slowest link and the step takes 2.9 times as long as ZeRO-3's on the device. There
# is no fixed factor for "how much slower offload is" (a "3-5x" circulates without a measurement
# behind it): a slower CPU Adam or PCIe link, or more GPUs sharing one host, makes it more; more
# compute per step makes it less. The host step does
# not grow with the micro-batches, while compute does; that is the advice that comes with offload,
# **use gradient accumulation of 8 or more**: at 8 micro-batches the same offload costs 1.24 times
# the step. The PCIe transfers grow too (parameter offload gathers every layer from the host in
# every forward and backward), but they hide behind compute.

# %% [markdown] id="ch05b-13"
# ## 4. What offload costs here
#
# Now the same comparison measured on this machine: stage 3 against stage 3 with each offload, the
# median of 5 steps after a warm-up, on 2 ranks.
#
# **Predict, then run.** Here the "device" and the "host" are the same CPU and the same memory: a
# copy down or up is a memory copy, and Adam runs on the same cores either way. How much slower
# will offload to the host be? And to NVMe (here a folder on this machine's disk, which the
# operating system caches in memory)?

# %% id="ch05b-14"
cost = crew.run(ch05.step_times, NVME)[0]       # rank 0: medians of 5 steps, after a warm-up
ch05.plot_cost(cost)
plt.show()
for name, t in cost.items():
    print(f"{name:<24} {t * 1e3:.1f} ms per step (median of 5)")

# %% [markdown] id="ch05b-15"
# Even here, where there is no PCIe link to cross and Adam runs on the same CPU either way, offload
# is not free: each offloaded bar is longer than stage 3's, by a share you can read off the figure
# (run the cell again: the bars move, by how much depends on the machine and its load). What offload
# adds here is bookkeeping, the fp32 gradient copies, and with NVMe the file reads and writes of
# every tile, every step (which the operating system mostly serves from its page cache): on this
# machine, the most visible cost. On a GPU the two differences the simulator
# adds are exactly what this machine lacks: a **CPU Adam much slower than the GPU's** and a **PCIe
# link** (~25 GB/s a direction) **far slower than GPU memory** (about 1,555 GB/s of HBM bandwidth
# on an A100-40GB). On a GPU server, DeepSpeed also pins the host buffers (`pin_memory`) so that
# the copies run asynchronously beside compute. The lesson is the one practitioners give: offload
# only when the device memory is short, and prefer more GPUs when you can have them.

# %% [markdown] id="ch05b-gpu"
# **Measured on a GPU, one day.** On 2026-12-04 a lent machine with one NVIDIA H200 ran
# `tools/gpu_check.py` five times (its figures: `benchmarks/results/gpu_check_runs.txt`; this
# notebook does not run it): a 37.8M-parameter MLP at world size 1, where torch's own step took about 5 ms. With the
# optimizer offloaded to pinned host memory a step took 10-20x as long (Adam on the host over 37.8M
# parameters, every step), with it in NVMe files 100-140x (about half a gigabyte read and written
# each step), while the GPU memory of the model states fell from 605 MB to 76 MB (stage 3, bf16),
# and to 0.1 MB with the parameters offloaded too. The first run caught a bug in zerolab: the
# gradients went down to the warehouse as an asynchronous copy (`non_blocking=True`, the way pinned
# memory is meant to be used), and the host's Adam began reading them before the truck had arrived.
# The losses drifted away from the same run without offload, and nothing raised an error. Whatever
# an asynchronous copy carries must be waited for (`torch.cuda.synchronize`, or an event) before the
# host touches it; on a machine without a GPU, host and device are the same memory and such a bug
# cannot show.

# %% [markdown] id="ch05b-16"
# ## What we measured

# %% id="ch05b-17"
r = runs[20_000]
print(f"sub-groups  NVMe, sub_group_size 20,000: {r['sub_groups']} sub-groups, swap buffers at most "
      f"{r['peak_buffers']:,} bytes")
print(f"            (12 x {r['largest']:,}, the largest sub-group)")
print(f"timeline    {len(c['host'])} host-step bars for {step['sub_groups']} sub-groups; "
      f"{len(c['opt_reads'])} NVMe reads of optimizer state per step")
print(f"simulated   13B on 4 A100-40GB, offload / stage 3: {off[0].step_s / plain[0].step_s:.2f}x at 1 "
      f"micro-batch, {off[3].step_s / plain[3].step_s:.2f}x at 8")
print(f"here        a step: stage 3 {cost['stage 3'] * 1e3:.1f} ms, both offloads to NVMe "
      f"{cost['+ opt nvme + param nvme'] * 1e3:.1f} ms (medians, machine-dependent)")

# %% [markdown] id="ch05b-18"
# - **`sub_group_size` bounds the host step's memory**: 12 bytes times the largest sub-group with
#   NVMe, at the price of more optimizer calls and more, smaller file reads.
# - **The step is as slow as its slowest link**, plus the host step that waits for the last
#   gradient; the timeline shows the host step's bars after backward, NVMe beside them.
# - **Offload hurts when a step has little compute to hide it behind**: 2.9x simulated at 1
#   micro-batch, 1.24x at 8; use gradient accumulation with offload.
# - **On this machine, where host and device are the same, offload still adds to the step**
#   (bookkeeping, fp32 copies, file I/O with NVMe); the costs a GPU server pays on top (PCIe, a slow
#   CPU Adam) are the simulator's. DeepSpeed 0.19.8's `offload_optimizer.ratio` and `super_offload`
#   (stage 3) trade some of that cost back.
#
# ## Questions
#
# 1. In section 1, add `2_000` to the sizes. Predict the peak swap buffers and the number of
#    sub-groups first, then check. How many NVMe reads of optimizer state will a step make?
# 2. In section 2, `one_step_timeline` pipelines reads and writes. Copy it with `pipeline=False`
#    (it is in `zerolab/course/chapters/ch05.py`): do the counts change? Where do the I/O bars move?
# 3. In the simulation, pass `cpu_adam_elems_per_s=4e9` to `ch05.simulate_offload` (a faster CPU
#    Adam: DeepSpeed says its vectorised `DeepSpeedCPUAdam` is 5-7 times faster than PyTorch's). How
#    many micro-batches does it take for offload to cost less than 1.5x? And with 8 GPUs instead of
#    4 (`shape=dict(ch05.SHAPE_13B, gpus=8)`)?
# 4. The ZeRO-Offload paper's "delayed parameter update" overlaps the host step of step t with the
#    forward and backward of step t + 1. Which formula for T does it turn the step into, and what
#    does the model lose in exchange?
#
# **Your turn:** in `exercises/05_host_step.ipynb` you design the host optimizer step itself: from
# the contract it must keep (what arrives, what must be true when it returns, how much may be in
# host memory at once), you decide what to copy down and in which dtype, what to step, what to copy
# back up and in what order. The check runs your step in place of zerolab's inside the engine, at
# stages 1-3, in fp32, fp16 and bf16, and compares every bit.

# %% id="ch05b-19"
crew.close()
shutil.rmtree(NVME, ignore_errors=True)
