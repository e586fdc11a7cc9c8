"""The optimizer that steps each rank's shard.

ZeRO steps a *flat shard* of the parameters instead of the parameters themselves. That is
only correct for optimizers that update every element on its own (Adam, AdamW, SGD, ...):
an optimizer that looks at a whole tensor at once (LAMB's trust ratio, Adafactor's factored
moments) would see a shard that cuts across tensors. So, as DeepSpeed does, zerolab accepts
a known list and refuses others unless ``zero_allow_untested_optimizer`` is set.

The optimizer comes from the config's ``optimizer`` block or from the caller, as an
optimizer class (``torch.optim.AdamW``), an instance built on the model's parameters (its
class and hyper-parameters are re-used on the shard) or a factory ``params -> optimizer``.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from ..i18n import catalogue

__all__ = ["build_optimizer", "ELEMENTWISE"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

# Optimizers whose update of an element depends only on that element's history.
ELEMENTWISE = {torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad,
               torch.optim.RMSprop, torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam}


def _rebuild(spec: torch.optim.Optimizer, params) -> torch.optim.Optimizer:
    """A new optimizer of ``spec``'s class over ``params`` with ``spec``'s hyper-parameters. A
    param group also holds entries its constructor does not take (``AdamW`` stores
    ``decoupled_weight_decay``, which only ``Adam`` accepts): those are left to the class and must
    come out the same, or the optimizer cannot be rebuilt faithfully and the error says which."""
    cls = type(spec)
    group = {k: v for k, v in spec.param_groups[0].items() if k != "params"}
    if params and isinstance(params[0], dict):      # one per parameter group, with its own settings
        params = [{**{k: v for k, v in pg.items() if k != "params"}, **extra}
                  for pg, extra in zip(spec.param_groups, params)]
    try:
        accepted = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        accepted = None
    takes_any = accepted is None or any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    hp = group if takes_any else {k: v for k, v in group.items() if k in accepted}
    opt = cls(params, **hp)
    differ = [k for k in group if k not in hp and opt.param_groups[0].get(k, group[k]) != group[k]]
    if differ:
        raise ValueError(T("cannot rebuild {cls} over the shards with the same settings: "
                           "{settings} is not a constructor "
                           "argument; pass the optimizer class or a factory (params -> optimizer) instead",
                           cls=cls.__name__, settings=", ".join(f"{k}={group[k]!r}" for k in differ)))
    return opt


def _from_config(opt_cfg, params) -> torch.optim.Optimizer:
    """The optimizer DeepSpeed would build from the config block (its "Adam" is AdamW unless
    ``adam_w_mode`` is false; the parser has resolved that into ``torch_name``)."""
    cls = getattr(torch.optim, opt_cfg.torch_name, None)
    if cls is None:
        raise ValueError(T("optimizer type {type} is not implemented by zerolab "
                           "(use Adam, AdamW or SGD, or pass a torch optimizer to initialize)",
                           type=repr(opt_cfg.type)))
    hp: dict[str, Any] = {k: (tuple(v) if isinstance(v, (list, tuple)) else v)
                          for k, v in opt_cfg.params.items()}
    return cls(params, **hp)


def build_optimizer(spec, opt_cfg, params: list[torch.Tensor], allow_untested: bool = False):
    """Build the optimizer over ``params`` (the shards) from ``spec`` and/or the config block."""
    if isinstance(spec, type) and issubclass(spec, torch.optim.Optimizer) and opt_cfg is not None:
        hp = {k: (tuple(v) if k == "betas" else v) for k, v in opt_cfg.params.items()}
        spec, opt_cfg = (lambda ps: spec(ps, **hp)), None     # the class, with the config's hyper-parameters
    if spec is not None and opt_cfg is not None:
        raise ValueError(T("an optimizer was passed to initialize() and the config has an "
                           "'optimizer' block too: give one of them"))
    if spec is None:
        if opt_cfg is None:
            raise ValueError(T("no optimizer: add an 'optimizer' block to the config "
                               "(e.g. {'type': 'AdamW', 'params': {'lr': 1e-3}}) or pass optimizer="))
        opt = _from_config(opt_cfg, params)
    elif isinstance(spec, torch.optim.Optimizer):
        opt = _rebuild(spec, params)
    elif isinstance(spec, type) and issubclass(spec, torch.optim.Optimizer):
        opt = spec(params)
    elif callable(spec):
        opt = spec(params)
    else:
        raise TypeError(T("optimizer must be a torch optimizer class, instance or factory, "
                          "not {type}", type=type(spec).__name__))
    if type(opt) not in ELEMENTWISE and not allow_untested:
        raise ValueError(T("{type} is not known to update elements independently, "
                           "so stepping a shard may not equal stepping the full parameters; set "
                           "'zero_allow_untested_optimizer': true to use it anyway", type=type(opt).__name__))
    return opt
