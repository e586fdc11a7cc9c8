"""What each ZeRO stage shards: the paper's P_os, P_os+g, P_os+g+p as a table.

This is what the ``zero_optimization.stage`` key means, so it lives with the keys, at the floor
of the config layer: the parser's and ``zerolab explain``'s per-stage rules, the memory layer's
formulas and the engine's stage table all read it, and none of them tests a stage number.

ZeRO's stages differ, for the bytes a rank holds, in one thing only: which of the three model
states (parameters, gradients, optimizer states) are cut into N shards. Stage 1 shards the
optimizer states, stage 2 also the gradients, stage 3 also the parameters (Rajbhandari et al.,
ZeRO, section 5; DeepSpeed 0.19.8 runs stage 1 and 2 in ``runtime/zero/stage_1_and_2.py`` and
stage 3 in ``runtime/zero/stage3.py`` with ``partition_parameters.py``). The memory formulas
(``zerolab/memory/memory.py``, ``budget.py``) read :data:`SHARDED`, and the engine's stage table
(``zerolab/zero/stage_table.py``) reads its rows' ``shards_optimizer`` and ``partitions_params``
from :func:`shards_optimizer` and :func:`partitions_params` here, so none of them can disagree.

The two named predicates are DeepSpeed's own two tests of the stage: :func:`shards_optimizer`
is its ``zero_optimization()`` (stages 1-3: ZeRO's optimizer runs at all), and
:func:`partitions_params` is its ``zero_optimization_partition_weights()`` (stage 3: the
``stage3_*`` keys, ``offload_param``, ZeRO++ and ``overlap_comm``'s default are that stage's).
"""
from __future__ import annotations

__all__ = ["PARAMS", "GRADS", "OPTIMIZER_STATES", "SHARDED", "shards", "parts", "stages_from",
           "shards_optimizer", "partitions_params"]

PARAMS, GRADS, OPTIMIZER_STATES = "params", "grads", "optimizer_states"   # engine.memory()'s keys

# stage -> the model states it cuts into N shards (every other one each rank holds whole)
SHARDED: dict[int, frozenset[str]] = {
    0: frozenset(),                                      # DDP: all whole
    1: frozenset({OPTIMIZER_STATES}),                    # P_os
    2: frozenset({OPTIMIZER_STATES, GRADS}),             # P_os+g
    3: frozenset({OPTIMIZER_STATES, GRADS, PARAMS}),     # P_os+g+p
}


def shards(stage: int, state: str) -> bool:
    """Whether ``stage`` cuts ``state`` ("params", "grads", "optimizer_states") into shards."""
    return state in SHARDED[stage]


def shards_optimizer(stage: int) -> bool:
    """Each rank steps only its part of the optimizer states: DeepSpeed's ``zero_optimization()``,
    where ZeRO starts (stages 1-3)."""
    return shards(stage, OPTIMIZER_STATES)


def partitions_params(stage: int) -> bool:
    """The parameters themselves are sharded and gathered per module: DeepSpeed's
    ``zero_optimization_partition_weights()``, the stage that reads ``stage3_*``, ``offload_param``
    and ZeRO++ (stage 3)."""
    return shards(stage, PARAMS)


def parts(stage: int, state: str, world_size: int) -> int:
    """Into how many parts ``state`` is cut at ``stage`` on ``world_size`` ranks: N or 1."""
    return world_size if shards(stage, state) else 1


def stages_from(stage: int) -> list[int]:
    """``stage`` and the stages that shard more than it, in the table's order (fewest shards first)."""
    return [s for s in SHARDED if SHARDED[stage] <= SHARDED[s]]
