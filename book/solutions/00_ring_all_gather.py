# %% [markdown] id="ex00-00"
# # Exercise 0 · The all-gather half of the ring
#
# After a ring reduce-scatter every worker holds one finished slice of the plan. To give every
# worker the whole plan, the slices travel around the ring once more: the **all-gather**. You
# write it with the same two-way step the chapter used: `send_recv(send_tensor, recv_tensor)`
# sends `send_tensor` to the right neighbour (rank + 1) while it fills `recv_tensor` with what
# the left neighbour (rank − 1) sends.
#
# Write `ring_all_gather(chunks, rank, world_size, send_recv)`:
#
# - `chunks` is a list of `world_size` 1-D tensors; at the start only `chunks[rank]` holds this
#   rank's data, the others are placeholders (filled with −1). Chunk sizes may differ by one.
# - Afterwards every `chunks[c]` must hold chunk c's data, on every rank. Return `chunks`.
# - Use N − 1 steps, one chunk sent per step. In step s, which chunk does rank r have that its
#   right neighbour is missing? (Step 0: its own.) Allocate the receive buffer with
#   `torch.empty_like` on the chunk you are about to receive.
#
# *Predict first:* at N = 4, how many bytes does each rank send for a tensor of S bytes?

# %% id="ex00-01"
import torch


def ring_all_gather(chunks, rank, world_size, send_recv):
    # BEGIN SOLUTION: N-1 steps of send_recv, one chunk each; fill every chunk
    n = world_size
    for s in range(n - 1):
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        buf = torch.empty_like(chunks[recv_i])
        send_recv(chunks[send_i], buf)
        chunks[recv_i] = buf
    return chunks
    # END SOLUTION

# %% [markdown] id="ex00-02"
# The check runs your function on 2, 3 and 4 real ranks (lengths that do not divide by N),
# compares every chunk with `torch.distributed.all_gather`, and counts the traffic. Chunk c
# holds `1000 · (c + 1) + i`, so a wrong chunk says whose data it holds.

# %% id="ex00-03" tags=["check"]
from zerolab.course.checks.ch00 import check_ring_all_gather

check_ring_all_gather(ring_all_gather)

# %% [markdown] id="ex00-04"
# ## Where this lives in zerolab
#
# `zerolab.comm.ring_all_gather` is the same ring; stages 1 and 2 use an all-gather after each
# optimizer step (every rank collects the updated parameter shards), stage 3 before each layer's
# forward and backward.
#
# Questions:
#
# 1. Each rank sent (N − 1)/N of the tensor. Why is it not all N chunks?
# 2. Ring reduce-scatter then ring all-gather is an all-reduce. How many steps, and how many
#    bytes per rank, in all?
