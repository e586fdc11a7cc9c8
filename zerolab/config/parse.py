"""The strict reader of a DeepSpeed config: :func:`load_config`, the block parsers behind it.

Nothing is silently ignored: a typo is an error naming the nearest key, a DeepSpeed feature
zerolab lacks is an error naming the feature (a run that quietly differs from DeepSpeed teaches
the wrong thing), and a key that has no effect in zerolab is accepted and listed by
``Config.ignored_settings`` (:mod:`zerolab.config.keys` holds the table of every key). The batch
triple is derived exactly as DeepSpeed derives it. All problems are collected and raised together
in one :class:`ConfigError`, so a config is fixed in one pass; the messages are in the edition's
language (``zerolab/i18n/language.py``). Which keys a block has, how each is read and its default all
come from the declarations of :mod:`zerolab.config.keys` (:func:`~zerolab.config.values.read_fields`
reads a block's fields in declaration order); the code here holds only what ties keys together
(the batch triple, stage-dependent checks, aliases). Users import all of this from
:mod:`zerolab.config`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from . import keys as K
from .stages import partitions_params, shards_optimizer
from .types import (BF16Config, Config, ConfigError, FP16Config, OptimizerConfig, SchedulerConfig, ZeroConfig,
                           ZerolabConfig, T, _freeze, _thaw)

__all__ = ["load_config"]


def load_config(config: Mapping[str, Any] | str | os.PathLike | Config, world_size: int) -> Config:
    """Read a DeepSpeed config (a dict, a path to a JSON file, or a Config) for ``world_size``
    data-parallel ranks, strictly, as the engine needs it. Raises :class:`ConfigError` listing
    every problem found, a DeepSpeed feature zerolab does not implement included."""
    _check_world_size(world_size)
    if isinstance(config, Config) and config.world_size == world_size:
        return config
    cfg, p = _parse(_input(config, world_size), world_size)
    if p.items:
        raise ConfigError(p.items, p.not_implemented)
    return cfg


def _check_world_size(world_size: Any) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(T("world_size must be a positive integer (the data-parallel size), got {value}",
                            value=repr(world_size)))


def _input(config: Any, world_size: Any) -> dict:
    _check_world_size(world_size)
    if isinstance(config, Config):
        config = config.raw
    if isinstance(config, (str, os.PathLike)):
        config = _read_json(config)
    if not isinstance(config, Mapping):
        raise ConfigError(T("a DeepSpeed config must be a dict or the path to a JSON file, got {type}",
                            type=type(config).__name__))
    return _thaw(config)


def _read_json(path: Any) -> dict:
    def no_duplicates(pairs: list) -> dict:  # DeepSpeed refuses duplicate keys too
        keys = [k for k, _ in pairs]
        for i, k in enumerate(keys):
            if k in keys[:i]:
                raise ConfigError(T("duplicate key '{key}' in the DeepSpeed config file {path}", key=k,
                                    path=os.fspath(path)))
        return dict(pairs)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=no_duplicates)
    except OSError as e:
        raise ConfigError(T("cannot read the DeepSpeed config file {path}: {error}", path=os.fspath(path),
                            error=e.strerror or e)) from None
    except json.JSONDecodeError as e:
        raise ConfigError(T("the DeepSpeed config file {path} is not valid JSON: {error}", path=os.fspath(path),
                            error=e)) from None


# ---- the blocks ----------------------------------------------------------------------------

def _parse(d: dict, world_size: int) -> tuple[Config, K.Problems]:
    """The config as far as it can be read, and every problem found (the caller decides)."""
    p = K.Problems()
    K.check_keys(p, d, "", K.TOP)
    top = K.read_fields(p, d, "", K.TOP)              # the batch triple first, then Config's scalars
    names = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    batch = [top.pop(k) for k in names]
    aio = K.read_block(p, d, "aio", "aio")
    if aio is not None:  # accepted and unused, but a typo in it is still a typo
        K.check_keys(p, aio, "aio", K.AIO)
    fp16 = _parse_fp16(p, K.read_block(p, d, "fp16", "fp16"))
    if "bf16" in d and "bfloat16" in d:
        p.add(T("give only one of 'bf16' and 'bfloat16' (the old name of the same block)"))
    bf16_key = "bf16" if "bf16" in d else "bfloat16"
    bf16_block = K.read_block(p, d, bf16_key, bf16_key)
    if bf16_block is not None:
        K.check_keys(p, bf16_block, bf16_key, K.BF16)
    bf16 = BF16Config(**K.read_fields(p, bf16_block, bf16_key, K.BF16))
    if fp16.enabled and bf16.enabled:
        p.add(T("'fp16.enabled' and '{bf16}.enabled' are both true: bfloat16 and fp16 modes cannot be enabled "
                "together (DeepSpeed asserts the same); pick one", bf16=bf16_key))
    zero = _parse_zero(p, d)
    own = _parse_zerolab(p, d)
    optimizer = _parse_optimizer(p, d)
    scheduler = _parse_scheduler(p, d)
    if not p.bad.intersection(names):
        batch = _resolve_batch(p, *batch, world_size) or batch   # unresolved: kept as given, to explain
    cfg = Config(*batch, world_size, optimizer=optimizer, scheduler=scheduler, zero=zero, zerolab=own, fp16=fp16, bf16=bf16, raw=_freeze(d), **top)
    return cfg, p


def _resolve_batch(p: K.Problems, tbs: Any, micro: Any, gas: Any, world: int) -> tuple | None:
    """DeepSpeed's ``_set_batch_related_parameters`` then ``_batch_assertion``: derive the missing
    member(s) with floor division, then insist the product holds. The note says why it did not."""
    note = ""
    if None not in (tbs, micro, gas):
        if tbs % (micro * gas) == 0 and tbs // (micro * gas) != world:
            note = T("these three fit world_size {fits}, not {world}", fits=tbs // (micro * gas), world=world)
    elif tbs is not None and micro is not None:
        gas = tbs // micro // world
        note = T("gradient_accumulation_steps was derived as {tbs} // {micro} // {world} = {gas}; train_batch_size "
                 "must be a multiple of train_micro_batch_size_per_gpu * world_size = {step}", tbs=tbs, micro=micro,
                 world=world, gas=gas, step=micro * world)
    elif tbs is not None and gas is not None:
        micro = tbs // world // gas
        note = T("train_micro_batch_size_per_gpu was derived as {tbs} // {world} // {gas} = {micro}; train_batch_size "
                 "must be a multiple of gradient_accumulation_steps * world_size = {step}", tbs=tbs, world=world,
                 gas=gas, micro=micro, step=gas * world)
    elif micro is not None and gas is not None:
        tbs = micro * gas * world
    elif tbs is not None:
        gas, micro = 1, tbs // world
        note = T("with only train_batch_size given, gradient_accumulation_steps is 1 and train_micro_batch_size_per_gpu"
                 " = {tbs} // {world} = {micro}; train_batch_size must be a multiple of world_size = {world}", tbs=tbs,
                 world=world, micro=micro)
    elif micro is not None:
        tbs, gas = micro * world, 1
    else:
        p.add(T("either train_batch_size or train_micro_batch_size_per_gpu needs to be provided (DeepSpeed derives "
                "the rest of the batch triple from them); the config has {has}",
                has=T("only gradient_accumulation_steps") if gas is not None else T("none of the three")))
        return None
    if tbs != micro * gas * world:
        p.add(T("check the batch parameters: train_batch_size is not equal to train_micro_batch_size_per_gpu * "
                "gradient_accumulation_steps * world_size: {tbs} != {micro} * {gas} * {world}", tbs=tbs, micro=micro,
                gas=gas, world=world) + (T(" ({note})", note=note) if note else ""))
        return None
    return tbs, micro, gas


def _parse_fp16(p: K.Problems, b: dict | None) -> FP16Config:
    if b is None:
        return FP16Config()
    K.check_keys(p, b, "fp16", K.FP16)
    g = lambda key: K.read(p, b, "fp16", key, K.FP16[key].read, K.FP16[key].field_default)  # noqa: E731
    enabled, loss_scale = g("enabled"), g("loss_scale")
    # As DeepSpeed 0.19.8: window and floor must be > 0 only where they act (dynamic scaling on).
    dyn = T(" when dynamic loss scaling is on (fp16 enabled, loss_scale 0)")
    readers = {} if not (enabled and loss_scale == 0) else dict.fromkeys(
        ("loss_scale_window", "min_loss_scale"), K.as_int(lo=1, note=dyn))
    kw = K.read_fields(p, b, "fp16", K.FP16, given={"enabled": enabled, "loss_scale": loss_scale}, readers=readers)
    return FP16Config(**{**kw, "min_loss_scale": float(kw["min_loss_scale"])})


def _parse_zero(p: K.Problems, d: dict) -> ZeroConfig:
    path = "zero_optimization"
    if isinstance(d.get(path), bool):
        p.add(T("'{key}' = {value} is DeepSpeed's deprecated boolean form; write {{\"stage\": 1}} or "
                "{{\"stage\": 0}}", key=path, value=K.show(d[path])))
        return ZeroConfig()
    b = K.read_block(p, d, path, path)
    if b is None:
        return ZeroConfig()
    b = dict(b)  # renamed below; raw keeps the user's spelling
    for short, long in K.ZERO_ALIASES.items():  # DeepSpeed also takes the pydantic field names
        if short in b:
            if long in b:
                p.add(T("give only one of '{path}.{short}' and '{path}.{long}' (the same setting)", path=path,
                        short=short, long=long))
            b[long] = b.pop(short)
    K.check_keys(p, b, path, K.zero_keys(_given_stage(b)))
    stage = K.read(p, b, path, "stage", K.ZERO["stage"].read, K.ZERO["stage"].default)
    overlap = K.read(p, b, path, "overlap_comm", K.ZERO["overlap_comm"].read, None)   # DeepSpeed's None: by stage
    if partitions_params(stage) and b.get("zero_quantized_gradients") is True and b.get("reduce_scatter") is False:
        p.add(T("'{path}.zero_quantized_gradients' needs '{path}.reduce_scatter' true (DeepSpeed 0.19.8's stage 3 "
                "asserts it: qgZ replaces the reduce-scatter); remove reduce_scatter: false or turn qgZ off", path=path))
    given = {"stage": stage, "overlap_comm": partitions_params(stage) if overlap is None else overlap}
    return ZeroConfig(**K.read_fields(p, b, path, K.ZERO, given=given,
                                      sub=lambda kind: _parse_offload(p, b, kind, stage)))


def _given_stage(b: Mapping) -> int | None:
    """The block's stage (DeepSpeed's 0 when absent), read without a word; None when it is not a
    stage, which the stage's own read reports."""
    try:
        return K.ZERO["stage"].read(b.get("stage", K.ZERO["stage"].default))
    except K.Bad:
        return None


