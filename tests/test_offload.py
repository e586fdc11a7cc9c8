"""Offload, the company warehouse: the same training, other memory.

* Parity: every offload option (optimizer states to the host or NVMe at stages 1-3, stage 3's
  parameters to the host or NVMe, small sub-groups, the NVMe pipelines) trains to parameters
  bit-identical to the same run without offload in fp32, and within a stated tolerance in
  fp16 and bf16, at 1, 2 and 3 ranks, with gradient accumulation and clipping on; and close
  to plain single-process training. One exception, DeepSpeed's own: at stage 3 with
  ``offload_optimizer`` DeepSpeed all-reduces the squared norm as fp32 and computes the
  clipping factor in fp32 (``complete_grad_norm_calculation_for_cpu_offload``), without it in
  fp64, so with clipping on those runs may differ from the plain one in the factor's last bit
  (within 1e-6 here), as DeepSpeed's do.
* Where the bytes live: ``engine.memory()``, ``memory("host")``, ``memory("nvme")`` hold the
  tensors each place should hold, and match DeepSpeed's estimator rows.
* NVMe files: a bad ``nvme_path`` is a clear error on every rank before the first step; files
  are removed at ``close()``; folders of killed runs are never read and are cleaned up.
"""
import os

import pytest
import torch

import zerolab
from zerolab.config import ConfigError
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.offload.nvme import NvmePathError, remove_stale_swap_dirs
from zerolab.offload import tile_ranges
from zerolab.zero.reference import train_engine, train_reference


def cfg_for(stage, world, *, precision="fp32", gas=2, clip=0.05, opt=None, param=None, sub_group=None):
    zero = {"stage": stage, "reduce_bucket_size": 700, "stage3_param_persistence_threshold": 30}
    if opt:
        zero["offload_optimizer"] = opt
    if param:
        zero["offload_param"] = param
    if sub_group:
        zero["sub_group_size"] = sub_group
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
           "train_batch_size": 2 * gas * world, "gradient_clipping": clip,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}},
           "zero_optimization": zero}
    if precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    elif precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def _variants(tmp):
    nv = {"device": "nvme", "nvme_path": tmp}
    out = []
    for stage in (1, 2, 3):
        out.append((f"s{stage} opt=cpu", stage, {"opt": {"device": "cpu"}}))
        out.append((f"s{stage} opt=cpu sub_group=100", stage, {"opt": {"device": "cpu"}, "sub_group": 100}))
        out.append((f"s{stage} opt=nvme sub_group=150 pipelined", stage,
                    {"opt": {**nv, "pipeline_read": True, "pipeline_write": True}, "sub_group": 150}))
    out.append(("s3 opt=nvme sub_group=100", 3, {"opt": nv, "sub_group": 100}))
    out.append(("s3 param=cpu", 3, {"param": {"device": "cpu"}}))
    out.append(("s3 param=cpu opt=cpu", 3, {"param": {"device": "cpu"}, "opt": {"device": "cpu"}}))
    out.append(("s3 param=nvme max_in_cpu=300 opt=nvme", 3,
                {"param": {**nv, "max_in_cpu": 300}, "opt": nv, "sub_group": 200}))
    return out


def run_parity(tmp, precision, steps=3):
    world = zerolab.world_size()
    out = {}
    for name, stage, kw in _variants(tmp):
        base = cfg_for(stage, world, precision=precision)
        batches = lm_batches(steps, base["train_batch_size"], seed=stage)
        dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        plain = zerolab.initialize(TinyLM(), base)
        train_engine(plain, batches, lm_loss)
        want = plain.full_params()
        plain.close()
        engine = zerolab.initialize(TinyLM(), cfg_for(stage, world, precision=precision, **kw))
        train_engine(engine, batches, lm_loss)
        got = engine.full_params()
        stores = [x for x in (engine.stage.home.nvme, getattr(getattr(engine.stage.params, "shards", None), "files", None)) if x]
        mine = [x.top for x in stores]             # this rank's folders (the other ranks have their own)
        files = [os.path.join(dp, f) for d in mine for dp, _, fs in os.walk(d) for f in fs]
        engine.close()
        left = [d for d in mine if os.path.exists(d)]
        ref = train_reference(TinyLM(), base, batches, lm_loss) if precision == "fp32" else None
        out[name] = {
            "bit_equal": all(torch.equal(got[k], want[k]) for k in want),
            "fp32_factor": stage == 3 and "opt" in kw,
            "max_diff": max(float((got[k] - want[k]).abs().max()) for k in want),
            "ref_diff": (max(float((got[k] - ref[k]).abs().max()) for k in ref) if ref else None),
            "used_files": bool(files), "left_files": left, "steps": engine.global_steps,
            "dtype": str(dtype)}
    return out


