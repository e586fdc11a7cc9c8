# %% [markdown] id="ex03c-00"
# # Exercise 3c · ZeRO-1 by hand: a sharded optimizer in plain `torch.distributed`
#
# In chapter 3 the captain tore the heavy notebook into N parts. The heavy notebook is the
# **optimizer states**: for every piece of furniture, Adam's two lines about how it has been
# moving (momentum and variance) and, in mixed precision, the exact register copy of its position
# (the fp32 master weights). Now each worker keeps **only his own pages**. After every trip the
# crew pools the door stickers (the **gradients**), each worker updates the furniture his pages
# describe, and then calls out the new positions, so that everyone's copy of the household (the
# **parameters**) is the same again before the next trip.
#
# In chapter 3's exercises you wrote pieces that zerolab's engine plugged in. Here you build the
# whole mechanism, with nothing but `torch.distributed`: a class `ShardedOptimizer` that wraps any
# torch optimizer and keeps its states for this rank's shard of the parameters only. That is ZeRO
# stage 1 (the paper's P<sub>os</sub>), the job of DeepSpeed's `DeepSpeedZeroOptimizer`
# (`deepspeed/runtime/zero/stage_1_and_2.py`). The check runs your class on 2 and 3 real ranks
# beside PyTorch's `DistributedDataParallel` (DDP) and asks for the same parameters, **bit for bit**
# (where the only difference is the order of a sum, it says so and accepts a stated tolerance).
#
# **When the check fails** it says in a few lines what is wrong and names the likely mistake; for
# the full traceback run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the
# check cell again.

# %% [markdown] id="ex03c-01"
# ## The design: one flat buffer, cut into N equal shards
#
# There are two ways to split the optimizer's work among N ranks:
#
# - **whole parameters to ranks**, as PyTorch's `ZeroRedundancyOptimizer` does: rank r steps the
#   tensors assigned to it. The shards are as uneven as the tensors (one embedding can be half a
#   model), and each tensor needs a collective of its own;
# - **one flat buffer**, as DeepSpeed's stages 1 and 2 do: lay every trainable parameter end to
#   end in one 1-D buffer, pad it with zeros to a multiple of N, and cut it into N equal shards.
#   Rank r owns shard r, whatever tensors it cuts through. Every rank keeps exactly 1/N of the
#   states, and a collective over the buffer (or over buckets of it, as DeepSpeed sends it) serves
#   every tensor at once.
#
# You build DeepSpeed's: its memory numbers, its collectives and its code
# (`bit16_groups_flat`, `single_partition_of_fp32_groups`) are then the ones you know. DeepSpeed
# pads to a multiple of 2N, so that every 16-bit shard starts on a 4-byte boundary; in fp32 a
# multiple of N is enough.
#
# What your class does, on every rank:
#
# 1. `__init__(params, optimizer_cls, **kwargs)`: flatten, pad, and copy this rank's shard into a
#    tensor of its own (DeepSpeed's fp32 master partition); build
#    `self.optimizer = optimizer_cls([shard], **kwargs)`. Its states will exist for the shard only.
# 2. `step()`, called after `loss.backward()`, when each parameter's `.grad` holds **this
#    rank's** gradient (from its own rows of the batch): flatten the gradients the same way and
#    average them over the ranks, as DDP does, so that this rank ends with the average for its
#    shard; make that the shard's `.grad`; `self.optimizer.step()`; give every rank every updated
#    shard; copy the whole buffer back into the parameters.
# 3. `zero_grad()`: clear every parameter's `.grad`.
#
# The collectives are yours to choose (torch 2.13's names; before 2.13 the first and last were
# `reduce_scatter_tensor` and `all_gather_into_tensor`):
#
# | call | what each rank ends with |
# |---|---|
# | `dist.reduce_scatter_single(out, buf)` | `out`: chunk `rank` of the sum over ranks of `buf` (N equal chunks) |
# | `dist.all_reduce(buf)` | `buf`: the sum over ranks, whole |
# | `dist.all_gather_single(out, shard)` | `out`: every rank's `shard`, in rank order |
#
# Call them as `dist.<name>(...)`: the check counts them that way.

# %% id="ex03c-02"
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import zerolab
from zerolab.course.checks import zero1     # the check's model, its batches, and a counter of collectives