def _parse_zerolab(p: K.Problems, d: dict) -> ZerolabConfig:
    b = K.read_block(p, d, "zerolab", "zerolab")
    if b is None:
        return ZerolabConfig()
    K.check_keys(p, b, "zerolab", K.ZEROLAB)
    return ZerolabConfig(**K.read_fields(p, b, "zerolab", K.ZEROLAB))


_ZERO_DEFAULT = ZeroConfig()


def _parse_offload(p: K.Problems, zero: dict, kind: str, stage: int) -> OffloadConfig:
    path, is_opt = f"zero_optimization.{kind}", kind == "offload_optimizer"
    default = getattr(_ZERO_DEFAULT, kind)            # the block's declared defaults (buffer_count 4 or 5)
    b = K.read_block(p, zero, kind, path)
    if b is None:
        return default
    table = K.ZERO[kind].block
    K.check_keys(p, b, path, table)
    cfg = dataclasses.replace(default, **K.read_fields(p, b, path, table))
    if cfg.ratio < 1 and not partitions_params(stage):
        p.add(T("'{path}.ratio' < 1 (partial offload) needs ZeRO stage 3, as in DeepSpeed; stage is {stage}",
                path=path, stage=stage))
    elif cfg.ratio < 1 and cfg.device != "none":
        p.refuse(f"{path}.ratio", cfg.ratio, T("partial offload, ZeRO-Offload++ Twin-Flow: only this fraction of "
                                               "the sub-groups steps on the host"), (1.0,))
    if cfg.device == "nvme" and not cfg.nvme_path:
        p.add(T("'{path}.device' is \"nvme\" but '{path}.nvme_path' is not set: give the folder (on a fast disk) "
                "where the swapped tensors go", path=path))
    if cfg.device != "none" and not shards_optimizer(stage) and is_opt:
        p.add(T("'{path}' needs a ZeRO stage of at least 1 (stage is 0): the offloaded step is ZeRO's optimizer, "
                "as in DeepSpeed", path=path))
    if cfg.device != "none" and not partitions_params(stage) and not is_opt:
        p.add(T("'{path}' offloads the parameter shards of ZeRO stage 3; stage is {stage} (DeepSpeed ignores it "
                "there: remove it, or use stage 3)", path=path, stage=stage))
    return cfg


