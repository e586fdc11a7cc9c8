"""Which DeepSpeed config keys zerolab reads, accepts or refuses (one table per block), and the
small readers that check a block against its table.

The reference is DeepSpeed 0.19.8 (``deepspeed/runtime/config.py``, ``constants.py``,
``precision_config.py``, ``zero/config.py``, ``zero/offload_config.py`` and the config modules
of its monitors, profiler, autotuner and AIO). Each key found there has one of four statuses:

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

:func:`check_keys` at the end holds one block against its table. The value readers
(:mod:`zerolab.config_values`, re-exported here) never raise: they record every problem in a
:class:`Problems` and hand back the default, so that :func:`zerolab.config.load_config`
reports all problems at once.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# the value readers, re-exported: zerolab.config and explain read them as config_keys.<name>
from .config_values import (DISABLED_BLOCK, Bad, Problems, Refusal, as_betas, as_bool, as_int,  # noqa: F401
                            as_num, as_str, join_path, one_of, optional, read, read_block, show)
from .i18n import catalogue

T = catalogue("config")      # the readers' messages in the edition's language (zerolab/messages_zh.py)

IMPLEMENTED = "implemented"
NO_EFFECT = "no effect"
NOT_IMPLEMENTED = "not implemented"
REMOVED = "removed"

@dataclass(frozen=True)
class Key:
    status: str
    what: str = ""              # what the key does in DeepSpeed (shown in errors)
    inert: tuple = ()           # NOT_IMPLEMENTED: values that ask for nothing


def is_inert(value: Any, inert: tuple) -> bool:
    """True when ``value`` is one of ``inert`` (``True`` is not ``1`` here) or a disabled block."""
    for ok in inert:
        if ok is DISABLED_BLOCK:
            if value is None or (isinstance(value, dict) and (not value or value.get("enabled") is False)):
                return True
        elif value is None or ok is None:
            if value is ok:
                return True
        elif isinstance(ok, bool) or isinstance(value, bool):
            if value is ok:
                return True
        elif value == ok:
            return True
    return False


def _ni(what: str, *inert: Any) -> Key:
    return Key(NOT_IMPLEMENTED, what, inert)


def _accepted(why: str) -> Key:
    return Key(NO_EFFECT, why)


_I, _A = Key(IMPLEMENTED), _accepted
TOP = {
    "train_batch_size": _I, "train_micro_batch_size_per_gpu": _I, "gradient_accumulation_steps": _I,
    "gradient_clipping": _I, "optimizer": _I, "zero_optimization": _I, "fp16": _I,
    "bf16": _I, "bfloat16": _I,  # "bfloat16" is DeepSpeed's old name for the bf16 block
    "communication_data_type": _I, "zero_allow_untested_optimizer": _I,
    "scheduler": _I,  # zerolab.scheduler: DeepSpeed's schedulers, built from the block and stepped by the engine
    "dataloader_drop_last": _I,  # the data loader zerolab.deepspeed.initialize builds from training_data
    "zerolab": _I,  # zerolab's own opt-in options (ZEROLAB below); DeepSpeed ignores a block it does not know
    # no effect in zerolab: bookkeeping, or knobs of features zerolab refuses elsewhere
    "steps_per_print": _A("DeepSpeed logs progress every N steps; logging only, zerolab prints no progress lines"),
    "wall_clock_breakdown": _A("DeepSpeed times forward/backward/step and logs it; timing logs only"),
    "zero_force_ds_cpu_optimizer": _A("DeepSpeed insists on DeepSpeedCPUAdam under optimizer offload; zerolab's "
                                      "host step runs the torch optimizer you chose, so there is nothing to force"),
    "memory_breakdown": _A("logging only"),
    "dump_state": _A("logging only"),
    "log_level": _A("logging only"),
    "timers": _A("timer logging only"),
    "vocabulary_size": _A("only a tensor-core alignment warning"),
    "seq_parallel_communication_data_type": _A("read only by sequence parallelism, which zerolab refuses"),
    "aio": _A("libaio settings of DeepSpeed's NVMe offload; zerolab's NVMe I/O runs on Python threads and "
               "does not read them"),
    "data_parallel_size": _A("read only together with sequence_parallel_size, which zerolab refuses"),
    "model_info": _A("read only by the autotuner, which zerolab refuses"),
    # DeepSpeed features zerolab lacks
    "activation_checkpointing": _ni("activation checkpointing / partitioning", DISABLED_BLOCK),
    "flops_profiler": _ni("FLOPs profiler", DISABLED_BLOCK),
    "tensorboard": _ni("TensorBoard monitor", DISABLED_BLOCK),
    "wandb": _ni("Weights & Biases monitor", DISABLED_BLOCK),
    "csv_monitor": _ni("CSV monitor", DISABLED_BLOCK),
    "comet": _ni("Comet monitor", DISABLED_BLOCK),
    "comms_logger": _ni("communication logger; zerolab's own comm ledger records every collective",
                        DISABLED_BLOCK),
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
    **{k: Key(REMOVED, why) for k, why in {
        "amp": "NVIDIA Apex AMP; use 'fp16' or 'bf16'",
        "elasticity": "elastic training; set the batch triple directly",
        "curriculum_learning": "legacy curriculum learning; DeepSpeed moved it into 'data_efficiency'",
        "nebula": "Nebula checkpointing", "compression_training": "compression library",
        "quantize_training": "MoQ quantized training", "sparse_gradients": "sparse embedding gradients",
        "eigenvalue": "eigenvalue MoQ", "sparse_attention": "sparse attention",
        "graph_harvesting": "graph harvesting", "progressive_layer_drop": "progressive layer drop",
    }.items()},
}

ZERO = {
    **{k: _I for k in (
        "stage", "reduce_bucket_size", "ignore_unused_parameters", "offload_optimizer", "offload_param",
        "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
        "overlap_comm",       # reduce.py: async bucket collectives during backward
        # reduce.py: DeepSpeed's collective per bucket. Stages 1-2: all-reduce (both true, the default,
        # or reduce_scatter false), a reduce to each owner (use_multi_rank_bucket_allreduce false);
        # stage 3: reduce-scatter (true) or all-reduce (false)
        "reduce_scatter", "use_multi_rank_bucket_allreduce")},
    "contiguous_gradients": _A("zerolab always packs gradients into flat buckets (what true does); false in "
                               "DeepSpeed changes only the memory layout, never the numbers"),
    "allgather_bucket_size": _A("zerolab all-gathers updated parameters one bucket (stages 1-2) or one module "
                                "(stage 3) at a time; DeepSpeed 0.19.8 itself ignores it on current torch "
                                "(one all_gather_into_tensor per parameter group); same numbers"),
    "allgather_partitions": _A("DeepSpeed 0.19.8 parses it but no optimizer reads it (only the autotuner "
                               "lists it): it has no effect in DeepSpeed either; zerolab all-gathers the "
                               "updated partitions, as DeepSpeed does"),
    "sub_group_size": _I,  # offload.py: the optimizer step runs sub-group by sub-group (the NVMe swap unit)
    # gather.py: the next groups of the recorded trace are all-gathered ahead, up to this many elements
    # in flight (0: just in time), within stage3_max_live_parameters gathered or in flight
    "stage3_prefetch_bucket_size": _I,
    "stage3_max_live_parameters": _I,
    # gather.py: after a module's forward, its parameters stay gathered if the trace uses them again
    # within this many elements (the last modules of forward are the first of backward)
    "stage3_max_reuse_distance": _I,
    "load_from_fp32_weights": _A("read only when loading a DeepSpeed checkpoint"),
    "memory_efficient_linear": _A("DeepSpeed's stage-3 Linear patch; same values"),
    "override_module_apply": _A("DeepSpeed's stage-3 module.apply patch"),
    "log_trace_cache_warnings": _A("logging only"),
    "enable_sanity_checks": _A("debug checks only"),
    "round_robin_gradients": _A("at stages 1-2 DeepSpeed deals the gradients of a bucket to the ranks in turn, to "
                                "spread the offload's device-to-host copies over ranks (stage 3 ignores it); which "
                                "rank owns which element changes, the numbers do not; zerolab keeps the order"),
    "stage3_gather_16bit_weights_on_model_save": _ni("save_16bit_model() gathers the weights", False),
    "stage3_gather_fp16_weights_on_model_save": _ni("deprecated name of the key above", False),
    "stage3_module_granularity_threshold": _ni("fetch fine-grained modules as one unit", 0),
    "stage3_use_all_reduce_for_fetch_params": _ni("fetch parameters with all-reduce", False),
    "stage3_allgather_sequential": _ni("unbucketed, per-parameter all-gathers", False),
    "elastic_checkpoint": _ni("legacy elastic checkpoints", False),
    "legacy_stage1": _ni("old stage-1 implementation", False),
    "compute_grad_norm": _ni("false skips the global gradient norm", True),
    "parameter_alignment": _ni("16-byte alignment padding in flat buffers", False),
    "zero_hpz_partition_size": _I,  # hpz.py: stage 3's secondary shard over groups of h ranks, backward gathers inside them
    "zero_quantized_weights": _I,   # gather.py: stage 3's parameter all-gathers as int8 blocks + scales (qwZ)
    # (DeepSpeed 0.19.8 quantizes a frozen parameter's freshly allocated, empty partition at partitioning and
    # then copies the values into the int8 tensor: partition_parameters.py, _partition_param; not reproduced)
    "zero_quantized_nontrainable_weights": _ni("ZeRO++ frozen weights stored quantized (zerolab partitions and "
                                               "gathers frozen parameters in their model dtype)", False),
    "zero_quantized_gradients": _I,  # reduce.py: stage 3's gradients as int4 through two all-to-alls (qgZ)
    "pipeline_loading_checkpoint": _ni("pipeline-mode checkpoint loading", False),
    "save_muon_momentum_buffer_in_memory": _ni("Muon momentum buffer placement", False),
    "zenflow": _ni("ZenFlow asynchronous offloaded updates", DISABLED_BLOCK),
    "leaf_module": _ni("user-listed ZeRO-3 leaf modules", DISABLED_BLOCK),
    "cpu_offload": _ni("deprecated form of offload_optimizer", None, False),
    "cpu_offload_param": _ni("deprecated form of offload_param", None, False),
    "cpu_offload_use_pin_memory": _ni("deprecated pin_memory for the keys above", None, False),
    "mics_shard_size": Key(REMOVED, "MiCS sharding"),
    "mics_hierarchical_params_gather": Key(REMOVED, "MiCS sharding"),
    "zeropp_loco_param": Key(REMOVED, "LoCo-ZeRO++"),
}

# ZeRO++'s keys are read by DeepSpeed's stage 3 only (partition_parameters.py, stage3.py): at
# stages 0-2 they change nothing (the engine makes qgZ's all-to-all groups, and nothing uses
# them; hpZ's partition groups are made on the stage-3 path only, engine.py)
ZEROPP_BELOW_STAGE3 = {k: _A("read by DeepSpeed's stage 3 only; at stages 0-2 it changes nothing (in DeepSpeed "
                             "too)") for k in ("zero_quantized_weights", "zero_quantized_nontrainable_weights",
                                               "zero_quantized_gradients", "zero_hpz_partition_size")}

# DeepSpeed's pydantic model also takes the field names of the stage3_* aliases.
ZERO_ALIASES = {k[len("stage3_"):]: k for k in ZERO if k.startswith("stage3_")
                and k != "stage3_gather_fp16_weights_on_model_save"}

FP16 = {
    **{k: _I for k in ("enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                       "consecutive_hysteresis", "min_loss_scale")},
    "auto_cast": _ni("casts the floating-point inputs of the model's forward to fp16", False),
    "fp16_master_weights_and_grads": _ni("fp16 master weights", False),
}

BF16 = {
    "enabled": _I,
    "check_grad_overflow": _I,
    "immediate_grad_update": _A("read only by DeepSpeed's BF16_Optimizer, which needs 'data_types'"),
    "bf16_master_weights_and_grads": _ni("bf16 master weights", False),
    "bf16_optimizer_states": _ni("bf16 optimizer states", False),
}

# Offload (``zerolab/offload.py``; stage 3's parameters in ``gather.py``). "device", "nvme_path",
# "pin_memory", the pipelines and "max_in_cpu" are read; the swap-buffer sizes are not needed by
# zerolab's I/O (it allocates one sub-group's buffers at a time) and change no number.
_SWAP_BUFFERS = _A("sizes DeepSpeed's pool of NVMe swap buffers; zerolab allocates each sub-group's buffers "
                   "as it swaps it (sub_group_size bounds them), so the pool size changes nothing")
OFFLOAD_OFF = _A("tunes the offload when its device is \"cpu\" or \"nvme\"; with device \"none\" it does nothing "
                 "(in DeepSpeed too)")
_OFFLOAD_COMMON = {"device": _I, "nvme_path": _I, "pin_memory": _I, "buffer_count": _SWAP_BUFFERS}
OFFLOAD_OPTIMIZER = {
    **_OFFLOAD_COMMON,
    "pipeline_read": _I, "pipeline_write": _I,
    "fast_init": _A("speeds up DeepSpeed's first NVMe write of the states; same numbers"),
    "ratio": _I,   # only 1.0 runs: below 1 is refused by the parser (stage 3) or an error (stages 0-2)
    "super_offload": _ni("SuperOffload (Grace-Hopper CPU optimizer)", False),
    "cpuadam_cores_perc": _A("the share of cores DeepSpeedCPUAdam uses; zerolab's host step runs torch's "
                             "optimizer on torch's threads"),
}
OFFLOAD_PARAM = {**_OFFLOAD_COMMON, "buffer_size": _SWAP_BUFFERS, "max_in_cpu": _I}

# Read only by NVMe offload; the top-level "aio" key is NO_EFFECT, and a typo in it is still a typo.
# zerolab's own block: options DeepSpeed does not have, opt-in and named (config.ZerolabConfig)
ZEROLAB = {
    "ideal_reduce_scatter": _I,   # reduce.py/params.py: stages 1-2 reduce-scatter each bucket (the paper's Psi)
    "order_checks": _I,           # gather.py: stage 3's 16-byte order headers (kind "check" in the ledger)
    "module_groups": _I,          # units.py: stage 3 partitions each module's parameters as one flat group
}

AIO = {k: _A("libaio setting, read only by NVMe offload") for k in (
    "block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events", "use_gds")}

SCHEDULER = {"type": _I, "params": _I}

OPTIMIZER = {"type": _I, "params": _I, "legacy_fusion": _ni("legacy fused optimizer", False)}

# Optimizer types: the ones zerolab builds, by lower-case name, and DeepSpeed's others
# (its own, plus any torch.optim class, which DeepSpeed looks up by name).
OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
OTHER_OPTIMIZERS = (
    "Adagrad", "Lamb", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon", "OneBitAdam", "ZeroOneAdam",
    "OneBitLamb", "Adadelta", "Adafactor", "Adamax", "ASGD", "LBFGS", "NAdam", "RAdam", "RMSprop",
    "Rprop", "SparseAdam",
)

# Defaults are those of the class DeepSpeed builds: FusedAdam / DeepSpeedCPUAdam for Adam(W)
# (weight_decay 0, unlike torch.optim.AdamW's 0.01), torch.optim.SGD for SGD.
ADAM_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
SGD_DEFAULTS = {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}
_GRAD_NORM = Key(REMOVED, "as an optimizer parameter; use the top-level 'gradient_clipping'")
OPTIMIZER_PARAMS = {
    "Adam": {
        **{k: _I for k in ADAM_DEFAULTS}, "adam_w_mode": _I,
        "torch_adam": _A("picks torch's Adam over FusedAdam; same update"),
        "fp32_optimizer_states": _A("read only by DeepSpeedCPUAdam; zerolab's host step keeps fp32 states"),
        "foreach": _A("torch implementation choice; same update"),
        "bias_correction": _ni("Adam without bias correction", True),
        "amsgrad": _ni("AMSGrad", False),
        "max_grad_norm": _GRAD_NORM,
    },
    "SGD": {
        **{k: _I for k in SGD_DEFAULTS},
        "foreach": _A("torch implementation choice; same update"),
        "fused": _A("torch implementation choice; same update"),
        "differentiable": _A("autograd through the step; unused by training"),
        "maximize": _ni("gradient ascent", False),
        "max_grad_norm": _GRAD_NORM,
    },
}
OPTIMIZER_PARAMS["AdamW"] = OPTIMIZER_PARAMS["Adam"]

# Old spellings that difflib cannot guess.
RENAMED = {"thread_count": "intra_op_parallelism", "bf16_enabled": "bf16", "fp16_enabled": "fp16"}


# ---- checking keys (used by zerolab.config) ---------------------------------------------------

def nearest(key: Any, names: list) -> str | None:
    """The known name the user most likely meant: an old spelling, a case slip, or difflib's pick."""
    key = str(key)
    if RENAMED.get(key) in names:
        return RENAMED[key]
    same_case = [n for n in names if n.lower() == key.lower()]
    return (same_case or difflib.get_close_matches(key, names, n=1, cutoff=0.6) or [None])[0]


def check_keys(p: Problems, block: Mapping, path: str, table: dict) -> None:
    """Unknown, removed and not-implemented keys of one block, by the tables of config_keys."""
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
