# %% [markdown] id="ex05-00"
# # Exercise 5 · The warehouse's day: design the host optimizer step
#
# *Bring one shelf of the notebook at a time: the day's notes down, the plans back up.*
#
# In chapters 5 and 5b the heavy notebook (the fp32 master weights and Adam's moments) moved to the
# company warehouse, host memory, and the optimizer step ran there, one **sub-group** at a time.
# Here **you design that step**. Nobody gives you the loop: you get what the engine hands you, what
# must be true when your function returns, and what may be in host memory while it runs. You decide
# what to copy down and in which dtype, what to step and how often, what to copy back up and when.
# The check then puts your step inside zerolab's engine in place of its own.
#
#     host_step(home, optimizer, grads, combined)
#
# **What the engine hands you** (once per optimizer step, after the gradients are reduced and the
# overflow check and the clipping norm are done):
#
# - `grads[i]`: group `i`'s reduced gradient shard, still multiplied by the loss scale and not yet
#   clipped. Its dtype depends on the config (you will look in a moment).
# - `combined`: the number the true gradient is `grads` divided by: the loss scale times the
#   clipping factor.
# - `home`, the rank's `zerolab.offload.StateHome`, where the notebook lives:
#   - `home.sub_groups`: a list of sub-groups, each a list of **tile** numbers `j`, each sub-group at
#     most `sub_group_size` elements;
#   - `home.tiles[j] = (i, a, b)`: tile `j` is elements `a` to `b` of group `i`'s shard;
#   - `home.tensors[j]`: tile `j`'s fp32 master, in host memory: the tensor the optimizer steps;
#   - `home.stage.write_params(i, a, values)`: puts `values` into the rank's parameters (group `i`,
#     from element `a`), rounding them to the model's dtype.
# - `optimizer`: the engine's AdamW over `home.tensors`. Like every torch optimizer, `step()` moves
#   each tensor whose `.grad` is set and leaves those whose `.grad` is `None` alone.
#
# **The contract: when `host_step` returns**
#
# 1. every tile's master has taken exactly one AdamW step with its own true gradient, unscaled in
#    fp32, bit for bit as DeepSpeed does it: `deepspeed/runtime/zero/stage3.py`'s
#    `unscale_and_clip_grads` multiplies the fp32 gradient by the reciprocal, `1 / combined`;
# 2. the model's parameters hold the new masters, rounded once to the model's dtype;
# 3. no tile holds a gradient.
#
# **While it runs** (why sub-groups exist):
#
# 4. at each `optimizer.step()`, the tiles holding a gradient are exactly one sub-group's, and the
#    sub-groups come in the order `home.sub_groups` lists them (with NVMe the engine reads them from
#    disk in that order, the next while this one steps);
# 5. a sub-group is finished before the next one steps: its parameters written up, its gradients
#    gone (with NVMe, its states leave host memory at that moment).
#
# Questions to settle before you write: in which dtype do you unscale, and does it matter when the
# gradients arrive in bf16? How many times do you call `optimizer.step()`? What is the difference,
# for AdamW, between a gradient of zeros and no gradient? What exactly do you hand `write_params`?
# The cells below let you find out what you do not know.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full traceback as well, run
# `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the check cell again.

# %% id="ex05-01"
import textwrap

import torch

import zerolab
from zerolab.course.checks import crew_of
from zerolab.course.checks.ch05 import check_host_step, what_arrives
from zerolab.models import TinyLM

# %% [markdown] id="ex05-02"
# ## What arrives
#
# **Predict, then run.** The engine reduces gradients in the model's dtype. At stage 1 it hands you
# the shard of the full gradient as it was reduced; at stages 2 and 3 with offload, DeepSpeed copies
# each reduced piece down into an fp32 buffer on the host as backward produces it. In which dtype
# will `grads` arrive at stage 1 in bf16, at stage 2 in fp16, at stage 3 in fp32? And will
# `combined` be the loss scale?