def _parse_optimizer(p: K.Problems, d: dict) -> OptimizerConfig | None:
    b = K.read_block(p, d, "optimizer", "optimizer")
    if b is None:
        return None
    K.check_keys(p, b, "optimizer", K.OPTIMIZER)
    kind = K.read(p, b, "optimizer", "type", K.as_str, None)
    if kind is None:
        if "type" not in b:
            p.add(T("'optimizer' has no 'type' (like \"AdamW\"); give one, or drop the block and pass an optimizer"))
        return None
    name, others = K.OPTIMIZERS.get(kind.lower()), {o.lower(): o for o in K.OTHER_OPTIMIZERS}
    if name is None:
        if kind.lower() in others:
            p.refuse("optimizer.type", kind, T("the {name} optimizer; zerolab builds Adam, AdamW and SGD",
                                               name=others[kind.lower()]), ("AdamW",))
        else:
            guess = K.nearest(kind, [*K.OPTIMIZERS.values(), *K.OTHER_OPTIMIZERS])
            p.add(T("unknown optimizer type '{kind}' in 'optimizer.type'; {hint}", kind=kind,
                    hint=T("did you mean '{guess}'?", guess=guess) if guess else T("zerolab builds Adam, AdamW and SGD")))
        return None
    params = K.read_block(p, b, "params", "optimizer.params") or {}
    K.check_keys(p, params, "optimizer.params", K.OPTIMIZER_PARAMS[name])
    # adam_w_mode picks the class (read for "Adam" only; "AdamW" is AdamW whatever it says); the rest
    # are the torch constructor's arguments, with the defaults of the class DeepSpeed builds
    out = K.read_fields(p, params, "optimizer.params", K.OPTIMIZER_PARAMS[name],
                        given={"adam_w_mode": True} if name == "AdamW" else {})
    adam_w_mode = name != "SGD" and out.pop("adam_w_mode")
    # torch_adam: DeepSpeed builds torch.optim.AdamW (or Adam) in place of FusedAdam and passes the
    # params as given, so an AdamW without 'weight_decay' gets torch's default, not FusedAdam's 0
    if name != "SGD" and out.pop("torch_adam") and adam_w_mode and "weight_decay" not in params:
        out["weight_decay"] = K.TORCH_ADAMW_WEIGHT_DECAY
    if name == "SGD" and out["nesterov"] and (out["momentum"] <= 0 or out["dampening"] != 0):
        p.add(T("'optimizer.params.nesterov' needs momentum > 0 and dampening 0 (torch.optim.SGD refuses otherwise)"))
    return OptimizerConfig(name, _freeze(out), adam_w_mode)


