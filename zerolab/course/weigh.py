"""What an object keeps alive, weighed as memory: the storage behind its tensors, each storage once.

Exercise 3c's check (``checks/zero1.py``) asks of a learner's sharded optimizer how much memory a rank
holds beyond the model's own parameters and gradients. A tensor's size is not the answer: a shard
that is a view of the whole flat buffer keeps the whole buffer alive, so every function here weighs
``t.untyped_storage()``, each storage once. :func:`state_bytes` and :func:`held_bytes` weigh what the
torch optimizer(s) hold (states, the tensors they step, their gradients); :func:`kept_tensors` and
:func:`kept_bytes` weigh everything the object keeps reachable (attributes, lists, dicts, plain
objects, optimizers, modules), naming each storage by the path the learner would write.
"""
from __future__ import annotations

import functools
import sys
import types
import warnings

import torch

__all__ = ["state_bytes", "held_bytes", "kept_tensors", "kept_bytes", "DEPTH"]


def _model_storages(model) -> set:
    """The storages behind ``model``'s own parameters and gradients (every rank of stage 1 keeps
    them whole: they are not what the optimizer side adds)."""
    return {t.untyped_storage().data_ptr() for p in model.parameters() for t in (p, p.grad) if t is not None}


def _optimizers(obj) -> list:
    """The torch optimizers ``obj`` is or keeps (as attributes, or in a list/tuple/dict of them)."""
    found = [obj] if isinstance(obj, torch.optim.Optimizer) else []
    for value in getattr(obj, "__dict__", {}).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found += [v for v in items if isinstance(v, torch.optim.Optimizer) and v is not obj]
    return list({id(o): o for o in found}.values())


def _storage_bytes(tensors, skip: set | None = None) -> int:
    """Bytes of the storages behind ``tensors``, each storage once (a view keeps its whole
    storage alive: a shard sliced out of a flat buffer weighs the buffer), without those in ``skip``
    (storage addresses)."""
    seen = set(skip or ())
    total = 0
    for t in tensors:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def _state_tensors(opts) -> list:
    return [t for o in opts for s in o.state.values() for t in s.values() if isinstance(t, torch.Tensor)]


def state_bytes(obj) -> int | None:
    """Bytes of memory the optimizer states ``obj`` keeps hold (None: no optimizer found): the
    storage behind every state tensor, each storage once, so that a state that is a view of a
    bigger buffer weighs that buffer."""
    opts = _optimizers(obj)
    if not opts:
        return None
    return _storage_bytes(_state_tensors(opts))


def held_bytes(obj, model) -> dict | None:
    """What the optimizer(s) ``obj`` keeps hold of beyond ``model``'s own parameters and gradients
    (which every rank of stage 1 keeps whole): the storage behind its states, behind the tensors it
    steps (the fp32 master shard) and behind their gradients, each storage counted once, in bytes;
    ``view_of``: the largest storage behind a stepped tensor or its gradient, in bytes."""
    opts = _optimizers(obj)
    if not opts:
        return None
    model_side = _model_storages(model)
    stepped = [p for o in opts for g in o.param_groups for p in g["params"]]
    mine = [p for p in stepped if p.untyped_storage().data_ptr() not in model_side]
    grads = [p.grad for p in stepped if p.grad is not None and p.grad.untyped_storage().data_ptr() not in model_side]
    return {"states": _storage_bytes(_state_tensors(opts)), "master": _storage_bytes(mine),
            "master_numel": sum(p.numel() for p in mine), "grads": _storage_bytes(grads, model_side),
            "grads_numel": sum(g.numel() for g in grads)}


DEPTH = 4                           # how deep kept_tensors looks: self.a[0]["b"].c is depth 4
NODES = 10_000                      # and how many objects it visits at most
_NOT_ENTERED = (type, types.ModuleType, types.BuiltinFunctionType, str, bytes)


def _slot_names(cls) -> list[str]:
    """The ``__slots__`` of ``cls`` and its bases (an object with slots may have no ``__dict__``)."""
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots if n not in ("__dict__", "__weakref__")]
    return names


def _function_parts(path: str, fn) -> list:
    """What a function keeps alive of its own: its closure's variables and its default arguments
    (not its globals: those are the notebook's, not the object's)."""
    out = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out.append((f"{path} (closure variable {name!r})", cell.cell_contents))
        except ValueError:                     # an empty cell
            pass
    names = fn.__code__.co_varnames[fn.__code__.co_argcount - len(fn.__defaults__ or ()):fn.__code__.co_argcount]
    out += [(f"{path} (default {name!r})", v) for name, v in zip(names, fn.__defaults__ or ())]
    out += [(f"{path} (default {name!r})", v) for name, v in (fn.__kwdefaults__ or {}).items()]
    return out


def _numpy_storage(array):
    """The tensor whose storage a NumPy array keeps alive: the tensor it views (``t.numpy()``), or its
    root array's memory seen as a tensor (shared, not copied); None for what torch cannot view."""
    while isinstance(array.base, type(array)):
        array = array.base
    if isinstance(array.base, torch.Tensor):
        return array.base
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # a read-only array: only weighed, never written
            return torch.from_numpy(array)
    except (TypeError, ValueError, RuntimeError):
        return None


