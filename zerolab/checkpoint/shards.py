"""What of an engine's shards a rank holds when it saves or loads a checkpoint (:mod:`zerolab.checkpoint.save`,
:mod:`zerolab.checkpoint.load`)."""
from __future__ import annotations


def _owned_range(g, stage) -> tuple[int, int] | None:
    """Which elements of group ``g``'s padded flat buffer this rank saves (None: nothing)."""
    if stage.shards_optimizer:
        return g.shard_range()
    return (0, g.padded_numel) if stage.rank == 0 else None


def _drop_secondary(stage) -> None:
    """Stage 3 with hpZ: forget the secondary shards, as DeepSpeed's ``checkpoint_event_epilogue``
    does after saving and loading (``stage3.py``: ``invalidate_secondary_tensor``)."""
    stage.params.drop_secondary()              # (a no-op where parameters are replicated)

