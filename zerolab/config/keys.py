"""Every DeepSpeed config key zerolab knows, declared once: one :class:`Key` per key, one table
per block. Everything else is derived from these tables: the block dataclasses and their defaults
(:mod:`zerolab.config.types`), the parser's checks and reads (:mod:`zerolab.config.parse`), what
``zerolab explain`` lists as having no effect, the defaults the course prints
(:data:`zerolab.course.knobs.DS_DEFAULTS`, :data:`zerolab.precision.loss_scaler.FP16_DEFAULTS`) and the JSON Schema
for editors (``zerolab/data/deepspeed_config.schema.json``). A new key is one line here.

The reference is DeepSpeed 0.19.8 (``deepspeed/runtime/config.py``, ``constants.py``,
``precision_config.py``, ``zero/config.py``, ``zero/offload_config.py`` and the config modules
of its monitors, profiler, autotuner and AIO); defaults are its *code* defaults, not its docs'.
Each key found there has one of four statuses:

* ``IMPLEMENTED``: parsed into :mod:`zerolab.config`'s dataclasses and read by the engine
  (``tests/test_config.py`` checks that each such field is read outside the config modules).
* ``NO_EFFECT``: accepted, but has no effect in zerolab. Either DeepSpeed bookkeeping that
  changes nothing zerolab computes (logging, debug checks, knobs read only by a feature zerolab
  refuses elsewhere), or a DeepSpeed knob that changes *when* or *in what memory* work happens
  but never the numbers, where zerolab's engine does it one fixed way (it always packs
  gradients into flat buckets, all-gathers the updated partitions in one call). Read,
  validated, and dropped; the ``what`` text says why that is safe. A key the
  user sets with this status is listed by ``Config.ignored_settings()`` (shown by ``zerolab
  explain`` and warned once when the engine is built).
* ``NOT_IMPLEMENTED``: a DeepSpeed feature zerolab does not have yet. It is an error, named,
  unless the value is *inert*: DeepSpeed's default, or a block that is empty or has
  ``"enabled": false``. Then the key asks for nothing, and refusing it would only annoy.
* ``REMOVED``: DeepSpeed 0.19.8 itself rejects the key (``_reject_removed_config_keys``).

A key missing from a table is unknown: a typo, or a key of another DeepSpeed version.

A key with a reader and a default (``_I(as_int(lo=1), 500_000_000, ...)``) is a field of its
block's dataclass, in table order; the order of a table is the order of its dataclass's fields,
of the parser's reads (so of the problems it lists) and of the "known keys" in an error. The
machinery (:class:`Key`, the readers, :func:`read_fields`) lives in :mod:`zerolab.config.values`
and is re-exported here; :func:`check_keys` at the end holds one block against its table.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# the machinery, re-exported: zerolab.config and explain read them as config_keys.<name>
from .values import (DISABLED_BLOCK, IMPLEMENTED, NO_EFFECT, NO_FIELD, NOT_IMPLEMENTED,  # noqa: F401
                            REMOVED, RENAMED, Bad, Key, Problems, Refusal, as_betas, as_bool, as_int, as_num,
                            as_str, defaults, is_inert, join_path, json_schema, nearest, one_of,
                            optional, read, read_block, read_fields, show)
from .stages import partitions_params
from ..i18n import catalogue

T = catalogue("config")      # the readers' messages in the edition's language (zerolab/i18n/messages_zh.py)


def _I(read: Any = None, default: Any = NO_FIELD, what: str = "", **kw: Any) -> Key:
    """IMPLEMENTED; with a reader and a default, a field of the block's dataclass."""
    return Key(IMPLEMENTED, what, (), read, default, **kw)


def _A(why: str, read: Any = None, default: Any = NO_FIELD, **kw: Any) -> Key:
    """NO_EFFECT: accepted (and, with a reader, checked), then dropped; ``why`` is shown."""
    return Key(NO_EFFECT, why, (), read, default, **kw)


def _ni(what: str, *inert: Any, **kw: Any) -> Key:
    """NOT_IMPLEMENTED: refused unless the value is one of ``inert``."""
    return Key(NOT_IMPLEMENTED, what, inert, **kw)


def _removed(what: str) -> Key:
    return Key(REMOVED, what)


