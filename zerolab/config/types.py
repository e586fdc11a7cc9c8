"""DeepSpeed's JSON config as frozen dataclasses: what :mod:`zerolab.config.parse` reads a config into.

The block dataclasses (``ZeroConfig``, ``OffloadConfig``, ``FP16Config``, ``BF16Config``,
``ZerolabConfig``) are generated from the key declarations of :mod:`zerolab.config.keys`: a
declared field there is a field here, with its type and DeepSpeed 0.19.8's *code* default, so a
key is written once. :class:`Config` itself is written out (its batch triple, world size, blocks
and methods), its scalar defaults read from the same declarations. The dataclasses are frozen
and hold only read-only values (tuples, :class:`FrozenDict`) so one Config can be shared by
every rank and pickled to them. :class:`ConfigError` carries every problem the parser found.
Users import all of this from :mod:`zerolab.config`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any

from . import keys as K
from ..i18n import catalogue

if TYPE_CHECKING:
    import torch

T = catalogue("config")      # the parser's messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["Config", "ConfigError", "OptimizerConfig", "SchedulerConfig", "FP16Config", "BF16Config",
           "OffloadConfig", "ZeroConfig", "ZerolabConfig", "FrozenDict"]


class ConfigError(ValueError):
    """A DeepSpeed config that zerolab cannot run as DeepSpeed would.

    ``problems``: every problem found, one sentence each. ``not_implemented``: the dotted keys
    among them that ask for a DeepSpeed feature zerolab does not have yet.
    """

    def __init__(self, problems: Any, not_implemented: Any = ()):
        self.problems = (problems,) if isinstance(problems, str) else tuple(problems)
        self.not_implemented = tuple(not_implemented)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = T("{n} problems in the DeepSpeed config:", n=len(self.problems)) + "\n" + "\n".join(
                f"  - {p}" for p in self.problems)
        super().__init__(message)

    def __reduce__(self):  # pickles whole (a rank's error travels to the parent)
        return (type(self), (self.problems, self.not_implemented))


class FrozenDict(Mapping):
    """A read-only dict. Unlike ``types.MappingProxyType`` it pickles, deep-copies and hashes,
    so a Config can travel to ranks and sit in a checkpoint."""
    __slots__ = ("_d",)

    def __init__(self, *args: Any, **kwargs: Any):
        self._d = dict(*args, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(frozenset(self._d.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({self._d!r})"

    def __reduce__(self):
        return (FrozenDict, (self._d,))


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return FrozenDict({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _thaw(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class OptimizerConfig:
    """The ``optimizer`` block. ``params`` are ready for the torch constructor, with the defaults
    of the class DeepSpeed builds filled in (its FusedAdam has weight_decay 0, torch's AdamW 0.01).

    ``adam_w_mode``: decoupled weight decay. DeepSpeed's ``"Adam"`` *is* AdamW unless the params
    say ``"adam_w_mode": false``; :attr:`torch_name` names the torch class that matches."""
    type: str
    params: Mapping[str, Any] = field(default_factory=FrozenDict)
    adam_w_mode: bool = False

    @property
    def torch_name(self) -> str:
        return "AdamW" if self.adam_w_mode else self.type


@dataclass(frozen=True)
class SchedulerConfig:
    """The ``scheduler`` block: a DeepSpeed scheduler's class name (``WarmupLR``, ``WarmupDecayLR``,
    ``WarmupCosineLR``, ``OneCycle``, ``LRRangeTest``, or a ``torch.optim.lr_scheduler`` class) and
    its constructor's arguments; :mod:`zerolab.scheduler` builds it, the engine steps it."""
    type: str
    params: Mapping[str, Any] = field(default_factory=FrozenDict)


