"""Stage 3's groups: how the model's parameters are cut into flat groups, and which groups each
module gathers (its *unit*).

* A parameter of at most ``stage3_param_persistence_threshold`` elements is *persistent*
  (DeepSpeed's per-parameter rule, in the model's parameter order, the total capped by
  ``stage3_model_persistence_threshold``): kept whole on every rank, never gathered in forward or
  backward.
* Every other parameter belongs to its module's group (one per optimizer parameter group): a
  module's own parameters, not its children's. A parameter shared by two modules (a tied weight)
  belongs to the first and is listed by both.
* Parameters the engine does not train (frozen, or left out of the optimizer) are partitioned too,
  as DeepSpeed's ``zero.Init`` converts every parameter, in groups after the trained ones (no
  gradient, no optimizer state); one whose dtype is not the model's stays whole, outside any group.
"""
from __future__ import annotations

import dataclasses

from torch import nn

from ...memory.flat import FlatGroup

__all__ = ["Units", "make_units"]


@dataclasses.dataclass
class Units:
    groups: list[FlatGroup]                 # trained groups first, then untrained ones
    persistent: list[bool]                  # per group: kept whole
    n_trained: int                          # groups[:n_trained] are the optimizer's
    module_groups: dict[nn.Module, list[int]]   # a module -> its gathered (non-persistent) groups
    unit_of: dict[int, FlatGroup]           # id(parameter) -> its group


def make_units(model: nn.Module, named, zero, dtype, rank: int, world_size: int,
               opt_group_of: dict[int, int], per_parameter: bool = True) -> Units:
    """The groups of stage 3. ``per_parameter`` (DeepSpeed's layout, the default): every parameter
    is a group of its own, with its own shard of ceil(n/N) elements and its own padding, as
    DeepSpeed's ``zero.Init`` partitions each parameter (``ds_tensor``); a module's fetch then
    gathers its parameters in one coalesced all-gather, and a persistent parameter is gathered on
    its own after each step. ``per_parameter=False`` is zerolab's own module layout
    (``"zerolab": {"module_groups": true}``): one flat group per module, padded once."""
    trainable = {id(p): n for n, p in named}
    names: dict[int, str] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    threshold = zero.stage3_param_persistence_threshold
    budget = zero.stage3_model_persistence_threshold
    seen: set[int] = set()
    persistent: list[nn.Parameter] = []
    modules = []                               # (name, module, its params, its new non-persistent)
    for mname, m in model.named_modules():
        own = [p for p in m.parameters(recurse=False) if id(p) in trainable or p.dtype == dtype]
        new = []
        for p in own:
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.numel() <= threshold and p.numel() <= budget:
                persistent.append(p)
                budget -= p.numel()
            else:
                new.append(p)
        modules.append((mname, m, own, new))
    groups: list[FlatGroup] = []
    keep: list[bool] = []
    owner: dict[int, int] = {}

    def add(params, label, whole, k):
        g = FlatGroup(len(groups), params, [names[id(p)] for p in params], rank, world_size, label=label,
                      opt_group=k)
        groups.append(g)
        keep.append(whole)
        owner.update({id(p): g.index for p in params})

    if per_parameter:
        return _per_parameter(model, modules, trainable, set(map(id, persistent)), names, opt_group_of,
                              rank, world_size)
    ks = sorted({opt_group_of.get(id(p), 0) for _, p in named})
    for k in ks:                               # (one per optimizer parameter group)
        kept = [p for p in persistent if id(p) in trainable and opt_group_of.get(id(p), 0) == k]
        if kept:
            add(kept, f"persistent ({len(kept)} params)" + (f" [group {k}]" if len(ks) > 1 else ""), True, k)
    for mname, _, _, new in modules:
        for k in ks:
            mine = [p for p in new if id(p) in trainable and opt_group_of.get(id(p), 0) == k]
            if mine:
                add(mine, (mname or "(root)") + (f" [group {k}]" if len(ks) > 1 else ""), False, k)
    n_trained = len(groups)
    kept = [p for p in persistent if id(p) not in trainable]
    if kept:
        add(kept, f"persistent ({len(kept)} untrained params)", True, -1)
    for mname, _, _, new in modules:
        mine = [p for p in new if id(p) not in trainable]
        if mine:
            add(mine, f"{mname or '(root)'} (untrained)", False, -1)
    module_groups: dict[nn.Module, list[int]] = {}
    for _, m, own, _ in modules:
        ids = sorted({owner[id(p)] for p in own if not keep[owner[id(p)]]})
        if ids:
            module_groups[m] = ids
    return Units(groups, keep, n_trained, module_groups, {id(p): g for g in groups for p in g.params})


def _per_parameter(model, modules, trainable, persistent_ids, names, opt_group_of, rank, world_size) -> Units:
    """DeepSpeed's layout: one group per parameter, in the model's parameter order (DeepSpeed's
    ``ds_id`` order), the trained ones first; persistent ones kept whole."""
    groups: list[FlatGroup] = []
    keep: list[bool] = []
    owner: dict[int, int] = {}
    n_trained = 0
    for trained in (True, False):
        for _, _, own, _ in modules:
            for p in own:
                if id(p) in owner or (id(p) in trainable) != trained:
                    continue
                whole = id(p) in persistent_ids
                g = FlatGroup(len(groups), [p], [names[id(p)]], rank, world_size,
                              label=names[id(p)] + (" (persistent)" if whole else ""),
                              opt_group=opt_group_of.get(id(p), 0) if trained else -1)
                groups.append(g)
                keep.append(whole)
                owner[id(p)] = g.index
        if trained:
            n_trained = len(groups)
    module_groups: dict[nn.Module, list[int]] = {}
    for _, m, own, _ in modules:
        ids = sorted({owner[id(p)] for p in own if id(p) in owner and not keep[owner[id(p)]]})
        if ids:
            module_groups[m] = ids
    return Units(groups, keep, n_trained, module_groups, {id(p): g for g in groups for p in g.params})
