"""What a DeepSpeed config means, in plain words: the lenient reader behind ``zerolab explain``
(:func:`explain_config`) and :func:`describe` (which :mod:`zerolab.config` gives to ``Config`` as its
``describe`` method: this module sits above the dataclasses and the parser, below that facade).

:func:`zerolab.config.load_config` is the strict reader the engine uses; :func:`explain_config`
reads any DeepSpeed 0.19.8 config, listing what zerolab does not implement instead of refusing
it, and keeps real errors (typos, bad values) apart.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


from . import keys as K
from .parse import _input, _parse
from .stages import GRADS, partitions_params, shards, shards_optimizer
from .types import Config, OffloadConfig, _thaw
from ..i18n import catalogue

T = catalogue("explain")     # what a config means, in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["Explanation", "explain_config", "describe"]

_STAGE_SHARDS = {0: T.mark("nothing is partitioned (plain data parallelism)"),
                 1: T.mark("optimizer states are partitioned"), 2: T.mark("optimizer states and gradients are partitioned"),
                 3: T.mark("optimizer states, gradients and parameters are partitioned")}


def describe(c: Config) -> str:
    """Plain lines on what this config asks for and what zerolab does with it (backs
    ``zerolab explain``), in the language of :mod:`zerolab.i18n`. Keys with no effect in zerolab
    are listed with the reason; features zerolab does not implement (only present in a config
    read by :func:`explain_config`) are described as DeepSpeed would run them."""
    z, f = c.zero, c.fp16
    lines = [T("ZeRO stage {stage} on {world} data-parallel rank(s): {shards}.", stage=z.stage, world=c.world_size,
               shards=T(_STAGE_SHARDS[z.stage]))]
    if c._batch_resolved():
        lines.append(T("Batch: train_batch_size {batch} = {micro} (micro-batch per rank) x {accum} (gradient "
                       "accumulation steps) x {world} (ranks).", batch=c.train_batch_size,
                       micro=c.train_micro_batch_size_per_gpu, accum=c.gradient_accumulation_steps,
                       world=c.world_size))
    else:
        given = ", ".join(f"{k} {v}" for k, v in (
            ("train_batch_size", c.train_batch_size),
            ("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu),
            ("gradient_accumulation_steps", c.gradient_accumulation_steps)) if v is not None)
        lines.append(T("Batch: not resolved for {world} rank(s) (see the error); the config gives {given}.",
                       world=c.world_size, given=given or T("none of the three")))
    if f.enabled:
        scale = (T("dynamic loss scale from 2^{power}, x2 after {window} clean steps, hysteresis {hysteresis}, "
                   "floor {floor:g}", power=f.initial_scale_power, window=f.loss_scale_window,
                   hysteresis=f.hysteresis, floor=f.min_loss_scale)
                 if f.dynamic else T("static loss scale {scale:g}", scale=f.loss_scale))
        lines.append(T("Precision: fp16 model, fp32 master weights; {scale}.", scale=scale))
        if f.auto_cast:
            lines.append(T("  fp16.auto_cast: DeepSpeed casts the forward's floating-point inputs to fp16 "
                           "(not implemented in zerolab)."))
    elif c.bf16.enabled:
        check = T("steps with inf/nan gradients skipped") if c.bf16.check_grad_overflow else T("no overflow check")
        lines.append(T("Precision: bf16 model, fp32 master weights; no loss scaling, {check}.", check=check))
    else:
        lines.append(T("Precision: fp32 throughout."))
    comm = c.communication_data_type or ("fp16" if c.fp16.enabled else "bf16" if c.bf16.enabled else "fp32")
    if partitions_params(z.stage):
        lines += _stage3_lines(c, comm)
    else:
        lines.append(_bucket_line(c, comm))
    lines += _offload_lines(c)
    clip = (T("clipped to global L2 norm {norm:g}", norm=c.gradient_clipping) if c.gradient_clipping
            else T("off"))
    lines.append(T("Gradient clipping: {clip}.", clip=clip))
    o = c.optimizer
    asked = c.raw.get("optimizer")
    if o is None and isinstance(asked, Mapping) and isinstance(asked.get("type"), str):
        lines.append(T("Optimizer: {type}, which zerolab does not build (it builds Adam, AdamW and SGD).",
                       type=asked["type"]))
    elif o is None:
        lines.append(T("Optimizer: none in the config (pass one to zerolab.initialize)."))
    else:
        lines.append(T("Optimizer: {type} (torch.optim.{name}), {params}.", type=o.type, name=o.torch_name,
                       params=", ".join(f"{k}={v}" for k, v in o.params.items())))
    if shards_optimizer(z.stage) and "sub_group_size" in (c.raw.get("zero_optimization") or {}):
        lines.append(T("Optimizer step: in sub-groups of at most {size:,} elements of each rank's shard "
                       "(sub_group_size), one after another: the unit of the host step and of NVMe swapping; it "
                       "bounds the step's working memory and changes no number.", size=z.sub_group_size))
    sc = c.scheduler
    if sc is not None:
        args = ", ".join(f"{k}={_show(v)}" for k, v in sc.params.items())
        lines.append(T("Learning-rate schedule: {type}({args}), DeepSpeed's formula; the engine steps it after "
                       "each optimizer step that is not skipped (an fp16 overflow does not advance it).",
                       type=sc.type, args=args))
    ignored = c._ignored()
    if ignored:
        lines.append(T("No effect in zerolab (accepted; same numbers as DeepSpeed):"))
        lines += [T("  - {path} = {value}: {why}", path=path, value=_show(value), why=K.T.text(why))
                  for path, value, why in ignored]
    return "\n".join(lines)


def _bucket_line(c: Config, comm: str) -> str:
    """Stages 0-2: how the gradients are reduced (DeepSpeed's way, or zerolab's own when asked)."""
    z = c.zero
    if not shards_optimizer(z.stage):      # no ZeRO optimizer: DeepSpeed reduces as DDP does
        how = T("at the accumulation boundary the gradients are all-reduced in buckets of 500,000,000 elements "
                "(DeepSpeed's stage 0 reduces like DDP; reduce_bucket_size is not used)")
    else:
        if c.zerolab.ideal_reduce_scatter:
            how = T("each bucket is its own flat buffer and is reduce-scattered (each rank receives only its "
                    "shard: Psi per step, the ZeRO paper's ideal) [zerolab's own: zerolab.ideal_reduce_scatter; "
                    "DeepSpeed all-reduces]")
        elif z.reduce_scatter and not z.use_multi_rank_bucket_allreduce:
            how = T("the parameters form one flat buffer cut into one contiguous partition per rank; each bucket "
                    "(a range of it) is reduced to each rank whose partition it touches, one reduce per owner "
                    "(use_multi_rank_bucket_allreduce false) [DeepSpeed's]")
        else:
            why = T("reduce_scatter false") if not z.reduce_scatter else T(
                "reduce_scatter and use_multi_rank_bucket_allreduce true, DeepSpeed's defaults")
            how = T("the parameters form one flat buffer cut into one contiguous partition per rank; each bucket "
                    "(a range of it) is all-reduced and each rank keeps the slices of its partition ({why}: "
                    "2 Psi on the wire, not the paper's Psi) [DeepSpeed's]", why=why)
        # sharded gradients are reduced as backward makes them (stage 2); whole ones at the boundary (stage 1)
        how = (T("during backward, once a bucket's gradients are complete, {how}", how=how) if shards(z.stage, GRADS)
               else T("at the accumulation boundary {how}", how=how))
        how += T("; after the step the updated partitions are all-gathered, one call (Psi) [DeepSpeed's]")
    if z.overlap_comm:
        how += T("; overlap_comm: each bucket's collective is issued asynchronously as soon as it is complete, "
                 "while backward goes on, at most two in flight (DeepSpeed's two IPG buffers)")
    nbytes = {"fp32": 4, "fp16": 2, "bf16": 2}[comm]
    return T("Gradient buckets: reduce_bucket_size {size:,} elements ({gb:.2f} GB in {comm}); {how}.",
             size=z.reduce_bucket_size, gb=z.reduce_bucket_size * nbytes / 1e9, comm=comm, how=how)


def _stage3_lines(c: Config, comm: str) -> list[str]:
    """Stage 3: gradients, fetching, ZeRO++ and zerolab's order checks."""
    z = c.zero
    verb = (T("reduce-scattered (each module's gradient padded to N shards; each rank receives its shards)")
            if z.reduce_scatter else T("all-reduced (reduce_scatter false; each rank keeps its shards)"))
    when = (T("issued asynchronously (overlap_comm), one in flight (DeepSpeed's one IPG buffer per dtype)")
            if z.overlap_comm else T("each call blocking (overlap_comm false)"))
    lines = [T("Gradients: during backward, collected in buckets of reduce_bucket_size {size:,} elements in the "
               "order backward finishes the modules; each bucket is {verb} in {comm} in one call, {when} "
               "[DeepSpeed's].", size=z.reduce_bucket_size, verb=verb, comm=comm, when=when)]
    persist = T("parameters of at most {n:,} elements stay gathered (stage3_param_persistence_threshold)",
                n=z.stage3_param_persistence_threshold)
    if z.stage3_model_persistence_threshold != sys.maxsize:
        persist += T(", up to {n:,} elements in all (stage3_model_persistence_threshold)",
                     n=z.stage3_model_persistence_threshold)
    if z.stage3_prefetch_bucket_size > 0:
        fetch = T("following the order recorded in the previous step, each module's fetch also issues one "
                  "asynchronous all-gather of the next modules' parameters, up to {size:,} more elements "
                  "(stage3_prefetch_bucket_size), as long as fewer than {live:,} are gathered or in flight "
                  "(stage3_max_live_parameters: the only bound on what is in flight) [DeepSpeed's]",
                  size=z.stage3_prefetch_bucket_size, live=z.stage3_max_live_parameters)
    else:
        fetch = T("just in time, no prefetch (stage3_prefetch_bucket_size 0)")
    if z.stage3_max_reuse_distance > 0:
        reuse = T("a module's parameters stay gathered after its forward if the recorded order uses them again "
                  "within {n:,} elements (stage3_max_reuse_distance: the last modules of forward are then not "
                  "gathered again for backward)", n=z.stage3_max_reuse_distance)
    else:
        reuse = T("every module is gathered again for backward (stage3_max_reuse_distance 0)")
    lines.append(T("Stage 3 fetching: each module's parameters are all-gathered before its forward and again before "
                   "its backward, and released after use; {fetch}; {reuse}; {persist}.",
                   fetch=fetch, reuse=reuse, persist=persist))
    if z.zero_quantized_weights:
        lines.append(T("qwZ (zero_quantized_weights) [DeepSpeed's ZeRO++]: every all-gather of a module's "
                       "parameters in forward and backward carries int8 blocks (each rank's shard in fp16, cut "
                       "into blocks of a multiple of 8, about 8,000 elements, by DeepSpeed's rule) plus one fp32 "
                       "scale per block, in two calls (values, then scales): about half of fp16/bf16's bytes; each "
                       "rank dequantizes to fp16, then to the model dtype. The shards and the fp32 master weights "
                       "stay exact; the persistent parameters' refresh after the step is not quantized."))
    if z.zero_hpz_partition_size > 1:
        lines.append(T("hpZ (zero_hpz_partition_size {h}) [DeepSpeed's ZeRO++]: besides its shard over all ranks, "
                       "each rank keeps a secondary shard of each module's parameters over its group of {h} "
                       "consecutive ranks (one node when that is the ranks per node), copied from the gathered "
                       "parameters when a module is released (and at initialization): 1/{h} of the padded "
                       "parameters in their dtype, until the next optimizer step drops it. While a module has "
                       "one, its all-gathers (prefetches too, quantized with qwZ) run inside the group: each "
                       "step's backward (and the forward of later micro-steps under gradient accumulation, and "
                       "of the first step), so the backward sends no parameter bytes across nodes. h must "
                       "divide the world size (DeepSpeed's assert).", h=z.zero_hpz_partition_size))
    if z.zero_quantized_gradients:
        lines.append(T("qgZ (zero_quantized_gradients) [DeepSpeed's ZeRO++]: with more than one node, each "
                       "module's gradient is quantized to int4 (one fp32 scale per block), exchanged by an "
                       "all-to-all inside the node, summed there and quantized again, exchanged by an all-to-all "
                       "across nodes, dequantized and divided by the number of nodes (DeepSpeed 0.19.8 divides the "
                       "sum over all ranks by the nodes only: the gradient is ranks-per-node times the mean); 1-D "
                       "parameters and sizes not a multiple of 2N are reduce-scattered. With one node it does "
                       "nothing (DeepSpeed's condition num_nodes > 1)."))
    if c.zerolab.order_checks:
        lines.append(T("Order checks [zerolab's own, zerolab.order_checks]: a 16-byte all-gather before each "
                       "unit of parameter gathers, so that ranks on different paths through the model fail "
                       "with the modules named instead of hanging; DeepSpeed sends none, and the ledger files "
                       "them apart from ZeRO's calls."))
    return lines


