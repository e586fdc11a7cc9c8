"""The stage table: everything that differs between ZeRO stages 0-3, in one place.

A ZeRO stage number is a bundle of choices (which gradient switch, which parameter switch,
whether optimizer states are sharded) and of DeepSpeed 0.19.8's constants for that bundle (the
collective that reduces a bucket, the bucket size, how many buckets are in flight, in what order
buckets fill, how the step's norm is sent). Each stage is one frozen :class:`StageSpec` row of
:data:`STAGES`; the rest of the engine reads the row (``stage.spec``) and never tests a stage
number, so a question such as "what does stage 2 do differently from stage 1?" is answered by
comparing two rows here. The rules that depend on config keys (``overlap_comm``,
``reduce_scatter``...) are small named functions in the row, not ``if stage == ...`` elsewhere.

The older names stay as views of the table: ``SWITCHES`` (stage -> the three switches),
:func:`reduce_mode`, :func:`reduce_spec`, ``STAGE0_BUCKET`` (``stage.py`` re-exports them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..config import stages
from .stage3.gather import GatheredParams
from .params import ReplicatedParams
from .reduce import AllReduceAtBoundary, ReduceScatterAtBoundary, ReduceScatterInBackward
from .switches import ReduceSpec

__all__ = ["StageSpec", "STAGES", "SWITCHES", "STAGE0_BUCKET", "reduce_mode", "reduce_spec"]

STAGE0_BUCKET = 500_000_000       # DeepSpeed's MEMORY_OPT_ALLREDUCE_SIZE: stage 0's all-reduce buckets


# -- the collective that reduces one bucket: DeepSpeed 0.19.8's rule for each stage's keys ------
def _always_all_reduce(zero, zerolab) -> str:
    """Stage 0: every rank needs the whole averaged gradient."""
    return "all_reduce"


def _partitioned_optimizer_mode(zero, zerolab) -> str:
    """Stages 1-2: the paper's reduce-scatter with ideal_reduce_scatter (its per-bucket layout),
    else DeepSpeed's: a reduce per owner (``reduce_scatter`` on, multi-rank bucket all-reduce off)
    or an all-reduce."""
    if zerolab.ideal_reduce_scatter:
        return "reduce_scatter"
    if zero.reduce_scatter and not zero.use_multi_rank_bucket_allreduce:
        return "reduce"
    return "all_reduce"


def _partitioned_params_mode(zero, zerolab) -> str:
    """Stage 3: its groups are padded to N shards, so ``reduce_scatter`` is all it reads."""
    return "reduce_scatter" if zero.reduce_scatter else "all_reduce"


# -- whether buckets fill in the last backward's hook order (DeepSpeed's IPG buckets) -----------
def _never(zero) -> bool:
    """Buckets are reduced after backward, in the model's order (or per pass: stage 3)."""
    return False


def _with_overlap_comm(zero) -> bool:
    """Stage 1 reduces during backward only with overlap_comm; then its hooks fill the buckets."""
    return bool(zero.overlap_comm)


def _always(zero) -> bool:
    """Stage 2 always reduces during backward, as its hooks fire."""
    return True


