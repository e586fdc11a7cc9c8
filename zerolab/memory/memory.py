"""The memory ledger: what a rank holds, measured from the tensors, set beside the ZeRO formulas.

A rank holds four kinds of memory: parameters, gradients, optimizer states and activations.
This module *measures* them from real tensors and states the paper's formulas for them, so a chapter can
print both side by side.

Units: every size here is in bytes (names end in ``_bytes``) or elements (``_numel``, ``psi``);
GB = 1e9 bytes (the ZeRO paper), GiB = 2**30 bytes (what allocators and DeepSpeed report).
This is a low layer: it imports torch and the standard library only, torch where a function
measures tensors (so the formulas, and the command line's config commands, need no torch).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..config.stages import GRADS, OPTIMIZER_STATES, PARAMS, SHARDED, parts, shards
from ..i18n import catalogue

if TYPE_CHECKING:
    import torch

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

# --------------------------------------------------------------------------- measuring


def _walk(obj) -> Iterable[torch.Tensor]:
    """Every tensor in a tensor / mapping / (nested) iterable; None is skipped."""
    import torch
    if obj is None:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, torch.nn.Module):
        raise TypeError(T("pass model.parameters() (or .buffers(), .state_dict()), not the module: "
                          "say which tensors you mean"))
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
        for v in obj:
            yield from _walk(v)


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return str(t.device), t.untyped_storage().data_ptr()


def tensor_bytes(tensors) -> int:
    """Bytes held by `tensors` (a tensor, a dict, or any nested iterable of them).

    Counts each underlying storage once and whole: views into one flat buffer (as ZeRO keeps
    its partitions) cost the buffer, not the sum of the views. None is ignored; meta tensors
    hold no memory and count 0.
    """
    seen: dict[tuple[str, int], int] = {}
    for t in _walk(tensors):
        held = storage_held(t)
        if held is not None:
            seen[held[0]] = held[1]
    return sum(seen.values())


def storage_held(t: torch.Tensor) -> tuple[tuple[str, int], int] | None:
    """The storage ``t`` holds, as (its key: device and address, its bytes), counted as
    :func:`tensor_bytes` counts it; None for a meta or empty tensor (no memory held)."""
    if t.is_meta:
        return None
    nbytes = t.untyped_storage().nbytes()
    return (_storage_key(t), nbytes) if nbytes else None


def count_params(model: torch.nn.Module) -> int:
    """Ψ: the number of unique parameter elements (tied weights counted once).

    Like DeepSpeed's estimator it deduplicates by ``data_ptr``, which also catches two
    distinct Parameter objects over the same memory; meta parameters (no data_ptr) are
    deduplicated by identity instead.
    """
    numel: dict[object, int] = {}
    for p in model.parameters():
        key = id(p) if (p.is_meta or p.numel() == 0) else (str(p.device), p.data_ptr())
        numel[key] = p.numel()
    return sum(numel.values())


def largest_layer_params(model: torch.nn.Module) -> int:
    """The most parameter elements any single module owns itself (``recurse=False``).

    This is what ZeRO-3 must gather at once for the biggest layer (DeepSpeed's
    ``model_to_params``); a container module's children do not count towards it.
    """
    return max((sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()),
               default=0)


def measure_activations(model: torch.nn.Module, *inputs, loss_fn=None) -> dict:
    """Run one forward and measure what autograd keeps for backward: the activations.

    Every tensor autograd saves passes through ``torch.autograd.graph.saved_tensors_hooks``;
    we count their storages once each. Parameters and buffers are left out (they are held
    whether or not a forward runs), so what remains grows with batch and sequence
    length. If `loss_fn` is given it is applied to the output inside the measurement
    (``loss_fn(output)``), since the loss saves tensors too.

    Returns a dict: ``activation_bytes`` (unique storages saved, inputs included),
    ``input_bytes`` (the part of it that is the caller's own input tensors),
    ``saved_tensors`` (how many non-parameter tensors were saved) and
    ``skipped_param_tensors`` (saves that were parameters or buffers, not counted).
    The graph is dropped at the end; nothing is trained.
    """
    import torch

    def state_keys() -> set:
        # recomputed at every save: ZeRO stage 3 gathers parameters into new storage mid-forward
        return {_storage_key(t) for t in (*model.parameters(), *model.buffers()) if not t.is_meta and t.numel()}

    input_keys = {_storage_key(t) for t in _walk(inputs) if not t.is_meta}
    held: list[torch.Tensor] = []  # keep them alive so a freed address is never reused mid-count
    skipped = 0

    def pack(t: torch.Tensor):
        nonlocal skipped
        if not t.is_meta and _storage_key(t) in state_keys():
            skipped += 1
        else:
            held.append(t)
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*inputs)
        if loss_fn is not None:
            out = loss_fn(out)
    result = {
        "activation_bytes": tensor_bytes(held),
        "input_bytes": tensor_bytes([t for t in held if not t.is_meta and _storage_key(t) in input_keys]),
        "saved_tensors": len(held),
        "skipped_param_tensors": skipped,
    }
    del out, held
    return result


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def format_bytes(n: float, unit: str = "auto", digits: int = 2) -> str:
    """`n` bytes as text that always names its unit: ``format_bytes(120e9, "GB") == "120.00 GB"``.

    GB/MB/KB/TB are decimal (1e9 ...), GiB/MiB/KiB/TiB binary (2**30 ...). ``"auto"`` picks the
    largest binary unit that keeps the number >= 1, as allocators and DeepSpeed count.
    """
    if unit == "auto":
        unit = "B"
        for u in ("TiB", "GiB", "MiB", "KiB"):
            if abs(n) >= _UNITS[u]:
                unit = u
                break
    if unit not in _UNITS:
        raise ValueError(T("unknown unit {unit}; use 'auto' or one of {units}", unit=repr(unit),
                           units=", ".join(_UNITS)))
    if unit == "B":
        return f"{int(round(n))} B"
    return f"{n / _UNITS[unit]:.{digits}f} {unit}"


# --------------------------------------------------------------------------- the formulas

def precision_bytes(precision: str = "fp16", optimizer: str = "adam") -> tuple[int, int, int]:
    """Bytes per parameter for (params, grads, optimizer states).

    fp32: 4 + 4, and the optimizer holds only its moments (Adam 8 = momentum 4 + variance 4).
    fp16/bf16 (mixed precision): 2 + 2, and the optimizer also keeps the fp32 master copy (4),
    so Adam's notebook weighs 12 (the paper's K = 12). SGD without momentum keeps nothing
    (or only the master, 4); momentum adds 4.
    """
    if precision not in ("fp32", "fp16", "bf16"):
        raise ValueError(T("precision must be 'fp32', 'fp16' or 'bf16', not {value}", value=repr(precision)))
    moments = {"adam": 8, "sgd": 0, "sgd_momentum": 4}
    if optimizer not in moments:
        raise ValueError(T("optimizer must be one of {names}, not {value}", names=", ".join(moments),
                           value=repr(optimizer)))
    if precision == "fp32":
        return 4, 4, moments[optimizer]
    return 2, 2, 4 + moments[optimizer]


def _check(stage: int, world_size: int) -> None:
    if stage not in tuple(SHARDED):
        raise ValueError(T("stage must be 0, 1, 2 or 3, not {value}", value=repr(stage)))
    if world_size < 1:
        raise ValueError(T("world_size must be >= 1, not {value}", value=world_size))


def model_state_bytes(psi: int, stage: int, world_size: int, *, param_bytes: int = 2,
                      grad_bytes: int = 2, optimizer_bytes: int = 12) -> dict:
    """Per-rank bytes of the model states under ZeRO `stage` with `world_size` ranks (the paper).

    Stage 0 (DDP) keeps everything whole; stage 1 shards the optimizer states; stage 2 also the
    gradients; stage 3 also the parameters (``config/stages.py``'s table). Defaults are mixed-precision
    Adam: 2 + 2 + 12 = 16 bytes per parameter. Shards are the exact fraction Ψ/N (no padding), as
    in the paper.
    """
    _check(stage, world_size)
    n = world_size
    out = {
        "params": psi * param_bytes / parts(stage, PARAMS, n),
        "grads": psi * grad_bytes / parts(stage, GRADS, n),
        "optimizer_states": psi * optimizer_bytes / parts(stage, OPTIMIZER_STATES, n),
    }
    out["total"] = out["params"] + out["grads"] + out["optimizer_states"]
    return out


def zero_paper_table(psi: int, world_size: int, **bytes_per_param) -> list[dict]:
    """The paper's Figure 1 rows: per-rank model-state bytes for DDP and ZeRO stages 1, 2, 3.

    ``zero_paper_table(7.5e9, 64)`` gives 120 GB, 31.4 GB, 16.6 GB and 1.9 GB (GB = 1e9).
    Keyword arguments are passed on to :func:`model_state_bytes`.
    """
    names = ["DDP (stage 0)", "P_os (stage 1)", "P_os+g (stage 2)", "P_os+g+p (stage 3)"]
    return [{"name": name, "stage": s, **model_state_bytes(psi, s, world_size, **bytes_per_param)}
            for s, name in enumerate(names)]


def comm_ops(psi: int, stage: int, world_size: int, bytes_per_elem: int = 2, *,
             persistent_numel: int = 0) -> dict[str, float]:
    """Ideal per-rank wire bytes of one training step, split by collective.

    Ring convention (the same as nccl-tests' bus bandwidth and ``zerolab.comm``): for a
    tensor of S bytes, an all-reduce puts 2(N-1)/N·S on each rank's wire, a reduce-scatter or
    an all-gather (N-1)/N·S.

    Stage 0: all-reduce the gradients. Stages 1 and 2: reduce-scatter the gradients, then
    all-gather the updated parameters (the same 2(N-1)/N·Ψ as DDP). Stage 3: all-gather the
    parameters in forward and again in backward, and reduce-scatter the gradients: 3(N-1)/N·Ψ.
    `persistent_numel` elements (small parameters that stage 3 keeps whole, DeepSpeed's
    ``stage3_param_persistence_threshold``) are never gathered; their gradients are all-reduced.

    Which of the three a stage does follows from what it shards (``config/stages.py``): whole optimizer
    states need the whole averaged gradient (the all-reduce); sharded ones need only their part
    (the reduce-scatter), and whole parameters are then rebuilt once (the all-gather); sharded
    parameters are gathered for forward and for backward.
    """
    _check(stage, world_size)
    if not 0 <= persistent_numel <= psi:
        raise ValueError(T("persistent_numel must be in [0, psi], not {value}", value=persistent_numel))
    f = (world_size - 1) / world_size
    full = psi * bytes_per_elem
    if not shards(stage, OPTIMIZER_STATES):
        return {"all_reduce": 2 * f * full, "reduce_scatter": 0.0, "all_gather": 0.0}
    if not shards(stage, PARAMS):
        return {"all_reduce": 0.0, "reduce_scatter": f * full, "all_gather": f * full}
    kept = persistent_numel * bytes_per_elem
    sharded = full - kept
    return {"all_reduce": 2 * f * kept, "reduce_scatter": f * sharded, "all_gather": 2 * f * sharded}


def comm_volume(psi: int, stage: int, world_size: int, bytes_per_elem: int = 2, *,
                persistent_numel: int = 0) -> float:
    """Ideal per-rank wire bytes of one step: 2(N-1)/N·Ψ·b for stages 0-2, 3(N-1)/N·Ψ·b for 3.

    With `persistent_numel` P under stage 3: 3(N-1)/N·(Ψ-P)·b + 2(N-1)/N·P·b. See
    :func:`comm_ops` for the split by collective and the ring convention.
    """
    return sum(comm_ops(psi, stage, world_size, bytes_per_elem,
                        persistent_numel=persistent_numel).values())
