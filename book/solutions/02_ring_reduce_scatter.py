# %% [markdown] id="ex02-00"
# # Exercise 2 · The ring reduce-scatter
#
# *The crew stands in a circle. Each worker may pass one bundle of notes to the right and take one
# from the left, all at the same moment. How do they end up, each of them, holding the complete
# total for one part of the house?*
#
# In chapter 2 you measured the ring all-reduce: a **reduce-scatter** followed by an
# **all-gather**, 2(N−1)/N·Ψ elements on the wire per rank. Here you write the first half.
#
# **Your function** runs on every rank of a real crew:
#
# ```python
# def ring_reduce_scatter(chunks, rank, world_size, send_recv):
#     ...
#     return chunks
# ```
#
# * `chunks`: this rank's tensor, already cut into `world_size` 1-D chunks (with `tensor_split`,
#   so their sizes may differ by one element). Chunk i of rank r is rank r's contribution to chunk i.
# * `send_recv(send_tensor, recv_tensor)`: one step of the ring. It sends `send_tensor` to the right
#   neighbour (rank + 1 mod N) and, at the same time, fills `recv_tensor` with what the left
#   neighbour (rank − 1 mod N) sent. Every rank must call it the same number of times.
# * When you return, `chunks[rank]` must hold **the sum of chunk `rank` over all ranks**. (The other
#   chunks may hold partial sums; an all-gather would overwrite them.)
#
# **The rule of the ring.** Take N − 1 steps. Think about the journey of one chunk, say chunk c:
# its partial sum must visit every rank once, gaining that rank's contribution, and arrive complete
# at rank c at the end of the last step. Each step it moves one rank to the right. So where must it
# start? And at step s, which chunk is rank r holding on its way, to send it on? The chunk a rank
# receives is the one its left neighbour is sending; add it to your own copy of that chunk.
#
# Do not receive straight into a chunk: `send_recv` would overwrite your own contribution.
# Receive into a fresh buffer (`torch.empty_like`) and add.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full Python traceback as well (through zerolab's own code,
# and any rank's traceback), run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run
# the check cell again (`zerolab.course.checks.full_tracebacks(False)` makes failures short again), or
# start Jupyter with the environment variable `ZEROLAB_FULL_TRACEBACK=1`.

# %% id="ex02-01"
import torch

from zerolab.course.checks.ch02 import check_ring_reduce_scatter, trace_ring

# %% id="ex02-02"
def ring_reduce_scatter(chunks, rank, world_size, send_recv):
    """Ring reduce-scatter: afterwards chunks[rank] holds the sum of chunk `rank` over all ranks."""
    # BEGIN SOLUTION: the N-1 steps of the ring: send one chunk right, add the one from the left
    n = world_size
    for step in range(n - 1):
        # chunk c starts at rank c+1 and moves one rank right per step, ending at rank c, so at
        # step s rank r holds chunk (r - s - 1) on its way; its left neighbour holds chunk (r - s - 2)
        send_index = (rank - step - 1) % n
        recv_index = (rank - step - 2) % n
        incoming = torch.empty_like(chunks[recv_index])
        send_recv(chunks[send_index], incoming)
        chunks[recv_index] += incoming
    # END SOLUTION
    return chunks

# %% [markdown] id="ex02-03"
# **See your ring.** This runs your function once on 4 ranks and prints, step by step, which chunk
# each rank sent to the right and which chunk it then changed (where it added what came from the
# left). In a correct ring, each column counts down, and what rank r adds into at step s is what
# rank r − 1 sent at step s.

# %% id="ex02-04"
schedules = trace_ring(ring_reduce_scatter, world_size=4)   # also returned: one list of steps per rank

# %% [markdown] id="ex02-05"
# **The check.** It runs your function on crews of 2, 3 and 4 ranks, on tensors of 11, 14 and 18
# elements (so the chunks are uneven), and compares `chunks[rank]` with the true sum; each rank's
# input is built so that a wrong sum says which ranks' contributions are missing. It counts the
# bytes every rank sent: a ring sends each chunk except its own exactly once, (N−1)/N of the tensor.
# Finally it plugs your function into zerolab's stage 0 as the gradient all-reduce (your
# reduce-scatter, then a ring all-gather) and trains TinyLM on 3 ranks: the parameters must equal
# single-process training's.

# %% id="ex02-06" tags=["check"]
check_ring_reduce_scatter(ring_reduce_scatter)

# %% [markdown] id="ex02-07"
# **Going further.**
# * The other half, the all-gather, is exercise 0 (`exercises/00_ring_all_gather.ipynb`): rank r
#   starts with a finished `chunks[r]`; after N − 1 steps everyone has every chunk. Your
#   reduce-scatter followed by it is a whole ring all-reduce.
# * Count the bytes: (N−1)/N·Ψ for the reduce-scatter, the same for the all-gather. Patarasuk and
#   Yuan (2009, "Bandwidth optimal all-reduce algorithms for clusters of workstations") proved that
#   no all-reduce sends fewer than 2(N−1)/N·Ψ per rank, which is why NCCL rings look like yours.
