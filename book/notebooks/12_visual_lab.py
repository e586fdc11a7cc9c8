# %% [markdown] id="ch12-00"
# # Chapter 12 · The visual lab (可视化实验室)
#
# *Look at the move while it happens.*
#
# Every chapter so far measured one thing at a time and printed it beside its formula. This one
# puts the whole move on screen, in four modes, each a set of controls over a **real engine on
# real ranks** (or, for clusters we do not have, over the simulator):
#
# | in the story | in training | what the lab draws |
# |---|---|---|
# | the workers of the crew | the **ranks** (N processes, gloo here) | one row or one line per rank |
# | the furniture | the **parameters** | who keeps which elements |
# | the door stickers | the **gradients** | who keeps which elements |
# | the heavy notebook of experience | the **optimizer states** (fp32 masters, Adam's momentum and variance) | who keeps which elements |
# | the folding chair | the **activations** | (not sharded by any stage; the application mode counts them) |
# | the captain's tally of every shout | the **ledger** (`engine.ledger`, one record per collective) | each collective, in order |
# | the stopwatch | the **timeline** (`engine.timeline`) | when each rank computed and waited |
# | the company warehouse | **offload**: host memory and NVMe | what each rank keeps where, and when it moves |
#
# 1. **Basic**: choose N, the ZeRO stage and the precision; see which shard of each giant every
#    rank holds, measured from the engine's own tensors.
# 2. **Core**: one training step played back, collective by collective: what moved between the
#    ranks, and what each rank held just after. The collectives are DeepSpeed's for the config; at
#    stages 1-2 the paper's ideal is an option, labelled as zerolab's switch.
# 3. **Application**: choose a model, a GPU count, the GPU memory and the interconnect; see which
#    configurations fit and how fast a step would be, from the scale simulator.
#
# 4. **Extension**: move the optimizer states (and at stage 3 the parameter shards) off the device,
#    to host memory or to NVMe files; see what each rank keeps in each place, and when in the
#    step the bytes move, and at stage 3 how many gathers were prefetched. Then spread the crew
#    over two buildings and switch on ZeRO++ (hpZ, qwZ, qgZ): the bytes that stay inside a node
#    and those that cross between nodes, beside the formula, and what hpZ costs in memory.
#
# The widgets answer as you move them. If you read this notebook without a running kernel, the
# printed cell above each widget shows what the widget shows at its first setting.

# %% id="ch12-01"
import matplotlib.pyplot as plt

import zerolab
from zerolab.course import lab

pool = lab.CrewPool(threads=1)       # one crew per N, started on first use and kept
N_MAX = zerolab.fit_ranks(4)         # the most ranks this machine allows (ZEROLAB_MAX_RANKS)
model = lab.lab_model()
print(f"the lab's model: zerolab's TinyLM, Ψ = {sum(p.numel() for p in model.parameters() if p.requires_grad):,}"
      f" trainable parameters")
print(f"{lab.MICRO_BATCH} sequences per rank per step")
print(f"ranks: up to {N_MAX}; buckets of {lab.BUCKET:,} elements; AdamW")

# %% [markdown] id="ch12-02"
# ## 1. Basic: who holds which shard
#
# Each choice runs `zerolab.initialize` on N real ranks, trains one step (so that Adam's states
# exist) and reads, on every rank, which elements of each giant that rank's tensors hold. Every
# giant is drawn as a bar of all its elements, the model's flat buffers laid end to end (white
# lines between buffers); a rank's row is coloured where the rank keeps those elements. The
# bytes at the right are what `engine.memory()` measured on that rank.
#
# **Predict, then run.** At stage 2 with 4 ranks, what fraction of the gradients does rank 1
# keep? And of the parameters? Write both down.

# %% id="ch12-03"
N0 = min(4, N_MAX)
for stage in range(4):
    print(lab.holdings(N0, stage, "bf16", pool=pool).describe(), end="\n\n")
fig = lab.draw_holdings(lab.holdings(N0, 2, "bf16", pool=pool))
plt.show()

