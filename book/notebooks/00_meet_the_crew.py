# %% [markdown] id="ch00-00"
# # Chapter 0 · Meet the crew (搬家队)
#
# *A household to move, and more of it than one pair of hands can carry.*
#
# A family is moving house. There is too much furniture for one worker, so the family hires a
# **crew**. Every worker wears a badge with a number on it, 0, 1, 2, 3: that number is the
# worker's **rank**, and the number of workers is the **world size**. Worker 0 is the
# **foreman**. He lifts boxes like everyone else, but when the crew needs one voice (whose
# copy of the floor plan counts, who reports back) it is rank 0 that speaks. And you, at this
# notebook, are the **captain**: you give each order to the whole crew at once, and every
# worker reports back to you.
#
# Training a large model is the same move. The household is the model: its parameters, its
# gradients, and the optimizer's thick notebook of running statistics. One GPU cannot carry
# all of it, so N processes share the work. Each process is one **rank** of a
# `torch.distributed` **process group**. The workers do not share a backpack: each process has
# its own memory, and whatever one rank needs from another must be **shouted across the house**.
# A shout that the whole crew makes together is a **collective**.
#
# How the shouting travels is the **backend**:
#
# * **gloo** is shouting down the hallway: it works on any machine, between CPU processes,
#   over ordinary sockets (here on the loopback address, 127.0.0.1). It is what runs on CPU ranks
#   in this course. (zerolab also has a shared board for CPU ranks of one machine, shared memory,
#   but only when asked for: `zerolab.Crew(N, backend="shm")`, chapter 6.)
# * **NCCL** is an intercom wired between GPUs (NVLink, PCIe, InfiniBand): much faster, but it
#   needs one GPU per rank.
#
# `backend="auto"` picks NCCL when there is a GPU for every rank, and gloo otherwise.
#
# | in the story | in `torch.distributed` | in this notebook |
# |---|---|---|
# | a worker | a rank (a process) | `zerolab.rank()` |
# | the size of the crew | the world size N | `zerolab.world_size()` |
# | the foreman | rank 0 | the source of a broadcast |
# | the captain | the launcher | you, through `crew.run(fn)` |
# | a shout that everyone makes together | a collective | `Comm.all_reduce`, ... |
# | hallway or intercom | backend: gloo or NCCL | `backend="auto"` |
#
# In this chapter we hire a crew of four, hear each worker introduce itself, watch the four
# shouts that all of ZeRO is built from, count the bytes each one puts on the wire, and then
# build the most important shout, the ring all-reduce, ourselves from plain sends and receives.

# %% [markdown] id="ch00-01"
# ## 1. Hire the crew
#
# `zerolab.Crew(N)` starts N processes and joins them into one process group. Starting them
# takes a second or two, so the crew is started **once** and kept for the whole chapter;
# after that, every `crew.run(fn)` costs about a millisecond. Four ranks work on any machine,
# even a two-core laptop: most of the time they wait for one another.

# %% id="ch00-02"
import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

import zerolab
from zerolab.comm import Ledger, default_comm, ring_all_reduce
from zerolab.course.viz import cells, collective_grids, only_slice, ring_steps

N = 4                                        # the world size: four workers
crew = zerolab.Crew(N, backend="auto")       # NCCL with a GPU per rank, else gloo on CPU
print(f"{crew.world_size} ranks are up")

# %% [markdown] id="ch00-03"
# ## 2. Each worker introduces itself
#
# `crew.run(fn)` runs `fn` on every rank, at the same time, and brings back the list of what
# each rank returned (index = rank). What a rank prints comes back too, grouped by rank and in
# rank order. Inside `fn`, `zerolab.rank_info()` tells the rank who it is, and
# `torch.distributed` is ready to use. Tensors go on `zerolab.device()`, the rank's device
# (the CPU here, the rank's own GPU with NCCL), so the same function runs on both.

# %% id="ch00-04"
def introduce():
    me = zerolab.rank_info()
    role = "the foreman" if me.rank == 0 else "a worker"
    print(f"I am rank {me.rank} of {me.world_size}, {role}. "
          f"torch.distributed agrees: rank {dist.get_rank()} of {dist.get_world_size()}")
    return me

badges = crew.run(introduce)

# %% [markdown] id="ch00-05"
# The one thing that depends on your machine is how the crew shouts: gloo between CPU
# processes here, NCCL with each rank on its own GPU where there are enough GPUs.