def _block_class(name: str, tables: tuple, doc: str, **namespace: Any) -> type:
    """A frozen dataclass with one field per declared field of ``tables`` (the first table's
    default wins where two share a key), in declaration order: the declaration in
    :mod:`zerolab.config.keys` is the field's one home, its name, type and default."""
    fields, seen = [], set()
    for table in tables:
        for key, spec in table.items():
            if spec.is_field and key not in seen:
                seen.add(key)
                default = _BLOCKS[id(spec.block)](spec.block) if spec.block is not None else spec.field_default
                fields.append((key, spec.annotation, field(default=default)))
    cls = make_dataclass(name, fields, frozen=True, namespace={"__doc__": doc, "__module__": __name__, **namespace})
    for table in tables:
        _BLOCKS[id(table)] = lambda t, cls=cls: cls(**{k: v.field_default for k, v in t.items() if v.is_field})
    return cls


_BLOCKS: dict = {}    # id(table) -> its dataclass's instance of the table's defaults (a sub-block's default)

FP16Config = _block_class("FP16Config", (K.FP16,), """The ``fp16`` block (``zerolab/precision/loss_scaler.py``);
    ``auto_cast``: only False runs (True is refused: not implemented).""",
                          dynamic=property(lambda self: self.loss_scale == 0,
                                           doc="Dynamic loss scaling (loss_scale 0, the default)."))

BF16Config = _block_class("BF16Config", (K.BF16,), """The ``bf16`` block (DeepSpeed's old name: ``bfloat16``).
    ``check_grad_overflow``: under ZeRO + bf16, skip the step when the gradient norm is inf/nan.""")

OffloadConfig = _block_class("OffloadConfig", (K.OFFLOAD_OPTIMIZER, K.OFFLOAD_PARAM), """``offload_optimizer`` /
    ``offload_param`` (run by ``offload.py`` and ``gather.py``); with device "none" the other keys do nothing.
    One class for both blocks: the defaults are ``offload_optimizer``'s (DeepSpeed 0.19.8's; pin_memory is
    True), ``ZeroConfig().offload_param`` holds ``offload_param``'s (buffer_count 5); ``buffer_size`` and
    ``max_in_cpu`` are offload_param's only, the pipelines, ``fast_init`` and ``ratio`` offload_optimizer's.""")

ZeroConfig = _block_class("ZeroConfig", (K.ZERO,), """The ``zero_optimization`` block. Sizes are in elements, not bytes.

    Every key is parsed and checked, but only some are read by the engine: see the statuses in
    :mod:`zerolab.config.keys` (``contiguous_gradients``, ``allgather_bucket_size``,
    ``allgather_partitions`` and ``round_robin_gradients`` have no effect in zerolab;
    :meth:`Config.ignored_settings` says why). ``reduce_scatter`` and
    ``use_multi_rank_bucket_allreduce`` pick DeepSpeed's collectives: at stages 1-2 each bucket
    is all-reduced (both true, the default, or ``reduce_scatter`` false) or reduced to each of
    its owners (``use_multi_rank_bucket_allreduce`` false); at stage 3 each bucket is
    reduce-scattered (``reduce_scatter`` true) or all-reduced. ``overlap_comm`` holds DeepSpeed's
    None resolved: True iff the stage partitions the parameters (stage 3).""")

ZerolabConfig = _block_class("ZerolabConfig", (K.ZEROLAB,), """The ``zerolab`` block: zerolab's own options,
    where it does something DeepSpeed does not. Everything else in a config means what it means in DeepSpeed
    0.19.8; these are opt-in and named so that a ledger never shows zerolab's mechanism as DeepSpeed's.

    ``ideal_reduce_scatter``: at stages 1-2, reduce-scatter each bucket (the ZeRO paper's Psi per
    step, each rank receiving only its shard; each bucket is then its own partition) instead of
    DeepSpeed's all-reduce of each bucket (2 Psi). ``order_checks``: at stage 3, a 16-byte
    all-gather before each unit of parameter gathers, so that ranks taking different paths
    through the model raise an error naming the modules instead of hanging (DeepSpeed sends
    none; the ledger files them apart, as ``kind == "check"``). ``module_groups``: at stage 3,
    partition, pad, persist and gather each module's own parameters as one flat group (fewer,
    larger calls) instead of DeepSpeed's layout, one partition per parameter.""")

_TOP = K.defaults(K.TOP)      # Config's scalar defaults, as declared


