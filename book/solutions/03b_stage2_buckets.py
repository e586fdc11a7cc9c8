# %% [markdown] id="ex05-00"
# # Exercise 3b · Stage 2's buckets: reduce-scatter during backward
#
# In stage 2 each worker keeps only his own door stickers (the gradients of his shard). Nobody
# ever holds the whole set: while backward is still running, the stickers are packed into boxes
# (**buckets**), and the moment a box is full it is sent out, each worker keeps the part that is
# his, and the box is thrown away.
#
# You write the two pieces of zerolab's `ReduceScatterInBackward` (in `zerolab/zero/reduce.py`, shared by
# stages 2 and 3) that do this, in **the paper's pattern**: each bucket is its own flat buffer,
# cut into N shards, and is **reduce-scattered**, so each rank receives only the sum of its own
# shard. That is what stage 3 does in DeepSpeed too; at stage 2 it is zerolab's switch
# `"zerolab": {"ideal_reduce_scatter": true}`, which the check turns on. DeepSpeed's own stage 2
# keeps one flat buffer and **all-reduces** each bucket instead, keeping the slices of its
# partition (chapter 3 measures the difference: 3Ψ against the paper's 2Ψ). The check plugs your
# functions into the real engine on every rank, trains TinyLM with stages 2 and 3 on 2 and 3
# ranks, in fp32 and bf16, with gradient accumulation 1 and 2, and compares every parameter with
# zerolab's own engine and (fp32) with single-process training.
#
# **When a check fails** it says in a few lines what is wrong and names the likely mistake. For
# the full traceback run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the
# check cell again.

# %% [markdown] id="ex05-01"
# ## (a) When is a bucket ready?
#
# Backward produces gradients one parameter at a time, in reverse order of the forward. Each
# bucket is a flat buffer of `padded_numel` elements holding several parameters end to end.
# When the gradient of parameter `i` of a bucket arrives, the engine calls
#
#     add_grad(bucket, where, grad, arrived, i, n_params)
#
# - `bucket`: the bucket's flat buffer (1-D, zeros at the start of each backward);
# - `where`: the slice of the bucket that belongs to parameter `i` (`bucket[where]`);
# - `grad`: the gradient, shaped like the parameter;
# - `arrived`: a set, shared by all calls for this bucket in this backward: the parameters
#   whose gradient is already in;
# - `n_params`: how many parameters the bucket holds.
#
# Put the gradient in its place, note that it arrived, and **return True exactly when the bucket
# is complete**; the engine then sends it (in the same bucket order on every rank).
#
# *Predict first:* what goes wrong if a bucket is sent when its first gradient arrives?

# %% id="ex05-02"
def add_grad(bucket, where, grad, arrived, i, n_params):
    # BEGIN SOLUTION: fill bucket[where], note i; True when complete
    bucket[where] += grad.reshape(-1)
    arrived.add(i)
    return len(arrived) == n_params
    # END SOLUTION

# %% [markdown] id="ex05-03"
# ## (b) What to send, what to keep
#
# When a bucket's turn comes the engine calls
#
#     reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard)
#
# - **send**: the bucket in the **communication dtype** `comm_dtype` (bf16 training may
#   communicate in fp32, DeepSpeed's `communication_data_type`), **pre-divided by
#   `world_size`**, so that the sum over ranks is the average gradient (dividing before the sum
#   also keeps fp16 sums from overflowing);
# - `chunks = reduce_scatter(send)` is a real reduce-scatter on the ranks. Like
#   `zerolab.comm.ring_reduce_scatter` (chapter 2's exercise), it returns all `world_size`
#   chunks of the bucket, but only `chunks[rank]` holds the sum over all ranks; the others
#   are partial sums on their way;
# - **keep**: add this rank's chunk into `grad_shard`, this rank's gradient shard of the bucket
#   (the engine's own buffer: change it in place). With gradient accumulation the engine calls
#   `reduce_bucket` once per micro-step, and `grad_shard` must end with the sum of all of them.

# %% id="ex05-04"
def reduce_bucket(bucket, rank, world_size, comm_dtype, reduce_scatter, grad_shard):
    # BEGIN SOLUTION: send bucket in comm_dtype / world_size; keep chunks[rank]
    send = bucket.to(comm_dtype)
    send /= world_size
    chunks = reduce_scatter(send)
    grad_shard += chunks[rank]
    # END SOLUTION

# %% [markdown] id="ex05-05"
# The check replaces `ReduceScatterInBackward.accept` and `ReduceScatterInBackward.issue` with
# versions that call your functions (on every rank, for the duration of the check only), trains,
# and watches each call: when a bucket was said to be complete, what was sent (its dtype and
# its size against the bucket's), and what the shard holds afterwards.

# %% id="ex05-06" tags=["check"]
from zerolab.course.checks.stage2_buckets import check_stage2_buckets

check_stage2_buckets(add_grad, reduce_bucket)

# %% [markdown] id="ex05-07"
# ## Where this lives in zerolab
#
# `ReduceScatterInBackward.accept` and `ReduceScatterInBackward.issue` in `zerolab/zero/reduce.py` do
# what you wrote; `GradReducer._reduce` sends the bucket (asynchronously when `overlap_comm` is
# on, so backward goes on computing while it travels) with the collective DeepSpeed would use for
# the config: a reduce-scatter here and at stage 3, an all-reduce at DeepSpeed's default stage 2.
# Stage 3 uses the same class, its buckets filled in the order backward finishes the modules; its parameters
# (`zerolab/zero/stage3/gather.py`) are told through `grads_done(g)` and reshard a module's gathered
# parameters once all its gradients are in.
#
# Questions:
#
# 1. With gradient accumulation 4, how many reduce-scatters does stage 2 make per optimizer
#    step, and how many would stage 1 make? (Chapter 3 measures it, both ways.)
# 2. Why must every rank send its buckets in the same order, even if one rank's bucket is
#    complete sooner?
# 3. Why divide before the sum rather than after, in fp16?
#
# The check kept its ranks running; stop them when you are done:

# %% id="ex05-08"
from zerolab.course.checks.stage2_buckets import close_crews

close_crews()