# %% id="ch00-06" tags=["nbval-ignore-output"]
for me in badges:
    print(f"rank {me.rank}: backend {me.backend}, device {me.device}")

# %% [markdown] id="ch00-07"
# ## 3. The four shouts
#
# Everything ZeRO does over the network is one of these four collectives:
#
# | collective | before | after | where ZeRO uses it |
# |---|---|---|---|
# | **all-reduce** | each rank has its own vector | every rank has the sum | plain data parallelism: averaging gradients (chapter 2) |
# | **reduce-scatter** | each rank has a full vector | rank r has the sum of **slice r** only | stage 3, and the ZeRO paper's stages 1 and 2: each rank keeps only its shard of the gradients (DeepSpeed's stages 1 and 2 all-reduce instead; chapter 3) |
# | **all-gather** | rank r has slice r | every rank has every slice | stages 1 to 3: rebuilding full parameters from the shards (chapter 3) |
# | **broadcast** | only the source rank has the data | every rank has its copy | the foreman hands everyone the same starting weights |
#
# They run through `zerolab.comm.Comm`, which calls `torch.distributed` and writes every call
# in a **ledger** (op, elements, bytes, dtype, time, and a tag saying why).
#
# In the pictures, each row is a rank and each cell one number it holds. The **colour says whose
# data it is**: one colour per rank, dark grey for a sum over all ranks, white for a cell the
# rank does not hold. The numbers are chosen so that you can read them: rank r starts with
# `10·r + i` at position i, so the tens digit is the rank and the ones digit the position.
# The pictures are drawn by `zerolab.course.viz.collective_grids` from what the ranks return; `show`
# only formats what a rank prints.
#
# ### All-reduce: every rank ends with the sum
#
# Each rank holds 8 numbers of its own: rank r holds 10·r + i at position i. After `all_reduce`,
# each holds the element-wise sum over the four ranks.
#
# **Predict, then run.** What will rank 2 hold at position 3 after the all-reduce? And rank 0?
# Write the two numbers down.

# %% id="ch00-08"
def show(t):
    return " ".join(f"{v:g}" for v in t.tolist())


def all_reduce_demo():
    r, dev = zerolab.rank(), zerolab.device()
    x = torch.arange(8.0, device=dev) + 10 * r         # rank r's own numbers
    before = x.clone()
    default_comm().all_reduce(x, tag="chapter 0")      # in place: x becomes the sum over ranks
    print(f"before: {show(before)}   after: {show(x)}")
    return before.tolist(), x.tolist()

held = crew.run(all_reduce_demo)
collective_grids("all-reduce: every rank ends with the sum",
                 [("before", [cells(b, r) for r, (b, a) in enumerate(held)]),
                  ("after", [cells(a, "sum") for b, a in held])], N)
plt.show()

# %% [markdown] id="ch00-09"
# 72 on both: at position i the sum is (0 + 10 + 20 + 30) + 4·i = 60 + 4·i, and every rank holds
# the same sum. Those who wrote 23 for rank 2 kept its own number: an all-reduce leaves no rank
# with its own data, only with everyone's.
#
# ### Reduce-scatter: each rank ends with one slice of the sum
#
# The 8 numbers are 4 slices of 2. After `reduce_scatter`, rank r holds only **slice r** of the
# sum: a quarter of the result each, and together the whole of it. This is how ZeRO stage 3
# (and the ZeRO paper's stage 2) keeps gradients: no rank ever holds all of them. (DeepSpeed's
# stage 2 all-reduces instead and each rank keeps its own slice: chapter 3 weighs the difference.)
#
# **Predict, then run.** Which two numbers will rank 1 hold after the reduce-scatter?