# %% [markdown] id="ch12-04"
# Stage 0 is the old crew: every worker carries the whole household. Stage 1 tears the heavy
# notebook into N parts, stage 2 the door stickers too, stage 3 the furniture as well; the
# coloured blocks of the ranks never overlap and together cover every element. Each flat buffer
# is padded to a multiple of N, so each rank's block in a buffer has the same size.
#
# Now the controls: change N, the stage and the precision. In fp32 the optimizer states are
# 8 bytes per element (momentum and variance; the fp32 parameters are their own master copy),
# in bf16 and fp16 12 (a separate fp32 master as well). The first setting is the one printed
# above.

# %% id="ch12-05" tags=["nbval-ignore-output"]
lab.basic_widget(pool, world_size=N0, stage=2, precision="bf16", max_ranks=N_MAX)

# %% [markdown] id="ch12-06"
# ## 2. Core: one step, played back
#
# Here the engine trains a warm-up step, then one more step while recording three things on
# every rank: the **ledger** (one record per collective: op, tag, elements, bytes), the
# **timeline** (when the rank computed, shouted and waited) and, after every collective and at
# each phase boundary, `engine.memory()` (the bytes of every giant, and of the buffers in flight:
# gradient buckets, gathered parameters).
#
# **Predict, then run.** At stage 3 the lab's model has 16 trained parameters, and stage 3
# partitions each on its own, as DeepSpeed does (16 groups, 16 Adam step counters); TinyLM's
# frozen `temperature` (1 element) is partitioned like the others. Gathers go by module: 9 modules
# own parameters (the root, with `pos` and `temperature`; the embedding; each block's LayerNorm, up
# and down projections; the final LayerNorm; the output head's one weight is the embedding's), and
# each module's parameters are all-gathered in one call. How many times will each module's
# parameters be all-gathered in one step? And how many reduce-scatters will there be, with
# `reduce_bucket_size` 2,000 elements?

# %% id="ch12-07"
trace = lab.step_trace(2, 3, "bf16", pool=pool)
print(trace.describe())
print()
print("the step's collectives on rank 0, in the order they were issued (zerolab's own order checks,")
print("which DeepSpeed does not send, are kept apart: the summary's last line)")
for c in trace.calls:
    print(f"  #{c.index:<3}{c.op:<15}{c.tag:<32}{c.numel:>7,} elements of {c.dtype}")

# %% [markdown] id="ch12-08"
# Read the list from the top. The lab runs DeepSpeed's stage 3 at reuse distance 0 with prefetch
# off, the paper's schedule (chapter 8 shows what DeepSpeed's default prefetch changes): forward
# gathers each module's parameters just before it runs, one all-gather per module. First the root's
# own `pos` with the frozen temperature (`params pos + 1 more`: the untrained parameter is
# partitioned and gathered like the others, as DeepSpeed's `zero.Init` does), then the embedding,
# each block's LayerNorm, up and down projections (weight and bias in one call, each padded to N
# on its own: DeepSpeed partitions every parameter) and the final LayerNorm; the output head, which
# shares the embedding matrix, gathers the embedding a second time. Backward gathers every module
# again in reverse (each was released after its forward), the embedding for the head's backward;
# then the embedding a **fourth** time (`params embed.weight`) for its own backward: DeepSpeed
# releases a module's parameters after its backward (`post_sub_module_backward_function`,
# `runtime/zero/parameter_offload.py`), and with reuse distance 0 nothing is kept from the head to
# the embedding. The
# gradients are packed, in the order backward finishes the modules, into buckets of
# `reduce_bucket_size` elements, and each bucket is **reduce-scattered** in one call
# (`grads bucket 0`, ...): DeepSpeed's stage 3, not one call per module. The step ends with one small
# all-reduce (the gradient norm, 8 bytes; DeepSpeed's stage 3 checks overflow in fp16 only). No all-gather follows: at stage 3 each
# rank updates only its own shard, and the next forward will gather.
#
# The picture shows one moment of the step: rank 0's timeline with the collective shaded, what
# that collective did to each rank's data, and the bytes every rank held over the step.

# %% id="ch12-09"
first_rs = next(c.index for c in trace.calls if c.op == "reduce_scatter")
print(trace.calls[first_rs].describe(trace.world_size))
after = trace.sample_after(first_rs)
print(f"rank 0 right after it: params {after.params:,} B, grads {after.grads:,} B, "
      f"optimizer states {after.optimizer_states:,} B, buffers {after.buffers:,} B")
fig = lab.draw_step(trace, first_rs)
plt.show()

