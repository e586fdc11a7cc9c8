# %% [markdown] id="ex03-00"
# # Exercise 3 · Stage 1 from the inside: who owns what, and the shard-only Adam step
#
# In stage 1 each worker keeps one part of the heavy notebook. Two small rules make that work,
# and you write both here:
#
# - **(a) the ownership rule**: which elements of a flat buffer rank r owns;
# - **(b) the shard-only AdamW step**: the update each rank applies to its own shard, with
#   only its own part of the optimizer states.
#
# The checks do not test your code on toy inputs only: they plug it into zerolab's stage 1
# engine, on 2 and 3 real ranks, train a small TinyLM, and compare the parameters with plain
# single-process training. If something is off they tell you what, where, and why it matters.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full Python traceback as well (through zerolab's own code,
# and any rank's traceback), run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run
# the check cell again (`zerolab.course.checks.full_tracebacks(False)` makes failures short again), or
# start Jupyter with the environment variable `ZEROLAB_FULL_TRACEBACK=1`.

# %% [markdown] id="ex03-01"
# ## (a) The shard ownership rule
#
# At stages 1 and 2 DeepSpeed lays the trainable parameters in one flat 1-D buffer of
# `padded_numel` elements: the parameters end to end, padded with zeros to a multiple of
# `world_size`. (The paper's layout, zerolab's `ideal_reduce_scatter` switch, makes one such
# buffer per gradient bucket.) Rank `rank` owns one contiguous piece of it, its **partition**,
# `[start, end)` in element offsets: the elements its optimizer steps.
#
# What the engine needs from the rule:
#
# - the pieces of all ranks **tile** the buffer: together they cover `[0, padded_numel)`, with no
#   gap and no overlap (every element has exactly one owner);
# - they are **equal**: the all-gather after the step collects (and the paper's reduce-scatter
#   delivers) pieces of `padded_numel / world_size` elements;
# - they are **in rank order**: the all-gather puts rank r's piece r-th in the buffer, so rank r
#   must own the r-th piece.
#
# Write `shard_range(padded_numel, world_size, rank) -> (start, end)`.

# %% id="ex03-02"
def shard_range(padded_numel, world_size, rank):
    # BEGIN SOLUTION: return (start, end), the elements of the flat buffer that `rank` owns
    shard_numel = padded_numel // world_size
    return rank * shard_numel, (rank + 1) * shard_numel
    # END SOLUTION

# %% [markdown] id="ex03-03"
# The check first tests that your ranges tile the buffer, for several sizes; then it replaces
# the engine's own rule (`zerolab.memory.flat.FlatGroup.shard_range`) by yours on every rank, trains
# stage 1 on 2 and on 3 ranks, in DeepSpeed's layout (one flat buffer; some parameters straddle
# two partitions) and in the paper's (one buffer per bucket), and compares every parameter with
# single-process training.

# %% id="ex03-04" tags=["check"]
from zerolab.course.checks.ch03 import check_shard_range

check_shard_range(shard_range)

# %% [markdown] id="ex03-05"
# ## (b) The shard-only AdamW step
#
# Once the gradients are reduced (DeepSpeed all-reduces each bucket and rank r keeps the slices
# in its partition), rank r holds the averaged gradient of its shard only, and the fp32 master
# weights and Adam's momentum and variance of that shard only. The optimizer step uses
# nothing else: AdamW updates every element on its own.
#
# Write `adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)`. The
# four tensors are 1-D fp32 shards of the same length; update `param`, `exp_avg` and
# `exp_avg_sq` **in place** (they are the engine's own buffers; return nothing). `step` is the
# number of this update, starting at 1. Follow torch's `AdamW` (decoupled weight decay):
#
# 1. `param ← param · (1 − lr · weight_decay)`
# 2. `exp_avg ← β₁ · exp_avg + (1 − β₁) · grad`
# 3. `exp_avg_sq ← β₂ · exp_avg_sq + (1 − β₂) · grad²`
# 4. `param ← param − lr / (1 − β₁^step) · exp_avg / (√exp_avg_sq / √(1 − β₂^step) + eps)`

# %% id="ex03-06"
import math


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    # BEGIN SOLUTION: update param, exp_avg and exp_avg_sq in place, as torch.optim.AdamW does
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
    # END SOLUTION

# %% [markdown] id="ex03-07"
# The check compares one step on a random shard with `torch.optim.AdamW` first; then it wraps
# your function in an optimizer, passes it to `zerolab.initialize(..., optimizer=...)`, trains
# stage 1 on 2 and 3 ranks (each rank steps only its shard, with your code) and compares with
# single-process training with torch's AdamW.

# %% id="ex03-08" tags=["check"]
from zerolab.course.checks.ch03 import check_adamw_step

check_adamw_step(adamw_step)

# %% [markdown] id="ex03-09"
# ## Where this lives in zerolab
#
# Your rule is `FlatGroup.shard_range` in `zerolab/memory/flat.py`; the stage that uses it is
# stage 1: `ReduceScatterAtBoundary` in `zerolab/zero/reduce.py` all-reduces each gradient bucket and
# keeps the slices inside this rank's partition (DeepSpeed's way; with the switch it
# reduce-scatters each bucket), the optimizer steps the owned partition, and
# `ReplicatedParams.publish` in `zerolab/zero/params.py` all-gathers the parameters. The optimizer zerolab steps is torch's own, over the shard tensors
# (`zerolab/zero/optim.py`), which is why only element-wise optimizers are allowed by default.
#
# The checks kept their ranks running, so that a second try is quick. Stop them when you are done:

# %% id="ex03-10"
from zerolab.course.checks.ch03 import close_crews

close_crews()