# %% id="ch00-10"
def reduce_scatter_demo():
    r, dev = zerolab.rank(), zerolab.device()
    full = torch.arange(8.0, device=dev) + 10 * r      # a full vector: N slices of 8 // N
    mine = torch.empty(8 // N, device=dev)             # room for one slice
    default_comm().reduce_scatter(mine, full, tag="chapter 0")
    print(f"before: {show(full)}   after: slice {r} = {show(mine)}")
    return full.tolist(), mine.tolist()

held = crew.run(reduce_scatter_demo)
collective_grids("reduce-scatter: rank r ends with slice r of the sum",
                 [("before", [cells(b, r) for r, (b, a) in enumerate(held)]),
                  ("after", [only_slice(a, r, "sum", 8) for r, (b, a) in enumerate(held)])], N)
plt.show()

# %% [markdown] id="ch00-11"
# ### All-gather: every rank ends with every slice
#
# 68 and 72: positions 2 and 3 of the all-reduce's sum, not rank 1's own 12 and 13. The sum is
# the same as before; each rank simply keeps a quarter of it.
#
# The opposite move. Rank r starts with only slice r (positions 2r and 2r+1, so its numbers are
# 10·r + 2r and 10·r + 2r + 1), and after `all_gather` every rank holds all four slices, in rank
# order. In ZeRO stage 3 this is how a layer's full weights are rebuilt, just before they are
# used, from the shards the ranks keep.

# %% id="ch00-12"
def all_gather_demo():
    r, dev, k = zerolab.rank(), zerolab.device(), 8 // N
    mine = torch.arange(float(k), device=dev) + r * k + 10 * r   # slice r: positions r*k ...
    everything = torch.empty(8, device=dev)
    default_comm().all_gather(everything, mine, tag="chapter 0")
    print(f"before: slice {r} = {show(mine)}   after: {show(everything)}")
    return mine.tolist(), everything.tolist()

held = crew.run(all_gather_demo)
collective_grids("all-gather: every rank ends with every slice",
                 [("before", [only_slice(b, r, r, 8) for r, (b, a) in enumerate(held)]),
                  ("after", [sum((cells(a[s * len(b):(s + 1) * len(b)], s) for s in range(N)), [])
                             for b, a in held])], N)
plt.show()

# %% [markdown] id="ch00-13"
# ### Broadcast: the foreman hands out his copy
#
# Only rank 0 has the floor plan; the others hold an empty buffer (zeros). After `broadcast`
# from rank 0, everyone holds the foreman's copy. This is how every rank starts from the same
# weights.

# %% id="ch00-14"
def broadcast_demo():
    r, dev = zerolab.rank(), zerolab.device()
    # only the foreman has the plan; the others hold an empty buffer
    plan = torch.arange(8.0, device=dev) if r == 0 else torch.zeros(8, device=dev)
    before = plan.clone()
    default_comm().broadcast(plan, src=0, tag="chapter 0")
    print(f"before: {show(before)}   after: {show(plan)}")
    return before.tolist(), plan.tolist()

held = crew.run(broadcast_demo)
collective_grids("broadcast from rank 0: everyone ends with the foreman's copy",
                 [("before", [cells(held[0][0], 0)] + [[(None, None)] * 8 for _ in range(1, N)]),
                  ("after", [cells(a, 0) for b, a in held])], N)
plt.show()

# %% [markdown] id="ch00-15"
# ## 4. The ledger: bytes on the wire
#
# Every call above went through `default_comm()`, the rank's own `Comm`, and each rank wrote it
# in its ledger. The ranks are the same processes all chapter long, so the ledger is still
# there: run a collective cell again and it is counted twice.
#
# The ledger measures what each call moved, from the tensors themselves: elements and bytes
# **S** of the full tensor (the reduce-scatter's input, the all-gather's output). From S it
# computes the **bytes each rank puts on the wire**, by the convention nccl-tests uses for bus
# bandwidth, which is what a bandwidth-optimal ring sends:
#
# * all-reduce: **2(N−1)/N · S** (it is a reduce-scatter followed by an all-gather)
# * reduce-scatter and all-gather: **(N−1)/N · S** (each rank sends N−1 of the N slices)
# * broadcast: **S** (in a pipelined chain every rank but the root receives all of it)
#
# With N = 4 the factors are 1.5, 0.75, 0.75 and 1.
#
# **Predict, then run.** Each of the four calls above moved a tensor of 8 float32 values, S = 32
# bytes. How many bytes per rank will the ledger put on the wire for each one? Which of the four
# is the most expensive?

# %% id="ch00-16"
def my_ledger():
    ledger = default_comm().ledger
    return ledger.table(), {op: {k: v for k, v in t.items() if k != "seconds"}
                            for op, t in ledger.totals().items()}

ledgers = crew.run(my_ledger)
assert all(totals == ledgers[0][1] for table, totals in ledgers)   # every rank wrote the same
print("the ledger of rank 0 (the other ranks' are identical):")
print(ledgers[0][0])

# %% [markdown] id="ch00-17"
# The all-reduce, at 48 bytes, one and a half times the tensor: it is a reduce-scatter (24) and an
# all-gather (24) back to back. The broadcast moves S, 32. The same totals, beside the formulas
# written out by hand:

# %% id="ch00-18"
FORMULAS = {"all_reduce": ("2(N-1)/N x S", 2 * (N - 1) / N), "reduce_scatter": ("(N-1)/N x S", (N - 1) / N),
            "all_gather": ("(N-1)/N x S", (N - 1) / N), "broadcast": ("S", 1.0)}
totals = ledgers[0][1]
print(f"{'op':<15}{'S (bytes)':>10}   {'formula':<13}{'= bytes':>8}{'ledger says':>13}")
for op, (formula, factor) in FORMULAS.items():
    t = totals[op]
    print(f"{op:<15}{t['bytes']:>10}   {formula:<13}{factor * t['bytes']:>8g}{t['wire_bytes']:>13g}")

# %% [markdown] id="ch00-19"
# These are per-rank bytes by the ring convention; they are not yet a measurement of traffic.
# The next section builds the ring itself and counts, one `send` at a time, what it really
# sends.
#
# ## 5. The ring all-reduce, from scratch
#
# How can every rank end with the sum while each rank sends only 2(N−1)/N of the data, less
# than twice the tensor however large the crew? The workers stand in a **ring**: each passes
# things to the neighbour on its right (rank r to rank r+1, and rank N−1 back to rank 0) and
# receives from the one on its left. Each rank cuts its tensor into N chunks.
#
# 1. **Reduce-scatter, N−1 steps.** In each step every rank sends one chunk to its right and
#    adds the chunk that arrives from its left to its own copy of that chunk. A partial sum
#    travels around the ring, gaining one rank's contribution per hop. After N−1 steps, rank r
#    holds chunk r summed over all N ranks.
# 2. **All-gather, N−1 steps.** Each finished chunk travels once more around the ring, now
#    replacing instead of adding, until every rank holds all of them.
#
# That is 2(N−1) steps, and in each of them every rank sends one chunk of S/N bytes, all ranks
# at the same time: 2(N−1)/N · S per rank.
#
# `zerolab.comm.ring_all_reduce` does exactly this with `torch.distributed` sends and receives,
# and can report each step. To see who has contributed to what, **rank r starts with the
# number 10^r** in every chunk: 1, 10, 100, 1000. A sum then spells out its contributors:
# read the digits from the right, and the k-th digit is 1 when rank k's number is in it.
# 1011 is ranks 0, 1 and 3; 1111 is everyone.
#
# **Predict, then run.** How many steps will the ring take on 4 ranks, and what number will every
# rank hold in every chunk at the end?

# %% id="ch00-20"
def ring_demo():
    r, dev = zerolab.rank(), zerolab.device()
    # one element per chunk, all equal to 10^r: 1, 10, 100, 1000
    x = torch.full((N,), 10.0 ** r, dtype=torch.float64, device=dev)
    trace = []
    out = ring_all_reduce(x, trace=trace)
    return x.tolist(), trace, out.tolist()

ring = crew.run(ring_demo)
steps = len(ring[0][1])
print(f"{'phase':>14} step  " + "  ".join(f"rank {r} -> {(r + 1) % N}" for r in range(N)))
for s in range(steps):
    moves = [ring[r][1][s] for r in range(N)]
    print(f"{moves[0]['phase']:>14} {moves[0]['step']:>4}  " +
          "  ".join(f"{'chunk ' + str(m['sent']):>11}" for m in moves))
finals = {tuple(ring[r][2]) for r in range(N)}
print(f"after {steps} steps every rank holds the same: {finals == {tuple(ring[0][2])}}, namely {ring[0][2]}")

# %% [markdown] id="ch00-21"
# Six steps, 2(N−1), and 1111 everywhere: every chunk holds every rank's number, once. (Some guess
# 4, one step per rank; the ring needs N−1 steps to sum and N−1 more to share.) Each row of the
# table is one step: every rank sends a different chunk at the same time, so no link sits idle.
#
# The same steps as pictures: what each rank holds (rows) of each chunk (columns) after every
# step. The darker the cell, the more ranks are in its sum; the outlined cell on each row is
# the chunk that rank has just received from its left neighbour. Watch the diagonal fill in
# during the reduce-scatter, then the finished chunks spread during the all-gather.
# (`zerolab.course.viz.ring_steps` draws them from the steps each rank traced.)

# %% id="ch00-22"
ring_steps([start for start, trace, out in ring], [trace for start, trace, out in ring])
plt.show()

# %% [markdown] id="ch00-23"
# Finally, the check that matters: the ring we watched must give **exactly** what the library's
# `dist.all_reduce` gives, and send exactly 2(N−1)/N · S. Each rank takes 1000 random integers
# as float64 (so the sum is exact in any order) and counts its own sends in a fresh `Ledger`.
#
# **Predict, then run.** The tensor is 1000 float64 values, S = 8000 bytes, on 4 ranks. How many
# `send` calls will each rank make, and how many bytes will it put on the wire in all? Would
# the answer change if rank 0 held the whole tensor and the others held nothing useful? Write
# your guesses down, then run the cell.

# %% id="ch00-24"
def ring_equals_library():
    g = torch.Generator().manual_seed(zerolab.rank())
    x = torch.randint(-100, 100, (1000,), generator=g).double().to(zerolab.device())
    library = x.clone()
    dist.all_reduce(library)
    sent = Ledger()
    ours = ring_all_reduce(x, ledger=sent)
    return torch.equal(ours, library), x.numel() * x.element_size(), sent.totals()["send"]

for r, (equal, S, sends) in enumerate(crew.run(ring_equals_library)):
    print(f"rank {r}: ring == dist.all_reduce: {equal};  sent {sends['calls']} chunks, {sends['bytes']} bytes")
print(f"formula: 2(N-1)/N x S = 2 x {N - 1}/{N} x {S} = {2 * (N - 1) / N * S:g} bytes per rank")

# %% [markdown] id="ch00-25"
# Six sends of 2,000 bytes, 12,000 in all, on every rank: 1.5 S, the ledger's formula, now counted
# send by send. And no, it would not change: a collective's traffic depends on the size of the
# tensor and the number of ranks, never on the values, so a rank with "nothing useful" (zeros)
# sends exactly as much as the others.
#
# ## What we measured
#
# * **The crew**: four ranks, real processes in one `torch.distributed` process group,
#   started once and reused by every cell. Each rank knows its rank, the world size and its
#   device; rank 0, the foreman, is the source of the broadcast.
# * **The four shouts**, with numbers you can check by hand: after the **all-reduce** every
#   rank held 60 + 4·i; after the **reduce-scatter** rank r held only slice r of that sum;
#   after the **all-gather** every rank held every slice; after the **broadcast** every rank
#   held rank 0's copy.
# * **The ledger**: for S bytes, each rank puts 2(N−1)/N · S on the wire for an all-reduce
#   (1.5 S at N = 4), (N−1)/N · S for a reduce-scatter or an all-gather (0.75 S each), and S
#   for a broadcast. An all-reduce costs exactly a reduce-scatter plus an all-gather, the fact
#   on which ZeRO's traffic claims rest (chapter 3).
# * **The ring, from scratch**: 2(N−1) = 6 steps, one chunk per rank per step. Counted send by
#   send, each rank sent 6 chunks, 12000 bytes for an 8000-byte tensor, exactly
#   2(N−1)/N · S, and the result was bit-for-bit equal to `dist.all_reduce`.
#
# ## Questions
#
# 1. Change `N = 4` at the top to 2, then 8, and re-run. How do the all-reduce's bytes per
#    rank change? What do they approach as N grows, and why does that make the ring scale?
# 2. In the ring, how many steps does a chunk's partial sum take to visit every rank? Why is
#    the reduce-scatter N−1 steps and not N?
# 3. A broadcast from rank 0 costs S per rank in the ledger, less than an all-reduce's 1.5 S
#    at N = 4. Why can't a broadcast replace an all-reduce when every rank has different
#    gradients?
# 4. The demo starts rank r with 10^r so that a sum spells its contributors. Which value
#    would rank 2 hold in chunk 3 after reduce-scatter step 1? Check it in the figure.
#
# ## Your turn
#
# Open **`exercises/00_ring_all_gather.ipynb`**: you write the second half of the ring, the
# all-gather, with `send_recv` only; the check runs it on 2, 3 and 4 real ranks and compares it
# with `dist.all_gather`.
#
# Next, chapter 1 opens the workers' backpacks: what a rank actually holds, and why the
# heaviest thing in it is not the furniture.

# %% id="ch00-26"
crew.close()          # stop the four processes; a new Crew starts in about a second
print("crew closed:", not crew.alive)
