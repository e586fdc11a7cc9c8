"""Checkpoints: DeepSpeed's save/load calls, exact resume, any world size and stage, safe files."""
import json
import os

import pytest
import torch

import zerolab
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine, train_reference

GLOBAL_BATCH = 12            # divides by 1, 2, 3 and 4 ranks


def cfg(stage, precision="fp32", gas=1):
    c = {"train_batch_size": GLOBAL_BATCH, "gradient_accumulation_steps": gas, "gradient_clipping": 0.5,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}},
         "zero_optimization": {"stage": stage, "reduce_bucket_size": 700, "stage3_param_persistence_threshold": 30}}
    if precision == "fp16":   # a small window: the loss scale moves, so its state must be restored
        c["fp16"] = {"enabled": True, "initial_scale_power": 14, "loss_scale_window": 1, "hysteresis": 1}
    elif precision == "bf16":
        c["bf16"] = {"enabled": True}
    return c


def resume_same_world(stage, precision, ckpt):
    batches = lm_batches(4, GLOBAL_BATCH)
    gas = 2
    whole = zerolab.initialize(TinyLM(), cfg(stage, precision, gas))
    train_engine(whole, batches[:2], lm_loss)
    whole.save_checkpoint(ckpt, client_state={"epoch": 3, "note": "halfway", "t": torch.arange(3)})
    train_engine(whole, batches[2:], lm_loss)
    want, scale, skipped = whole.full_params(), whole.loss_scale, whole.skipped_steps
    whole.close()
    resumed = zerolab.initialize(TinyLM(seed=1), cfg(stage, precision, gas))  # other initial weights
    path, client = resumed.load_checkpoint(ckpt)
    train_engine(resumed, batches[2:], lm_loss)
    got = resumed.full_params()
    return {"equal": all(torch.equal(got[k], want[k]) for k in want), "scale": (resumed.loss_scale, scale),
            "skipped": (resumed.skipped_steps, skipped), "steps": resumed.global_steps,
            "client": (client["epoch"], client["note"], client["t"].tolist()), "tag": os.path.basename(path)}


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_resume_at_the_same_world_size_is_bit_identical(tmp_path, precision):
    for stage in (0, 1, 2, 3):
        ckpt = str(tmp_path / f"stage{stage}")
        for r in zerolab.launch(resume_same_world, 2, stage, precision, ckpt, echo=False, timeout=120):
            assert r["equal"], (stage, r)
            assert r["scale"][0] == r["scale"][1] and r["skipped"][0] == r["skipped"][1], (stage, r)
            assert r["steps"] == 4 and r["tag"] == "global_step2", r
            assert r["skipped"][1] < 4, r                 # fp16: some steps did train
            assert r["client"] == (3, "halfway", [0, 1, 2]), r


def first_half(stage, ckpt):
    batches = lm_batches(4, GLOBAL_BATCH)
    engine = zerolab.initialize(TinyLM(), cfg(stage))
    train_engine(engine, batches[:2], lm_loss)
    engine.save_checkpoint(ckpt)


def second_half(stage, ckpt):
    batches = lm_batches(4, GLOBAL_BATCH)
    engine = zerolab.initialize(TinyLM(seed=5), cfg(stage))
    engine.load_checkpoint(ckpt)
    train_engine(engine, batches[2:], lm_loss)
    return engine.full_params()


@pytest.mark.parametrize("n,stage_n,m,stage_m", [(2, 3, 3, 2), (3, 1, 2, 3), (4, 2, 1, 0)])
def test_resume_on_another_world_size_and_stage(tmp_path, n, stage_n, m, stage_m):
    ckpt = str(tmp_path / "ckpt")
    zerolab.launch(first_half, n, stage_n, ckpt, echo=False, timeout=120)
    got = zerolab.launch(second_half, m, stage_m, ckpt, echo=False, timeout=120)
    ref = train_reference(TinyLM(), cfg(0), lm_batches(4, GLOBAL_BATCH), lm_loss)
    for params in got:
        worst = max(float(((params[k] - ref[k]).abs() / (1 + ref[k].abs())).max()) for k in ref)
        assert worst < 1e-5, f"{n} ranks stage {stage_n} -> {m} ranks stage {stage_m}: {worst:.1e}"