@dataclass(frozen=True)
class Config:
    """A resolved DeepSpeed config for one data-parallel world size."""
    train_batch_size: int
    train_micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    world_size: int
    gradient_clipping: float = _TOP["gradient_clipping"]   # 0 = off
    optimizer: OptimizerConfig | None = None
    scheduler: SchedulerConfig | None = None     # None: no scheduler (the lr stays the optimizer's)
    zero: ZeroConfig = ZeroConfig()
    zerolab: ZerolabConfig = ZerolabConfig()     # zerolab's own opt-in options (not DeepSpeed's)
    fp16: FP16Config = FP16Config()
    bf16: BF16Config = BF16Config()
    communication_data_type: str | None = _TOP["communication_data_type"]    # None | "fp32" | "fp16" | "bf16"
    steps_per_print: int | None = _TOP["steps_per_print"]    # DeepSpeed 0.19.8: None = never print progress
    wall_clock_breakdown: bool = _TOP["wall_clock_breakdown"]
    zero_allow_untested_optimizer: bool = _TOP["zero_allow_untested_optimizer"]
    dataloader_drop_last: bool = _TOP["dataloader_drop_last"]    # read by zerolab.deepspeed.initialize's loader
    raw: Mapping[str, Any] = field(default_factory=FrozenDict, repr=False, compare=False)

    @property
    def compute_dtype(self) -> torch.dtype:
        import torch                   # here, not at the top: the config layer itself needs no torch
        return torch.float16 if self.fp16.enabled else torch.bfloat16 if self.bf16.enabled else torch.float32

    def ignored_settings(self) -> list[tuple[str, str]]:
        """``(dotted key, reason)`` for every key the user set (present in :attr:`raw`, not a
        default) that zerolab accepts but that has no effect here (status ``NO_EFFECT`` in
        :mod:`zerolab.config.keys`), in the config's order. Keys keep the user's spelling (a
        stage-3 alias stays an alias). A no-effect block (``aio``) is listed once, not key by key;
        the tuning keys of an offload block whose device is "none" are listed (they tune nothing)."""
        return [(path, why) for path, _, why in self._ignored()]

    def _ignored(self) -> list[tuple[str, Any, str]]:
        out: list[tuple[str, Any, str]] = []

        def walk(block: Any, path: str, table: dict, aliases: Mapping = FrozenDict()) -> None:
            if not isinstance(block, Mapping):
                return
            for key, value in block.items():
                entry = table.get(aliases.get(key, key))
                if entry is not None and entry.status == K.NO_EFFECT:
                    out.append((K.join_path(path, key), value, entry.what))

        raw = self.raw
        walk(raw, "", K.TOP)
        zero = raw.get("zero_optimization")
        walk(zero, "zero_optimization", K.zero_keys(self.zero.stage), K.ZERO_ALIASES)
        if isinstance(zero, Mapping):
            for kind, table in (("offload_optimizer", K.OFFLOAD_OPTIMIZER), ("offload_param", K.OFFLOAD_PARAM)):
                if getattr(self.zero, kind).device == "none":     # off: every tuning key does nothing
                    table = {k: (v if k == "device" or v.status != K.IMPLEMENTED else K.OFFLOAD_OFF)
                             for k, v in table.items()}
                walk(zero.get(kind), f"zero_optimization.{kind}", table)
        walk(raw.get("fp16"), "fp16", K.FP16)
        for name in ("bf16", "bfloat16"):
            walk(raw.get(name), name, K.BF16)
        opt = raw.get("optimizer")
        if isinstance(opt, Mapping):
            walk(opt, "optimizer", K.OPTIMIZER)
            name = K.OPTIMIZERS.get(str(opt.get("type", "")).lower())
            if name is not None:
                walk(opt.get("params"), "optimizer.params", K.OPTIMIZER_PARAMS[name])
        return out

    def _batch_resolved(self) -> bool:
        t = (self.train_batch_size, self.train_micro_batch_size_per_gpu, self.gradient_accumulation_steps)
        return all(isinstance(v, int) and v > 0 for v in t) and t[0] == t[1] * t[2] * self.world_size