flag, size, count = as_bool, as_int(lo=1), as_int(lo=0)


# ---- offload (zerolab/offload/offload.py; stage 3's parameters in gather.py) --------------------------
# The swap-buffer sizes are not needed by zerolab's I/O (it allocates one sub-group's buffers at a
# time) and change no number.
_SWAP_BUFFERS = ("sizes DeepSpeed's pool of NVMe swap buffers; zerolab allocates each sub-group's buffers "
                 "as it swaps it (sub_group_size bounds them), so the pool size changes nothing")
OFFLOAD_OFF = _A("tunes the offload when its device is \"cpu\" or \"nvme\"; with device \"none\" it does nothing "
                 "(in DeepSpeed too)")


def _offload(buffer_count: int) -> dict:
    """The keys both offload blocks have (DeepSpeed's DeepSpeedZeroOffload*Config)."""
    return {"device": _I(one_of("none", "cpu", "nvme"), "none", "where the states or parameters live"),
            "nvme_path": _I(optional(as_str), None, "the folder of the swap files (device \"nvme\")"),
            "pin_memory": _I(flag, True, "page-locked host buffers"),
            "buffer_count": _A(_SWAP_BUFFERS, count, buffer_count)}


OFFLOAD_OPTIMIZER = {
    **_offload(buffer_count=4),
    "pipeline_read": _I(flag, False, "overlap the next sub-group's NVMe read with the step"),
    "pipeline_write": _I(flag, False, "overlap the previous sub-group's NVMe write with the step"),
    "fast_init": _A("speeds up DeepSpeed's first NVMe write of the states; same numbers", flag, False),
    # only 1.0 runs: below 1 is refused by the parser (stage 3) or an error (stages 0-2)
    "ratio": _I(as_num(0, 1), 1.0, "the fraction of the sub-groups stepped on the host"),
    "super_offload": _ni("SuperOffload (Grace-Hopper CPU optimizer)", False),
    "cpuadam_cores_perc": _A("the share of cores DeepSpeedCPUAdam uses; zerolab's host step runs torch's "
                             "optimizer on torch's threads"),
}
OFFLOAD_PARAM = {
    **_offload(buffer_count=5),
    "buffer_size": _A(_SWAP_BUFFERS, count, 100_000_000),
    "max_in_cpu": _I(count, 1_000_000_000, "elements kept in host memory under NVMe offload"),
}