@pytest.mark.parametrize("world", [1, 2, 3])
def test_offload_fp32_is_bit_identical(world, tmp_path):
    results = zerolab.launch(run_parity, world, str(tmp_path), "fp32", echo=False, timeout=300)
    for r, res in enumerate(results):
        for name, got in res.items():
            assert got["steps"] == 3, (name, got)
            if got["fp32_factor"]:                 # DeepSpeed's fp32 clipping factor (above)
                assert got["max_diff"] < 1e-6, f"world {world} rank {r} {name}: differs by {got['max_diff']:.3g}"
            else:
                assert got["bit_equal"], f"world {world} rank {r} {name}: differs by {got['max_diff']:.3g}"
            assert got["ref_diff"] < 1e-5, f"{name}: {got['ref_diff']:.3g} from single-process training"
            assert got["left_files"] == [], f"{name}: files left after close(): {got['left_files']}"
            assert got["used_files"] == ("nvme" in name), name


def _foreach_or_not(stage):
    world = zerolab.world_size()
    out = []
    for foreach in (None, False):                # None: zerolab's choice; False: torch's default loop
        cfg = cfg_for(stage, world)
        engine = zerolab.initialize(TinyLM(), cfg)
        if foreach is False:
            for pg in engine.optimizer.param_groups:
                pg["foreach"] = False
        train_engine(engine, lm_batches(3, cfg["train_batch_size"], seed=1), lm_loss)
        out.append(({pg.get("foreach") for pg in engine.optimizer.param_groups}, engine.full_params()))
        engine.close()
    return out


def test_stage3_on_the_cpu_steps_its_tiles_in_foreach_form_bit_for_bit():
    """Stage 3 keeps one master tile per parameter: on the CPU torch's default Adam would step them
    one by one in Python; zerolab asks for the foreach form, which gives the same bits."""
    for (mine, got), (torchs, want) in zerolab.launch(_foreach_or_not, 2, 3, echo=False, timeout=300):
        assert mine == {True} and torchs == {False}
        assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_offload_mixed_precision_within_tolerance(precision, tmp_path):
    # The offloaded run accumulates the reduced gradient shards in fp32 on the host (DeepSpeed's
    # CPU gradient buffer), the plain one in the model dtype: with accumulation 2 they may differ
    # by the dtype's rounding of the sum, which Adam turns into at most a fraction of one step
    # (lr 3e-3). A wrong shard or a skipped tile moves weights by whole steps.
    results = zerolab.launch(run_parity, 2, str(tmp_path), precision, echo=False, timeout=300)
    for res in results:
        for name, got in res.items():
            assert got["steps"] == 3, (name, got)
            assert got["max_diff"] < 3e-3, f"{precision} {name}: {got['max_diff']:.3g}"
            assert got["left_files"] == [], name


def test_tile_ranges():
    assert tile_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert tile_ranges(4, 4) == [(0, 4)]
    assert tile_ranges(0, 4) == [(0, 0)]


def _places(tmp, stage, opt, param):
    world = zerolab.world_size()
    cfg = cfg_for(stage, world, precision="fp16", gas=1, clip=0.0,
                  opt={"device": opt, **({"nvme_path": tmp} if opt == "nvme" else {})} if opt else None,
                  param={"device": param, **({"nvme_path": tmp, "max_in_cpu": 0} if param == "nvme" else {})}
                  if param else None)
    model = TinyLM()
    engine = zerolab.initialize(model, cfg)
    train_engine(engine, lm_batches(1, cfg["train_batch_size"], seed=0), lm_loss)
    out = {w: engine.memory(w) for w in ("device", "host", "nvme")}
    s = engine.stage
    out["shard_numel"] = sum(g.shard_numel for g in s.groups)
    out["tiles"] = len(s.home.tensors)            # Adam keeps a 4-byte step counter per tile
    out["persistent_numel"] = sum(g.padded_numel for g in s.groups if getattr(s.params, "persistent", [False] * 99)[g.index])
    ps = s.params
    if hasattr(ps, "n_trained"):   # stage 3 partitions untrained parameters too; TinyLM's one is persistent (whole)
        assert all(ps.persistent[g.index] for g in ps.groups[ps.n_trained:])
        out["frozen"] = sum(2 * g.padded_numel for g in ps.groups[ps.n_trained:])
    else:
        out["frozen"] = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    engine.close()
    return out