# %% id="ex05-03"
crew = crew_of(2)
for r in crew.run(what_arrives)[0]:          # rank 0, one optimizer step of each config
    groups = f"{r['groups']} group" + "s" * (r["groups"] > 1)
    print(f"stage {r['stage']}, {r['precision']}: grads in {', '.join(r['dtypes'])} ({groups}), "
          f"masters {r['master']}, model {r['model']};")
    print(f"   loss scale {r['scale']:g}; combined / loss scale >= 1 (the clipping factor): "
          f"{r['combined'] / r['scale'] >= 1}")

# %% [markdown] id="ex05-04"
# So the same function must take bf16 gradients at stage 1 and fp32 ones at stages 2 and 3, and
# `combined` is more than the loss scale whenever clipping bites (here every step: the check's
# `gradient_clipping` is small). Whatever arrives, the optimizer wants fp32.
#
# ## The layout of a home
#
# TinyLM (vocabulary 37, width 26, two blocks) at stage 3 on 2 ranks, the optimizer offloaded to
# the host: each module is a group, and each rank owns a shard of it.

# %% id="ex05-05"
def layout(sub_group_size):
    cfg = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                 "offload_optimizer": {"device": "cpu"}, "sub_group_size": sub_group_size}}
    engine = zerolab.initialize(TinyLM(), cfg)
    home = engine.stage.home
    out = {"where": home.where, "tiles": list(home.tiles), "sub_groups": [list(s) for s in home.sub_groups],
           "dtype": str(home.tensors[0].dtype)}
    engine.close()
    return out


whole = crew.run(layout, 10**9)[0]
print(f"states {whole['where']!r} (host memory), masters {whole['dtype']}")
print(textwrap.fill("rank 0's groups, shard sizes in elements: " + ", ".join(str(b - a) for i, a, b in whole["tiles"]),
                    96, subsequent_indent="    "))
print(f"sub_group_size 10**9 (DeepSpeed's default): {len(whole['sub_groups'])} sub-group of "
      f"{len(whole['tiles'])} tiles")

# %% [markdown] id="ex05-06"
# **Predict, then run.** With `sub_group_size = 200`: a group larger than 200 elements is cut into
# tiles of at most 200, and consecutive tiles are packed into a sub-group while the sub-group stays
# within 200 elements. How many tiles and how many sub-groups will rank 0 have?

# %% id="ex05-07"
small = crew.run(layout, 200)[0]
tiles = small["tiles"]
print(f"sub_group_size 200: {len(tiles)} tiles in {len(small['sub_groups'])} sub-groups; the first six:")
for k, sg in enumerate(small["sub_groups"][:6]):
    parts = [f"tile {j} = group {tiles[j][0]} [{tiles[j][1]}:{tiles[j][2]}]" for j in sg]
    print(textwrap.fill(f"sub-group {k}: " + ", ".join(parts) + f"; {sum(tiles[j][2] - tiles[j][1] for j in sg)} "
                        "elements", 96, initial_indent="  ", subsequent_indent="    "))

# %% [markdown] id="ex05-08"
# ## Two facts the contract rests on
#
# **Predict, then run.** (a) AdamW with weight decay: does a tensor whose gradient is all zeros
# move in a step? Does one whose `.grad` is `None`? (b) In fp32, are `g * (1 / c)` and `g / c` the
# same bits?

# %% id="ex05-09"
w = [torch.ones(4), torch.ones(4)]
opt = torch.optim.AdamW(w, lr=0.1, weight_decay=0.1)
w[0].grad = torch.zeros(4)                      # w[1].grad stays None
opt.step()
print(f"zero gradient: moved {not torch.equal(w[0], torch.ones(4))}; "
      f"no gradient: moved {not torch.equal(w[1], torch.ones(4))}")

g = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 1000
c = 256 * 1.7
mul, div = g * (1 / c), g / c
ulps = (mul.view(torch.int32) - div.view(torch.int32)).abs().max()    # units in the last place
print(f"g * (1 / c) equals g / c in every element: {torch.equal(mul, div)}; apart by at most "
      f"2 units in the last place: {bool(ulps <= 2)}")