# ---- zero_optimization ----------------------------------------------------------------------
# "stage" is DeepSpeed's ZeroStageEnum, 0..3; what each stage shards is config/stages.py's table
ZERO = {
    "stage": _I(as_int(lo=0, hi=3), 0, "what is partitioned: 1 optimizer states, 2 and gradients, 3 and parameters"),
    "contiguous_gradients": _A("zerolab always packs gradients into flat buckets (what true does); false in "
                               "DeepSpeed changes only the memory layout, never the numbers", flag, True),
    # reduce.py: DeepSpeed's collective per bucket. Stages 1-2: all-reduce (both true, the default,
    # or reduce_scatter false), a reduce to each owner (use_multi_rank_bucket_allreduce false);
    # stage 3: reduce-scatter (true) or all-reduce (false)
    "reduce_scatter": _I(flag, True, "reduce-scatter (stage 3) or all-reduce/reduce (stages 1-2) each bucket"),
    "use_multi_rank_bucket_allreduce": _I(flag, True, "stages 1-2: all-reduce each bucket, not one reduce per owner"),
    "reduce_bucket_size": _I(size, 500_000_000, "elements per gradient bucket"),
    "allgather_bucket_size": _A("zerolab all-gathers updated parameters one bucket (stages 1-2) or one module "
                                "(stage 3) at a time; DeepSpeed 0.19.8 itself ignores it on current torch "
                                "(one all_gather_into_tensor per parameter group); same numbers", size, 500_000_000),
    # reduce.py: async bucket collectives during backward; DeepSpeed's None is resolved: true iff stage 3
    "overlap_comm": _I(optional(flag), False, "reduce buckets asynchronously during backward", type="bool",
                       deepspeed="None: stage 3"),
    "allgather_partitions": _A("DeepSpeed 0.19.8 parses it but no optimizer reads it (only the autotuner "
                               "lists it): it has no effect in DeepSpeed either; zerolab all-gathers the "
                               "updated partitions, as DeepSpeed does", flag, True),
    "round_robin_gradients": _A("at stages 1-2 DeepSpeed deals the gradients of a bucket to the ranks in turn, to "
                                "spread the offload's device-to-host copies over ranks (stage 3 ignores it); which "
                                "rank owns which element changes, the numbers do not; zerolab keeps the order",
                                flag, False),
    # offload.py: the optimizer step runs sub-group by sub-group (the NVMe swap unit)
    "sub_group_size": _I(count, 1_000_000_000, "elements per sub-group of the optimizer step"),
    "stage3_param_persistence_threshold": _I(count, 100_000, "parameters this small stay gathered",
                                             alias="param_persistence_threshold"),
    "stage3_model_persistence_threshold": _I(count, sys.maxsize, "cap on the total persistent elements",
                                             alias="model_persistence_threshold"),
    # gather.py: the next groups of the recorded trace are all-gathered ahead, up to this many elements
    # in flight (0: just in time), within stage3_max_live_parameters gathered or in flight
    "stage3_prefetch_bucket_size": _I(count, 50_000_000, "elements prefetched ahead of use",
                                      alias="prefetch_bucket_size"),
    "stage3_max_live_parameters": _I(count, 1_000_000_000, "elements gathered or in flight at most",
                                     alias="max_live_parameters"),
    # gather.py: after a module's forward, its parameters stay gathered if the trace uses them again
    # within this many elements (the last modules of forward are the first of backward)
    "stage3_max_reuse_distance": _I(count, 1_000_000_000, "keep a module gathered if reused within this many",
                                    alias="max_reuse_distance"),
    "offload_optimizer": _I(None, None, "optimizer states (and step) on the host or NVMe", block=OFFLOAD_OPTIMIZER),
    "offload_param": _I(None, None, "stage 3's parameter shards on the host or NVMe", block=OFFLOAD_PARAM),
    "ignore_unused_parameters": _I(flag, True, "false: a parameter without a gradient is an error"),
    # gather.py: stage 3's parameter all-gathers as int8 blocks + scales (qwZ). (DeepSpeed 0.19.8 quantizes a
    # frozen parameter's freshly allocated, empty partition at partitioning and then copies the values into
    # the int8 tensor: partition_parameters.py, _partition_param; not reproduced)
    "zero_quantized_weights": _I(flag, False, "ZeRO++ qwZ: int8 parameter all-gathers (stage 3)"),
    # reduce.py: stage 3's gradients as int4 through two all-to-alls (qgZ, more than one node)
    "zero_quantized_gradients": _I(flag, False, "ZeRO++ qgZ: int4 gradient all-to-alls (stage 3)"),
    # hpz.py: stage 3's secondary shard over groups of h ranks, backward gathers inside them; 0 and 1: off
    "zero_hpz_partition_size": _I(count, 1, "ZeRO++ hpZ: secondary parameter shard over h ranks (stage 3)"),
    "load_from_fp32_weights": _A("read only when loading a DeepSpeed checkpoint"),
    # stage3/linear.py; measured with `zerolab compare --model tied` (benchmarks/results/compare_configs.txt)
    "memory_efficient_linear": _I(flag, True, "stage 3's own torch.nn.functional.linear, DeepSpeed's: on 3-D "
                                  "inputs the bias added after the matmul, the weight gradient summed its own way "
                                  "(the last bits differ from torch's); DeepSpeed for the whole process, zerolab while the model's "
                                  "forward and backward run"),
    "override_module_apply": _A("DeepSpeed's stage-3 module.apply patch"),
    "log_trace_cache_warnings": _A("logging only"),
    "enable_sanity_checks": _A("debug checks only"),
    "stage3_gather_16bit_weights_on_model_save": _ni("save_16bit_model() gathers the weights", False,
                                                     alias="gather_16bit_weights_on_model_save"),
    "stage3_gather_fp16_weights_on_model_save": _ni("deprecated name of the key above", False),
    "stage3_module_granularity_threshold": _ni("fetch fine-grained modules as one unit", 0,
                                               alias="module_granularity_threshold"),
    "stage3_use_all_reduce_for_fetch_params": _ni("fetch parameters with all-reduce", False,
                                                  alias="use_all_reduce_for_fetch_params"),
    "stage3_allgather_sequential": _ni("unbucketed, per-parameter all-gathers", False,
                                       alias="allgather_sequential"),
    "elastic_checkpoint": _ni("legacy elastic checkpoints", False),
    "legacy_stage1": _ni("old stage-1 implementation", False),
    "compute_grad_norm": _ni("false skips the global gradient norm", True),
    "parameter_alignment": _ni("16-byte alignment padding in flat buffers", False),
    "zero_quantized_nontrainable_weights": _ni("ZeRO++ frozen weights stored quantized (zerolab partitions and "
                                               "gathers frozen parameters in their model dtype)", False),
    "pipeline_loading_checkpoint": _ni("pipeline-mode checkpoint loading", False),
    "save_muon_momentum_buffer_in_memory": _ni("Muon momentum buffer placement", False),
    "zenflow": _ni("ZenFlow asynchronous offloaded updates", DISABLED_BLOCK),
    "leaf_module": _ni("user-listed ZeRO-3 leaf modules", DISABLED_BLOCK),
    "cpu_offload": _ni("deprecated form of offload_optimizer", None, False),
    "cpu_offload_param": _ni("deprecated form of offload_param", None, False),
    "cpu_offload_use_pin_memory": _ni("deprecated pin_memory for the keys above", None, False),
    "mics_shard_size": _removed("MiCS sharding"),
    "mics_hierarchical_params_gather": _removed("MiCS sharding"),
    "zeropp_loco_param": _removed("LoCo-ZeRO++"),
}