# Value checks for DeepSpeed's own schedulers' params (a torch scheduler's are checked by its constructor).
_LR, _RATIO = K.as_num(lo=0), K.as_num(lo=0)
_SCHEDULER_CONVS = {
    "warmup_min_lr": _LR, "warmup_max_lr": K.optional(_LR), "warmup_num_steps": K.as_int(lo=1),
    "warmup_type": K.as_str, "total_num_steps": K.as_int(lo=0), "warmup_min_ratio": _RATIO,
    "cos_min_ratio": _RATIO, "cycle_min_lr": _LR, "cycle_max_lr": _LR, "decay_lr_rate": K.as_num(),
    "cycle_first_step_size": K.as_num(lo=1), "cycle_second_step_size": K.optional(K.as_num(lo=0)),
    "cycle_first_stair_count": K.as_int(lo=0), "cycle_second_stair_count": K.optional(K.as_int(lo=0)),
    "decay_step_size": K.as_num(lo=0), "cycle_momentum": K.as_bool, "cycle_min_mom": K.as_num(lo=0),
    "cycle_max_mom": K.as_num(lo=0), "decay_mom_rate": K.as_num(), "lr_range_test_min_lr": _LR,
    "lr_range_test_step_size": K.as_int(lo=1), "lr_range_test_step_rate": K.as_num(),
    "lr_range_test_staircase": K.as_bool,
}