# %% [markdown] id="ch12-10"
# Now play it: press ▶ (or drag the collective slider) to step through the collectives, and
# change N, the stage and the precision to record another step. At stages 1 and 2 DeepSpeed
# **all-reduces** each gradient bucket (each rank keeps the slices of its own partition) and
# all-gathers the flat parameter buffer once after the step: 3Ψ. Tick *paper's ideal* to see the
# ZeRO paper's reduce-scatter instead (zerolab's `ideal_reduce_scatter` switch, not DeepSpeed's):
# 2Ψ. At stage 0 the gradients are all-reduced at the boundary. Watch the memory line: at stage 3
# it rises as modules are gathered and falls as they are released. (*On a GPU cluster* DeepSpeed
# issues these calls on NCCL streams beside the compute, into preallocated bucket buffers; here
# they run over gloo on the same CPU cores.)

# %% id="ch12-11" tags=["nbval-ignore-output"]
lab.core_widget(pool, world_size=2, stage=3, precision="bf16", max_ranks=N_MAX)

# %% [markdown] id="ch12-12"
# ## 3. Application: plan a run on a real cluster
#
# The last mode leaves this machine. For a published model shape it asks `zerolab.tools.simulate` for
# every configuration (stages 0-3, stage 3 with the optimizer offloaded to the CPU, and with the
# parameters too): memory per GPU (model states by stage, activations with checkpointing, the
# stage-3 working set, a gradient bucket) and step time (compute at 40 % of the GPU's peak,
# DeepSpeed's traffic for the stage over the link, 2Ψ at stage 0 and 3Ψ at stages 1-3, PCIe
# transfers and the CPU's optimizer step with offload). Beside it, DeepSpeed's own estimator of the model states (`zerolab.tools.estimate`, the same
# numbers as `estimate_zero2/3_model_states_mem_needs`). These are estimates from published link
# and GPU figures: trust the shape (what fits, what dominates), not the last 10 %.
#
# **Predict, then run.** Llama-2 70B on 64 A100s of 80 GB: which stages fit?

# %% id="ch12-13"
p = lab.plan("Llama-2 70B", gpus=64, gpu="a100-80gb", link="ib-hdr")
print(p.describe())
fig = lab.draw_plan(p)
plt.show()

# %% [markdown] id="ch12-14"
# 16 bytes per parameter is 1,104 GB for Llama-2 70B's 69B parameters: no GPU holds that, so stage 0 is out.
# Stage 1 still keeps the bf16 parameters and gradients whole on every GPU (4 bytes per
# parameter, 276 GB); stage 2 keeps the parameters whole (138 GB); only stage 3 divides all of it
# by 64. Offloading then frees the GPU almost entirely, at the price of the CPU's optimizer step.
#
# Now choose your own: a smaller GPU, fewer GPUs, a slower link, a bigger micro-batch.

# %% id="ch12-15" tags=["nbval-ignore-output"]
lab.application_widget(model="Llama-2 7B", gpus=8, gpu="a100-80gb", gpu_memory_gb=80, link="nvlink-a100")

# %% [markdown] id="ch12-16"
# ## 4. Extension: what lives where, and when
#
# The heavy notebook does not have to stay on the desk. With `offload_optimizer` the optimizer
# states (fp32 masters, Adam's two moments) and the fp32 gradient shard move to **host memory**
# (`"cpu"`), and the optimizer step runs there, on the CPU; with `"nvme"` they live in **files**
# and stream through host memory one *sub-group* (at most `sub_group_size` elements) at a time,
# the next one read (`pipeline_read`) and the last one written (`pipeline_write`) on I/O threads
# while the current one steps. At stage 3, `offload_param` sends the parameter shards there too;
# each gather copies its shard up first.
#
# Each choice runs a real engine on 2 ranks: a warm-up step, then one recorded step. The bytes
# are `engine.memory("device")`, `engine.memory("host")` and `engine.memory("nvme")` after that
# step; the step's timeline has a row for the host optimizer step (one span per sub-group) and
# for every NVMe read and write. The NVMe files go to a temporary folder, removed afterwards.
#
# On this machine the "device" is the CPU playing the GPU's part, and host memory is the same
# RAM: the *accounting* is exact (which tensor lives where), the *times* are a small machine's.
# At stage 3 the gathers are also **prefetched**: from the second step on, the engine follows the
# order of modules it recorded in the previous one and, at every module's fetch (DeepSpeed's
# rule), starts one all-gather of the next modules while fewer than
# min(`stage3_max_live_parameters` − available, `stage3_prefetch_bucket_size`) elements are taken;
# what is in flight is bounded only by `stage3_max_live_parameters`. The lab shows each gather,
# when it happens, how many were prefetched, and the release after use.
#
# **Predict, then run.** Stage 3, 2 ranks, bf16, optimizer offloaded to the CPU: how many bytes
# per element of its shard does a rank keep in host memory? (fp32 master, two moments, the fp32
# gradient.) And what is left on the device?