# ZeRO++'s keys are read by DeepSpeed's stage 3 only (partition_parameters.py, stage3.py): at
# stages 0-2 they change nothing (the engine makes qgZ's all-to-all groups, and nothing uses
# them; hpZ's partition groups are made on the stage-3 path only, engine.py)
ZEROPP_BELOW_STAGE3 = {k: _A("read by DeepSpeed's stage 3 only; at stages 0-2 it changes nothing (in DeepSpeed "
                             "too)") for k in ("zero_quantized_weights", "zero_quantized_nontrainable_weights",
                                               "zero_quantized_gradients", "zero_hpz_partition_size")}


def zero_keys(stage: int | None) -> dict:
    """``zero_optimization``'s table as ``stage`` reads it: where the parameters are not partitioned
    (stages 0-2), ZeRO++'s keys have no effect. None (the block's stage is not a stage, which its
    reader reports): every key as stage 3 reads it, so each is still checked."""
    return ZERO if stage is None or partitions_params(stage) else {**ZERO, **ZEROPP_BELOW_STAGE3}


# DeepSpeed's pydantic model also takes the field names of the stage3_* keys: {alias: key}.
ZERO_ALIASES = {key.alias: name for name, key in ZERO.items() if key.alias}

# ---- the precision blocks (loss_scaler.py, precision.py) --------------------------------------
FP16 = {
    "enabled": _I(flag, False, "fp16 mixed precision"),
    "loss_scale": _I(as_num(lo=0), 0.0, "a static loss scale; 0: dynamic"),
    "initial_scale_power": _I(as_int(lo=0), 16, "the dynamic scale starts at 2**this"),
    "loss_scale_window": _I(as_int(), 1000, "clean steps between doublings"),
    "hysteresis": _I(as_int(lo=1), 2, "overflows tolerated before the scale is cut"),
    "consecutive_hysteresis": _I(flag, False, "refill the hysteresis at every clean step"),
    "min_loss_scale": _I(as_int(), 1, "the dynamic scale's floor", type="float"),
    "auto_cast": _ni("casts the floating-point inputs of the model's forward to fp16", False, read=flag,
                     default=False),
    "fp16_master_weights_and_grads": _ni("fp16 master weights", False),
}

BF16 = {
    "enabled": _I(flag, False, "bf16 mixed precision"),
    # DeepSpeed 0.19.8: under ZeRO + bf16, skip the step when the gradient norm is inf/nan
    "check_grad_overflow": _I(flag, True, "skip the step when the gradient norm is inf/nan"),
    "immediate_grad_update": _A("read only by DeepSpeed's BF16_Optimizer, which needs 'data_types'"),
    "bf16_master_weights_and_grads": _ni("bf16 master weights", False),
    "bf16_optimizer_states": _ni("bf16 optimizer states", False),
}