@pytest.mark.parametrize("stage,opt,param", [(2, "cpu", None), (3, "cpu", None), (3, "cpu", "cpu"),
                                             (3, "nvme", "nvme"), (1, "cpu", None)])
def test_where_every_byte_lives(stage, opt, param, tmp_path):
    """fp16 + Adam, 2 ranks. Device: 2-byte parameters only (stages 1-2 keep them whole, stage 3 its
    persistent ones; stage 1 its full fp16 gradient too). Host: per element of the shard, 4 (fp32
    master) + 8 (Adam's two moments) + 4 (fp32 gradient) at stages 2-3, and 2 (fp16 parameter
    shard) with parameter offload. NVMe: the same bytes in files instead."""
    results = zerolab.launch(_places, 2, str(tmp_path), stage, opt, param, echo=False, timeout=120)
    for r in results:
        dev, host, nvme, n = r["device"], r["host"], r["nvme"], r["shard_numel"]
        steps = 4 * r["tiles"]
        assert dev["optimizer_states"] == 0
        assert dev["grads"] == (0 if stage >= 2 else 2 * 2 * n)        # stage 1: the whole fp16 gradient
        if opt == "cpu":
            assert host["optimizer_states"] == (4 + 8) * n + steps
        else:   # at rest only the step counters stay in memory; masters and moments are in files
            assert host["optimizer_states"] == 0 and host["buffers"] == steps
            assert nvme["optimizer_states"] == (4 + 8) * n
        assert host["grads"] == (4 * n if stage >= 2 else 0)
        if param:
            # shards of gathered groups off the device; the persistent group stays whole there
            on = host if param == "cpu" else nvme
            assert on["params"] == 2 * (n - r["persistent_numel"] // 2)
            assert dev["params"] == 2 * r["persistent_numel"] + r["frozen"]


def _estimator_check(stage, opt, param):
    from zerolab.tools.estimate import estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs
    from zerolab.memory import count_params, largest_layer_params
    world = zerolab.world_size()
    cfg = cfg_for(stage, world, precision="fp16", gas=1, clip=0.0, opt={"device": opt},
                  param={"device": param} if param else None)
    cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    model = TinyLM()
    psi, big = count_params(model), largest_layer_params(model)
    engine = zerolab.initialize(model, cfg)
    train_engine(engine, lm_batches(1, cfg["train_batch_size"], seed=0), lm_loss)
    dev, host = engine.memory("device"), engine.memory("host")
    engine.close()
    if stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=world, cpu_offload=True,
                                                         additional_buffer_factor=1.0)
        return {"dev": dev["model_states"], "host": host["model_states"], "gpu": gpu, "cpu": cpu, "psi": psi}
    cpu, gpu, largest = estimate_zero3_model_states_mem_needs(
        psi, big, num_gpus_per_node=world, cpu_offload=True, cpu_offload_params=bool(param), zero_init=True,
        additional_buffer_factor=1.0)
    return {"dev": dev["model_states"], "host": host["model_states"], "gpu": gpu, "cpu": cpu, "psi": psi,
            "largest": largest, "peak_buffers": dev["peak_buffers"]}


@pytest.mark.parametrize("stage,param", [(2, None), (3, None), (3, "cpu")])
def test_memory_matches_deepspeed_estimator_rows(stage, param):
    """DeepSpeed's estimators (zerolab.tools.estimate reproduces them) with the buffer factor 1.0:
    ZeRO-2 + optimizer offload: 2 Psi per GPU, 16 Psi per node in host memory. ZeRO-3 +
    optimizer offload: 2 Psi / N per GPU (+ the largest layer, gathered), 16 Psi on the host;
    with parameter offload too: nothing but the gathered layer per GPU, 18 Psi on the host.
    TinyLM's tied embedding is counted once by both; padding to a multiple of N adds a few
    elements (at most N - 1 per group), so the check allows 0.5%."""
    results = zerolab.launch(_estimator_check, 2, stage, "cpu", param, echo=False, timeout=120)
    total_host = sum(r["host"] for r in results)
    r0 = results[0]
    assert total_host == pytest.approx(r0["cpu"], rel=5e-3)
    if stage == 2:
        assert r0["dev"] == pytest.approx(r0["gpu"], rel=5e-3)
    else:
        # the estimator's GPU row includes one gathered layer (4L: its fp16 params and grads);
        # zerolab's model states at rest hold none, its peak buffers hold the gathered groups
        assert r0["dev"] == pytest.approx(r0["gpu"] - r0["largest"], rel=5e-3, abs=64)


