"""What every ZeRO stage shares: groups, gradient hooks, masters, and the engine's contract.

The engine (``engine.py``) owns the training loop logic that does not depend on *where*
things live: loss scaling, the overflow check, clipping, the optimizer. A stage decides where
the parameters, gradients and optimizer states live, and which collectives move them:

    stage 0  everything full on every rank; gradients all-reduced        (stage0.py)
    stage 1  optimizer states sharded; gradients reduce-scattered at the boundary (stage1.py)
    stage 2  gradients sharded too: reduce-scattered bucket by bucket during backward (stage2.py)
    stage 3  parameters sharded too: gathered per module, just in time    (stage3.py)

Gradients arrive through ``register_post_accumulate_grad_hook``: as soon as autograd has
finished a parameter's gradient, the stage takes it (into its flat gradient buffer or a
bucket) and sets ``param.grad = None``, so no stray full-size ``.grad`` tensors stay behind.

Ranks may take different paths through the model (a branch only one rank runs, a layer skipped
on some steps). The rule that keeps that correct is DDP's: every rank reduces every bucket,
every backward, *in one fixed order*; a parameter that got no gradient on a rank contributes
zeros there (so the average is DDP's with ``find_unused_parameters=True``). A bucket that is
complete early waits for its turn rather than racing ahead of a bucket another rank completed
first, which would pair different buckets in one collective.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .comm import Comm
from .flat import FlatGroup
from .memory import tensor_bytes

__all__ = ["StageBase", "UnusedParameterError"]


class UnusedParameterError(RuntimeError):
    """``ignore_unused_parameters`` is false and a trainable parameter got no gradient."""


class StageBase:
    stage: int = -1
    shards_optimizer = True      # do ranks step only their own shard? (False for stage 0)

    def __init__(self, model: nn.Module, named: list[tuple[str, nn.Parameter]], comm: Comm,
                 zero, dtype: torch.dtype, comm_dtype: torch.dtype, device: torch.device):
        self.model = model
        self.comm = comm
        self.zero = zero                         # the ZeroConfig
        self.dtype = dtype                       # compute dtype of the model (fp32/fp16/bf16)
        self.comm_dtype = comm_dtype             # dtype gradients travel in
        self.mixed = dtype != torch.float32      # keep separate fp32 master weights?
        self.device = device
        self.rank, self.world_size = comm.rank, comm.world_size
        self.named = named
        self.groups: list[FlatGroup] = self.make_groups(named)
        self.group_of = {id(p): g for g in self.groups for p in g.params}
        self.peak_buffer_bytes = 0               # largest transient buffer total seen in a step
        self._live_buffers: dict[str, torch.Tensor] = {}
        self._got_grad: set[int] = set()         # ids of params that got a gradient this backward
        self.closed = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for _, p in named]

    # -- building -----------------------------------------------------------------------
    def make_groups(self, named) -> list[FlatGroup]:
        raise NotImplementedError

    def _make_masters(self, shards: list[torch.Tensor]) -> list[torch.Tensor]:
        """fp32 tensors the optimizer steps. In fp32 training they *are* the shards (views,
        no copy); in mixed precision they are fp32 copies: the "full ledger book"."""
        if self.mixed:
            return [s.detach().float().clone() for s in shards]
        return [s.detach() for s in shards]

    # -- gradients ----------------------------------------------------------------------
    def _on_grad(self, p: nn.Parameter) -> None:
        if p.grad is None:
            return
        g = self.group_of[id(p)]
        self._got_grad.add(id(p))
        self.accept_grad(g, g.index_of[id(p)], p.grad)
        p.grad = None

    def accept_grad(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        raise NotImplementedError

    def begin_backward(self) -> None:
        self._got_grad.clear()

    def end_backward(self) -> None:
        """Called after every ``loss.backward()`` (stages 2/3 flush unfinished buckets)."""

    def check_unused(self) -> None:
        """``ignore_unused_parameters: false``: a trainable parameter that got no gradient in
        this backward, on any rank, is an error on every rank (one small all-reduce)."""
        missing = [n for n, p in self.named if id(p) not in self._got_grad]
        flags = torch.zeros(self.world_size, dtype=torch.int64, device=self.device)
        flags[self.rank] = len(missing)
        self.comm.all_reduce(flags, tag="unused-parameter check")
        if int(flags.sum()) == 0:
            return
        ranks = [r for r in range(self.world_size) if int(flags[r])]
        mine = (f"; on this rank (rank {self.rank}): " + ", ".join(missing[:8])
                + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")) if missing else ""
        raise UnusedParameterError(
            f"trainable parameters got no gradient in this backward on rank(s) {ranks}{mine}. "
            "zero_optimization.ignore_unused_parameters is false, so this is an error (DeepSpeed's "
            "rule); set it to true (the default) to treat a missing gradient as zero, as DDP with "
            "find_unused_parameters=True does, or freeze the parameter (requires_grad=False).")

    def boundary_reduce(self) -> None:
        """Called once per optimizer step, before the step (stages 0/1 reduce here)."""

    def grads_for_step(self) -> list[torch.Tensor]:
        """Averaged gradients aligned with ``self.masters`` (any float dtype)."""
        raise NotImplementedError

    def zero_grads(self) -> None:
        raise NotImplementedError

    def publish(self) -> None:
        """After the optimizer stepped the masters: make the model's parameters current."""
        raise NotImplementedError

    def _send_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """The gradient as it travels: in the communication dtype, pre-divided by N so the
        SUM is an average (pre-dividing keeps fp16 sums from overflowing)."""
        send = buf.to(self.comm_dtype) if buf.dtype != self.comm_dtype else buf
        if self.world_size > 1:
            send.div_(self.world_size)
        return send

    def _track(self, key: str, t: torch.Tensor | None) -> None:
        """Remember a transient buffer (bucket, gathered params) for the memory report."""
        if t is None:
            self._live_buffers.pop(key, None)
        else:
            self._live_buffers[key] = t
        self.peak_buffer_bytes = max(self.peak_buffer_bytes, self.buffer_bytes())

    def buffer_bytes(self) -> int:
        return tensor_bytes(self._live_buffers.values())

    # -- views for users ------------------------------------------------------------------
    def full_master_flats(self) -> list[torch.Tensor]:
        """Every group's full fp32 master values (gathers the shards when sharded)."""
        out = []
        for g, m in zip(self.groups, self.masters):
            if not self.shards_optimizer:
                out.append(m.detach().float().clone())
                continue
            full = torch.empty(g.padded_numel, dtype=torch.float32, device=self.device)
            with self.comm.ledger.paused():
                self.comm.all_gather(full, m.detach().float().contiguous())
            out.append(full)
        return out

    def full_params(self) -> dict[str, torch.Tensor]:
        values: dict[str, torch.Tensor] = {}
        for g, flat in zip(self.groups, self.full_master_flats()):
            for name, v in zip(g.names, g.views(flat)):
                values[name] = v.clone().cpu()
        return values

    def memory(self) -> dict[str, int]:
        raise NotImplementedError

    def _frozen_bytes(self) -> int:
        trainable = {id(p) for _, p in self.named}
        return tensor_bytes(p for p in self.model.parameters() if id(p) not in trainable)

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def close(self) -> None:
        """Detach from the model: remove every hook, leave each parameter holding its full,
        current value (a plain tensor), and drop buckets and gathered buffers."""
        if self.closed:
            return
        self.remove_hooks()
        self.restore_params()
        for p in self.model.parameters():
            p.grad = None
        self._live_buffers.clear()
        self.closed = True

    def load_full_values(self, values: dict[str, torch.Tensor]) -> None:
        """Set every trained parameter (masters and the model's copy) from full fp32 values by
        name, cut the way this stage shards (a checkpoint from any world size or stage)."""
        for g, m in zip(self.groups, self.masters):
            flat = g.flatten([values[n] for n in g.names], torch.float32, self.device)
            self.store_flat(g, flat)
            m.detach().copy_(g.shard_of(flat) if self.shards_optimizer else flat)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        """Put group ``g``'s full values into the model's parameters (this stage's storage)."""
        raise NotImplementedError

    def restore_params(self) -> None:
        """Give every trained parameter its full value as a tensor of its own."""
        for g, flat in zip(self.groups, self.full_master_flats()):
            for p, v in zip(g.params, g.views(flat)):
                p.data = v.to(self.dtype).clone()


