"""zerolab.config: DeepSpeed 0.19.8 config semantics, defaults, and every error path (no ranks)."""
import ast
import copy
import dataclasses
import json
import pathlib
import pickle

import pytest
import torch

import zerolab
from zerolab.config import keys as K
from zerolab.config import (BF16Config, Config, ConfigError, FP16Config, FrozenDict, OffloadConfig, SchedulerConfig,
                            OptimizerConfig, ZeroConfig, load_config)
from zerolab.config.explain import explain_config

# The production ZeRO-3 config of seed 002 (shared/seeds/002_7b4206f545a4cfb6.txt), verbatim.
SEED_002 = {
    "zero_optimization": {
        "stage": 3, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 5e8,
        "stage3_prefetch_bucket_size": 5e8, "stage3_param_persistence_threshold": 1e5,
        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "sub_group_size": 1e8, "round_robin_gradients": True,
    },
    "gradient_accumulation_steps": 4, "train_batch_size": 128,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
}


def error(cfg, world_size=2) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(cfg, world_size)
    return info.value


def with_batch(**extra):
    return {"train_batch_size": 8, **extra}


# ---- defaults ------------------------------------------------------------------------------

def test_defaults_are_deepspeed_0_19_8_code_defaults():
    c = load_config({"train_batch_size": 8}, 2)
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == (8, 4, 1)
    assert c.world_size == 2
    assert c.gradient_clipping == 1.0          # 0.19.8: 1.0 (older code: 0.0)
    assert c.steps_per_print is None           # 0.19.8: None = never print
    assert c.optimizer is None and c.communication_data_type is None
    assert not c.wall_clock_breakdown and not c.zero_allow_untested_optimizer
    assert c.fp16 == FP16Config() and c.bf16 == BF16Config()
    assert c.compute_dtype == torch.float32
    z = c.zero
    assert z == ZeroConfig()
    assert (z.stage, z.overlap_comm, z.contiguous_gradients, z.reduce_scatter) == (0, False, True, True)
    assert z.reduce_bucket_size == z.allgather_bucket_size == 500_000_000
    assert z.stage3_prefetch_bucket_size == 50_000_000            # code, not the docs' 5e8
    assert z.stage3_param_persistence_threshold == 100_000
    assert z.stage3_max_live_parameters == z.stage3_max_reuse_distance == z.sub_group_size == 1_000_000_000
    assert z.offload_optimizer.device == z.offload_param.device == "none"
    assert z.offload_optimizer.pin_memory and z.offload_param.pin_memory   # 0.19.8: True
    assert (z.offload_optimizer.buffer_count, z.offload_param.buffer_count) == (4, 5)
    f = c.fp16
    assert (f.loss_scale, f.initial_scale_power, f.loss_scale_window, f.hysteresis, f.min_loss_scale) == \
        (0.0, 16, 1000, 2, 1.0)
    assert f.dynamic and not f.consecutive_hysteresis and not f.auto_cast
    assert c.bf16.check_grad_overflow


@pytest.mark.parametrize("stage,given,expected", [
    (0, None, False), (1, None, False), (2, None, False), (3, None, True), (3, False, False), (2, True, True)])
def test_overlap_comm_none_resolves_true_only_for_stage_3(stage, given, expected):
    zero = {"stage": stage} if given is None else {"stage": stage, "overlap_comm": given}
    assert load_config(with_batch(zero_optimization=zero), 1).zero.overlap_comm is expected
    assert load_config(with_batch(zero_optimization={"stage": stage, "overlap_comm": None}), 1).zero.overlap_comm \
        is (stage == 3)


def test_compute_dtype_follows_precision_blocks():
    assert load_config(with_batch(fp16={"enabled": True}), 1).compute_dtype == torch.float16
    assert load_config(with_batch(bf16={"enabled": True}), 1).compute_dtype == torch.bfloat16
    assert load_config(with_batch(bfloat16={"enabled": True}), 1).compute_dtype == torch.bfloat16


def test_scientific_notation_floats_become_ints():
    z = load_config(with_batch(zero_optimization={"reduce_bucket_size": 5e8, "sub_group_size": 1e8}), 1).zero
    assert z.reduce_bucket_size == 500_000_000 and type(z.reduce_bucket_size) is int
    assert type(z.sub_group_size) is int
    c = load_config({"train_batch_size": 128.0, "gradient_accumulation_steps": 4.0}, 2)
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu) == (128, 16)
    assert type(c.train_batch_size) is int


# ---- the batch triple ----------------------------------------------------------------------

@pytest.mark.parametrize("given,world,triple", [
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 4, (32, 4, 2)),
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}, 4, (32, 4, 2)),
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 4, (32, 4, 2)),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 4, (32, 4, 2)),
    ({"train_batch_size": 32}, 4, (32, 8, 1)),
    ({"train_micro_batch_size_per_gpu": 4}, 4, (16, 4, 1)),
    ({"train_batch_size": 7}, 1, (7, 7, 1)),
])
def test_batch_triple_derived_as_deepspeed(given, world, triple):
    c = load_config(given, world)
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == triple


@pytest.mark.parametrize("given,world,words", [
    ({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3}, 2,
     ["10 != 3 * 1 * 2", "derived as 10 // 3 // 2 = 1", "multiple of train_micro_batch_size_per_gpu * world_size = 6"]),
    ({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 8}, 1, ["4 != 8 * 0 * 1", "= 0"]),
    ({"train_batch_size": 30, "gradient_accumulation_steps": 4}, 2,
     ["30 != 3 * 4 * 2", "multiple of gradient_accumulation_steps * world_size = 8"]),
    ({"train_batch_size": 9}, 2, ["9 != 4 * 1 * 2", "multiple of world_size = 2"]),
    ({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 4}, 8,
     ["128 != 16 * 4 * 8", "these three fit world_size 2, not 8"]),
])
def test_batch_mismatch_says_the_numbers(given, world, words):
    msg = str(error(given, world))
    assert msg.startswith("check the batch parameters: train_batch_size is not equal to "
                          "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size")
    for w in words:
        assert w in msg


@pytest.mark.parametrize("given,words", [
    ({}, "none of the three"),
    ({"gradient_accumulation_steps": 4}, "only gradient_accumulation_steps"),
])
def test_batch_needs_tbs_or_micro(given, words):
    msg = str(error(given))
    assert "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided" in msg and words in msg


