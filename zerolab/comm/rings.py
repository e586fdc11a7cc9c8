"""Ring collectives written with point-to-point send/recv, for the course: each step of the ring
is a pair of ``torch.distributed`` calls that a learner can follow (and trace for a picture).
The engine never uses them (it calls :class:`~zerolab.comm.Comm`); chapters 0 and 2 do.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .ledger import CommRecord, Ledger

__all__ = ["ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"]


def _ring_step(send: torch.Tensor, recv: torch.Tensor, rank: int, n: int, ledger: Ledger | None,
               tag: str) -> None:
    """Send ``send`` to the right neighbour while receiving ``recv`` from the left one."""
    t0 = time.perf_counter()
    right, left = (rank + 1) % n, (rank - 1) % n
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send.contiguous(), right),
                                   dist.P2POp(dist.irecv, recv, left)])
    for r in reqs:
        r.wait()
    if ledger is not None:
        from ..crew.topology import current
        dt = time.perf_counter() - t0
        dtype = str(send.dtype).replace("torch.", "")
        topo = current()
        link = "intra" if topo.same_node([rank, right]) else "inter"       # (the sender's link)
        ledger.nodes = max(ledger.nodes, topo.nodes)
        ledger.add(CommRecord("send", send.numel(), send.numel() * send.element_size(), dtype, n, dt, tag,
                              link=link))
        ledger.add(CommRecord("recv", recv.numel(), recv.numel() * recv.element_size(), dtype, n, 0.0, tag,
                              link="intra" if topo.same_node([rank, left]) else "inter"))


def _trace_step(trace: list | None, phase: str, step: int, rank: int, n: int, sent: int,
                received: int, chunks: list[torch.Tensor]) -> None:
    """Note one ring step for a picture: who sent which chunk where, and what this rank holds after it."""
    if trace is not None:
        trace.append({"phase": phase, "step": step, "rank": rank, "sent": sent, "to": (rank + 1) % n,
                      "received": received, "from": (rank - 1) % n,
                      "chunks": [c.detach().clone().cpu() for c in chunks]})


def ring_reduce_scatter(x: torch.Tensor, *, ledger: Ledger | None = None,
                        trace: list | None = None) -> list[torch.Tensor]:
    """Ring reduce-scatter of a 1-D tensor, written with send/recv for teaching.

    ``x`` is cut into N chunks with ``tensor_split`` (sizes may differ by one, so any length
    works). In step s = 0 .. N-2, rank r sends its partial sum of chunk (r-s-1) mod N to the
    right and adds what arrives from the left into chunk (r-s-2) mod N. After N-1 steps chunk
    r on rank r holds the sum over all ranks. Returns all chunks (only chunk r is final).
    If ``trace`` is a list, one dict per step is appended to it (see ``_trace_step``).
    """
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = [c.clone() for c in x.reshape(-1).tensor_split(n)]
    for s in range(n - 1):
        send_i, recv_i = (r - s - 1) % n, (r - s - 2) % n
        buf = torch.empty_like(chunks[recv_i])
        _ring_step(chunks[send_i], buf, r, n, ledger, f"ring reduce-scatter step {s}")
        chunks[recv_i] += buf
        _trace_step(trace, "reduce-scatter", s, r, n, send_i, recv_i, chunks)
    return chunks


def ring_all_gather(chunks: list[torch.Tensor], *, ledger: Ledger | None = None,
                    trace: list | None = None) -> torch.Tensor:
    """Ring all-gather: rank r starts with a correct ``chunks[r]``; in step s it sends chunk
    (r-s) mod N to the right and receives chunk (r-s-1) mod N from the left."""
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = list(chunks)
    for s in range(n - 1):
        send_i, recv_i = (r - s) % n, (r - s - 1) % n
        buf = torch.empty_like(chunks[recv_i])
        _ring_step(chunks[send_i], buf, r, n, ledger, f"ring all-gather step {s}")
        chunks[recv_i] = buf
        _trace_step(trace, "all-gather", s, r, n, send_i, recv_i, chunks)
    return torch.cat(chunks)


def ring_all_reduce(x: torch.Tensor, *, ledger: Ledger | None = None,
                    trace: list | None = None) -> torch.Tensor:
    """Ring all-reduce (sum) = ring reduce-scatter + ring all-gather. Returns a new tensor
    shaped like ``x``; each rank sends 2(N-1) chunks, about 2(N-1)/N of the tensor."""
    chunks = ring_reduce_scatter(x, ledger=ledger, trace=trace)
    return ring_all_gather(chunks, ledger=ledger, trace=trace).reshape(x.shape)