class ReduceScatterGrads:
    """Sharded gradients, shared by stages 2 and 3 (a mixin for :class:`StageBase`).

    A group's gradient is collected in a bucket as backward produces it; once every parameter
    of the group has its gradient the bucket is *ready*. Ready buckets are reduce-scattered in
    the order :meth:`reduce_order` fixes for this backward (the same on every rank), so a
    bucket that is ready early waits for the ones before it; whatever is left when backward
    ends (a parameter this rank did not use) is reduced then, still in that order. This rank
    adds its shard to ``grad_shards`` (accumulating across micro-steps) and the bucket is
    freed. Stages hook in through :meth:`_after_reduce` (stage 3 releases the gathered
    parameters there)."""

    def _init_grad_shards(self) -> None:
        self.grad_shards = [torch.zeros(g.shard_numel, dtype=self.dtype, device=self.device)
                            for g in self.groups]
        self._buckets: dict[int, torch.Tensor] = {}     # group index -> gradient bucket in flight
        self._arrived: dict[int, set[int]] = {}         # group index -> params whose grad arrived
        self._reduced: set[int] = set()                 # groups reduced in this backward pass
        self._ready: set[int] = set()                   # groups complete, waiting for their turn
        self._order: list[int] = []                     # the reduction order of this backward
        self._next = 0                                  # position in _order of the next to reduce

    def reduce_order(self) -> list[int]:
        """Group indices in the order their gradients are reduced this backward: identical
        on every rank. Stage 2: bucket order (buckets are cut in gradient order)."""
        return list(range(len(self.groups)))

    def begin_backward(self) -> None:
        super().begin_backward()
        order = self.reduce_order()
        seen = set(order)
        self._order = order + [i for i in range(len(self.groups)) if i not in seen]
        self._next = 0
        self._ready.clear()

    def accept_grad(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        if g.index in self._reduced:
            raise RuntimeError(
                f"a second gradient for {g.names[i]!r} arrived in one backward, after its bucket "
                f"({g.label}) was reduced: its gradient was accumulated twice in one backward "
                "(e.g. reentrant activation checkpointing), which zerolab does not support; use "
                "torch.utils.checkpoint with use_reentrant=False")
        bucket = self._buckets.get(g.index)
        if bucket is None:
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
            self._buckets[g.index] = bucket
            self._arrived[g.index] = set()
            self._track(f"grads {g.index}", bucket)
        bucket[g.param_slice(i)].add_(grad.reshape(-1))
        self._arrived[g.index].add(i)
        if len(self._arrived[g.index]) == len(g.params):
            self._ready.add(g.index)
            self._reduce_ready()

    def _reduce_ready(self) -> None:
        """Reduce ready buckets from the front of the order, stopping at one not ready yet."""
        while self._next < len(self._order) and self._order[self._next] in self._ready:
            self._reduce_bucket(self.groups[self._order[self._next]])
            self._next += 1

    def _reduce_bucket(self, g: FlatGroup) -> None:
        bucket = self._buckets.pop(g.index, None)
        if bucket is None:                        # no gradient reached this group here
            bucket = torch.zeros(g.padded_numel, dtype=self.dtype, device=self.device)
        self._arrived.pop(g.index, None)
        self._reduced.add(g.index)
        send = self._send_buffer(bucket)
        out = torch.empty(g.shard_numel, dtype=send.dtype, device=send.device)
        self.comm.reduce_scatter(out, send, tag=f"grads {g.label}")
        self.grad_shards[g.index].add_(out)
        self._track(f"grads {g.index}", None)
        self._after_reduce(g)

    def _after_reduce(self, g: FlatGroup) -> None:
        pass

    def end_backward(self) -> None:
        # Groups whose parameters got no (or not every) gradient this pass, e.g. a parameter
        # unused in forward on this rank, are still reduced, in the same order, so every rank
        # makes the same calls and the averages stay right.
        for i in self._order[self._next:]:
            if i not in self._reduced:
                self._reduce_bucket(self.groups[i])
        self._next = len(self._order)
        self._ready.clear()
        self._reduced.clear()

    def boundary_reduce(self) -> None:
        pass                                      # already reduced during backward

    def grads_for_step(self):
        return self.grad_shards

    def zero_grads(self) -> None:
        for s in self.grad_shards:
            s.zero_()


def broadcast_(comm: Comm, t: torch.Tensor) -> None:
    """Make rank 0's values everyone's (set-up traffic: not written to the ledger)."""
    if comm.world_size > 1:
        with comm.ledger.paused():
            comm.broadcast(t, 0)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()