@pytest.mark.parametrize("value", [0, -8, 1.5, True, "8", [8]])
def test_batch_values_must_be_positive_integers(value):
    e = error({"train_batch_size": value})
    assert str(e).startswith("'train_batch_size' must be an integer > 0, got ")
    assert len(e.problems) == 1        # no second, confusing triple error


# ---- unknown keys --------------------------------------------------------------------------

def test_unknown_top_level_key_names_the_nearest():
    assert str(error(with_batch(zero_optimisation={"stage": 1}))) == \
        "unknown key 'zero_optimisation' in the DeepSpeed config; did you mean 'zero_optimization'?"
    assert "did you mean 'train_batch_size'?" in str(error({"Train_Batch_Size": 8,
                                                             "train_micro_batch_size_per_gpu": 1}))
    assert "it is not a DeepSpeed 0.19.8 key" in str(error(with_batch(frobnicate=1)))


@pytest.mark.parametrize("cfg,message", [
    (with_batch(zero_optimization={"stage3_prefetch_bucket": 1}),
     "unknown key 'stage3_prefetch_bucket' in 'zero_optimization'; did you mean 'stage3_prefetch_bucket_size'?"),
    (with_batch(fp16={"enable": True}), "unknown key 'enable' in 'fp16'; did you mean 'enabled'?"),
    (with_batch(bf16={"enabeld": True}), "unknown key 'enabeld' in 'bf16'; did you mean 'enabled'?"),
    (with_batch(zero_optimization={"offload_param": {"devices": "none"}}),
     "unknown key 'devices' in 'zero_optimization.offload_param'; did you mean 'device'?"),
    (with_batch(zero_optimization={"offload_param": {"ratio": 0.5}}),
     "unknown key 'ratio' in 'zero_optimization.offload_param'; known keys: device, nvme_path"),
    (with_batch(optimizer={"type": "AdamW", "params": {"weight_dacay": 0.1}}),
     "unknown key 'weight_dacay' in 'optimizer.params'; did you mean 'weight_decay'?"),
    (with_batch(optimizer={"type": "AdamW", "parms": {}}),
     "unknown key 'parms' in 'optimizer'; did you mean 'params'?"),
    (with_batch(aio={"thread_count": 1}), "unknown key 'thread_count' in 'aio'; did you mean 'intra_op_parallelism'?"),
    (with_batch(fp16={"xyz": 1}), "unknown key 'xyz' in 'fp16'; known keys: enabled, loss_scale"),
])
def test_unknown_key_in_every_block(cfg, message):
    assert str(error(cfg)).startswith(message)


# ---- known DeepSpeed keys that zerolab does not implement --------------------------------------

