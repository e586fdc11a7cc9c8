"""Loading a checkpoint into an engine: every file checked and every rank deciding together before
anything is changed, at any world size and stage (the layout in :mod:`zerolab.checkpoint.checkpoint`'s
docstring). Saving is :mod:`zerolab.checkpoint.save`."""
from __future__ import annotations

import torch

from .read import CheckpointError, read_full_state, resolve
from .shards import _drop_secondary
from ..offload import disk
from ..i18n import catalogue

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["load_checkpoint"]


def load_checkpoint(engine, load_dir, tag=None, load_optimizer_states=True, load_module_only=False,
                    load_lr_scheduler_states=True):
    """Load a checkpoint into ``engine`` (every rank must call it); returns ``(path,
    client_state)``. Any world size and stage the checkpoint was written at. The scheduler's
    state is loaded when both the engine and the checkpoint have one (DeepSpeed's
    ``load_lr_scheduler_states``); the lr itself comes back with the optimizer's param groups."""
    comm = engine.comm
    error, full, path = None, None, None
    try:
        path = resolve(load_dir, tag)
        full = read_full_state(path)
        _check_matches(engine, full, load_optimizer_states and not load_module_only, load_module_only)
    except CheckpointError as e:
        error = str(e)
    except Exception as e:                                       # noqa: BLE001 (told to every rank)
        error = T("cannot read the checkpoint in {dir}: {cause}", dir=path or load_dir,
                  cause=disk.cause(e, path or load_dir, reading=True))
    # decide together: one rank's problem stops every rank, before anything is changed
    bad = comm.agree(error, tag="checkpoint load", device=engine.device)
    if bad:
        raise CheckpointError(T("{errors}. Nothing was loaded.", errors=T.text("; ").join(
            T("rank {rank}: {error}", rank=r, error=e) for r, e in bad[:2])))
    # then every rank puts it in place (no collective in between) and they agree once more, so
    # that one rank's failure here (an NVMe file that cannot be written) reaches all of them
    error = None
    try:
        client = _apply(engine, full, load_optimizer_states, load_module_only, load_lr_scheduler_states)
    except Exception as e:                                       # noqa: BLE001 (told to every rank)
        error = T("{type}: {error}", type=type(e).__name__, error=e)
    bad = comm.agree(error, tag="checkpoint load", device=engine.device)
    if bad:
        raise CheckpointError(T("{errors}. The checkpoint was read but could not be put in place on every rank: "
                                "this engine's state is partly loaded; close it and start again from the "
                                "checkpoint.", errors=T.text("; ").join(
                                    T("rank {rank}: {error}", rank=r, error=e) for r, e in bad[:2])))
    return str(path), client


def _apply(engine, full, load_optimizer_states, load_module_only, load_lr_scheduler_states) -> dict:
    """Put a checked checkpoint's state into ``engine`` (this rank's part); returns its client state."""
    stage = engine.stage
    meta, params = full["meta"], full["params"]
    ms = full["model_states"]
    trained = {n for g in stage.groups for n in g.names}
    if load_module_only:      # the weights by name, whichever were frozen when saved or are now
        every = {**{n: t.float() for n, t in ms["frozen"].items()}, **params}
        stage.load_full_values({n: every[n] for n in trained})
        fixed = {n: t for n, t in every.items() if n not in trained}
    else:
        stage.load_full_values(params)
        fixed = ms["frozen"]
    _drop_secondary(stage)
    named_buffers = dict(engine.module.named_buffers())
    for n, b in ms["buffers"].items():
        named_buffers[n].data.copy_(b)
    stage.load_untrained(fixed)
    if load_module_only:
        return ms.get("client_state", {})
    if load_optimizer_states:
        opt = engine.optimizer
        for g in stage.groups:
            st = {}
            keys = set(full["states"][g.names[0]]) if g.names else set()
            for k in keys:
                flat = g.flatten([full["states"][n][k] for n in g.names], torch.float32, torch.device("cpu"))
                owned = g.shard_of(flat) if stage.shards_optimizer else flat
                st[k] = owned.clone()
            for k, v in full["scalars"].items():
                st[k] = v.clone() if torch.is_tensor(v) else v
            stage.home.set_group(g.index, state=st)   # cut into the home's tiles, on its device
        for pg, saved in zip(opt.param_groups, meta["optimizer"]["param_groups"]):
            for k, v in saved.items():
                if k in pg:
                    pg[k] = tuple(v) if isinstance(pg[k], tuple) else v
    sched = getattr(engine, "lr_scheduler", None)
    if load_lr_scheduler_states and sched is not None and ms.get("lr_scheduler") is not None:
        sched.load_state_dict(ms["lr_scheduler"])
    engine.global_steps = meta["global_steps"]
    engine.micro_steps = meta["micro_steps"]
    engine.skipped_steps = meta["skipped_steps"]
    for k, v in meta["loss_scaler"].items():
        if hasattr(engine.scaler, k):
            setattr(engine.scaler, k, v)
    return ms.get("client_state", {})


