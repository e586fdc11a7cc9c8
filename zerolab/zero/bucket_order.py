"""The plan and the order of gradient buckets, shared by the three reduce switches of ``reduce.py``.

:class:`GradReducer` packs the gradients into buckets (DeepSpeed's IPG rule at stages 1-3, its stage-0
rule at stage 0) and sends each bucket in one order on every rank, the moment it and every bucket
before it are complete (the rules are in :mod:`zerolab.zero.reduce`'s docstring); what a bucket's
collective is, a switch of ``reduce.py`` says (:meth:`GradReducer.issue`), and how it travels is
:class:`zerolab.zero.bucket_comm.BucketCollectives`."""
from __future__ import annotations

from collections import deque
from typing import Callable

import torch

from . import params as _params
from .bucket_comm import BucketCollectives
from ..memory.flat import Bucket, FlatGroup, Part, pack_after, pack_buckets
from ..i18n import catalogue
from ..memory import Place
from .switches import LiveBuffers, ReduceSpec

__all__ = ["GradReducer"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)


class GradReducer(BucketCollectives):
    """Bucket order and the collectives, shared by the three switches. A switch defines
    :meth:`accept` (a parameter's gradient arrived) and :meth:`issue` (send one bucket)."""

    grad_flats: list[torch.Tensor] = ()      # stages 0-1: full gradient buffers
    grad_shards: list[torch.Tensor] = ()     # stages 2-3: this rank's gradient shards

    def __init__(self, groups: list[FlatGroup], comm, spec: ReduceSpec, *, dtype: torch.dtype,
                 comm_dtype: torch.dtype, device: torch.device, units: Callable[[], list[Part]],
                 per_pass: bool = False, on_group_done: Callable[[FlatGroup], None] | None = None,
                 buffers: LiveBuffers | None = None, sharded: bool = True, home=None):
        """``units``: what buckets are packed from (the parameter switch's ``reduce_units``),
        once, or again before every backward when ``per_pass`` (stage 3: the order of this pass's
        forward); ``on_group_done(g)``: every gradient of group ``g`` is in a bucket (stage 3
        releases it then); ``buffers``: where transient buffers are counted; ``sharded``: each
        rank's optimizer steps only its shard; ``home``: the state home, asked where the reduced
        gradient shards live (stages 2-3)."""
        self.groups, self.comm, self.spec = groups, comm, spec
        self.dtype, self.device = dtype, device
        self.rank, self.world_size = comm.rank, comm.world_size
        self.comm_dtype = comm_dtype             # the dtype gradients travel in
        self.overlap = spec.overlap              # async collectives during backward
        self.mode = spec.mode
        self.post_scale = spec.post_scale and spec.mode == "all_reduce"
        self.max_in_flight = spec.max_in_flight
        self.bucket_numel = spec.bucket_numel
        self.units, self.per_pass, self.on_group_done = units, per_pass, on_group_done
        self.track = (buffers or LiveBuffers()).track
        self.sharded = sharded
        self.buckets: list[Bucket] = []           # the plan (fixed at stages 0-2, per backward at 3)
        self._where: dict[tuple[int, int], tuple[Bucket, int]] = {}   # (group, param) -> bucket, offset
        self._group_left: dict[int, int] = {}    # group index -> gradients still to arrive
        self._left: dict[int, int] = {}           # bucket index -> gradients still to arrive
        self._ready: set[int] = set()             # complete buckets waiting for their turn
        self._next = 0                            # index of the next bucket to send
        self._in_flight: deque = deque()          # (Pending, finish) of async collectives
        self.arrived: list[tuple[int, int]] = []  # this backward's gradients, in arrival order
        self.observe: Callable[[list], bool] | None = None   # told the last backward's order
        self._backward_seen = False
        if not per_pass:
            self._plan(units())

    # -- the lifecycle (called by the Stage) -----------------------------------------------
    def pre_backward(self, boundary: bool) -> None:
        pass

    def accept(self, g: FlatGroup, i: int, grad: torch.Tensor) -> None:
        raise NotImplementedError

    def post_backward(self) -> None:
        pass

    def at_boundary(self) -> None:
        pass

    def for_step(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def zero(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def memory(self) -> dict[Place, dict[str, int]]:
        raise NotImplementedError

    def _how(self) -> str:
        return {"all_reduce": "all-reduce", "reduce": "reduce to each owner",   # DeepSpeed's choice
                "reduce_scatter": "reduce-scatter"}[self.mode]

    # -- the plan and the order of buckets -------------------------------------------------------
    def _plan(self, units) -> None:
        """Pack the units (params.reduce_units(): ranges of group buffers, in gradient order) into
        buckets: DeepSpeed's IPG rule at stages 1-3, its stage-0 rule at stage 0."""
        sizes = [u.numel for u in units]
        if self.spec.pack_after:
            runs = pack_after(sizes, self.bucket_numel)
        else:                                     # (looked up here: exercise 6 plugs in its own)
            runs = _params.bucket_params([(f"unit {k}", _Sized(n)) for k, n in enumerate(sizes)],
                                         self.bucket_numel)
        self.buckets = pack_buckets(units, runs)
        self._where = {(part.group.index, i): (b, off)
                       for b in self.buckets for part, off in zip(b.parts, b.offsets)
                       for i, off in part.param_offsets(off)}

    def _start_order(self) -> None:
        """A backward begins: every bucket waits for all its gradients again."""
        replan = False
        if self.observe is not None:              # stages 1-2: the last backward's hook order
            if self._backward_seen:               # (every rank calls it at the same backward)
                replan = self.observe(self.arrived)
            self._backward_seen = True
        self.arrived = []
        if self.per_pass or replan:               # stage 3: the order of this pass's forward
            self._plan(self.units())
        self._left = {b.index: len(b.members) for b in self.buckets}
        self._group_left = {g.index: len(g.params) for g in self.groups}
        self._ready.clear()
        self._next = 0

    def _check_not_sent(self, g: FlatGroup, i: int) -> None:
        b, _ = self._where[(g.index, i)]
        if b.index < self._next:
            raise RuntimeError(T(
                "a second gradient for {name} arrived in one backward, after its bucket "
                "({bucket}) was sent: its gradient was accumulated twice in one backward "
                "(e.g. reentrant activation checkpointing), which zerolab does not support; use "
                "torch.utils.checkpoint with use_reentrant=False", name=repr(g.names[i]), bucket=b.label))

    def _arrive(self, g: FlatGroup, i: int) -> None:
        b, _ = self._where[(g.index, i)]
        self.arrived.append((g.index, i))
        self._group_left[g.index] -= 1
        if self._group_left[g.index] == 0 and self.on_group_done is not None:
            self.on_group_done(g)                 # stage 3: its parameters can be released now
        self._left[b.index] -= 1
        if self._left[b.index] == 0:
            self._ready.add(b.index)
            while self._next < len(self.buckets) and self._next in self._ready:
                self._issue_next()

    def _issue_next(self) -> None:
        b = self.buckets[self._next]
        self._next += 1
        self.issue(b)

    def _issue_rest(self) -> None:
        """Send every bucket not sent yet, in order (end of backward)."""
        while self._next < len(self.buckets):
            self._issue_next()

    def issue(self, b: Bucket) -> None:
        raise NotImplementedError


class _Sized:
    """What ``bucket_params`` reads of a parameter: its number of elements."""

    def __init__(self, n: int):
        self.n = n

    def numel(self) -> int:
        return self.n