def _bad_path(path):
    cfg = cfg_for(2, zerolab.world_size(), opt={"device": "nvme", "nvme_path": path})
    try:
        zerolab.initialize(TinyLM(), cfg)
    except NvmePathError as e:
        return str(e)
    return "no error"


def test_bad_nvme_path_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "nope")
    msgs = zerolab.launch(_bad_path, 2, missing, echo=False, timeout=60)
    assert all("does not exist" in m for m in msgs), msgs
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):          # root ignores permissions: nothing to test here
        pytest.skip("running as root: a read-only folder is writable")
    msgs = zerolab.launch(_bad_path, 2, str(ro), echo=False, timeout=60)
    assert all("not writable" in m for m in msgs), msgs


def test_nvme_needs_a_path_and_param_offload_needs_stage_3():
    with pytest.raises(ConfigError, match="nvme_path"):
        zerolab.load_config(cfg_for(2, 1, opt={"device": "nvme"}), 1)
    with pytest.raises(ConfigError, match="stage 3"):
        zerolab.load_config(cfg_for(2, 1, param={"device": "cpu"}), 1)
    with pytest.raises(ConfigError, match="at least 1"):
        zerolab.load_config(cfg_for(0, 1, opt={"device": "cpu"}), 1)
    with pytest.raises(ConfigError, match="ratio"):
        zerolab.load_config(cfg_for(2, 1, opt={"device": "cpu", "ratio": 0.5}), 1)


def test_stale_swap_dirs_of_dead_processes_are_removed(tmp_path):
    import socket
    import subprocess
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"zerolab-swap-{socket.gethostname()}-{dead.pid}-abcd1234" / "rank0"
    stale.mkdir(parents=True)
    (stale / "0.master.bin").write_bytes(b"\0" * 16)
    alive = tmp_path / f"zerolab-swap-{socket.gethostname()}-{os.getpid()}-live0000"
    alive.mkdir()
    other = tmp_path / "zerolab-swap-otherhost-1-x"
    other.mkdir()
    removed = remove_stale_swap_dirs(str(tmp_path))
    assert removed == [stale.parent.name]
    assert alive.exists() and other.exists() and not stale.parent.exists()


_KEPT = []          # (inside a rank) the engines a rank keeps alive until it exits, never closed


def _train_and_keep(path, stage):
    cfg = cfg_for(stage, zerolab.world_size(), opt={"device": "nvme", "nvme_path": path}, sub_group=150,
                  param={"device": "nvme", "nvme_path": path, "max_in_cpu": 0} if stage == 3 else None)
    engine = zerolab.initialize(TinyLM(), cfg)
    train_engine(engine, lm_batches(1, cfg["train_batch_size"], seed=0), lm_loss)
    _KEPT.append(engine)                       # still alive (and open) when the crew ends
    return sorted(os.listdir(path))


def test_a_rank_that_exits_normally_removes_its_swap_folder(tmp_path, stage=3):
    """An engine with NVMe offload that is never closed (a notebook's cell, a script that just ends):
    when its crew ends normally, each rank removes its own swap folders on the way out; none is left
    for a later run to clean up. Stage 3 with both offloads on NVMe: the optimizer states' folder and
    the parameter shards' folder of every rank."""
    with zerolab.Crew(2, echo=False) as crew:
        during = crew.run(_train_and_keep, str(tmp_path), stage, timeout=120)
        assert during[0], during                # the ranks' folders are there while the engines live
    assert os.listdir(tmp_path) == []
    # and again: two runs leave nothing either
    zerolab.launch(_train_and_keep, 2, str(tmp_path), stage, echo=False, timeout=120)
    assert os.listdir(tmp_path) == []