def save_then(action, ckpt):
    """Save once (tag 'good'), then ``action``: try to break the next save or the files."""
    engine = zerolab.initialize(TinyLM(), cfg(2))
    train_engine(engine, lm_batches(1, GLOBAL_BATCH), lm_loss)
    if action != "load only":
        engine.save_checkpoint(ckpt, tag="good")
    before = engine.full_params()
    if action == "die while saving":
        if zerolab.rank() == 1:
            torch.save = None                     # rank 1 fails in the middle of writing
        engine.save_checkpoint(ckpt, tag="broken")
    other = zerolab.initialize(TinyLM(seed=3), cfg(2))
    try:
        other.load_checkpoint(ckpt, tag="good")
    except zerolab.CheckpointError as e:
        untouched = all(torch.equal(v, other.full_params()[k]) for k, v in
                        zerolab.initialize(TinyLM(seed=3), cfg(2)).full_params().items())
        return str(e), untouched
    return "loaded", all(torch.equal(v, other.full_params()[k]) for k, v in before.items())


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    with pytest.raises(zerolab.RankError):
        zerolab.launch(save_then, 2, "die while saving", str(ckpt), echo=False, timeout=30)
    assert (ckpt / "latest").read_text() == "good"
    assert not (ckpt / "broken").exists()
    assert zerolab.launch(save_then, 2, "nothing", str(ckpt), echo=False, timeout=60) == [("loaded", True)] * 2


def corrupt(ckpt, how):
    d = ckpt / "good"
    if how == "flip a byte":
        data = bytearray((d / "rank_1.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (d / "rank_1.pt").write_bytes(bytes(data))
    elif how == "truncate":
        data = (d / "rank_0.pt").read_bytes()
        (d / "rank_0.pt").write_bytes(data[: len(data) // 3])
    elif how == "lose a rank file":
        (d / "rank_1.pt").unlink()
    elif how == "another model":
        meta = json.loads((d / "meta.json").read_text())
        meta["groups"][0]["names"][0] = "blocks.9.up.weight"
        (d / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("how,message", [("flip a byte", "rank_1.pt is corrupted or truncated"),
                                         ("truncate", "rank_0.pt is corrupted or truncated"),
                                         ("lose a rank file", "rank_1.pt is missing"),
                                         ("another model", "of another model")])
def test_a_damaged_checkpoint_is_a_clear_error_on_every_rank_and_loads_nothing(tmp_path, how, message):
    ckpt = tmp_path / "ckpt"
    zerolab.launch(save_then, 2, "nothing", str(ckpt), echo=False, timeout=60)
    corrupt(ckpt, how)
    for text, untouched in zerolab.launch(save_then, 2, "load only", str(ckpt), echo=False, timeout=60):
        assert message in text and "Nothing was loaded" in text, text
        assert untouched


def full_after_save(stage, ckpt):
    engine = zerolab.initialize(TinyLM(), cfg(stage, "bf16"))
    train_engine(engine, lm_batches(2, GLOBAL_BATCH), lm_loss)
    engine.save_checkpoint(ckpt)
    return engine.full_params()


@pytest.mark.parametrize("stage", [0, 3])
def test_consolidate_writes_one_fp32_state_dict_for_the_plain_model(tmp_path, stage):
    from safetensors.torch import load_file
    ckpt, out = tmp_path / "ckpt", tmp_path / "model.safetensors"
    full = zerolab.launch(full_after_save, 3, stage, str(ckpt), echo=False, timeout=60)[0]
    zerolab.consolidate(ckpt, out)
    model = TinyLM()
    model.load_state_dict(load_file(out), strict=True)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), full[name]), name
    assert load_file(out)["head.weight"].dtype == torch.float32


def bad_client_state(ckpt):
    engine = zerolab.initialize(TinyLM(), cfg(1))
    engine.save_checkpoint(ckpt, client_state={"fn": print})


def test_client_state_that_would_need_unpickling_code_is_refused(tmp_path):
    with pytest.raises(zerolab.RankError, match=r"client_state\['fn'\] is a builtin_function_or_method"):
        zerolab.launch(bad_client_state, 2, str(tmp_path), echo=False, timeout=60)


def test_consolidate_from_the_command_line(tmp_path, capsys):
    import subprocess
    import sys
    from safetensors.torch import load_file
    from zerolab.cli import main as cli
    ckpt, out = tmp_path / "ckpt", tmp_path / "m.safetensors"
    full = zerolab.launch(full_after_save, 2, 2, str(ckpt), echo=False, timeout=60)[0]
    run = subprocess.run([sys.executable, "-m", "zerolab.cli", "consolidate", str(ckpt), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "wrote" in run.stdout, run.stderr
    assert torch.equal(load_file(out)["blocks.0.up.weight"], full["blocks.0.up.weight"])
    # the error path through the same entry point, in this process (one interpreter start less)
    assert cli(["consolidate", str(tmp_path / "nowhere"), str(out)]) == 2
    assert "no 'latest' file" in capsys.readouterr().err
