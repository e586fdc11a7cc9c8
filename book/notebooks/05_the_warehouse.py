# %% [markdown] id="ch05-00"
# # Chapter 5 · The warehouse (卸载策略): where the bytes go
#
# *Leave the heavy notebook at the company warehouse; carry only today's pages.*
#
# The crew has cut its load as far as cutting goes: every worker carries only his share of the
# furniture, of the door stickers and of the heavy notebook of experience (ZeRO-3). Some workers
# still cannot lift their backpacks. So the captain uses his last resort: the **company
# warehouse**. The heavy notebook, which a worker needs only once a day when the crew updates its
# plans, is left there; a worker carries just the pages he needs today. If the warehouse's front
# room fills up, the notebooks go to the shelves at the back (slower to reach, but there is room
# for everything). The backpack really is lighter; the trips to the warehouse take time, and that
# is chapter 5b. This chapter follows the bytes.
#
# | in the story | in training | in zerolab / DeepSpeed |
# |---|---|---|
# | the backpack | the GPU's memory (here: the memory counted as the device's) | `engine.memory()` |
# | the company warehouse | host (CPU) memory: far cheaper and larger than GPU memory | `offload_optimizer: {device: cpu}`, `engine.memory("host")` |
# | the shelves at the back | an NVMe disk (ZeRO-Infinity) | `device: nvme`, `nvme_path`, `engine.memory("nvme")` |
# | the heavy notebook | optimizer states: fp32 master weights and Adam's two moments, 12 bytes per parameter | stepped on the host: `zerolab.offload.StateHome` |
# | the furniture left at the warehouse | stage 3's parameter shards on the host or NVMe | `offload_param` (stage 3 only) |
#
# **What we measure here:** where every byte lives with each offload switch, on the device, in host
# memory and on NVMe; the same bytes beside DeepSpeed's own estimator; a device-memory budget that
# plain data parallelism overruns and ZeRO-3 with offload fits; the stages and offload as one table
# of switches; and a published offload table checked against 16 bytes per parameter.

# %% id="ch05-01"
import shutil
import tempfile
import textwrap

import matplotlib.pyplot as plt

import zerolab
from zerolab.course.chapters import ch05       # this chapter's runs, tables and figures
from zerolab.i18n import fill           # textwrap.fill that also wraps Chinese (the zh edition's messages)
from zerolab.memory import count_params, largest_layer_params

crew = zerolab.Crew(2, threads=1)      # two ranks for the whole chapter (gloo, on this CPU)
N = crew.world_size
# A temporary folder stands in for an NVMe mount (on a GPU server: a fast local SSD, /local_nvme).
NVME = tempfile.mkdtemp(prefix="zerolab-nvme-")

model = ch05.make_model()
psi, L = count_params(model), largest_layer_params(model)
print(f"{N} ranks started; TinyLM: psi = {psi:,} parameters (tied embedding once, 1 frozen),")
print(f"largest layer L = {L:,} (the embedding, 257 x 64); fp16 + AdamW")
cfg = ch05.config(3, opt="cpu", param="cpu", world=N)    # DeepSpeed's keys; the other runs vary them
print(textwrap.fill(f"stage 3 + opt cpu + param cpu: {cfg['zero_optimization']}", 98, subsequent_indent="  "))

# %% [markdown] id="ch05-02"
# ## 1. Where every byte lives
#
# Mixed precision with Adam costs 16 bytes per parameter (chapter 1): 2 for the fp16 parameter,
# 2 for its fp16 gradient, 12 for the heavy notebook (fp32 master 4, Adam's two moments 4 + 4).
# ZeRO-3 splits all of it over the N ranks. Offload then moves parts of each rank's share off
# the device (DeepSpeed's `offload_optimizer` and `offload_param`, in
# `deepspeed/runtime/zero/offload_config.py`):
#
# - `offload_optimizer: {device: cpu}` (**ZeRO-Offload**, stages 1-3): the notebook (masters and
#   moments) lives in host memory, and so does an fp32 copy of the rank's reduced gradient shard
#   (the gradients are copied down as they are produced). The optimizer step runs on the CPU; the
#   updated 16-bit parameters are copied up.
# - `offload_param: {device: cpu}` (stage 3 only): the rank's 16-bit parameter shard lives in host
#   memory too, and is brought up only to be gathered for a module's forward or backward.
# - `device: nvme` (**ZeRO-Infinity**): the same, in files under `nvme_path`, streamed through host
#   memory one sub-group at a time.
#
# **Predict, then run.** On 2 ranks, each rank owns a shard of n = Ψ/N ≈ 75,000 elements. For
# stage 3 with both offloads to the host: how many bytes per element stay on the device, and how
# many go to host memory (count the fp32 gradient copy too)? And with both to NVMe: what is left
# in host memory? Write your guesses down.