def kept_tensors(obj, depth: int = DEPTH) -> list:
    """Every tensor ``obj`` keeps reachable, as (path, tensor), the path as the learner would write
    it (``self.full_copy``, ``self.buffers['flat']``, ``self.moments[0]``, ``self.shard.grad``,
    ``self.optimizer.state[self.shard]['exp_avg']``): its attributes, then theirs, through lists,
    tuples, sets, dicts and plain objects, at most ``depth`` deep; a torch optimizer's states and
    param groups, an ``nn.Module``'s parameters and buffers and a leaf tensor's ``.grad`` at any
    depth; ``__slots__`` as attributes; a function's (or ``functools.partial``'s) closure variables,
    default arguments and bound arguments; a NumPy array as the memory it keeps (its root array,
    or the tensor it views). Classes, modules and a function's globals are not entered. Each
    object is visited once (the shortest path names it: attributes before what the optimizer holds)."""
    found, named, seen, deferred = [], {}, set(), set()
    ndarray = getattr(sys.modules.get("numpy"), "ndarray", None)     # (no NumPy imported: no arrays)
    queue = [("self", obj, 0)]
    while queue and len(seen) < NODES:
        path, value, level = queue.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        try:                                   # an object that will not be read is skipped
            if isinstance(value, torch.Tensor):
                if value.layout != torch.strided:
                    continue
                found.append((path, value))
                named.setdefault(id(value), path)
                if value.is_leaf and value.grad is not None:
                    queue.append((path + ".grad", value.grad, level))
                continue
            if isinstance(value, torch.optim.Optimizer):
                if id(value) not in deferred:           # read it last: its parameters named as attributes
                    deferred.add(id(value))
                    seen.discard(id(value))
                    queue.append((path, value, level))
                    continue
                grouped = {}                                  # a parameter's path in param_groups
                for i, group in enumerate(value.param_groups):
                    for j, param in enumerate(group["params"]):
                        grouped.setdefault(id(param), f"{path}.param_groups[{i}]['params'][{j}]")
                        queue.append((f"{path}.param_groups[{i}]['params'][{j}]", param, level))
                for k, key in enumerate(list(value.state)):
                    where = named.get(id(key)) or grouped.get(id(key), f"<param {k}>")
                    for name, state in (value.state[key] or {}).items():
                        queue.append((f"{path}.state[{where}][{name!r}]", state, level))
                rest = {k: v for k, v in vars(value).items() if k not in ("state", "param_groups")}
                queue += [(f"{path}.{k}", v, level + 1) for k, v in rest.items()] if level < depth else []
                continue
            if isinstance(value, torch.nn.Module):
                for name, t in value.state_dict(keep_vars=True).items():
                    queue.append((f"{path}.{name}", t, level))
                continue
            if ndarray is not None and isinstance(value, ndarray):
                t = _numpy_storage(value)
                if t is not None:
                    found.append((path, t))
                continue
            if level >= depth:
                continue
            if isinstance(value, dict):
                queue += [(f"{path}[{k!r}]", v, level + 1) for k, v in value.items()]
            elif isinstance(value, (list, tuple)):
                queue += [(f"{path}[{i}]", v, level + 1) for i, v in enumerate(value)]
            elif isinstance(value, (set, frozenset)):
                queue += [(f"{path}{{...}}", v, level + 1) for v in value]
            elif isinstance(value, _NOT_ENTERED):
                continue
            elif isinstance(value, types.FunctionType):
                queue += [(p, v, level + 1) for p, v in _function_parts(path, value)]
            elif isinstance(value, types.MethodType):                     # its object and its function
                queue += [(path, value.__func__, level), (f"{path}.__self__", value.__self__, level + 1)]
            elif isinstance(value, functools.partial):
                queue.append((path, value.func, level))
                queue += [(f"{path} (argument {i})", v, level + 1) for i, v in enumerate(value.args)]
                queue += [(f"{path} (argument {k!r})", v, level + 1) for k, v in value.keywords.items()]
            else:                                                       # a plain object: attributes, slots
                attrs = vars(value) if isinstance(getattr(value, "__dict__", None), dict) else {}
                slots = [(n, getattr(value, n)) for n in _slot_names(type(value)) if hasattr(value, n)]
                queue += [(f"{path}.{k}", v, level + 1) for k, v in [*attrs.items(), *slots]]
        except Exception:                                           # noqa: BLE001
            continue
    return found


def kept_bytes(obj, model) -> dict:
    """What ``obj`` keeps alive beyond ``model``'s own parameters and gradients (which every rank of
    stage 1 keeps whole): the storage behind every tensor :func:`kept_tensors` finds, each storage
    once, in bytes (``total``), and the storages from the largest down, each named by the first path
    that reaches it (``storages``: [(path, bytes)])."""
    model_side = _model_storages(model)
    storages, seen = [], set(model_side)
    for path, t in kept_tensors(obj):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        storages.append((path, storage.nbytes()))
    storages.sort(key=lambda s: -s[1])
    return {"total": sum(b for _, b in storages), "storages": storages}