def _parse_scheduler(p: K.Problems, d: dict) -> SchedulerConfig | None:
    """DeepSpeed's ``scheduler`` block. Absent, null or ``{}``: no scheduler. DeepSpeed builds
    ``getattr(lr_schedules, type)(optimizer, **params)`` (or a torch.optim.lr_scheduler class of
    that name), so a param it does not take is a TypeError there: here it is a typo, named."""
    from ..scheduler import SCHEDULERS, scheduler_class, scheduler_signature
    b = K.read_block(p, d, "scheduler", "scheduler")
    if not b:
        return None
    K.check_keys(p, b, "scheduler", K.SCHEDULER)
    kind = K.read(p, b, "scheduler", "type", K.as_str, None)
    if kind is None:
        if "type" not in b:
            p.add(T("'scheduler' has no 'type' (like \"WarmupLR\"): DeepSpeed would quietly run without a "
                    "scheduler; give one, or drop the block"))
        return None
    sig = scheduler_signature(kind)
    if sig is None:
        guess = K.nearest(kind, list(SCHEDULERS))
        p.add(T("unknown scheduler type '{kind}' in 'scheduler.type'; {hint}", kind=kind, hint=T(
            "did you mean '{guess}'?", guess=guess) if guess else T("DeepSpeed's are {names}, or the name of a "
                                                                    "torch.optim.lr_scheduler class",
                                                                    names=", ".join(SCHEDULERS))))
        return None
    params = K.read_block(p, b, "params", "scheduler.params") or {}
    defaults, required = sig
    out = {}
    for key, value in params.items():
        if key not in defaults:
            guess = K.nearest(key, list(defaults))
            p.add(T("unknown key '{key}' in 'scheduler.params' for {kind}; {hint}", key=key, kind=kind,
                    hint=T("did you mean '{guess}'?", guess=guess) if guess else
                    T("its params are {names}", names=", ".join(defaults))))
        elif key in ("last_batch_iteration", "last_epoch"):
            continue
        elif scheduler_class(kind) is SCHEDULERS.get(kind) and key in _SCHEDULER_CONVS:
            out[key] = K.read(p, params, "scheduler.params", key, _SCHEDULER_CONVS[key], None)
        else:
            out[key] = value
    for key in sorted(required - set(params)):
        p.add(T("'scheduler.params.{key}' is missing: {kind} needs it (it has no default in DeepSpeed either)",
                key=key, kind=kind))
    return SchedulerConfig(kind, _freeze(out))