def _show(value: Any) -> str:
    """A config value for people: 5e8 as 500,000,000, blocks and strings as JSON."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 63:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return K.show(_thaw(value))


def _offload_lines(c: Config) -> list[str]:
    """What the config's offload does (zerolab runs it as DeepSpeed does; differences named)."""
    lines = []
    for kind in ("offload_optimizer", "offload_param"):
        o: OffloadConfig = getattr(c.zero, kind)
        if o.device == "none":
            continue
        if o.device == "cpu":
            where = T("host (CPU) memory, pinned when a GPU is present") if o.pin_memory else T("host (CPU) memory")
        else:
            where = T("files under nvme_path ({path}), brought through host memory one sub-group ({size:,} "
                      "elements) at a time", path=o.nvme_path or T("not given"), size=c.zero.sub_group_size)
        if kind == "offload_optimizer":
            pipe = ""
            if o.device == "nvme":
                pipe = (T(" The next sub-group's read overlaps the current step") if o.pipeline_read else
                        T(" Reads are not overlapped (pipeline_read false)")) + (
                        T("; the previous one's write too.") if o.pipeline_write else
                        T("; writes are waited for (pipeline_write false)."))
            lines.append(T("Offload: offload_optimizer.device = {device}: each rank's optimizer states (fp32 master "
                           "weights and Adam moments, 12 bytes per parameter of its shard) and, at stages 2-3, its "
                           "fp32 gradient shard (4 bytes) live in {where}; the optimizer step runs there, sub-group "
                           "by sub-group (DeepSpeed: DeepSpeedCPUAdam; zerolab: the torch optimizer, foreach form), "
                           "and updated parameters are copied back to the device.{pipe}",
                           device=o.device, where=where, pipe=pipe))
        else:
            keep = "" if o.device != "nvme" else T(" (the first {n:,} elements stay in host memory)", n=o.max_in_cpu)
            lines.append(T("Offload: offload_param.device = {device}: each rank's stage-3 parameter shards live in "
                           "{where}{keep} and are copied to the device when their module is gathered; persistent "
                           "(small) parameters stay on the device.", device=o.device, where=where, keep=keep))
    return lines


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain_config` found. ``config``: the config as far as it could be read (a
    feature zerolab does not implement is kept as written, e.g. an offload device "cpu"; a bad
    value takes DeepSpeed's default; an unresolvable batch triple stays as given).
    ``not_implemented``: the DeepSpeed features it asks for that zerolab lacks (``path``,
    ``value``, ``what``). ``errors``: real problems (typos, bad values, batch arithmetic) that
    DeepSpeed would reject too."""
    config: Config
    not_implemented: tuple[K.Refusal, ...] = ()
    errors: tuple[str, ...] = ()


def explain_config(config: Mapping[str, Any] | str | os.PathLike | Config, world_size: int) -> Explanation:
    """Read any DeepSpeed 0.19.8 config leniently, to explain it (``zerolab explain``): unlike
    :func:`load_config` a feature zerolab does not implement is listed, not raised. Raises
    :class:`ConfigError` only when there is nothing to explain (an unreadable file, not a dict,
    a bad world size)."""
    cfg, p = _parse(_input(config, world_size), world_size)
    return Explanation(cfg, tuple(p.refusals), tuple(p.errors))
