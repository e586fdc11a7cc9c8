# %% [markdown] id="ex06-00"
# # Exercise 6 · Packing the boxes: the bucket assignment
#
# *Pack in the order the items come, close a box when the next item would not fit, and give an
# oversized item a box of its own.*
#
# In chapter 6 the gradients travelled in buckets of at most `reduce_bucket_size` elements, and
# the number of buckets set the number of calls. Here **you write the rule that cuts the
# parameters into buckets**, `zerolab.memory.flat.bucket_params`, by which stages 1 and 2 pack their
# gradient buckets (ranges of the one flat buffer, each one all-reduce), and the check puts yours
# inside the engine.
#
#     bucket_params(named, bucket_numel) -> list of buckets, each a list of indices into named
#
# - `named`: a list of `(name, parameter)` pairs, **already in gradient order** (the engine
#   reverses the model's order before calling you); `parameter.numel()` is its size in elements;
# - `bucket_numel`: the most elements a bucket may hold.
#
# **The rule** (DeepSpeed's):
#
# 1. Take the parameters in the order given; never reorder them.
# 2. Before adding a parameter to the open bucket, if the bucket already holds something and
#    adding it would make the bucket hold **more than** `bucket_numel` elements, close the bucket
#    and open a new one. A bucket filled to exactly `bucket_numel` is fine.
# 3. A parameter larger than `bucket_numel` therefore gets a bucket of its own (and no empty
#    bucket is ever closed before it).
# 4. At the end, close the last bucket if it holds anything.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full traceback as well, run
# `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the check cell again.

# %% id="ex06-01"
from zerolab.course.checks.ch06 import check_bucket_params

# %% id="ex06-02"
def bucket_params(named, bucket_numel):
    """Cut parameters (in gradient order) into buckets of at most bucket_numel elements."""
    # BEGIN SOLUTION: greedy in order; close before overflow; oversized alone; no empty bucket
    buckets, current, size = [], [], 0
    for i, (_, p) in enumerate(named):
        n = p.numel()
        if current and size + n > bucket_numel:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        buckets.append(current)
    return buckets
    # END SOLUTION

# %% [markdown] id="ex06-03"
# Try it by hand. Seven parameters, a limit of 100 elements; **predict the buckets** before you
# run the cell (one parameter is larger than a bucket, and one bucket fills up exactly).

# %% id="ex06-04"
import torch

sizes = [30, 70, 250, 20, 45, 40, 10]
named = [(f"p{i}", torch.nn.Parameter(torch.zeros(n))) for i, n in enumerate(sizes)]
for b in bucket_params(named, 100):
    print(f"bucket {b}: {sum(sizes[i] for i in b)} elements")

# %% [markdown] id="ex06-05"
# **The check.** First your function on six lists of parameter sizes (small parameters, buckets
# filled exactly to the limit, parameters larger than a bucket, everything in one bucket,
# everything alone, an MLP's parameters in gradient order), each against zerolab's rule. Then on
# 2 ranks: `zerolab.zero.params.bucket_params` is replaced by yours for the duration of the run, a
# small MLP trains at stages 1 and 2 with three bucket sizes, and the collectives in the ledger
# (one all-reduce per bucket, and the all-gather after the step: calls, elements, bytes) and the
# trained weights are compared with the same runs under zerolab's own rule.

# %% id="ex06-06" tags=["check"]
check_bucket_params(bucket_params)

# %% [markdown] id="ex06-07"
# ## Where this lives in zerolab
#
# `zerolab.memory.flat.bucket_params` is what you wrote; `GradReducer._plan` (`zerolab/zero/bucket_order.py`) calls
# it on the gradients in gradient order (each parameter's range of the flat buffer at stages 1-2)
# and packs each bucket from the ranges it returns, as DeepSpeed fills its IPG buckets
# (`stage_1_and_2.py`). Stage 3 packs its buckets of modules by the same rule; stage 0 uses
# DeepSpeed's stage-0 rule instead (buckets of 5·10⁸ elements). With zerolab's opt-in
# `ideal_reduce_scatter`, `ReplicatedParams.make_groups` (`zerolab/zero/params.py`) also calls it, to
# make each bucket a flat buffer of its own.
#
# Questions:
#
# 1. Why must every rank cut exactly the same buckets? What would happen at the first all-reduce
#    if rank 1 had one bucket more than rank 0?
# 2. Why does the order matter for overlap: what would go wrong, in time rather than in
#    correctness, if the buckets were cut in the forward order?