@pytest.mark.parametrize("cfg,path", [
    (with_batch(activation_checkpointing={"partition_activations": True}), "activation_checkpointing"),
    (with_batch(activation_checkpointing={"partition_activations": True}), "activation_checkpointing"),
    (with_batch(flops_profiler={"enabled": True}), "flops_profiler"),
    (with_batch(tensorboard={"enabled": True, "output_path": "x"}), "tensorboard"),
    (with_batch(prescale_gradients=True), "prescale_gradients"),
    (with_batch(gradient_predivide_factor=2.0), "gradient_predivide_factor"),
    (with_batch(data_types={"grad_accum_dtype": "fp32"}), "data_types"),
    (with_batch(zero_optimization={"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}),
     "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
    (with_batch(zero_optimization={"elastic_checkpoint": True}), "zero_optimization.elastic_checkpoint"),
    (with_batch(zero_optimization={"stage": 3, "zero_quantized_nontrainable_weights": True}),
     "zero_optimization.zero_quantized_nontrainable_weights"),
    (with_batch(zero_optimization={"cpu_offload": True}), "zero_optimization.cpu_offload"),
    (with_batch(zero_optimization={"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}),
     "zero_optimization.offload_optimizer.ratio"),
    (with_batch(fp16={"enabled": True, "fp16_master_weights_and_grads": True}), "fp16.fp16_master_weights_and_grads"),
    (with_batch(bf16={"enabled": True, "bf16_master_weights_and_grads": True}), "bf16.bf16_master_weights_and_grads"),
    (with_batch(optimizer={"type": "Lamb"}), "optimizer.type"),
    (with_batch(optimizer={"type": "RMSprop"}), "optimizer.type"),
    (with_batch(optimizer={"type": "Adam", "params": {"amsgrad": True}}), "optimizer.params.amsgrad"),
    (with_batch(optimizer={"type": "Adam", "params": {"bias_correction": False}}), "optimizer.params.bias_correction"),
    (with_batch(optimizer={"type": "AdamW"}, scheduler={}, legacy_fusion=None), None),
])
def test_not_implemented_keys_are_named(cfg, path):
    if path is None:   # an inert scheduler block is fine, a misplaced legacy_fusion is unknown
        assert "unknown key 'legacy_fusion' in the DeepSpeed config" in str(error(cfg))
        return
    e = error(cfg)
    assert e.not_implemented == (path,)
    assert f"'{path}' is a DeepSpeed key that zerolab does not implement yet (" in str(e)


def test_not_implemented_messages_verbatim():
    assert str(error(with_batch(flops_profiler={"enabled": True}))) == (
        "'flops_profiler' is a DeepSpeed key that zerolab does not implement yet (FLOPs profiler): remove it")
    assert str(error(with_batch(zero_optimization={"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}))) == (
        "'zero_optimization.offload_optimizer.ratio' is a DeepSpeed key that zerolab does not implement yet "
        "(partial offload, ZeRO-Offload++ Twin-Flow: only this fraction of the sub-groups steps on the host): it "
        "is 0.5 here; remove it or set it to 1.0")


@pytest.mark.parametrize("extra", [
    {"flops_profiler": {"enabled": False, "profile_step": 1}}, {"tensorboard": {"enabled": False}},
    {"activation_checkpointing": {}}, {"scheduler": None}, {"prescale_gradients": False},
    {"gradient_predivide_factor": 1.0}, {"gradient_allreduce_op": "mean"}, {"sequence_parallel_size": 1},
    {"zero_optimization": {"round_robin_gradients": False, "elastic_checkpoint": False,
                           "stage3_gather_16bit_weights_on_model_save": False, "zero_hpz_partition_size": 1,
                           "offload_optimizer": {"device": "none", "pin_memory": False}, "offload_param": None}},
])
def test_inert_values_of_not_implemented_keys_are_accepted(extra):
    load_config(with_batch(**extra), 2)


@pytest.mark.parametrize("extra", [
    {"memory_breakdown": True}, {"dump_state": True}, {"zero_force_ds_cpu_optimizer": False},
    {"vocabulary_size": 50257}, {"timers": {"throughput": {"enabled": True}}}, {"dataloader_drop_last": True},
    {"aio": {"block_size": 1048576, "queue_depth": 8}}, {"bf16": {"enabled": True, "immediate_grad_update": True}},
    {"zero_optimization": {"load_from_fp32_weights": False, "use_multi_rank_bucket_allreduce": False,
                           "memory_efficient_linear": False, "log_trace_cache_warnings": True}},
    {"optimizer": {"type": "Adam", "params": {"torch_adam": True, "foreach": False}}},
])
def test_harmless_bookkeeping_keys_are_accepted(extra):
    load_config(with_batch(**extra), 2)


@pytest.mark.parametrize("cfg,path", [
    (with_batch(amp={"enabled": True}), "amp"),
    (with_batch(elasticity={"enabled": True}), "elasticity"),
    (with_batch(zero_optimization={"mics_shard_size": 8}), "zero_optimization.mics_shard_size"),
    (with_batch(optimizer={"type": "AdamW", "params": {"max_grad_norm": 1.0}}), "optimizer.params.max_grad_norm"),
])
def test_keys_removed_from_deepspeed_itself(cfg, path):
    assert str(error(cfg)).startswith(f"'{path}' was removed from DeepSpeed itself (")


# ---- the seed production config ---------------------------------------------------------------

def test_seed_002_loads_as_written():
    # offload runs (issue 9); round_robin_gradients only changes which rank owns which element
    c = load_config(SEED_002, 8)
    assert (c.zero.offload_optimizer.device, c.zero.offload_param.device) == ("cpu", "cpu")
    assert dict(c.ignored_settings())["zero_optimization.round_robin_gradients"].startswith("at stages 1-2")


def test_seed_002_without_the_later_work_parses():
    cfg = copy.deepcopy(SEED_002)
    for key in ("offload_optimizer", "offload_param", "round_robin_gradients"):
        del cfg["zero_optimization"][key]
    c = load_config(cfg, 8)
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == (128, 4, 4)
    z = c.zero
    assert (z.stage, z.overlap_comm, z.contiguous_gradients) == (3, True, True)
    assert (z.reduce_bucket_size, z.stage3_prefetch_bucket_size) == (500_000_000, 500_000_000)
    assert (z.stage3_param_persistence_threshold, z.stage3_max_live_parameters, z.stage3_max_reuse_distance,
            z.sub_group_size) == (100_000, 1_000_000_000, 1_000_000_000, 100_000_000)
    assert c.fp16.enabled and c.fp16.dynamic and c.fp16.initial_scale_power == 16
    assert load_config(cfg, 2).train_micro_batch_size_per_gpu == 16
    # partial offload (ratio < 1) is refused only when the offload is on
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "none", "pin_memory": True, "ratio": 0.5}
    assert load_config(cfg, 8).zero.offload_optimizer == OffloadConfig(device="none", pin_memory=True, ratio=0.5)


# ---- values --------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,message", [
    (with_batch(zero_optimization={"stage": 4}), "'zero_optimization.stage' must be an integer in 0..3, got 4"),
    (with_batch(zero_optimization={"stage": True}), "'zero_optimization.stage' must be an integer in 0..3, got true"),
    (with_batch(zero_optimization={"reduce_bucket_size": 0}),
     "'zero_optimization.reduce_bucket_size' must be an integer > 0, got 0"),
    (with_batch(zero_optimization={"allgather_bucket_size": 1.5}),
     "'zero_optimization.allgather_bucket_size' must be an integer > 0, got 1.5"),
    (with_batch(zero_optimization={"stage3_prefetch_bucket_size": -1}),
     "'zero_optimization.stage3_prefetch_bucket_size' must be an integer >= 0, got -1"),
    (with_batch(zero_optimization={"contiguous_gradients": "true"}),
     "'zero_optimization.contiguous_gradients' must be true or false, got \"true\""),
    (with_batch(zero_optimization={"overlap_comm": 1}),
     "'zero_optimization.overlap_comm' must be true or false or null, got 1"),
    (with_batch(zero_optimization={"offload_optimizer": {"device": "CPU"}}),
     "'zero_optimization.offload_optimizer.device' must be one of \"none\", \"cpu\", \"nvme\", got \"CPU\""),
    (with_batch(zero_optimization={"offload_optimizer": {"ratio": 1.5}}),
     "'zero_optimization.offload_optimizer.ratio' must be a number in [0, 1], got 1.5"),
    (with_batch(zero_optimization={"stage": 2, "offload_optimizer": {"ratio": 0.5}}),
     "'zero_optimization.offload_optimizer.ratio' < 1 (partial offload) needs ZeRO stage 3"),
    (with_batch(zero_optimization=True), "'zero_optimization' = true is DeepSpeed's deprecated boolean form"),
    (with_batch(zero_optimization=[1]), "'zero_optimization' must be a JSON object ({...}), got [1]"),
    (with_batch(fp16=True), "'fp16' must be a JSON object ({...}), got true"),
    (with_batch(fp16={"enabled": True, "loss_scale_window": 0}),
     "'fp16.loss_scale_window' must be an integer > 0 when dynamic loss scaling is on"),
    (with_batch(fp16={"enabled": True, "min_loss_scale": 0}),
     "'fp16.min_loss_scale' must be an integer > 0 when dynamic loss scaling is on"),
    (with_batch(fp16={"enabled": True, "min_loss_scale": 0.5}), "'fp16.min_loss_scale' must be an integer > 0"),
    (with_batch(fp16={"enabled": True, "hysteresis": 0}), "'fp16.hysteresis' must be an integer > 0, got 0"),
    (with_batch(fp16={"enabled": True, "loss_scale": -1}), "'fp16.loss_scale' must be a number >= 0, got -1"),
    (with_batch(fp16={"enabled": True, "initial_scale_power": -2}),
     "'fp16.initial_scale_power' must be an integer >= 0, got -2"),
    (with_batch(gradient_clipping=-1.0), "'gradient_clipping' must be a number >= 0, got -1.0"),
    (with_batch(gradient_clipping=True), "'gradient_clipping' must be a number >= 0, got true"),
    (with_batch(steps_per_print=0), "'steps_per_print' must be an integer > 0 or null, got 0"),
    (with_batch(communication_data_type="float16"),
     "'communication_data_type' must be one of \"fp32\", \"fp16\", \"bf16\" or null, got \"float16\""),
    (with_batch(fp16={"enabled": True}, bf16={"enabled": True}),
     "'fp16.enabled' and 'bf16.enabled' are both true: bfloat16 and fp16 modes cannot be enabled together"),
    (with_batch(bf16={"enabled": True}, bfloat16={"enabled": True}), "give only one of 'bf16' and 'bfloat16'"),
    (with_batch(zero_optimization={"prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2}),
     "give only one of 'zero_optimization.prefetch_bucket_size' and 'zero_optimization.stage3_prefetch_bucket_size'"),
])
def test_bad_values(cfg, message):
    assert str(error(cfg)).startswith(message)


def test_loss_scale_window_and_floor_are_checked_only_where_they_act():
    # as DeepSpeed 0.19.8: a static scale (or fp16 off) carries unused values without complaint
    load_config(with_batch(fp16={"enabled": True, "loss_scale": 128, "loss_scale_window": 0, "min_loss_scale": 0}), 1)
    load_config(with_batch(fp16={"enabled": False, "loss_scale_window": 0}), 1)
    f = load_config(with_batch(fp16={"enabled": True, "loss_scale": 1024}), 1).fp16
    assert not f.dynamic and f.loss_scale == 1024.0


def test_communication_data_type_is_case_insensitive():
    assert load_config(with_batch(communication_data_type="FP16"), 1).communication_data_type == "fp16"
    assert load_config(with_batch(communication_data_type="bf16"), 1).communication_data_type == "bf16"


def test_stage3_field_names_are_aliases_as_in_deepspeed():
    z = load_config(with_batch(zero_optimization={"prefetch_bucket_size": 7, "max_live_parameters": 9}), 1).zero
    assert (z.stage3_prefetch_bucket_size, z.stage3_max_live_parameters) == (7, 9)


@pytest.mark.parametrize("cfg,path,expected", [
    ({"train_batch_size": "auto"}, "train_batch_size", "give an integer > 0 instead"),
    (with_batch(fp16={"enabled": "auto"}), "fp16.enabled", "give true or false instead"),
    (with_batch(gradient_clipping="auto"), "gradient_clipping", "give a number >= 0 instead"),
    (with_batch(optimizer={"type": "AdamW", "params": {"lr": "auto"}}), "optimizer.params.lr",
     "give a number >= 0 instead"),
    (with_batch(zero_optimization={"reduce_bucket_size": "auto"}), "zero_optimization.reduce_bucket_size",
     "give an integer > 0 instead"),
])
def test_auto_values_from_hf_trainer_configs(cfg, path, expected):
    msg = str(error(cfg))
    assert msg.startswith(f"'{path}' is \"auto\": \"auto\" is filled in by the Hugging Face Trainer")
    assert msg.endswith(expected)


def test_all_problems_are_reported_together():
    e = error({"train_batch_size": "auto", "zero_optimisation": {}, "flops_profiler": {"enabled": True},
               "fp16": {"enabled": True, "hysteresis": 0}, "optimizer": {"type": "Adamm"}})
    assert len(e.problems) == 5 and e.not_implemented == ("flops_profiler",)
    msg = str(e)
    assert msg.startswith("5 problems in the DeepSpeed config:\n")
    for part in ("'zero_optimisation'", "'flops_profiler'", "'train_batch_size' is \"auto\"", "'fp16.hysteresis'",
                 "unknown optimizer type 'Adamm' in 'optimizer.type'; did you mean 'Adam'?"):
        assert part in msg


# ---- optimizer -----------------------------------------------------------------------------

def test_optimizer_types_match_case_insensitively_and_fill_deepspeed_defaults():
    o = load_config(with_batch(optimizer={"type": "adamw", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}}), 1).optimizer
    assert o.type == "AdamW" and o.torch_name == "AdamW" and o.adam_w_mode
    # FusedAdam's weight_decay default is 0 (torch.optim.AdamW's would be 0.01)
    assert dict(o.params) == {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0}
    s = load_config(with_batch(optimizer={"type": "sgd", "params": {"lr": 0.1, "momentum": 0.9}}), 1).optimizer
    assert (s.type, s.torch_name, s.adam_w_mode) == ("SGD", "SGD", False)
    assert dict(s.params) == {"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}


def test_deepspeed_adam_is_adamw_unless_adam_w_mode_is_false():
    adam = load_config(with_batch(optimizer={"type": "Adam", "params": {"weight_decay": 0.1}}), 1).optimizer
    assert adam.type == "Adam" and adam.adam_w_mode and adam.torch_name == "AdamW"
    plain = load_config(with_batch(optimizer={"type": "Adam", "params": {"adam_w_mode": False}}), 1).optimizer
    assert not plain.adam_w_mode and plain.torch_name == "Adam"
    assert "adam_w_mode" not in plain.params      # params are ready for the torch constructor
    forced = load_config(with_batch(optimizer={"type": "AdamW", "params": {"adam_w_mode": False}}), 1).optimizer
    assert forced.torch_name == "AdamW"            # as DeepSpeed: AdamW stays AdamW


@pytest.mark.parametrize("opt,message", [
    ({"params": {"lr": 1e-3}}, "'optimizer' has no 'type'"),
    ({"type": 3}, "'optimizer.type' must be a string, got 3"),
    ({"type": "Adamm"}, "unknown optimizer type 'Adamm' in 'optimizer.type'; did you mean 'Adam'?"),
    ({"type": "Zzz"}, "unknown optimizer type 'Zzz' in 'optimizer.type'; zerolab builds Adam, AdamW and SGD"),
    ({"type": "AdamW", "params": {"betas": [0.9]}}, "'optimizer.params.betas' must be two numbers in [0, 1)"),
    ({"type": "AdamW", "params": {"lr": -1}}, "'optimizer.params.lr' must be a number >= 0, got -1"),
    ({"type": "SGD", "params": {"nesterov": True}}, "'optimizer.params.nesterov' needs momentum > 0 and dampening 0"),
    ({"type": "SGD", "params": {"betas": [0.9, 0.99]}}, "unknown key 'betas' in 'optimizer.params'"),
])
def test_optimizer_errors(opt, message):
    assert str(error(with_batch(optimizer=opt))).startswith(message)


# ---- inputs, outputs -------------------------------------------------------------------------

def test_json_path_input(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(SEED_002))
    for p in (path, str(path)):
        assert load_config(p, 8).zero.sub_group_size == 100_000_000
    path.write_text('{"train_batch_size": 16, "zero_optimization": {"stage": 2}}')
    c = load_config(path, 4)
    assert (c.train_micro_batch_size_per_gpu, c.zero.stage) == (4, 2)


def test_json_file_errors(tmp_path):
    dup = tmp_path / "dup.json"
    dup.write_text('{"train_batch_size": 16, "train_batch_size": 32}')
    assert str(error(dup)).startswith("duplicate key 'train_batch_size' in the DeepSpeed config file")
    bad = tmp_path / "bad.json"
    bad.write_text('{"train_batch_size": 16,}')
    assert "is not valid JSON" in str(error(bad))
    assert "cannot read the DeepSpeed config file" in str(error(tmp_path / "missing.json"))
    assert "must be a dict or the path to a JSON file, got int" in str(error(3))


@pytest.mark.parametrize("world_size", [0, -1, True, 2.0, "2"])
def test_world_size_must_be_a_positive_int(world_size):
    assert "world_size must be a positive integer" in str(error({"train_batch_size": 8}, world_size))


def test_config_is_frozen_and_read_only():
    src = with_batch(optimizer={"type": "AdamW", "params": {"betas": [0.9, 0.99]}},
                     zero_optimization={"stage": 2}, tensorboard={"enabled": False, "x": [1, 2]})
    c = load_config(src, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.train_batch_size = 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.zero.stage = 3
    with pytest.raises(TypeError):
        c.optimizer.params["lr"] = 1.0
    with pytest.raises(TypeError):
        c.raw["train_batch_size"] = 16
    assert c.raw["tensorboard"]["x"] == (1, 2)            # lists frozen to tuples
    assert c.raw["optimizer"]["params"]["betas"] == (0.9, 0.99)
    src["zero_optimization"]["stage"] = 3                 # the caller's dict is not shared
    assert c.zero.stage == 2 and c.raw["zero_optimization"]["stage"] == 2
    assert isinstance(c.raw, FrozenDict) and c.raw == {**c.raw}


def test_config_pickles_deep_copies_and_hashes():
    c = load_config(with_batch(optimizer={"type": "Adam"}, zero_optimization={"stage": 3}), 2)
    for clone in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c)):
        assert clone == c and clone.raw == c.raw and clone.describe() == c.describe()
    assert hash(c) == hash(pickle.loads(pickle.dumps(c)))
    bad = copy.deepcopy(SEED_002)
    bad["zero_optimization"]["round_robin"] = True                 # a typo
    bad["activation_checkpointing"] = {"partition_activations": True}
    e = pickle.loads(pickle.dumps(error(bad, 8)))
    assert isinstance(e, ConfigError) and len(e.problems) == 2 and e.not_implemented == ("activation_checkpointing",)


def test_a_config_is_accepted_and_re_resolved_for_another_world_size():
    c = load_config({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}, 2)
    assert load_config(c, 2) is c
    c8 = load_config(c, 8)
    assert (c8.world_size, c8.gradient_accumulation_steps) == (8, 1)
    assert "32 != 4 * 0 * 16" in str(error(c, 16))


def test_raw_keeps_the_users_spelling():
    c = load_config(with_batch(zero_optimization={"prefetch_bucket_size": 7}), 1)
    assert dict(c.raw["zero_optimization"]) == {"prefetch_bucket_size": 7}


def test_describe_is_factual():
    cfg = copy.deepcopy(SEED_002)
    for key in ("offload_optimizer", "offload_param", "round_robin_gradients"):
        del cfg["zero_optimization"][key]
    cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-4}}
    text = load_config(cfg, 8).describe()
    assert "ZeRO stage 3 on 8 data-parallel rank(s): optimizer states, gradients and parameters are partitioned" \
        in text
    assert "train_batch_size 128 = 4 (micro-batch per rank) x 4 (gradient accumulation steps) x 8 (ranks)" in text
    assert "fp16 model, fp32 master weights; dynamic loss scale from 2^16" in text
    assert "collected in buckets of reduce_bucket_size 500,000,000 elements" in text
    assert "is reduce-scattered (each module's gradient padded to N shards; each rank receives its shards) " \
        "in fp16 in one call" in text
    # stage 3 prefetches from the recorded trace, DeepSpeed's rule: a top-up per fetch, max_live the bound
    assert "up to 500,000,000 more elements (stage3_prefetch_bucket_size)" in text
    assert "fewer than 1,000,000,000 are gathered or in flight (stage3_max_live_parameters: the only bound" in text
    assert "[DeepSpeed's]" in text and "Order checks [zerolab's own, zerolab.order_checks]" in text
    assert "parameters of at most 100,000 elements stay gathered (stage3_param_persistence_threshold)" in text
    assert "Gradient clipping: clipped to global L2 norm 1." in text
    assert "Optimizer: AdamW (torch.optim.AdamW), lr=0.0001" in text
    assert "No effect in zerolab (accepted; same numbers as DeepSpeed):" in text
    assert "issued asynchronously (overlap_comm), one in flight (DeepSpeed's one IPG buffer per dtype)" in text
    for key, value in (("contiguous_gradients", "true"),):
        assert f"  - zero_optimization.{key} = {value}: " in text, key
    assert "uses them again within 1,000,000,000 elements (stage3_max_reuse_distance" in text
    assert "sub_group_size = " not in text
    assert "Optimizer step: in sub-groups of at most 100,000,000 elements" in text
    plain = load_config({"train_batch_size": 4, "gradient_clipping": 0}, 1).describe()
    assert "nothing is partitioned" in plain and "fp32 throughout" in plain and "Gradient clipping: off." in plain
    assert "Stage 3" not in plain and "none in the config" in plain and "No effect" not in plain
    assert "at the accumulation boundary the gradients are all-reduced in buckets of 500,000,000 elements " \
        "(DeepSpeed's stage 0 reduces like DDP; reduce_bucket_size is not used)" in plain
    two = load_config({"train_batch_size": 4, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000}}, 2).describe()
    assert "reduce_bucket_size 1,000 elements (0.00 GB in bf16); during backward, once a bucket's gradients " \
        "are complete, the parameters form one flat buffer" in two
    assert "each bucket (a range of it) is all-reduced and each rank keeps the slices of its partition" in two
    ideal = load_config({"train_batch_size": 4, "zero_optimization": {"stage": 1},
                         "zerolab": {"ideal_reduce_scatter": True}}, 2).describe()
    assert "is reduce-scattered (each rank receives only its shard: Psi per step, the ZeRO paper's ideal) " \
        "[zerolab's own: zerolab.ideal_reduce_scatter; DeepSpeed all-reduces]" in ideal
    owner = load_config({"train_batch_size": 4, "zero_optimization": {"stage": 2,
                         "use_multi_rank_bucket_allreduce": False}}, 2).describe()
    assert "one reduce per owner (use_multi_rank_bucket_allreduce false) [DeepSpeed's]" in owner


# ---- the key tables ------------------------------------------------------------------------

def test_key_tables_are_consistent_with_the_dataclasses():
    statuses = {K.IMPLEMENTED, K.NO_EFFECT, K.NOT_IMPLEMENTED, K.REMOVED}
    for table in (K.TOP, K.ZERO, K.ZEROLAB, K.FP16, K.BF16, K.OFFLOAD_OPTIMIZER, K.OFFLOAD_PARAM, K.OPTIMIZER,
                  *K.OPTIMIZER_PARAMS.values()):
        for name, key in table.items():
            assert key.status in statuses, name
            assert key.status == K.IMPLEMENTED or key.what, name        # every other status says why
            assert key.status != K.NOT_IMPLEMENTED or key.inert, name  # and how to turn it off
    fields = {f.name for f in dataclasses.fields(ZeroConfig)}
    assert {k for k, v in K.ZERO.items() if v.status == K.IMPLEMENTED} <= fields
    fp16 = {f.name for f in dataclasses.fields(FP16Config)}
    assert {k for k, v in K.FP16.items() if v.status == K.IMPLEMENTED} <= fp16
    offload = {f.name for f in dataclasses.fields(OffloadConfig)}
    assert {k for k, v in {**K.OFFLOAD_OPTIMIZER, **K.OFFLOAD_PARAM}.items() if v.status == K.IMPLEMENTED} <= offload


def test_the_briefs_not_implemented_list_is_in_the_tables():
    for name in ("activation_checkpointing", "flops_profiler", "tensorboard"):
        assert K.TOP[name].status == K.NOT_IMPLEMENTED
    assert K.TOP["scheduler"].status == K.IMPLEMENTED       # zerolab.scheduler (issue 13)
    for name in ("stage3_gather_16bit_weights_on_model_save", "elastic_checkpoint"):
        assert K.ZERO[name].status == K.NOT_IMPLEMENTED
    assert K.ZERO["round_robin_gradients"].status == K.NO_EFFECT     # ownership order only
    # removed in DeepSpeed 0.19.8 itself, so refused with that reason
    assert K.TOP["amp"].status == K.ZERO["mics_shard_size"].status == K.REMOVED


def test_optimizer_config_defaults():
    o = OptimizerConfig("SGD")
    assert o.params == {} and o.torch_name == "SGD"
    assert Config(8, 4, 1, 2).zero == ZeroConfig() and Config(8, 4, 1, 2).raw == {}


# ---- honesty: implemented means read, no effect means said (issue 8) ------------------------

PACKAGE = pathlib.Path(zerolab.__file__).parent
# Modules that parse or explain a config; a read there does not make a key implemented.
CONFIG_MODULES = {"config", "cli.py"}            # the package zerolab/config/, and the command line
# the course's exercises, chapters and lab: not the engine
COURSE_PARTS = {"course/checks", "course/chapters", "course/lab"}
# Implemented by load_config itself, not by an engine read: DeepSpeed's batch triple is derived and
# checked there (_batch_assertion); the engine needs only gradient_accumulation_steps, because the
# caller feeds it micro-batches (zerolab builds no data loader).
IMPLEMENTED_BY_THE_PARSER = {"train_batch_size", "train_micro_batch_size_per_gpu"}


def names_read_outside_the_config_modules() -> set:
    """Attribute names loaded (``x.name``) and string arguments of calls (``getattr(x, "name")``,
    ``_get(fp16, "name")``) in the package's own modules (the engine and its parts) outside the
    config modules. The course's chapters, checks and lab (``zerolab/course/checks``: the
    exercises' checkers) are not the engine."""
    names = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.split("/")[0] in CONFIG_MODULES or any(rel.startswith(part + "/") for part in COURSE_PARTS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Call):
                names.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return names


def implemented_keys_and_fields() -> list:
    """(dotted key, attribute chain from a Config) for every IMPLEMENTED key of the tables."""
    top = {"zero_optimization": "zero", "bfloat16": "bf16"}
    out = [(k, (top.get(k, k),)) for k, v in K.TOP.items() if v.status == K.IMPLEMENTED]
    for prefix, chain, table in (("zero_optimization", ("zero",), K.ZERO), ("fp16", ("fp16",), K.FP16),
                                 ("bf16", ("bf16",), K.BF16),
                                 ("zero_optimization.offload_optimizer", ("zero", "offload_optimizer"),
                                  K.OFFLOAD_OPTIMIZER),
                                 ("zero_optimization.offload_param", ("zero", "offload_param"), K.OFFLOAD_PARAM),
                                 ("optimizer", ("optimizer",), K.OPTIMIZER),
                                 ("scheduler", ("scheduler",), K.SCHEDULER)):
        out += [(f"{prefix}.{k}", (*chain, k)) for k, v in table.items() if v.status == K.IMPLEMENTED]
    for name, table in K.OPTIMIZER_PARAMS.items():
        for k, v in table.items():
            if v.status == K.IMPLEMENTED:   # hyper-parameters reach torch through params; adam_w_mode picks the class
                out.append((f"optimizer.params.{k} ({name})",
                            ("optimizer", "torch_name") if k == "adam_w_mode" else ("optimizer", "params")))
    return out


def test_every_implemented_key_maps_to_a_real_field():
    holders = {"": Config, "zero": ZeroConfig, "fp16": FP16Config, "bf16": BF16Config, "optimizer": OptimizerConfig,
               "scheduler": SchedulerConfig,
               "offload_optimizer": OffloadConfig, "offload_param": OffloadConfig}
    for key, chain in implemented_keys_and_fields():
        owner = ""
        for attr in chain:
            cls = holders[owner]
            assert attr in {f.name for f in dataclasses.fields(cls)} or isinstance(getattr(cls, attr, None), property), \
                (key, chain)
            owner = attr


def test_every_implemented_key_is_read_by_the_engine():
    """A key labelled IMPLEMENTED must reach the engine: each attribute on the way to its value is
    read somewhere in the package outside the config modules. Fails for a key nothing reads; then
    either make the engine read it or relabel it honestly (NO_EFFECT with the reason, or
    NOT_IMPLEMENTED)."""
    read = names_read_outside_the_config_modules()
    unread = [key for key, chain in implemented_keys_and_fields()
              if key not in IMPLEMENTED_BY_THE_PARSER and not set(chain) <= read]
    assert unread == [], f"labelled IMPLEMENTED but nothing outside zerolab/config*.py reads them: {unread}"


def test_the_keys_of_issue_8_have_honest_statuses():
    for key in ("contiguous_gradients", "allgather_bucket_size", "allgather_partitions"):
        assert K.ZERO[key].status == K.NO_EFFECT, key
    for key in ("stage3_prefetch_bucket_size", "stage3_max_live_parameters",   # gather.py (issue 10)
                "stage3_max_reuse_distance"):
        assert K.ZERO[key].status == K.IMPLEMENTED, key
    assert K.ZERO["sub_group_size"].status == K.IMPLEMENTED          # offload.py tiles the step (issue 9)
    # implemented since (zerolab/zero/reduce.py): async bucket collectives, and the all-reduce path
    assert K.ZERO["overlap_comm"].status == K.ZERO["reduce_scatter"].status == K.IMPLEMENTED
    assert K.FP16["auto_cast"].status == K.NOT_IMPLEMENTED and K.FP16["auto_cast"].inert == (False,)
    for key in ("stage", "reduce_bucket_size", "ignore_unused_parameters", "stage3_param_persistence_threshold",
                "stage3_model_persistence_threshold"):
        assert K.ZERO[key].status == K.IMPLEMENTED, key
    assert K.OFFLOAD_OPTIMIZER["device"].status == K.OFFLOAD_PARAM["device"].status == K.IMPLEMENTED
    # issue 9: offload runs; the swap-buffer pool sizes and fast_init change nothing in zerolab
    for table, keys in ((K.OFFLOAD_OPTIMIZER, ("nvme_path", "pin_memory", "pipeline_read", "pipeline_write", "ratio")),
                        (K.OFFLOAD_PARAM, ("nvme_path", "pin_memory", "max_in_cpu"))):
        assert all(table[k].status == K.IMPLEMENTED for k in keys), keys
        assert table["buffer_count"].status == K.NO_EFFECT
    assert K.OFFLOAD_OPTIMIZER["fast_init"].status == K.OFFLOAD_PARAM["buffer_size"].status == K.NO_EFFECT
    assert K.TOP["steps_per_print"].status == K.TOP["wall_clock_breakdown"].status == K.NO_EFFECT


@pytest.mark.parametrize("cfg,path", [
    (with_batch(fp16={"enabled": True, "auto_cast": True}), "fp16.auto_cast"),
])
def test_settings_that_change_what_deepspeed_does_are_refused(cfg, path):
    e = error(cfg)
    assert e.not_implemented == (path,)
    assert f"'{path}' is a DeepSpeed key that zerolab does not implement yet (" in str(e)


def test_their_inert_values_are_fine():
    c = load_config(with_batch(zero_optimization={"reduce_scatter": True}, fp16={"enabled": True, "auto_cast": False}), 2)
    assert c.zero.reduce_scatter and not c.fp16.auto_cast
    assert c.ignored_settings() == []           # what zerolab does anyway: nothing to warn about


def test_ignored_settings_lists_what_the_user_set_with_no_effect_and_why():
    assert load_config({"train_batch_size": 8}, 2).ignored_settings() == []
    cfg = copy.deepcopy(SEED_002)
    for key in ("offload_optimizer", "offload_param", "round_robin_gradients"):
        del cfg["zero_optimization"][key]
    ignored = load_config(cfg, 8).ignored_settings()
    assert [k for k, _ in ignored] == [f"zero_optimization.{k}" for k in (
        "contiguous_gradients",)]
    why = dict(ignored)
    assert "never the numbers" in why["zero_optimization.contiguous_gradients"]
    assert "flat buckets" in why["zero_optimization.contiguous_gradients"]
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "buffer_count": 8, "pin_memory": True}
    why = dict(load_config(cfg, 8).ignored_settings())
    assert "pool of NVMe swap buffers" in why["zero_optimization.offload_optimizer.buffer_count"]
    assert "zero_optimization.offload_optimizer.pin_memory" not in why
    other = load_config(with_batch(
        steps_per_print=10, wall_clock_breakdown=True, aio={"block_size": 1048576, "queue_depth": 8},
        bf16={"enabled": True, "immediate_grad_update": True},
        zero_optimization={"stage": 3, "allgather_partitions": False,
                           "allgather_bucket_size": 100, "offload_optimizer": {"device": "none", "pin_memory": True}},
        optimizer={"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True, "foreach": False}}), 2).ignored_settings()
    assert [k for k, _ in other] == [
        "steps_per_print", "wall_clock_breakdown", "aio",      # a no-effect block is listed once
        "zero_optimization.allgather_partitions", "zero_optimization.allgather_bucket_size",
        "zero_optimization.offload_optimizer.pin_memory", "bf16.immediate_grad_update",
        "optimizer.params.foreach"]                           # (torch_adam has an effect: below)
    assert all(why for _, why in other)
    assert "no optimizer reads it" in dict(other)["zero_optimization.allgather_partitions"]


@pytest.mark.parametrize("kind, params, cls, decay", [
    ("Adam", {}, "AdamW", 0.0),                                    # FusedAdam, adam_w_mode: its 0
    ("AdamW", {}, "AdamW", 0.0),
    ("Adam", {"torch_adam": True}, "AdamW", 0.01),                 # torch.optim.AdamW's own default
    ("AdamW", {"torch_adam": True}, "AdamW", 0.01),
    ("AdamW", {"torch_adam": True, "weight_decay": 0.0}, "AdamW", 0.0),
    ("Adam", {"torch_adam": True, "adam_w_mode": False}, "Adam", 0.0),   # torch.optim.Adam: 0
    ("Adam", {"torch_adam": False, "weight_decay": 0.1}, "AdamW", 0.1),
])
def test_the_weight_decay_is_the_one_of_the_class_deepspeed_builds(kind, params, cls, decay):
    """DeepSpeed 0.19.8 (engine.get_optimizer_configuration) builds FusedAdam for Adam/AdamW
    (weight_decay 0 unless given), or with torch_adam torch.optim.AdamW / Adam with the params as
    given, so an AdamW without weight_decay decays by torch's 0.01. `zerolab compare` once showed
    losses apart from step 2 on because it added torch_adam to DeepSpeed's side alone."""
    opt = load_config(with_batch(optimizer={"type": kind, "params": {"lr": 1e-3, **params}}), 2).optimizer
    assert (opt.torch_name, opt.params["weight_decay"]) == (cls, decay)
    assert "torch_adam" not in opt.params                        # picks the defaults, not a torch argument


def test_compare_gives_deepspeed_the_same_update_as_the_config_asks():
    """`zerolab compare` runs DeepSpeed on the CPU, where FusedAdam has no op: torch's AdamW stands in
    with FusedAdam's weight decay (0), unless the config asked for torch_adam itself."""
    from zerolab.tools.compare_ds import runnable_on_cpu
    fused = {"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
    got = runnable_on_cpu(fused)["optimizer"]["params"]
    assert got == {"lr": 1e-3, "torch_adam": True, "weight_decay": 0.0} and fused["optimizer"]["params"] == {"lr": 1e-3}
    torch_adam = {"optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}
    assert runnable_on_cpu(torch_adam)["optimizer"]["params"] == {"torch_adam": True}
    sgd = {"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
    assert runnable_on_cpu(sgd)["optimizer"] == sgd["optimizer"]
    for cfg in (fused, torch_adam):         # zerolab reads each as DeepSpeed then builds it
        a = load_config(with_batch(**cfg), 2).optimizer
        b = load_config(with_batch(**runnable_on_cpu(cfg)), 2).optimizer
        assert (a.torch_name, dict(a.params)) == (b.torch_name, dict(b.params))


def test_explain_config_reads_any_deepspeed_config():
    e = explain_config(SEED_002, 8)
    assert e.errors == ()
    assert e.not_implemented == ()
    c = e.config
    assert c.zero.offload_optimizer.device == "cpu" and c.train_micro_batch_size_per_gpu == 4
    text = c.describe()
    assert "optimizer states (fp32 master weights and Adam moments, 12 bytes per parameter of its shard) and, at " \
        "stages 2-3, its fp32 gradient shard (4 bytes) live in host (CPU) memory, pinned when a GPU is present" in text
    assert "offload_param.device = cpu: each rank's stage-3 parameter shards live in host (CPU) memory" in text
    # the offload's tuning keys are read (pin_memory), so they are not on the no-effect list
    assert "offload_optimizer.pin_memory" not in "".join(k for k, _ in c.ignored_settings())
    # the strict reader the engine uses reads the same config to the same result
    assert load_config(SEED_002, 8) == c


def test_explain_config_keeps_real_errors_apart():
    e = explain_config({"train_batch_size": 30, "gradient_accumulation_steps": 4, "zero_optimisation": {},
                        "flops_profiler": {"enabled": True}, "optimizer": {"type": "Lamb"}}, 2)
    assert [r.path for r in e.not_implemented] == ["flops_profiler", "optimizer.type"]
    assert len(e.errors) == 2
    assert e.errors[0].startswith("unknown key 'zero_optimisation'")
    assert e.errors[1].startswith("check the batch parameters")
    text = e.config.describe()
    assert "Batch: not resolved for 2 rank(s) (see the error); the config gives train_batch_size 30, " \
        "gradient_accumulation_steps 4." in text
    assert "Optimizer: Lamb, which zerolab does not build" in text
    with pytest.raises(ConfigError, match="cannot read"):
        explain_config("/nonexistent/ds.json", 2)


def test_compare_says_how_far_apart_the_losses_are():
    from zerolab.tools.compare import table
    from zerolab.tools.compare_ds import summarize
    calls = [{"family": "all_reduce", "numel": 100, "bytes": 400}]

    def side(losses):
        return {"steps": [{"step": i + 1, "loss": v, "summary": summarize(calls)} for i, v in enumerate(losses)],
                "memory": [{"params": 400}]}
    text, ok = table(side([2.5, 1.25]), side([2.5, 1.25]))
    assert ok and "the losses: equal bit for bit" in text
    text, ok = table(side([2.5, 1.25]), side([2.5, 1.25003]))
    assert ok and "the losses: at most 3e-05 apart" in text      # the calls still match: ok stays


def test_compare_refuses_a_config_deepspeed_would_refuse_before_running_it(tmp_path):
    """(It used to start DeepSpeed, which failed after its start with only torchrun's summary shown.)"""
    from zerolab.tools.compare import main
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 1}}))
    said = []
    assert main(str(path), world=3, ds_python="/nonexistent/python", out=said.append) == 2
    assert "cannot run on 3 ranks" in said[0] and "must be a multiple of world_size = 3" in said[0], said