# %% id="ch05-03"
places = crew.run(ch05.where_it_lives, NVME)     # each config trained 2 steps on every rank
ch05.print_places(places)
mine = places[0]
n = mine["stage 3"]["n"]

# %% [markdown] id="ch05-04"
# Read it per element of the shard (n = 75,232):
#
# - **stage 3, no offload**: 2n + 2n + 12n on the device (16 bytes per element; the 2 extra bytes
#   of parameters are the rank's shard of TinyLM's frozen `temperature`: no optimizer owns it, but
#   stage 3 partitions it like the others, as DeepSpeed's `zero.Init` does, its one element padded
#   to two so that each rank holds one).
# - **stage 2 + opt cpu**, ZeRO-Offload as its paper describes it: the device keeps the whole 16-bit
#   model, 2Ψ, and nothing else; the host holds 4n of fp32 gradients and 12n of notebook.
# - **stage 3 + opt cpu**: 2n on the device; the host 4n + 12n.
# - **+ param cpu**: the device keeps no parameter at all between uses, not even the frozen one's
#   shard (the gathered layers come and go, and count as buffers); the host holds 2n + 4n + 12n =
#   18 bytes per element, and the frozen shard's 2 bytes.
#   If you guessed 16, you forgot the fp32 gradient copy: the host step needs the gradients in fp32.
# - **NVMe**: 2n + 12n in files (and the frozen shard's 2 bytes); of host memory the table counts
#   only the fp32 gradients, 4n. Adam's step counters stay in host memory too (only the masters
#   and moments, one value per element, go to the files), but `engine.memory` counts them with the host's buffers, a column
#   this table does not print: 112 bytes on rank 0 (chapter 5b reads them).
#
# The leftovers: where the states stay in memory, the optimizer column is 12n plus 4 bytes per
# tile, Adam's step counter (a 4-byte tensor per parameter tensor the optimizer steps; 28 tiles at
# stage 3, one per trained parameter, since stage 3 partitions each parameter on its own as
# DeepSpeed does, 4 × 28 = 112 bytes; and one at stage 2, whose shard is one piece of a single flat
# buffer). In the NVMe row it is exactly 12n, the counters being the host's buffers above. The
# figure draws the same table.

# %% id="ch05-05"
ch05.plot_places(mine)
plt.show()

# %% [markdown] id="ch05-06"
# ## 2. Beside DeepSpeed's estimator
#
# DeepSpeed ships `estimate_zero2_model_states_mem_needs` and `estimate_zero3_model_states_mem_needs`
# (`deepspeed/runtime/zero/stage_1_and_2.py` and `stage3.py`; zerolab re-derives them in
# `zerolab.tools.estimate`, same arguments, same numbers). Their "per CPU" column is the host memory of
# the node, both ranks together; "per GPU" is one rank. With the optimizer offloaded at stage 3,
# the GPU row is 4L + 2Ψ/N (one gathered layer's 16-bit parameters and gradients, plus the rank's
# parameter shard) and the CPU row 16Ψ; with the parameters offloaded too, 4L and 18Ψ. We call
# them with `additional_buffer_factor=1.0` (the default 1.5 is headroom, not tensors).
#
# **Predict, then run.** From Ψ and L printed at the top, work out DeepSpeed's per-GPU bytes for
# stage 3 + opt cpu, 4L + 2Ψ/N. Will the ranks hold exactly that, more, or fewer? And will the
# host hold exactly 16Ψ?

# %% id="ch05-07"
worst = ch05.print_estimator(places, psi, L)