# %% id="ch12-17"
shard = sum(lab.placement(2, 3, "none", pool=pool).sub_groups[0])
print(f"stage 3, N = 2, bf16: each rank's shard is {shard:,} elements;")
print("rank 0's model states after the step, in bytes")
print(f"{'optimizer':<11}{'params':<8}{'device':>9}{'host':>9}{'NVMe':>9}")
for opt, par in (("none", "none"), ("cpu", "none"), ("cpu", "cpu"), ("nvme", "none"), ("nvme", "nvme")):
    p = lab.placement(2, 3, opt, par, pool=pool)
    print(f"{opt:<11}{par:<8}" + "".join(f"{p.bytes(0, w):>9,}" for w in lab.PLACES))
print()
print(lab.placement(2, 3, "none", pool=pool).describe())

# %% [markdown] id="ch12-18"
# Read the host column with the optimizer on the CPU: 16 bytes per element of the shard (4 the
# fp32 master, 8 the two moments, 4 the fp32 gradient), plus Adam's 4-byte step counter per
# tensor; the device keeps only the bf16 parameter shard, TinyLM's frozen temperature included (it
# is partitioned like the others: 1 element per rank at N = 2). Offload the parameters too and the
# device keeps nothing: the temperature's shard goes to the host with the rest. On NVMe the
# same bytes sit in files, except the gradient, which the host step reads from memory.
#
# Now the step itself, with everything on NVMe, sub-groups of at most 1,000 elements and both
# pipelines on. The rows of the timeline say when the bytes moved: parameter shards read from
# their files at each gather (forward and backward), the optimizer states read, stepped and
# written back sub-group by sub-group. The time split is measured (and so is only drawn, never
# printed): on a laptop it is mostly the collectives and Python.

# %% id="ch12-19"
p = lab.placement(2, 3, "nvme", "nvme", sub_group_size=1000, pipeline_read=True, pipeline_write=True, pool=pool)
print(p.describe())
fig = lab.draw_placement(p)
plt.show()

# %% [markdown] id="ch12-20"
# Now the controls: the stage, where the optimizer states live, where the parameter shards live
# (stage 3 only), the sub-group size and the NVMe pipelines. Try the optimizer on the CPU and
# watch the host-step row appear at the end of the step; then NVMe without pipelining, with
# pipelining, and with smaller sub-groups. The first setting is the one printed above.

# %% id="ch12-21" tags=["nbval-ignore-output"]
lab.extension_widget(pool, world_size=2, stage=3, offload_optimizer="none", max_ranks=N_MAX)

