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

How and when buckets are reduced (one order on every rank, reduce-scatter or all-reduce,
overlap with backward) is in ``reduce.py``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .comm import Comm
from .flat import FlatGroup
from .memory import tensor_bytes
from .offload import make_state_home
from .reduce import OrderedBuckets, ReduceScatterGrads  # noqa: F401  (ReduceScatterGrads: stages 2, 3)

__all__ = ["StageBase", "UnusedParameterError"]


class UnusedParameterError(RuntimeError):
    """``ignore_unused_parameters`` is false and a trainable parameter got no gradient."""


class StageBase(OrderedBuckets):
    stage: int = -1
    shards_optimizer = True      # do ranks step only their own shard? (False for stage 0)
    grads_on_host = False        # reduced gradient shards kept in host memory (stages 2-3 with offload)

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
        self.budget_check = None                 # the engine's device budget, when it has one
        self._init_order()
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for _, p in named]

    # -- building -----------------------------------------------------------------------
    def make_groups(self, named) -> list[FlatGroup]:
        raise NotImplementedError

    def _make_home(self, owned: list[torch.Tensor]) -> None:
        """Where the optimizer's side lives (``offload.py``): the fp32 masters the optimizer
        steps and its moments, on the device, the host or NVMe. ``owned``: this rank's part of
        each group's parameters, which the step updates (through :meth:`write_params`). In fp32
        training without offload the masters *are* those parameters (views, no copy); otherwise
        they are fp32 copies: the full register (the seed's 登记簿)."""
        self.owned_params = owned
        self.home = make_state_home(self, owned, self.zero)

    @property
    def masters(self) -> list[torch.Tensor]:
        """Each group's fp32 master shard (read back from the files under NVMe offload)."""
        return [self.home.group_master(i) for i in range(len(self.groups))]

    @property
    def offloads_optimizer(self) -> bool:
        return self.zero.offload_optimizer.device in ("cpu", "nvme")

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        """The optimizer updated ``values`` (fp32) of group ``i``'s owned part from ``start``:
        put them into this rank's parameters, in the model dtype."""
        self.owned_params[i][start:start + values.numel()].copy_(values, non_blocking=True)

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

    def begin_backward(self, boundary: bool = True) -> None:
        """Called before every ``loss.backward()``; ``boundary``: this micro-step ends with an
        optimizer step (stages 0/1 reduce their gradients then)."""
        self._got_grad.clear()

    def end_backward(self) -> None:
        """Called after every ``loss.backward()`` (stages 2/3 flush unfinished buckets)."""

    def forward_failed(self) -> None:
        """The model's forward raised (stage 3 forgets the modules it had open)."""

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
        if t is not None and self.budget_check is not None:
            self.budget_check("backward" if key.startswith("grads") else "a parameter gather")

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

    def param_bytes_on(self, where: str) -> int:
        """Parameter bytes offload keeps in "host" memory or on "nvme" (stage 3 only)."""
        return 0

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
        self.home.close()
        self.closed = True

    def load_full_values(self, values: dict[str, torch.Tensor]) -> None:
        """Set every trained parameter (masters and the model's copy) from full fp32 values by
        name, cut the way this stage shards (a checkpoint from any world size or stage)."""
        for g in self.groups:
            flat = g.flatten([values[n] for n in g.names], torch.float32, self.device)
            self.store_flat(g, flat)
            self.home.set_group(g.index, master=(g.shard_of(flat) if self.shards_optimizer else flat))

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        """Put group ``g``'s full values into the model's parameters (this stage's storage)."""
        raise NotImplementedError

    def restore_params(self) -> None:
        """Give every trained parameter its full value as a tensor of its own."""
        for g, flat in zip(self.groups, self.full_master_flats()):
            for p, v in zip(g.params, g.views(flat)):
                p.data = v.to(self.dtype).clone()


def broadcast_(comm: Comm, t: torch.Tensor) -> None:
    """Make rank 0's values everyone's (set-up traffic: not written to the ledger)."""
    if comm.world_size > 1:
        with comm.ledger.paused():
            comm.broadcast(t, 0)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()
