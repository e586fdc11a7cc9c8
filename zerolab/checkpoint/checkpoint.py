"""Checkpoints that lose nothing: DeepSpeed's save/load API over zerolab's shards.

Layout of ``save_dir/<tag>/`` (the tag defaults to ``global_step<n>``, as DeepSpeed's):

    meta.json         rank 0: format version, stage, world size, dtypes, the group layout
                      (names and sizes of the parameters in each flat group), counters, the
                      loss scaler, optimizer type and hyperparameters, sha256 of every file
    rank_<r>.pt       rank r: the part of each group's fp32 master and optimizer state it owns
                      (stage 0: rank 0 writes the whole of every group; the others write none)
    model_states.pt   rank 0: buffers and frozen parameters; ``client_state``; the learning-rate
                      scheduler's ``state_dict()`` (None without one), as DeepSpeed keeps it

and ``save_dir/latest`` names the newest tag. Every file is written into a temporary folder
that is renamed into place only when all ranks have finished, so a run killed while saving
leaves the previous checkpoint, and ``latest``, as they were. A save that fails on one rank (a
read-only folder, a full disk, a permission, any exception in its part) fails on every rank: the
ranks agree after each part (:meth:`zerolab.comm.Comm.agree`, zerolab's own 4-byte check, never
counted as ZeRO's calls), and every rank raises :class:`CheckpointError` naming the rank, the file
and the cause (:mod:`zerolab.offload.disk`) within seconds, the temporary folder removed.

Loading never unpickles arbitrary objects (``torch.load(weights_only=True)``), checks every
file's hash and the model's parameter names and shapes before touching anything, and decides
on every rank together: if any rank finds a problem, every rank raises
:class:`CheckpointError` and nothing is loaded.

Any world size, any stage. The loader rebuilds each parameter's full fp32 value and full
optimizer state from all the rank files, then cuts them the way *this* engine shards (its
world size, stage and buckets). So a checkpoint written on 3 ranks at stage 3 resumes on 2
ranks at stage 2 (DeepSpeed needs its "universal checkpoint" conversion for that). Each rank
holds the full model states once while loading: fine for the models of this course; a
production loader would read only the ranges it owns.

Reading a folder back without an engine (:func:`read_full_state`, :func:`consolidate`) is
:mod:`zerolab.checkpoint.read`; saving into an engine is :mod:`zerolab.checkpoint.save`, loading into one
:mod:`zerolab.checkpoint.load` (what of the engine's shards a rank holds: :mod:`zerolab.checkpoint.shards`).
This module is their face: it hands on their public names, as it defined them before the split.
"""
from __future__ import annotations

from .load import load_checkpoint
from .read import CheckpointError, consolidate, read_full_state, resolve  # noqa: F401 (as before the split)
from .save import save_checkpoint

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "read_full_state", "consolidate"]