# %% [markdown] id="ch05-08"
# (`P` is Ψ.) DeepSpeed's estimator and the ranks agree: **offload moves 14 to 16 of the 16 bytes
# per parameter off the device** (14 with the optimizer offloaded: the 12 bytes of the heavy
# notebook and the 2 of the gradient shard; 16 with the parameters too), and the host takes them,
# 16Ψ or 18Ψ in all. The differences are a few bytes each, and each is accounted for below (read on
# only if you want the last byte; the next section does not need it).
#
# *The last bytes.* 4 × 16,640 + 2 × 150,465 / 2 = 217,025, and the ranks hold 1 byte more. On the host: the estimator counts the
# frozen `temperature` as trained (16 or 18 bytes), while the ranks keep only its 16-bit shards
# there, and only when the parameters are offloaded (2 bytes a rank: its one element padded to
# two); and it does not count Adam's step counters (4 bytes per tile per rank: 1 tile at stage 2,
# whose trainable parameters are one flat buffer, as in DeepSpeed; 28 at stage 3, one per trained
# parameter; 4 × 28 × 2 ranks = 224 bytes): 8 - 16 = -8, 224 - 16 = 208, 224 + 4 - 18 = 210. On the GPU: with the parameters on
# the device every rank holds a 2-byte shard of the frozen parameter (padding makes 2 elements of
# its 1), of which the estimator's 2Ψ/N counts 1; offloaded, it leaves the device with the
# others and the row matches exactly. At stage 3 the estimator's GPU row includes 4L; zerolab's
# model states at rest hold no gathered layer, so we add 4L to them (the gathered layers themselves
# count as buffers, in the next section).
#
# ## 3. The backpack's limit: a device-memory budget
#
# On a GPU, running out of memory is an error: `torch.OutOfMemoryError`. This machine has no GPU,
# so zerolab gives each rank a **device budget** (`zerolab.initialize(..., device_budget="1MiB")`,
# a zerolab option outside DeepSpeed's keys): the engine counts what it puts on the "device"
# (model states, gradient buckets and gathered parameters, and the activations autograd saves for
# backward, through saved-tensor hooks) and raises `DeviceOutOfMemoryError` (a
# `torch.OutOfMemoryError`) the moment the count would pass the budget, naming the biggest
# consumers and configs that would fit. (On a GPU it reads the CUDA allocator instead.)
#
# First, with a generous budget, the peak each config reaches during two steps.
#
# **Predict, then run.** With a budget of 1 MiB (1,048,576 bytes) per rank, which of these fit:
# stage 0 (plain data parallelism, DDP), 1, 2, 3, and stages 1, 2, 3 with the optimizer offloaded,
# and stage 3 with the parameters offloaded too?

# %% id="ch05-09"
BUDGET = 2**20
peak = crew.run(ch05.peaks)[0]                   # rank 0; each config trained 2 steps
ch05.print_peaks(peak, BUDGET)
ch05.plot_peaks(peak, BUDGET)
plt.show()

# %% [markdown] id="ch05-10"
# Most learners guess that ZeRO-3 fits: it divides everything by N. It does not: 16 bytes per
# element of a 75,000-element shard is already 1.2 MB, before any activation. (The peak is not the
# sum of the columns: activations are freed during backward while buckets fill, and stage 3's
# gathered layers come and go.) Now with the budget enforced: plain data parallelism first. The
# engine refuses before the first step, and says why.

# %% id="ch05-11"
ddp = crew.run(ch05.try_budget, ch05.BUDGETED["stage 0 (DDP)"], "1MiB")[0]
print(f"DeviceOutOfMemoryError, a torch.OutOfMemoryError: {ddp['is_torch_oom']}")
for line in ddp["error"].splitlines():          # the engine's message, wrapped to fit the page
    print(fill(line, 98, subsequent_indent="      "))

# %% [markdown] id="ch05-12"
# It stops at set-up, before any step: the fp32 masters alone (Adam's moments appear only at the
# first step) and the 16-bit parameters and gradients already pass 1 MiB. The message names the
# giants in the backpack, biggest first, and lists configs whose model states would fit, smallest
# change first (by the formula; the activations come on top, and the table above shows they still
# fit). The last of them, under the same budget:

# %% id="ch05-13"
z3 = crew.run(ch05.try_budget, ch05.BUDGETED["stage 3 + opt cpu + param cpu"], "1MiB")[0]
print(f"stage 3 + opt cpu + param cpu under device_budget='1MiB': error {z3['error']}; "
      f"{z3['steps']} steps;")
print(f"  peak within the {BUDGET:,} bytes: {z3['peak'] <= BUDGET}; loss fell: {z3['loss_fell']}")