# zerolab's own block: options DeepSpeed does not have, opt-in and named (config.ZerolabConfig)
ZEROLAB = {
    # reduce.py/params.py: stages 1-2 reduce-scatter each bucket (the paper's Psi)
    "ideal_reduce_scatter": _I(flag, False, "stages 1-2: reduce-scatter each bucket, the ZeRO paper's Psi"),
    # gather.py: stage 3's 16-byte order headers (kind "check" in the ledger)
    "order_checks": _I(flag, True, "stage 3: a 16-byte all-gather naming the modules before each unit"),
    # units.py: stage 3 partitions each module's parameters as one flat group
    "module_groups": _I(flag, False, "stage 3: one flat group per module, not one partition per parameter"),
}

# Read only by NVMe offload; the top-level "aio" key is NO_EFFECT, and a typo in it is still a typo.
AIO = {k: _A("libaio setting, read only by NVMe offload") for k in (
    "block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events", "use_gds")}

SCHEDULER = {"type": _I(what="the scheduler's class"), "params": _I(what="its constructor's arguments")}

OPTIMIZER = {"type": _I(what="the optimizer's class"), "params": _I(what="its hyper-parameters"),
             "legacy_fusion": _ni("legacy fused optimizer", False)}

# Optimizer types: the ones zerolab builds, by lower-case name, and DeepSpeed's others
# (its own, plus any torch.optim class, which DeepSpeed looks up by name).
OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
OTHER_OPTIMIZERS = (
    "Adagrad", "Lamb", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon", "OneBitAdam", "ZeroOneAdam",
    "OneBitLamb", "Adadelta", "Adafactor", "Adamax", "ASGD", "LBFGS", "NAdam", "RAdam", "RMSprop",
    "Rprop", "SparseAdam",
)

# Defaults are those of the class DeepSpeed builds: FusedAdam / DeepSpeedCPUAdam for Adam(W)
# (weight_decay 0, unlike torch.optim.AdamW's 0.01), torch.optim.SGD for SGD. Each field is a
# constructor argument, except adam_w_mode, which picks the class (read for "Adam" only).
_GRAD_NORM = _removed("as an optimizer parameter; use the top-level 'gradient_clipping'")
_TORCH_CHOICE = "torch implementation choice; same update"
_LR = _I(as_num(lo=0), 1e-3, "the learning rate")
_WEIGHT_DECAY = _I(as_num(lo=0), 0.0, "weight decay")
OPTIMIZER_PARAMS = {
    "Adam": {
        "lr": _LR, "betas": _I(as_betas, (0.9, 0.999), "Adam's moment decays"),
        "eps": _I(as_num(lo=0), 1e-8, "Adam's epsilon"), "weight_decay": _WEIGHT_DECAY,
        "adam_w_mode": _I(flag, True, "decoupled weight decay: DeepSpeed's \"Adam\" is AdamW unless false"),
        # DeepSpeed then builds torch.optim.AdamW (or Adam), whose default weight_decay is 0.01
        # (AdamW), not FusedAdam's 0: the one difference it makes to the update (parse.py)
        "torch_adam": _I(flag, False, "torch's AdamW/Adam instead of FusedAdam: the same update, but an AdamW "
                                      "without 'weight_decay' takes torch's default, 0.01"),
        "fp32_optimizer_states": _A("read only by DeepSpeedCPUAdam; zerolab's host step keeps fp32 states"),
        "foreach": _A(_TORCH_CHOICE),
        "bias_correction": _ni("Adam without bias correction", True),
        "amsgrad": _ni("AMSGrad", False),
        "max_grad_norm": _GRAD_NORM,
    },
    "SGD": {
        "lr": _LR, "momentum": _I(as_num(lo=0), 0.0, "momentum"), "dampening": _I(as_num(), 0.0, "dampening"),
        "weight_decay": _WEIGHT_DECAY, "nesterov": _I(flag, False, "Nesterov momentum"),
        "foreach": _A(_TORCH_CHOICE),
        "fused": _A(_TORCH_CHOICE),
        "differentiable": _A("autograd through the step; unused by training"),
        "maximize": _ni("gradient ascent", False),
        "max_grad_norm": _GRAD_NORM,
    },
}
OPTIMIZER_PARAMS["AdamW"] = OPTIMIZER_PARAMS["Adam"]
ADAM_DEFAULTS = {k: v for k, v in defaults(OPTIMIZER_PARAMS["Adam"]).items() if k not in ("adam_w_mode", "torch_adam")}
TORCH_ADAMW_WEIGHT_DECAY = 0.01     # torch.optim.AdamW's default, which DeepSpeed's torch_adam path keeps
SGD_DEFAULTS = defaults(OPTIMIZER_PARAMS["SGD"])