def _check_matches(engine, full, with_optimizer: bool, module_only: bool = False) -> None:
    """The checkpoint must describe this model: the same trainable names and shapes, and frozen
    parameters this model has, of the same shapes (all checked before anything is changed).
    ``module_only``: weights by name, frozen or trained when saved, whatever they are now."""
    # the group layout, not p.shape: stage 3's released parameters are empty tensors
    want = {n: tuple(s) for g in engine.stage.groups for n, s in zip(g.names, g.shapes)}
    have = {n: tuple(t.shape) for n, t in full["params"].items()}
    frozen_saved = {n: tuple(t.shape) for n, t in full["model_states"]["frozen"].items()}
    model_frozen = {n: s for n, s in engine.stage.param_shapes().items() if n not in want}
    if module_only:
        have = {**frozen_saved, **have}
        want = {**want, **{n: s for n, s in model_frozen.items() if n in have}}
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    if not module_only:
        extra += sorted(n for n in frozen_saved if n not in model_frozen and n not in want)
        unfrozen = [n for n in missing if n in frozen_saved]
        if unfrozen:
            raise CheckpointError(T(
                "frozen when this checkpoint was saved (no optimizer state): {names}; pass "
                "load_module_only=True to load the weights and start the optimizer afresh",
                names=", ".join(unfrozen[:4])))
    for n, s in frozen_saved.items():
        if n in model_frozen and model_frozen[n] != s and not module_only:
            want[n], have[n] = model_frozen[n], s              # reported as a shape difference
    shapes = [T("{name}: checkpoint {saved}, model {model}", name=n, saved=list(have[n]), model=list(want[n]))
              for n in want if n in have and have[n] != want[n]]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append(T("missing from the checkpoint: {names}", names=", ".join(missing[:6])))
        if extra:
            parts.append(T("not in this model: {names}", names=", ".join(extra[:6])))
        if shapes:
            parts.append(T("different shapes: {shapes}", shapes=T.text("; ").join(shapes[:6])))
        raise CheckpointError(T("the checkpoint is of another model ({parts})", parts=T.text("; ").join(parts)))
    buffers = dict(engine.module.named_buffers())
    for n, b in full["model_states"]["buffers"].items():
        if n not in buffers or tuple(buffers[n].shape) != tuple(b.shape):
            raise CheckpointError(T("the checkpoint's buffer {name} does not match this model's", name=repr(n)))
    if with_optimizer:
        saved = full["meta"]["optimizer"]["type"]
        if saved != type(engine.optimizer).__name__:
            raise CheckpointError(T("the checkpoint's optimizer is {saved}, this engine's is {mine}: pass "
                                    "load_optimizer_states=False to load only the weights",
                                    saved=saved, mine=type(engine.optimizer).__name__))