# %% [markdown] id="ch12-22"
# ### ZeRO++: the crew in two buildings
#
# A big crew does not fit in one building. Shouting inside a building is cheap (NVLink between
# the GPUs of a node), shouting across the street is not (InfiniBand between nodes), and at stage 3
# every gather and every gradient reduction spans all the ranks, so all of it crosses the street.
# ZeRO++ (Wang et al. 2023) cuts what crosses, with three of DeepSpeed 0.19.8's stage-3 keys:
#
# - `zero_hpz_partition_size` h (**hpZ**): after a module's gather each rank keeps a **secondary
#   shard**, 1/h of the module, over its group of h consecutive ranks (one building when h is the
#   ranks per node); while it has one, the module is gathered inside the group. DeepSpeed drops it
#   at every optimizer step (`partition_parameters.py`, `_partition_param_sec`; `stage3.py`,
#   `invalidate_secondary_tensor`);
# - `zero_quantized_weights` (**qwZ**): the parameter gathers carry int8 blocks and one fp32 scale
#   per block, instead of bf16;
# - `zero_quantized_gradients` (**qgZ**): the gradients travel as int4 through two all-to-alls, inside
#   the node first, then across (DeepSpeed's `all_to_all_quant_reduce`; only with more than one node).
#
# Here the crew is 4 ranks in 2 *virtual* buildings of 2 (`zerolab.Crew(4, nodes=2)`): the ranks share
# this machine, but the ledger files every collective under `intra` (its ranks share a node) or
# `inter` (they span nodes), as it would on a cluster. Chapter 13 measures each component's error;
# this mode shows where the bytes go. The model is four `Linear(64, 64)` (Ψ = 16,640): the shape the
# simulator assumes, and shards that DeepSpeed's qwZ quantizer can cut into blocks of a multiple of
# 8 elements (the lab's TinyLM, whose sizes do not divide, cannot run qwZ). Each row runs a fresh
# engine: one optimizer step, then a second one read from the ledger. Beside it, the formula:
# `zerolab.tools.simulate` for the same Ψ, ranks, nodes and keys.
#
# **Predict, then run.** Without ZeRO++, how many bytes does rank 0 send across the street in one
# step (a forward gather, a backward gather and a reduce-scatter, each 3/4 of 2 bytes × Ψ)? With
# hpZ 2, which of the three stays inside the building, and how many bytes of secondary shards does
# each rank hold after the backward? With 2 micro-steps per step?

# %% id="ch12-23"
N_ZPP, NODES = (4, 2) if N_MAX >= 4 else (2, 2)
ROWS = {"ZeRO++ off": {}, "hpZ 2": dict(hpz=2), "hpZ 2, 2 micro-steps": dict(hpz=2, accumulation=2),
        "qwZ": dict(qwz=True), "qgZ": dict(qgz=True), "hpZ 2 + qwZ + qgZ": dict(hpz=2, qwz=True, qgz=True)}
runs = {name: lab.links(N_ZPP, NODES, pool=pool, **kw) for name, kw in ROWS.items()}
print(f"stage 3, {N_ZPP} ranks as {NODES} nodes, bf16, Ψ = {runs['ZeRO++ off'].psi:,}: rank 0's bytes in one step")
print(f"{'':<22}{'ledger: inside':>15}{'across':>9}{'formula: inside':>17}{'across':>9}{'secondary':>11}")
for name, lk in runs.items():
    got, f = lk.by_link(0), lk.formula
    print(f"{name:<22}{got['intra']:>15,.0f}{got['inter']:>9,.0f}{f['intra']:>17,.0f}{f['inter']:>9,.0f}"
          f"{lk.secondary[0]:>11,}")
exact = [n for n in ROWS if "q" not in n]
print(f"ledger = formula, byte for byte, in the {len(exact)} rows without quantization: "
      f"{all(runs[n].by_link(0) == {k: runs[n].formula[k] for k in ('intra', 'inter')} for n in exact)}")

# %% [markdown] id="ch12-24"
# Read the rows from the top. Without ZeRO++ all three kinds of traffic cross the street:
# 3 × 3/4 × 2 × 16,640 = 74,880 bytes. With hpZ 2 the backward's gathers run over the two ranks
# of a building (1/2 × 2 × 16,640 = 16,640 bytes, none across), and each rank holds the price
# after the backward: 2 bytes × Ψ / h = 16,640 bytes of secondary shards, twice its 1/N shard of
# the parameters (8,320 bytes), until the optimizer step drops them. With 2 micro-steps the
# second forward finds the secondary still there and stays inside too: only the step's first
# forward crosses. qwZ halves the gathers (int8 and one 4-byte scale per block); qgZ sends int4
# gradients, through an all-to-all inside the building, then a smaller one across. The quantized
# rows differ from the formula by a few bytes of scales:
# the formula spreads a scale over 8,000 (qwZ) or 64 (qgZ) elements, DeepSpeed cuts each shard into
# whole blocks. Every row also sends 24 bytes the formula leaves out (the overflow check and the
# gradient norm, one all-reduce).
#
# The summary of one run in full, and its picture: the bytes per link, stacked by kind, with the
# formula as a dashed line; and each rank's parameter bytes after the last backward, the 1/N shard
# and hpZ's secondary shard on top.

# %% id="ch12-25"
lk = runs["hpZ 2 + qwZ + qgZ"]
print(lk.describe())
fig = lab.draw_links(lk)
plt.show()