# %% id="ex03c-03"
class ShardedOptimizer:
    # ZeRO stage 1: every rank keeps optimizer states for its own shard of a flat buffer only.

    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = [p for p in params if p.requires_grad]
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # BEGIN SOLUTION: a flat buffer padded to N; self.optimizer over this rank's shard
        self.numel = sum(p.numel() for p in self.params)
        self.padded_numel = -(-self.numel // self.world_size) * self.world_size   # up to a multiple of N
        self.shard_numel = self.padded_numel // self.world_size
        start = self.rank * self.shard_numel
        flat = torch.zeros(self.padded_numel)
        flat[:self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = torch.nn.Parameter(flat[start:start + self.shard_numel].clone())   # its own copy
        self.optimizer = optimizer_cls([self.shard], **kwargs)
        # END SOLUTION

    def step(self):
        # BEGIN SOLUTION: average the gradients, step the shard, gather every shard back
        flat_grad = torch.zeros(self.padded_numel)
        flat_grad[:self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        flat_grad.mul_(1.0 / self.world_size)            # x 1/N, then the sum: DDP's rounding
        self.shard.grad = torch.empty(self.shard_numel)
        dist.reduce_scatter_single(self.shard.grad, flat_grad)   # this rank gets its shard's sum
        self.optimizer.step()
        flat = torch.empty(self.padded_numel)
        dist.all_gather_single(flat, self.shard.detach())        # every shard, in rank order
        with torch.no_grad():
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        # END SOLUTION

    def zero_grad(self):
        # BEGIN SOLUTION: clear every parameter's gradient
        for p in self.params:
            p.grad = None
        # END SOLUTION

# %% [markdown] id="ex03c-04"
# ## Run it on 2 ranks, beside DDP
#
# `zerolab.Crew(2)` starts two processes joined in a gloo process group; `crew.run(fn, ...)` runs
# `fn` on every rank and returns the list of results, index = rank. The rank function below trains
# the check's model (a small MLP of 5,573 parameters: a multiple of neither 2 nor 3) for 3 steps
# of AdamW (betas (0.8, 0.95), weight decay 0.1), every rank on its own rows of each global batch
# of 12. It trains either with your optimizer or with DDP and torch's AdamW, the reference.
# `zero1.counting()` wraps `torch.distributed`'s collectives on the rank while it runs, and notes
# every call made while `count.on` is true: here, those inside `step()`.
#
# **Predict, then run.** Your ranks and DDP's start from the same parameters and see the same
# rows. After 3 steps, are your parameters DDP's to the last bit, or only up to rounding (your
# optimizer steps one flat shard, DDP's steps six tensors; your gradients travel in a reduce-scatter,
# DDP's in an all-reduce)?

# %% id="ex03c-05"
def train(kind, steps=3):
    rank, n = dist.get_rank(), dist.get_world_size()
    model = zero1.make_model()                       # the same 5,573 parameters on every rank
    optimizer_cls, hyper = zero1.OPTIMIZERS["AdamW"]
    if kind == "zero1":
        net, opt = model, ShardedOptimizer(model.parameters(), optimizer_cls, **hyper)
    else:                                            # "ddp": PyTorch's data parallelism
        net = DDP(model)
        opt = optimizer_cls(net.parameters(), **hyper)
    with zero1.counting() as count:
        for step in range(steps):
            opt.zero_grad()
            zero1.loss_fn(net, *zero1.batch(step, rank, n)).backward()   # this rank's rows only
            count.on = True
            opt.step()
            count.on = False
    return {"params": zero1.flat_params(model), "state_bytes": zero1.state_bytes(opt),
            "calls": count.calls}


crews, runs_kept = {}, {}


def runs(n):
    # Your optimizer and DDP on n ranks (run once, then kept). zero1.on_ranks is crew.run, except
    # that an error in your class reads as the check's few lines, not as a rank's traceback.
    if n not in runs_kept:
        crew = crews.setdefault(n, zerolab.Crew(n))
        runs_kept[n] = zero1.on_ranks(crew, train, "zero1"), crew.run(train, "ddp")
    return runs_kept[n]


mine, ddp = runs(2)
same = all(torch.equal(a["params"], b["params"]) for a, b in zip(mine, ddp))
print(f"2 ranks, 3 AdamW steps: your parameters {'equal' if same else 'DIFFER FROM'} DDP's, "
      f"bit for bit, on every rank")

# %% [markdown] id="ex03c-06"
# ## What the shard saves
#
# **Predict, then run.** torch's AdamW keeps, for every tensor it steps, two fp32 tensors of the
# same size (momentum and variance) and a 4-byte step counter. The model has Ψ = 5,573 parameters
# in 6 tensors; your buffer pads them to Ψ' = 5,574 for N = 2. How many bytes of optimizer states
# does each of your ranks hold, and each of DDP's? Write both numbers down.

# %% id="ex03c-07"
mine, ddp = runs(2)
psi, padded = zero1.psi(), zero1.padded(2)
print(f"{'optimizer states (bytes)':<26}{'measured':>10}   formula")
for rank, result in enumerate(mine):
    print(f"{f'yours, rank {rank}':<26}{result['state_bytes']:>10,}   "
          f"8 x {padded:,} / 2 + 4 = {8 * padded // 2 + 4:,}")
print(f"{'DDP, every rank':<26}{ddp[0]['state_bytes']:>10,}   8 x {psi:,} + 6 x 4 = {8 * psi + 24:,}")

# %% [markdown] id="ex03c-08"
# Half, to the byte. `zero1.state_bytes` weighs the memory behind every state tensor
# (`t.untyped_storage().nbytes()`, each storage once), never the tensor's own size: a slice of a
# bigger buffer is a view, and it keeps the whole buffer alive. The check weighs the shard you
# step and its `.grad` the same way, so a shard sliced out of the flat buffer without `.clone()`
# shows up at the buffer's full size, on every rank. In fp32 AdamW's states are 8 bytes per parameter; the
# paper's 12 bytes per parameter also count the fp32 master weights, which mixed precision needs
# beside its 16-bit parameters. Your class keeps such a copy too, of its shard only: the 4-byte
# `self.shard` it steps (DeepSpeed clones its fp32 partition even in fp32 training). So each rank's
# optimizer side weighs 12Ψ'/N = 33,444 bytes at N = 2, where DDP's weighs 8Ψ = 44,584 plus the
# counters, and the gap grows with N. The parameters and gradients stay whole on every rank:
# that is stage 1 (chapter 3: 4Ψ + 12Ψ/N in mixed precision).

# %% [markdown] id="ex03c-09"
# ## What the shard costs on the wire
#
# **Predict, then run.** How many bytes does each rank put on the wire in one `step()`? Count by
# chapter 2's ring convention: for a buffer of S bytes, a reduce-scatter or an all-gather sends
# (N−1)/N · S per rank, an all-reduce 2(N−1)/N · S. Here S = 4 × 5,574 = 22,296 bytes. And DDP,
# which all-reduces its 22,292 bytes of gradients?

# %% id="ex03c-10"
mine, ddp = runs(2)
n, steps, s = 2, 3, 4 * zero1.padded(2)
for rank, result in enumerate(mine):
    ops = [op for op in zero1.ORDER if any(c[0] == op for c in result["calls"])]
    calls = ", ".join(f"{sum(c[0] == op for c in result['calls']) // steps} {op}" for op in ops)
    print(f"rank {rank}, per step: {calls}: {zero1.wire_bytes(result['calls'], n) / steps:,.0f} bytes")
print(f"reduce-scatter + all-gather: 2(N-1)/N x S = {2 * (n - 1) / n * s:,.0f} bytes")
print(f"all-reduce + all-gather (DeepSpeed's default): 3(N-1)/N x S = {3 * (n - 1) / n * s:,.0f} bytes")
print(f"DDP's all-reduce of the gradients: 2(N-1)/N x 4 x {zero1.psi():,} = "
      f"{2 * (n - 1) / n * 4 * zero1.psi():,.0f} bytes")

# %% [markdown] id="ex03c-11"
# With a reduce-scatter and an all-gather, stage 1 costs what DDP costs (the 4 bytes more are the
# padding): an all-reduce *is* a reduce-scatter followed by an all-gather (chapter 2), and ZeRO
# only moves the optimizer step between the two halves. That is the paper's claim, 2Ψ per rank.
# DeepSpeed 0.19.8 does not take it at stages 1 and 2: by default it all-reduces each gradient
# bucket and every rank keeps the slices it owns (`average_tensor` in `stage_1_and_2.py`, with
# `use_multi_rank_bucket_allreduce`), then all-gathers the parameters: 3(N−1)/N · S, 1.5 times
# DDP. If you chose the all-reduce, the line above shows it.

# %% [markdown] id="ex03c-12"
# ## Bit for bit at 3 ranks?
#
# **Predict, then run.** On 3 ranks, are your parameters still DDP's, bit for bit? Weigh three
# facts: 1/3 is not exact in binary (DDP's reducer multiplies each gradient by 1/N, rounded, while
# torch's `allreduce_hook` and DeepSpeed divide by N); a sum of three floats depends on their order;
# and DDP, as it comes, packs its buckets again after the first step, in the order the gradients
# arrived (the last layer first). The cell compares your run with three DDPs: as it comes, and two
# that keep their first bucket layout (the parameters' own order: `find_unused_parameters=True`
# has that effect), one multiplying by 1/3 before the sum, one dividing by 3 before it.

# %% id="ex03c-13"
mine, as_it_comes = runs(3)
crew = crews[3]
first_layout = {rounding: [r["params"][-1] for r in crew.run(zero1.run_ddp, "AdamW", rounding)]
                for rounding in ("builtin", "divide_first")}     # the parameters after step 3
references = {"DDP as it comes (buckets packed again after step 1)": [r["params"] for r in as_it_comes],
              "DDP, first layout, x 1/3 before the sum (its reducer)": first_layout["builtin"],
              "DDP, first layout, / 3 before the sum (allreduce_hook)": first_layout["divide_first"]}
print("3 ranks, 3 AdamW steps (lr 3e-3); your parameters against:")
for name, ref in references.items():
    worst = max(float((a["params"] - b).abs().max()) for a, b in zip(mine, ref))
    verdict = "bit for bit" if worst == 0 else "differ, < 3e-4 (lr/10)" if worst < 3e-4 else "DIFFER (!)"
    print(f"  {name:<56}{verdict}")
for c in crews.values():
    c.close()

# %% [markdown] id="ex03c-14"
# Two roundings and two orders. **The division**: DDP's reducer multiplies each gradient by 1/N as
# it copies it into the bucket (measured: × 1/3 reproduces it bit for bit, ÷ 3 does not), torch's
# `allreduce_hook` divides, whatever its docstring says about matching DDP, and so does DeepSpeed
# (`tensor.div_(world_size)` in `average_tensor`). At N = 2 the two agree: halving is exact. **The
# order**: gloo's ring adds element i's three contributions in an order set by which third of the
# buffer i sits in (chapter 2's ring: each chunk's sum ends at its owner). Same buffer layout, same
# order; DDP's second layout (last layer first) moves many elements to another third. A flat
# buffer in the parameters' order, padded to N, gets the bits of DDP's first layout; that is why
# the check holds you against DDP with its first layout, at each of its roundings. At 2 ranks none
# of this matters: a + b is b + a, and halving is exact, which is why the first run matched.
#
# AdamW then makes the last bits visible: it moves an element whose gradient nearly cancels by a
# fraction of lr whatever the gradient's size (appendix 3a), so the differences can grow towards
# lr/10, where SGD's stay at a rounding step.
#
# ## The check
#
# It runs your class on 2 ranks (SGD with momentum 0.9, then AdamW with betas (0.8, 0.95) and weight
# decay 0.1) and on 3 ranks (the same two), 3 steps each, against DDP on the same data; counts your
# collectives in `step()` and weighs your optimizer's states, and every tensor your object keeps
# beyond the model's own parameters and gradients (its attributes, and the lists, dicts and objects
# in them): a whole-size tensor kept there, a full copy or a full gradient buffer, fails, named by
# where it is kept. At 2 ranks it asks for DDP's parameters bit for bit; at 3 ranks for the bits
# of one of DDP's roundings (first layout), or else accepts a stated tolerance and says why
# (another order of the sums). When your parameters differ, it looks at how (every update twice
# DDP's? elements that never moved? ranks that disagree?) and names the likely mistake.

# %% id="ex03c-15" tags=["check"]
from zerolab.course.checks.zero1 import check

check(ShardedOptimizer)

# %% [markdown] id="ex03c-16"
# ## Where this lives
#
# In DeepSpeed 0.19.8 (`deepspeed/runtime/zero/stage_1_and_2.py`, class `DeepSpeedZeroOptimizer`):
# the flat buffer is `bit16_groups_flat` (one per parameter group, padded by `align_dense_tensors`
# to a multiple of 2N); the model's parameters are views into it, so the all-gather writes straight
# into them where you copied; the shard is `single_partition_of_fp32_groups`, and the wrapped
# optimizer's param groups hold only it; `average_tensor` divides and all-reduces each gradient
# bucket; `all_gather_dp_groups` gathers the partitions after the step. In zerolab the same three
# steps are `zerolab/memory/flat.py` (the buffer and `shard_range`), `zerolab/zero/reduce.py` (the buckets) and
# `zerolab/zero/params.py` (`ReplicatedParams.publish`, the all-gather).
#
# ## Questions
#
# 1. Your class calls one reduce-scatter per step, after backward. DeepSpeed reduces bucket by
#    bucket, and with `overlap_comm` during backward. What does that buy on a GPU, and why can
#    stage 1 not free any gradient memory by doing so (what would stage 2 do with each bucket)?
# 2. Replace your reduce-scatter with an all-reduce that keeps this rank's slice. Predict the bytes
#    on the wire and whether the parameters stay bit for bit DDP's at 3 ranks; then run the check.
# 3. With N = 64 and a 7B-parameter model in bf16 with AdamW, how many GB of optimizer side (master
#    partition + momentum + variance) does each rank hold with your class, and with DDP?
# 4. Why must the flat buffer be laid out in the same order on every rank? What would the check
#    say if one rank reversed it?
#
# The check kept its ranks running, so that a second try is quick. Stop them when you are done:

# %% id="ex03c-17"
zero1.close_crews()