# ---- the top level ----------------------------------------------------------------------------
# Its fields are Config's scalars (the blocks are Config's sub-dataclasses); the batch triple has no
# default: DeepSpeed derives the missing members (config_parse._resolve_batch).
TOP = {
    "train_batch_size": _I(size, None, "samples per optimizer step, over all ranks"),
    "train_micro_batch_size_per_gpu": _I(size, None, "samples per forward/backward on one rank"),
    "gradient_accumulation_steps": _I(size, None, "micro-batches per optimizer step"),
    "gradient_clipping": _I(as_num(lo=0), 1.0, "clip to this global L2 norm; 0: off"),
    "communication_data_type": _I(optional(one_of("fp32", "fp16", "bf16", lower=True)), None,
                                  "the dtype gradients are reduced in; null: the model's"),
    # no effect in zerolab: bookkeeping, or knobs of features zerolab refuses elsewhere
    "steps_per_print": _A("DeepSpeed logs progress every N steps; logging only, zerolab prints no progress lines",
                          optional(as_int(lo=1)), None),
    "wall_clock_breakdown": _A("DeepSpeed times forward/backward/step and logs it; timing logs only", flag, False),
    "zero_allow_untested_optimizer": _I(flag, False, "allow an optimizer DeepSpeed has not tested with ZeRO"),
    # the data loader zerolab.deepspeed.initialize builds from training_data
    "dataloader_drop_last": _I(flag, False, "drop the last incomplete batch of the data loader"),
    "optimizer": _I(what="the optimizer DeepSpeed builds", block=OPTIMIZER),
    # zerolab.scheduler: DeepSpeed's schedulers, built from the block and stepped by the engine
    "scheduler": _I(what="the learning-rate scheduler", block=SCHEDULER),
    "zero_optimization": _I(what="ZeRO's stage and knobs", block=ZERO),
    "fp16": _I(what="fp16 mixed precision and loss scaling", block=FP16),
    "bf16": _I(what="bf16 mixed precision", block=BF16),
    "bfloat16": _I(what="DeepSpeed's old name for the bf16 block", block=BF16),
    # zerolab's own opt-in options (ZEROLAB); DeepSpeed ignores a block it does not know
    "zerolab": _I(what="zerolab's own options", block=ZEROLAB),
    "zero_force_ds_cpu_optimizer": _A("DeepSpeed insists on DeepSpeedCPUAdam under optimizer offload; zerolab's "
                                      "host step runs the torch optimizer you chose, so there is nothing to force"),
    "memory_breakdown": _A("logging only"),
    "dump_state": _A("logging only"),
    "log_level": _A("logging only"),
    "timers": _A("timer logging only"),
    "vocabulary_size": _A("only a tensor-core alignment warning"),
    "seq_parallel_communication_data_type": _A("read only by sequence parallelism, which zerolab refuses"),
    "aio": _A("libaio settings of DeepSpeed's NVMe offload; zerolab's NVMe I/O runs on Python threads and "
              "does not read them", block=AIO),
    "data_parallel_size": _A("read only together with sequence_parallel_size, which zerolab refuses"),
    "model_info": _A("read only by the autotuner, which zerolab refuses"),
    # DeepSpeed features zerolab lacks
    "activation_checkpointing": _ni("activation checkpointing / partitioning", DISABLED_BLOCK),
    "flops_profiler": _ni("FLOPs profiler", DISABLED_BLOCK),
    "tensorboard": _ni("TensorBoard monitor", DISABLED_BLOCK),
    "wandb": _ni("Weights & Biases monitor", DISABLED_BLOCK),
    "csv_monitor": _ni("CSV monitor", DISABLED_BLOCK),
    "comet": _ni("Comet monitor", DISABLED_BLOCK),
    "comms_logger": _ni("communication logger; zerolab's own comm ledger records every collective", DISABLED_BLOCK),
    "autotuning": _ni("autotuner", DISABLED_BLOCK),
    "hybrid_engine": _ni("RLHF hybrid engine", DISABLED_BLOCK),
    "torch_autocast": _ni("torch.autocast mixed precision", DISABLED_BLOCK),
    "data_efficiency": _ni("data sampling / routing library", DISABLED_BLOCK),
    "compile": _ni("torch.compile / DeepCompile integration", DISABLED_BLOCK),
    "tensor_parallel": _ni("tensor parallelism (AutoTP)", DISABLED_BLOCK),
    "expert_parallel": _ni("expert parallelism", DISABLED_BLOCK),
    "pipeline": _ni("pipeline parallelism", DISABLED_BLOCK),
    "checkpoint": _ni("checkpoint tag validation / universal checkpoints / writers", DISABLED_BLOCK),
    "data_types": _ni("grad_accum_dtype / param_dtype / buffer_dtype overrides", DISABLED_BLOCK),
    "weight_quantization": _ni("weight quantization", DISABLED_BLOCK),
    "datastates_ckpt": _ni("DataStates asynchronous checkpointing", False),
    "prescale_gradients": _ni("divide gradients by world size before the all-reduce", False),
    "gradient_predivide_factor": _ni("split the 1/world_size division around the collective", 1, 1.0),
    "gradient_allreduce_op": _ni("sum instead of mean of gradients across ranks", "mean"),
    "disable_allgather": _ni("broadcast instead of all-gather (stage 0)", False),
    "disable_python_gc": _ni("engine-managed Python garbage collection", False),
    "sequence_parallel_size": _ni("sequence parallelism (Ulysses)", 1),
    "use_data_before_expert_parallelism": _ni("expert/data parallel group order", False),
    "managed_gradient_accumulation": _ni("false hands the accumulation boundary to the caller", True),
    # removed from DeepSpeed itself
    **{k: _removed(why) for k, why in {
        "amp": "NVIDIA Apex AMP; use 'fp16' or 'bf16'",
        "elasticity": "elastic training; set the batch triple directly",
        "curriculum_learning": "legacy curriculum learning; DeepSpeed moved it into 'data_efficiency'",
        "nebula": "Nebula checkpointing", "compression_training": "compression library",
        "quantize_training": "MoQ quantized training", "sparse_gradients": "sparse embedding gradients",
        "eigenvalue": "eigenvalue MoQ", "sparse_attention": "sparse attention",
        "graph_harvesting": "graph harvesting", "progressive_layer_drop": "progressive layer drop",
    }.items()},
}