@dataclass(frozen=True)
class StageSpec:
    """One stage: its three switches and every per-stage constant and rule the engine reads."""
    stage: int
    grads: type                   # the gradient switch (reduce.py)
    params: type                  # the parameter switch (params.py: replicated; gather.py: gathered)
    mode: Callable[[Any, Any], str]   # (zero, zerolab) -> the collective that reduces one bucket
    bucket_numel: int | None      # a fixed bucket size (stage 0), or None: reduce_bucket_size
    max_in_flight: int            # async bucket collectives in flight at most (DeepSpeed's IPG buffers)
    pack_after: bool              # a bucket closes once it reaches bucket_numel (stage 0's packing)
    qgz: bool                     # zero_quantized_gradients (qgZ) applies
    ideal_layout: bool            # ideal_reduce_scatter's per-bucket flat buffers apply (stages 1-2)
    per_pass: bool                # buckets follow each forward's order; the params switch is told when
                                  # a group's gradients are all in (and releases it)
    hook_order: Callable[[Any], bool]  # (zero) -> buckets follow the last backward's hook order

    # what the stage shards is the stage key's table (config/stages.py, the formulas' and the
    # parser's too): the rows read it, so the engine, the config and the paper's formulas cannot disagree
    @property
    def shards_optimizer(self) -> bool:
        """Each rank steps only its part: optimizer states (and masters) sharded."""
        return stages.shards_optimizer(self.stage)

    @property
    def partitions_params(self) -> bool:
        """Parameters sharded, gathered per module in module hooks (so no torch.compile'd module),
        and DeepSpeed's stage-3 norm: fp64 SUMs, the overflow MAX only under fp16, an invalid norm
        always an overflow."""
        return stages.partitions_params(self.stage)

    @property
    def zero_enabled(self) -> bool:
        """DeepSpeed's ``zero_optimization()``: stages 1-3, where ZeRO starts by sharding the
        optimizer states."""
        return self.shards_optimizer

    @property
    def switches(self) -> tuple[type, type, bool]:
        """(gradient switch, parameter switch, optimizer states sharded?): ``SWITCHES``' row."""
        return self.grads, self.params, self.shards_optimizer

    def reduce_mode(self, zero, zerolab) -> str:
        """"all_reduce", "reduce" (one per owner) or "reduce_scatter", as DeepSpeed 0.19.8 picks it."""
        return self.mode(zero, zerolab)

    def reduce_spec(self, zero, zerolab) -> ReduceSpec:
        """The gradient switch's slice of the config: DeepSpeed 0.19.8's choices for this stage."""
        return ReduceSpec(mode=self.reduce_mode(zero, zerolab),
                          bucket_numel=self.bucket_numel if self.bucket_numel is not None else zero.reduce_bucket_size,
                          overlap=bool(zero.overlap_comm),
                          max_in_flight=self.max_in_flight,
                          pack_after=self.pack_after,
                          # DeepSpeed's engine all-reduces stage 0's buckets and then multiplies by 1/N
                          # (postscale_gradients); its ZeRO optimizers pre-divide by N
                          post_scale=self.stage == 0,
                          quantized=self.qgz and bool(zero.zero_quantized_gradients))

    def bucket_order(self, zero, zerolab) -> str:
        """The order gradient buckets are filled in: "pass" (each forward's, stage 3), "reverse"
        (the reverse of the model's: ideal_reduce_scatter's buckets, and the parameter switch's
        order until told otherwise), "hook" (the last backward's hook order, agreed once by the
        ranks: where DeepSpeed reduces during backward) or "model" (the model's order: where
        DeepSpeed reduces after backward)."""
        if self.per_pass:
            return "pass"
        if zerolab.ideal_reduce_scatter:
            return "reverse"
        return "hook" if self.hook_order(zero) else "model"


STAGES: dict[int, StageSpec] = {   # (what each stage shards: config/stages.py's SHARDED)
    0: StageSpec(0, AllReduceAtBoundary, ReplicatedParams, mode=_always_all_reduce, bucket_numel=STAGE0_BUCKET,
                 max_in_flight=2, pack_after=True, qgz=False, ideal_layout=False, per_pass=False, hook_order=_never),
    1: StageSpec(1, ReduceScatterAtBoundary, ReplicatedParams, mode=_partitioned_optimizer_mode, bucket_numel=None,
                 max_in_flight=2, pack_after=False, qgz=False, ideal_layout=True, per_pass=False,
                 hook_order=_with_overlap_comm),
    2: StageSpec(2, ReduceScatterInBackward, ReplicatedParams, mode=_partitioned_optimizer_mode, bucket_numel=None,
                 max_in_flight=2, pack_after=False, qgz=False, ideal_layout=True, per_pass=False, hook_order=_always),
    3: StageSpec(3, ReduceScatterInBackward, GatheredParams, mode=_partitioned_params_mode, bucket_numel=None,
                 max_in_flight=1, pack_after=False, qgz=True, ideal_layout=False, per_pass=True, hook_order=_never),
}

# stage -> (how gradients are reduced, where parameters live, optimizer states sharded?): a view
SWITCHES = {stage: spec.switches for stage, spec in STAGES.items()}


def reduce_mode(stage: int, zero, zerolab) -> str:
    """The collective that reduces one bucket, as DeepSpeed 0.19.8 picks it for these keys:
    "all_reduce", "reduce" (one per owner) or "reduce_scatter" (the table's rule for ``stage``)."""
    return STAGES[stage].reduce_mode(zero, zerolab)


def reduce_spec(stage: int, zero, zerolab) -> ReduceSpec:
    """The gradient switch's slice of the config: DeepSpeed 0.19.8's choices for this stage."""
    return STAGES[stage].reduce_spec(zero, zerolab)
