"""Stage 3: shard the parameters too (nobody carries the whole household any more).

Every rank keeps only its shard of each module's parameters (plus, in mixed precision, the
fp32 master and Adam states of that shard): 16 Psi / N bytes per rank. A module's full
parameters exist only while they are needed:

    forward   pre-hook:  all-gather the module's parameters      (Psi on the wire, in total)
              post-hook: release them (``param.data`` becomes an empty tensor)
    backward  when the module's gradient reaches its outputs: all-gather again   (Psi)
              when all its parameters have their gradient: reduce-scatter it     (Psi)
              and release the parameters
    step      each rank steps its shard; nothing is gathered until the next forward

One :class:`FlatGroup` per module (its own parameters, ``recurse=False``), so a gather
brings exactly what the module is about to use. Groups of at most
``stage3_param_persistence_threshold`` elements are *persistent*: gathered once, kept whole,
and refreshed by an all-gather after each step (DeepSpeed's rule: many tiny all-gathers cost
more in latency than the memory they save).

Every rank must run the same modules in the same order. Before each gather the ranks
exchange the id of the group they are about to gather (16 bytes); if two ranks disagree,
both raise an error that names the modules, instead of hanging in mismatched collectives.

Limits: a parameter must be used inside the forward of a module that owns it (as DeepSpeed
without ``register_external_parameter``); frozen parameters are kept whole.
"""
from __future__ import annotations

import torch
from torch import nn

from .flat import FlatGroup
from .memory import tensor_bytes
from .stage_base import ReduceScatterGrads, StageBase, broadcast_

__all__ = ["Stage3", "ModuleOrderError"]


class ModuleOrderError(RuntimeError):
    """Ranks gathered different modules: their forward/backward took different paths."""


class _OnBackward(torch.autograd.Function):
    """Identity in forward; calls ``fn`` when the gradient flows back through it."""

    @staticmethod
    def forward(ctx, fn, *tensors):
        ctx.fn = fn
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        ctx.fn()
        return (None, *grads)