# ---- checking keys (used by zerolab.config.parse) ---------------------------------------------

def check_keys(p: Problems, block: Mapping, path: str, table: dict) -> None:
    """Unknown, removed and not-implemented keys of one block, by its table of :class:`Key`."""
    where = f"'{path}'" if path else T("the DeepSpeed config")
    for key, value in block.items():
        full, entry = join_path(path, key), table.get(key)
        if entry is None:
            names = list(table)
            guess = nearest(key, names)
            hint = (T("did you mean '{guess}'?", guess=guess) if guess else
                    T("known keys: {names}", names=", ".join(names)) if len(names) <= 12 else
                    T("it is not a DeepSpeed 0.19.8 key"))
            p.add(T("unknown key '{key}' in {where}; {hint}", key=key, where=where, hint=hint))
        elif entry.status == REMOVED:
            p.add(T("'{key}' was removed from DeepSpeed itself ({what}); DeepSpeed 0.19.8 rejects it too", key=full,
                    what=T.text(entry.what)))
        elif entry.status == NOT_IMPLEMENTED and not is_inert(value, entry.inert):
            p.refuse(full, value, entry.what, entry.inert)


def config_schema() -> dict:
    """The JSON Schema of a whole DeepSpeed config as zerolab reads it, for editors; written to
    ``zerolab/data/deepspeed_config.schema.json`` by ``tools/make_config_schema.py`` (a test checks
    the file matches these declarations)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "DeepSpeed 0.19.8 config, as zerolab reads it (generated from zerolab/config/keys.py)",
            **json_schema(TOP)}