# %% [markdown] id="ch05-14"
# Same model, same ranks, same training: plain data parallelism needs more than twice the budget
# and ZeRO-3 alone still too much; with the warehouse even stage 1 fits, and ZeRO-3 with both
# offloads trains inside the budget with room to spare.
# What is left on the device is what only the device can do: the layer being computed (gathered
# parameters and its gradients) and the activations, which chapter 7 attacks with recomputation.
#
# ## 4. The stages and offload as switches
#
# Stages 0-3 and offload are not a ladder of ever more complicated engines. Each is a setting of
# three independent switches: **how gradients are reduced**, **where parameters live**, **where
# optimizer states live**. `engine.switches()` says which way each points, and in which module
# of zerolab that switch lives.
#
# **Predict, then run.** Which switch does `offload_optimizer` turn? Which does stage 3 turn that
# stage 2 does not? Is there a switch that offload_param and stage 3 share?

# %% id="ch05-15"
ch05.print_switches(crew.run(ch05.switches, NVME)[0])

# %% [markdown] id="ch05-16"
# Read down the list: stage 1 turns the optimizer-states switch to *sharded* (and each rank keeps
# only its partition of the reduced gradients: with DeepSpeed's defaults each bucket is
# all-reduced and each rank keeps its slices, chapter 6); stage 2 reduces them during
# backward, bucket by bucket, so that no rank holds the whole gradient; stage 3 turns the
# parameters switch to *sharded, gathered per module*. Offload turns a different knob on the same
# switches: `offload_optimizer` says *where* the sharded optimizer states live (device, host,
# NVMe), and `offload_param` *where* stage 3's parameter shards live. That is why `offload_param`
# needs stage 3 (there are no parameter shards to move before it), and why `offload_optimizer`
# needs stage 1 or more in DeepSpeed (zerolab refuses the same combinations, with the reason).
#
# The names in brackets are zerolab's classes, and two are named for the paper's design:
# `ReduceScatterAtBoundary` (stage 1) and `ReduceScatterInBackward` (stages 2-3) issue what the line
# before them says, an **all-reduce** per bucket at stages 1-2 with DeepSpeed's defaults, and a
# reduce-scatter only at stage 3 or with zerolab's `"ideal_reduce_scatter": true` (chapter 6).
#
# ## 5. A published offload table, checked
#
# A widely shared ZeRO-3 guide gives this configuration for "training a 70B model on 4 A100-40GB"
# with both offloads to the CPU (`"offload_optimizer": {"device": "cpu", "pin_memory": true}`, the
# same for `offload_param`), and this table:
#
# | config | GPU memory | CPU memory | training speed |
# |---|---|---|---|
# | ZeRO-3 (8 GPUs) | 40 GB × 8 | 64 GB | 100% |
# | ZeRO-3 + Offload (4 GPUs) | 40 GB × 4 | 512 GB | ~35% |
# | ZeRO-3 + Offload (2 GPUs) | 80 GB × 2 | 512 GB | ~20% |
#
# **Predict, then run.** Offload moves bytes between the GPUs and the host; it does not make them
# disappear. Mixed-precision Adam needs 16 bytes per parameter somewhere. Can any of these rows
# hold the model states of a 70B model?

# %% id="ch05-17"
PSI = 70e9
ch05.print_capacity(PSI)

# %% [markdown] id="ch05-18"
# No row can: the most memory any row has, GPUs and host together, is 672 GB, and the model states
# of 70B parameters are 1,120 GB. (The first row, ZeRO-3 without offload on 8 GPUs, would need
# 16Ψ/8 = 140 GB on each 40 GB GPU.)
#
# **Predict, then run.** DeepSpeed's estimator puts the offloaded states in host memory. For a
# Llama-2-70B-shaped model (the largest layer, the 32,000 × 8,192 embedding, is what one GPU must
# gather at once) with both offloads on one node: how many GB of host memory will it ask for,
# with its headroom factor 1 (section 2's 18Ψ) and with its default 1.5?

# %% id="ch05-19"
ch05.print_70b_estimator(PSI, largest=32_000 * 8_192)