class Stage3(ReduceScatterGrads, StageBase):
    stage = 3
    shards_optimizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        thresh = self.zero.stage3_param_persistence_threshold
        self.shards: list[torch.Tensor] = []       # this rank's shard of each group (model dtype)
        self.full: dict[int, torch.Tensor] = {}    # group index -> gathered flat buffer, while alive
        self.persistent = [g.numel <= thresh for g in self.groups]
        for g in self.groups:
            flat = g.flatten([p.data for p in g.params], self.dtype, self.device)
            broadcast_(self.comm, flat)            # everyone starts from rank 0's weights
            if self.persistent[g.index]:
                self.shards.append(g.shard_of(flat))       # a view: the whole buffer stays
                self.full[g.index] = flat
                g.bind(flat)
            else:
                self.shards.append(g.shard_of(flat).clone())
                self._release(g)
        self.masters = self._make_masters(self.shards)
        self._init_grad_shards()
        self._in_backward = False
        self.fetches = 0                           # all-gathers issued for parameters
        self.peak_gathered_numel = 0               # most parameter elements gathered at once
        self._install_hooks()

    # -- groups: one per module with parameters of its own ------------------------------
    def make_groups(self, named):
        trainable = {id(p): n for n, p in named}
        self.module_groups: dict[nn.Module, list[int]] = {}
        groups: list[FlatGroup] = []
        owner: dict[int, int] = {}
        for mname, m in self.model.named_modules():
            own = [p for p in m.parameters(recurse=False) if id(p) in trainable]
            new = [p for p in own if id(p) not in owner]
            if new:
                g = FlatGroup(len(groups), new, [trainable[id(p)] for p in new], self.rank,
                              self.world_size, label=mname or "(root)")
                groups.append(g)
                for p in new:
                    owner[id(p)] = g.index
            ids = sorted({owner[id(p)] for p in own})
            if ids:
                self.module_groups[m] = ids
        return groups

    def _install_hooks(self) -> None:
        for m, ids in self.module_groups.items():
            m.register_forward_pre_hook(self._make_pre_forward(ids))
            m.register_forward_hook(self._make_post_forward(ids))

    def _make_pre_forward(self, ids):
        def hook(module, inputs):
            for i in ids:
                self._fetch(self.groups[i])
        return hook

    def _make_post_forward(self, ids):
        def hook(module, inputs, output):
            for i in ids:
                if not self._in_backward:
                    self._maybe_release(self.groups[i])
            if not torch.is_grad_enabled():
                return output
            def before_backward():
                self._in_backward = True
                for i in ids:
                    self._fetch(self.groups[i])
            return _wrap_outputs(output, before_backward)
        return hook

    # -- gather and release ----------------------------------------------------------------
    def _fetch(self, g: FlatGroup) -> None:
        if g.index in self.full:
            return
        flat = torch.empty(g.padded_numel, dtype=self.dtype, device=self.device)
        self._checked_all_gather(g, flat)
        self.full[g.index] = flat
        g.bind(flat)
        self.fetches += 1
        self._track(f"params {g.index}", flat)
        live = sum(self.groups[i].padded_numel for i in self.full if not self.persistent[i])
        self.peak_gathered_numel = max(self.peak_gathered_numel, live)

    def _checked_all_gather(self, g: FlatGroup, out: torch.Tensor) -> None:
        """All-gather the group's shards, after checking every rank is gathering this group.

        A 16-byte header (group id, shard size) is all-gathered first: if the ranks took
        different paths through the model they would otherwise issue all-gathers of
        different sizes, which deadlocks or crashes the transport. The header costs one
        small collective per gather, recorded in the ledger under the tag 'check'."""
        shard = self.shards[g.index]
        header = torch.tensor([g.index, shard.numel()], dtype=torch.int64, device=self.device)
        headers = torch.empty(2 * self.world_size, dtype=torch.int64, device=self.device)
        self.comm.all_gather(headers, header, tag=f"check {g.label}")
        ids = headers.view(self.world_size, 2)[:, 0].tolist()
        if any(i != g.index for i in ids):
            names = {r: self.groups[i].label if 0 <= i < len(self.groups) else f"#{i}"
                     for r, i in enumerate(ids)}
            raise ModuleOrderError(
                "ranks ran different modules: " + ", ".join(f"rank {r} gathered {n!r}" for r, n in names.items())
                + ". With ZeRO stage 3 every rank must run the same modules in the same order "
                  "(e.g. no rank-dependent branches, no forward on one rank only).")
        self.comm.all_gather(out, shard, tag=f"params {g.label}")

    def _release(self, g: FlatGroup) -> None:
        for p in g.params:
            p.data = torch.empty(0, dtype=self.dtype, device=self.device)
        self.full.pop(g.index, None)
        self._track(f"params {g.index}", None)

    def _maybe_release(self, g: FlatGroup) -> None:
        if not self.persistent[g.index] and g.index in self.full:
            self._release(g)

    # -- gradients -----------------------------------------------------------------------
    def begin_backward(self) -> None:
        self._in_backward = True

    def _after_reduce(self, g: FlatGroup) -> None:
        self._maybe_release(g)                    # its gradient is done: the furniture goes back

    def end_backward(self) -> None:
        super().end_backward()
        for g in self.groups:
            self._maybe_release(g)
        self._in_backward = False

    def publish(self) -> None:
        for g, shard, m in zip(self.groups, self.shards, self.masters):
            if self.mixed:
                shard.copy_(m)
            if self.persistent[g.index]:          # kept whole: refresh it now
                flat = self.full[g.index]
                self.comm.all_gather(flat, shard.clone(), tag=f"params {g.label}")

    def memory(self) -> dict[str, int]:
        persistent = [self.full[i] for i in self.full if self.persistent[i]]
        return {"params": tensor_bytes([*self.shards, *persistent]) + self._frozen_bytes(),
                "grads": tensor_bytes(self.grad_shards),
                "optimizer_states": tensor_bytes(self.masters) if self.mixed else 0,
                "buffers": self.buffer_bytes()}


def _wrap_outputs(output, fn):
    """Route the module's tensor outputs through ``_OnBackward`` so that ``fn`` runs before
    the module's own backward. Handles a tensor, or a tuple/list of values."""
    if torch.is_tensor(output):
        if not output.requires_grad:
            return output
        return _OnBackward.apply(fn, output)[0]
    if isinstance(output, (tuple, list)):
        idx = [k for k, o in enumerate(output) if torch.is_tensor(o) and o.requires_grad]
        if not idx:
            return output
        wrapped = _OnBackward.apply(fn, *[output[k] for k in idx])
        out = list(output)
        for k, w in zip(idx, wrapped):
            out[k] = w
        return type(output)(out) if isinstance(output, tuple) else out
    return output