# %% [markdown] id="ex05-10"
# A zero gradient still moves AdamW's weights (decoupled weight decay, and the moments decay), so a
# tile that has been stepped must lose its gradient, not have it zeroed. And division rounds
# differently from multiplication by the reciprocal (itself rounded) in the last bits of many
# elements: bit for bit with DeepSpeed means the reciprocal.
#
# ## Your design
#
# The engine calls your function once per optimizer step; `home` is all you need besides the
# arguments.

# %% id="ex05-11"
def host_step(home, optimizer, grads, combined):
    """One optimizer step over home's sub-groups, keeping the contract above."""
    # BEGIN SOLUTION: design the step from the contract above (what goes down, in which dtype; what steps; what goes up, when)
    inv = 1.0 / combined
    for sg in home.sub_groups:
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            t.grad = grads[i][a:b].to(t.device, torch.float32) * inv
        optimizer.step()
        for j in sg:
            i, a, b = home.tiles[j]
            t = home.tensors[j]
            t.grad = None
            home.stage.write_params(i, a, t)
    # END SOLUTION

# %% [markdown] id="ex05-12"
# **The check.** First *alone*: a real `StateHome` over three fp16 groups of 50, 23 and 81 elements
# (cut into tiles that do not divide evenly), stepped twice by AdamW with a loss scale and a
# clipping factor, with your step and with zerolab's, at `sub_group_size` 40, 64 and 10⁹. Then *in
# the engine*, on 2 ranks: `StateHome.step` is replaced by yours while TinyLM trains with
# `offload_optimizer: cpu` for 3 steps of 2 micro-batches with clipping, at stages 1, 2 and 3 (and
# 3 with `offload_param` too), in fp32, fp16 and bf16, at `sub_group_size` 37, 200 and 10⁹; every
# run must end with masters, parameters and losses bit-identical to the same run with zerolab's
# step. All along, every `optimizer.step()` and every `write_params` is held to the contract:
# which tiles carry a gradient, whether it is the true one in fp32, in which order the sub-groups
# come, whether each is finished before the next, and what goes up.

# %% id="ex05-13" tags=["check"]
check_host_step(host_step)

# %% [markdown] id="ex05-14"
# ## Where this lives in zerolab
#
# Your step is `StateHome.step` in `zerolab/offload/offload.py`. The engine (`Engine._optimizer_step` in
# `zerolab/zero/engine.py`) calls it after the overflow check and the clipping norm, with the stage's
# reduced gradient shards; `stage.publish()` then makes the new parameters everyone's (at stages 1
# and 2 an all-gather; at stage 3 only the small persistent parameters are gathered, the others
# wait for the next forward's gathers). zerolab's version adds two things to yours:
#
# - **NVMe**: before a sub-group steps, its masters and moments are read from their files into
#   host buffers, and after it, written back and the buffers dropped. With `pipeline_read` the next
#   sub-group's read is issued before this one steps; with `pipeline_write` the writes are waited
#   for only at the end. The reads and writes run on I/O threads, and the timeline shows them.
# - **The timeline**: each sub-group's step is a `host` event, which chapter 5b plots.
#
# On a GPU, the gradients' way down is a device-to-host copy (into pinned memory when `pin_memory`
# is set, so that it can run asynchronously) and `write_params` a host-to-device copy; the design
# is the same.
#
# Questions:
#
# 1. Why is stepping tile by tile bit-identical to stepping the whole shard at once, for AdamW? For
#    which optimizer would it not be (think of one that needs a norm over all parameters, such as
#    LAMB)?
# 2. Your step creates an fp32 gradient per tile. With `sub_group_size` at its default, 10⁹, how much
#    host memory can that take on a rank that owns 3 billion elements, and what does a smaller
#    `sub_group_size` change?
# 3. The contract asks each sub-group to be finished before the next steps. With offload to host
#    memory (not NVMe), writing every tile up at the very end would give the same bits. Why does
#    DeepSpeed not do it that way?