# %% [markdown] id="ch12-26"
# Now the controls: the layout (all ranks in one building, two buildings, one rank per building),
# hpZ's group size (the divisors of N, as DeepSpeed requires), qwZ, qgZ and the micro-steps per
# optimizer step. Try hpZ 2 on 4 ranks as 4 nodes of 1: the engine warns, and the backward's
# gathers cross the street again. The first setting is the first row above.

# %% id="ch12-27" tags=["nbval-ignore-output"]
lab.zeropp_widget(pool, world_size=N_ZPP, nodes=NODES, max_ranks=N_MAX)

# %% [markdown] id="ch12-28"
# ## What we saw
#
# - **Who holds what** (basic): stage 1 splits the optimizer states, stage 2 the gradients as
#   well, stage 3 the parameters too; the ranks' shards never overlap and cover every element,
#   padded to a multiple of N. The bytes are `engine.memory()`'s, measured.
# - **One step** (core): stage 3 gathers each module twice (forward and backward; the embedding,
#   shared with the output head, twice more at reuse distance 0) and reduce-scatters the gradients once, a bucket of modules per call; DeepSpeed's stages 1-2
#   all-reduce each gradient bucket and all-gather the parameters once (3Ψ; the paper's
#   reduce-scatter, zerolab's switch, 2Ψ); stage 0 all-reduces. A rank's memory rises while
#   parameters are gathered and buckets are in flight, and falls as they are released.
# - **Planning** (application): 16 bytes per parameter decide which stage fits; the link and the
#   CPU decide how fast.
# - **Offload** (extension): the optimizer states and the fp32 gradient shard (16 bytes per
#   element of the shard in mixed precision) leave the device for host memory or NVMe files;
#   the step then runs on the host, sub-group by sub-group, and NVMe adds reads and writes that
#   the pipelines overlap with it. Stage 3 prefetches the next modules' parameters from the
#   order recorded in the previous step.
# - **ZeRO++** (extension): on a crew in two buildings every stage-3 collective crosses the street;
#   hpZ keeps the backward's gathers (and, under gradient accumulation, the later forwards') inside
#   the building for 2Ψ/h bytes of secondary shards per rank; qwZ halves the gathers, qgZ sends
#   int4 gradients. The ledger's bytes per link equal the simulator's formula, up to the scales.
#
# ## Questions
#
# 1. In the basic mode, choose N = 3, stage 3. Ψ = 7,204 is not a multiple of 3: how many
#    padding elements do the flat buffers add, and who holds them? (Compare the last element
#    number on the x axis with Ψ.)
# 2. In the core mode at stage 2, how many gradient all-reduces does one step make? Predict it
#    from the number of buckets (`reduce_bucket_size` 2,000 elements), then check the summary
#    under the widget. Tick *paper's ideal*: how many reduce-scatters, and how many bytes fewer?
# 3. At stage 3 the output head shares the embedding matrix. In the core mode, find the two
#    forward gathers of `embed` and the two in backward. What would change if the head had its own
#    matrix?
# 4. In the application mode, take Llama-2 7B on 8 GPUs and switch the link from NVLink to
#    100 Gb Ethernet. What bounds the step now, and which stages lose the most? (DeepSpeed's
#    stages 1-3 move 3Ψ per step, stage 0 2Ψ.)
# 5. Same model: lower the GPU memory until stage 2 no longer fits. Which bytes push it over?
# 6. In the extension mode, put the optimizer states on NVMe with sub_group_size 500. How many
#    reads does one step make, and why is it three times the number of tensors the optimizer
#    steps? (Compare the sub-group sizes in the summary.)
# 7. Same setting: switch `pipeline_read` on. Which spans of the NVMe row move, relative to the
#    host-step spans? Do the printed bytes change?
# 8. In the ZeRO++ controls, choose hpZ 4 on 4 ranks as 2 nodes of 2. Where do the backward's
#    gathers run now, and what does each rank pay in memory? Why does DeepSpeed accept it?
# 9. With hpZ 2 and 2 micro-steps, predict the bytes across the street per optimizer step, then
#    check the summary. How many would 4 micro-steps send, and how many inside the building?
#
# Close the crews when you are done:

# %% id="ch12-29"
pool.close()
print("the lab's ranks are stopped")
