"""What an engine attaches to its model, and the set-up ``Engine.__init__`` does before the stage.

One live engine per model (``_LIVE``): a new engine on the same model closes the old one first.
The caller's parameter groups are checked and turned into what the stage trains; frozen
parameters and module buffers start as rank 0's.
"""
from __future__ import annotations

import warnings
import weakref

import torch
from torch import nn

from ..crew import crew
from ..i18n import catalogue

T = catalogue("engine")        # the warnings in the edition's language (zerolab/i18n/messages_zh.py)
CONFIG = catalogue("config")   # what a no-effect key does, in the same language

__all__ = ["Attached", "as_groups", "close_previous_engine", "current_device", "forget_live",
           "only_the_optimizers", "refuse_compiled", "register_live", "sync_untrained_state",
           "warn_ignored_settings"]

# id(model) -> (weak model, weak engine, what the engine attached): the live engine of each model,
# for "one per model". The attachments are held strongly: they stay on the model (hooks) even
# when nobody keeps the engine, and a new engine must take them off.
_LIVE: dict[int, tuple] = {}
_WARNED: set[str] = set()                 # no-effect settings already warned about, per process


def current_device() -> torch.device:
    try:
        return crew.rank_info().device
    except RuntimeError:
        return torch.device("cpu")


def as_groups(param_groups) -> list[dict]:
    """torch's parameter groups (dicts with "params"), or a plain iterable of tensors (one group)."""
    groups = list(param_groups)
    if not groups or not all(isinstance(g, dict) for g in groups):
        if any(isinstance(g, dict) for g in groups):
            raise ValueError(T("param_groups mixes dicts and tensors: give a list of dicts with 'params'"))
        groups = [{"params": groups}]
    out = []
    for g in groups:
        ps = g["params"]
        ps = [ps] if torch.is_tensor(ps) else list(ps)
        out.append({**g, "params": ps})
    seen = set()
    for g in out:
        for p in g["params"]:
            if id(p) in seen:
                raise ValueError(T("a parameter appears in more than one parameter group"))
            seen.add(id(p))
    return out


def refuse_compiled(model: nn.Module) -> None:
    """Stage 3 gathers each module's parameters in forward hooks and swaps ``param.data``, which
    torch.compile cannot trace (dynamo fails deep inside with "already tracked for mutation")."""
    compiled = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    kind = getattr(compiled, "OptimizedModule", None)
    names = [n or T("the model") for n, m in model.named_modules() if kind is not None and isinstance(m, kind)]
    if names:
        raise ValueError(T(
            "ZeRO stage 3 cannot run a torch.compile'd module ({name}): stage 3 gathers and "
            "releases each module's parameters in module hooks, which the compiler cannot trace. "
            "Pass the model before torch.compile, or use ZeRO stage 0-2 (they run compiled models "
            "unchanged)", name=names[0]))


def _drop_grad(p: torch.Tensor) -> None:
    p.grad = None


class Attached:
    """What an engine leaves on its model (the stage's hooks and buffers, the hooks that drop
    untrained gradients), closable without the engine."""

    def __init__(self, stage, hooks: list):
        self.stage, self.hooks = stage, hooks

    @property
    def closed(self) -> bool:
        return self.stage.closed

    def close(self) -> None:
        self.stage.close()
        for h in self.hooks:
            h.remove()
        self.hooks.clear()


def register_live(model: nn.Module, engine, attached: Attached) -> None:
    _LIVE[id(model)] = (weakref.ref(model), weakref.ref(engine), attached)


def forget_live(model: nn.Module, engine) -> None:
    entry = _LIVE.get(id(model))
    if entry and entry[1]() is engine:
        del _LIVE[id(model)]


def close_previous_engine(model: nn.Module, rank: int) -> None:
    """A model has one live engine: close the one ``model`` has (called by ``Engine.__init__``)."""
    entry = _LIVE.get(id(model))
    if not entry or entry[0]() is not model:
        return
    old, attached = entry[1](), entry[2]
    if (old is not None and not old.closed) or (old is None and not attached.closed):
        if rank == 0:
            warnings.warn(T("this model already had a zerolab engine: it is closed now (its hooks removed, the "
                            "model given its full current weights), and the new engine starts from them"), stacklevel=4)
        if old is not None:
            old.close()
        else:                                 # the engine is gone, its hooks are not
            attached.close()


def warn_ignored_settings(config, rank: int) -> None:
    ignored = getattr(config, "ignored_settings", None)
    for key, why in (ignored() if ignored else []):
        if key not in _WARNED and rank == 0:
            _WARNED.add(key)
            warnings.warn(T("{key} has no effect in zerolab: {why}", key=key, why=CONFIG.text(why)), stacklevel=4)


def only_the_optimizers(model, named, param_groups, hooks: list, rank: int) -> list:
    """An optimizer built over some of the parameters trains those alone, as in DeepSpeed:
    the other ``requires_grad`` parameters are left as they are (their gradients dropped as
    autograd makes them, so they neither change nor pile up; the hooks that drop them are
    appended to ``hooks``)."""
    mine = {id(p) for g in param_groups for p in g["params"]}
    frozen = [n for n, p in model.named_parameters() if id(p) in mine and not p.requires_grad]
    if frozen:
        raise ValueError(T("the optimizer's parameter groups hold frozen parameters ({name}): "
                           "leave them out, or set requires_grad=True", name=repr(frozen[0])))
    stray = mine - {id(p) for p in model.parameters()}
    if stray:
        raise ValueError(T("the optimizer holds {n} tensor(s) that are not parameters of the "
                           "model given to initialize: build it over model.parameters() (or some of them)",
                           n=len(stray)))
    left = [(n, p) for n, p in named if id(p) not in mine]
    if left:
        for _, p in left:
            hooks.append(p.register_post_accumulate_grad_hook(_drop_grad))
        if rank == 0:
            print(T("zerolab: {n} parameter(s) with requires_grad are not in the optimizer ({names}): "
                    "they are not trained, as in DeepSpeed", n=len(left),
                    names=", ".join(repr(n) for n, _ in left[:3]) + (", ..." if len(left) > 3 else "")))
    return [(n, p) for n, p in named if id(p) in mine]


def sync_untrained_state(module: nn.Module, named, comm) -> None:
    """Frozen parameters and module buffers start equal on every rank (rank 0's)."""
    trainable = {id(p) for _, p in named}
    with comm.ledger.paused():
        for p in module.parameters():
            if id(p) not in trainable:
                comm.broadcast(p.data, 0)
        for b in module.buffers():
            comm.broadcast(b.data, 0)