# %% [markdown] id="ch05-20"
# With both offloads each GPU needs only 4L ≈ 1 GB, but the node's host memory needs 18Ψ = 1,260 GB
# (1,890 GB with DeepSpeed's default headroom) against the table's 512 GB; with the optimizer
# alone offloaded, 36 GB a GPU of model states on 4 GPUs (inside a 40 GB A100, but the 4 GB left
# must hold the activations, the gathered layers, the buckets and the CUDA context: too tight for
# a 70B model's activations without recomputation) and 16Ψ = 1,120 GB of host memory. So, as written, the table cannot describe training a 70B model with Adam. What would
# make it work:
#
# - **NVMe** (ZeRO-Infinity, section 1's last row): the 16-18 bytes per parameter go to a local
#   SSD of a few TB, and the host keeps only a sub-group's swap buffers (chapter 5b). This is what
#   DeepSpeed recommends for models whose states exceed host memory.
# - **A smaller model**: 672 GB holds the model states of at most 42B parameters (fewer in practice:
#   activations, buffers and the estimator's headroom need room too).
# - **Another optimizer or training method** with fewer bytes per parameter (8-bit optimizer
#   states, or LoRA, which trains a tiny fraction of the parameters).
#
# The speed column (35% and 20% of the first row's) gives no setup it was measured on, and no run
# can have measured it for rows that cannot start; chapter 5b simulates what offload costs and
# shows it depends on the compute per step, not a fixed factor.
#
# ## What we measured

# %% id="ch05-21"
s3 = mine["stage 3"]["mem"]["device"]["model_states"]
both = mine["stage 3 + opt cpu + param cpu"]["mem"]
print(f"places     rank 0, n = {n:,}: stage 3 holds {s3:,} bytes on the device; with both offloads")
print(f"           {both['device']['model_states']:,} on the device and {both['host']['model_states']:,} "
      f"on the host (18n + counters + frozen shard)")
print(f"estimator  host bytes of both ranks match DeepSpeed's 16P / 18P rows within {worst} bytes")
print(f"budget     1 MiB: DDP refused at set-up (its model states reach {peak['stage 0 (DDP)']['states']:,});")
print(f"           stage 3 + offload trained within it: {z3['peak'] <= BUDGET}")
print(f"70B        16 x 70e9 = {16 * PSI / 1e9:,.0f} GB > 672 GB, the most any row of the table has")

# %% [markdown] id="ch05-22"
# - **Offload moves bytes, it does not remove them.** `offload_optimizer` takes the heavy notebook
#   (12 bytes per parameter) and an fp32 gradient copy (4) to host memory; `offload_param` (stage 3
#   only) takes the 16-bit parameter shards too (2). The device keeps what it computes with. NVMe
#   takes the same bytes off the host as well, streamed one sub-group at a time.
# - **DeepSpeed's estimators** (16Ψ and 18Ψ on the host, 2Ψ/N + 4L or 4L on the GPU) match what the
#   ranks hold, byte for byte once a frozen parameter, its padding and Adam's step counters are
#   counted.
# - **A device budget** makes the trade visible: plain data parallelism overflows 1 MiB before its
#   first step; ZeRO-3 with both offloads trains in it.
# - **The stages and offload are switches**: how gradients are reduced, where parameters live, where
#   optimizer states live; offload chooses the place, the stage chooses the sharding.
# - **Check a plan against 16Ψ first**: no stage and no offload to CPU fits 1,120 GB of model states
#   into 672 GB.
#
# ## Questions
#
# 1. With the optimizer offloaded at stage 2, the device still holds 2Ψ. Why does ZeRO-Offload keep
#    the whole 16-bit model on every GPU, and what does stage 3 + `offload_param` pay to avoid it?
# 2. Section 3's budget: lower it to 300 KiB (`"300KiB"` in the `try_budget` cells). Does any config
#    fit? Read the error message: which consumer is left, and what would you do next? (Chapter 7.)
# 3. Run `ch05.print_places(crew.run(ch05.where_it_lives, NVME, {"s1": dict(stage=1, opt="cpu")}))`.
#    Predict the device bytes first: which of the 16 bytes per parameter does stage 1 + offload keep
#    on the device, and why more than stage 2 + offload?
# 4. Which of the table's rows becomes feasible for a 35B model? Check with `ch05.print_capacity(35e9)`,
#    then with the estimator's rows: does the host memory suffice with DeepSpeed's 1.5× headroom?
#
# **Next:** chapter 5b, *The corridor*, follows the same offload in time: the host step sub-group by
# sub-group, the NVMe reads and writes on the timeline, and what offload costs on GPUs and here. Its
# exercise (exercise 5) is the host step itself.

# %% id="ch05-23"
crew.close()
shutil.rmtree(NVME, ignore_errors=True)
