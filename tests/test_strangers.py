"""Cases from users' scripts that once went wrong (issue 23): each fails on the code before its fix."""
import pytest
import torch
from torch import nn

import zerolab


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def _train(stage, make_optimizer):
    world = zerolab.world_size()
    model = Net()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    engine = zerolab.initialize(model, {"train_batch_size": 4 * world,
                                        "zero_optimization": {"stage": stage}},
                                optimizer=make_optimizer(model))
    torch.manual_seed(1)
    for _ in range(2):
        x = torch.randn(4, 8)
        engine.backward(engine(x).square().mean())
        engine.step()
    after = engine.full_params()
    engine.close()
    return {n: not torch.equal(before[n], after[n].to(before[n].dtype)) for n in before}


def head_only(model):
    return torch.optim.SGD(model.head.parameters(), lr=0.1)


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_an_optimizer_over_the_head_trains_only_the_head(stage):
    changed = zerolab.launch(_train, 2, stage, head_only, echo=False, timeout=60)[0]
    assert changed == {"body.weight": False, "body.bias": False, "head.weight": True, "head.bias": True}


@pytest.mark.parametrize("stage", [0, 3])
def test_a_torch_adamw_instance_is_rebuilt_over_the_shards(stage):
    changed = zerolab.launch(_train, 2, stage, adamw, echo=False, timeout=60)[0]
    assert all(changed.values())


def test_nvme_swap_files_are_private_and_go_with_a_dropped_store(tmp_path):
    import gc
    import stat

    from zerolab.offload.nvme import SWAP_PREFIX, NvmeStore
    store = NvmeStore(str(tmp_path), 0, 1 << 10)
    store.write(0, "param", torch.arange(16.0)).result()
    (top,) = [p for p in tmp_path.iterdir() if p.name.startswith(SWAP_PREFIX)]
    files = list(top.rglob("*.bin"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in (top, *top.iterdir()))
    del store                                  # an engine dropped without close()
    gc.collect()
    assert not top.exists()


def _twice_without_keeping(stage):
    world = zerolab.world_size()
    model = Net()
    cfg = {"train_batch_size": 4 * world, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
           "zero_optimization": {"stage": stage}}

    def one_run():                             # a helper that drops its engine
        engine = zerolab.initialize(model, cfg)
        engine.backward(engine(torch.ones(4, 8)).square().mean())
        engine.step()
    import gc
    import warnings
    one_run()
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = zerolab.initialize(model, cfg)
    before = {n: p.detach().clone() for n, p in engine.full_params().items()}
    engine.backward(engine(torch.ones(4, 8)).square().mean())
    engine.step()
    after = engine.full_params()
    engine.close()
    return all(not torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("stage", [0, 3])
def test_a_second_engine_trains_when_the_first_was_not_kept(stage):
    assert all(zerolab.launch(_twice_without_keeping, 2, stage, echo=False, timeout=60))


def _sub_group_zero(size):
    world = zerolab.world_size()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    engine = zerolab.initialize(model, {
        "train_batch_size": 2 * world, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 2, "sub_group_size": size, "offload_optimizer": {"device": "cpu"}}})
    engine.backward(engine(torch.ones(2, 64)).square().mean())
    engine.step()
    out = (len(engine.stage.home.sub_groups), engine.full_params())
    engine.close()
    return out


def test_sub_group_size_zero_makes_one_sub_group_per_parameter():
    """DeepSpeed's schema allows 0: every parameter its own sub-group (not one per element)."""
    (n0, p0), (n1, p1) = (zerolab.launch(_sub_group_zero, 2, size, echo=False, timeout=120)[0]
                          for size in (0, 10 ** 9))
    assert n1 == 1 and 8 <= n0 <= 16 + 1          # 16 tensors over 2 partitions (+ a straddler, padding)
    assert all(torch.equal(p0[k], p1[k]) for k in p0)


def _compiled(stage):
    model = torch.compile(Net())               # nothing is compiled until it is called
    try:
        engine = zerolab.initialize(model, {"train_batch_size": 4 * zerolab.world_size(),
                                            "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                                            "zero_optimization": {"stage": stage}})
    except ValueError as e:
        return str(e)
    engine.close()
    return "accepted"


def test_stage3_refuses_a_compiled_model_with_the_reason():
    assert zerolab.launch(_compiled, 2, 2, echo=False, timeout=60)[0] == "accepted"
    msg = zerolab.launch(_compiled, 2, 3, echo=False, timeout=60)[0]
    assert "cannot run a torch.compile'd module" in msg and "before torch.compile" in msg


# -- checkpoints (issue 23 item 5) -------------------------------------------------------------

class Based(nn.Module):
    """A frozen base and a trained head (LoRA-style), the base unfrozen later."""

    def __init__(self, width=16):
        super().__init__()
        torch.manual_seed(0)
        self.base = nn.Linear(8, width)
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(torch.relu(self.base(x)))


def _cfg(stage):
    return {"train_batch_size": 2 * zerolab.world_size(), "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            "zero_optimization": {"stage": stage}}


def _save_frozen_base(path, stage):
    model = Based()
    model.base.requires_grad_(False)
    engine = zerolab.initialize(model, _cfg(stage))
    engine.backward(engine(torch.ones(2, 8)).square().mean())
    engine.step()
    engine.save_checkpoint(path, "t")
    saved = engine.full_params()
    engine.close()
    return saved, {n: p.detach().clone() for n, p in model.named_parameters()}


def _load_other_frozen_shape(path, stage):
    model = Based(width=12)                        # a frozen base of another shape: another model
    model.base.requires_grad_(False)
    model.head = nn.Linear(16, 4)
    engine = zerolab.initialize(model, _cfg(stage))
    before = engine.full_params()
    try:
        engine.load_checkpoint(path, "t")
    except zerolab.CheckpointError as e:
        after = engine.full_params()
        return str(e), all(torch.equal(before[n], after[n]) for n in before)
    return None, None


def _load_unfrozen(path, stage, module_only):
    model = Based()                                # the base now trained too
    engine = zerolab.initialize(model, _cfg(stage))
    try:
        engine.load_checkpoint(path, "t", load_module_only=module_only)
    except zerolab.CheckpointError as e:
        return str(e)
    out = engine.full_params()
    engine.close()
    return out


@pytest.mark.parametrize("stage", [1, 3])
def test_checkpoints_of_a_frozen_base(tmp_path, stage):
    saved, weights = zerolab.launch(_save_frozen_base, 2, str(tmp_path), stage, echo=False, timeout=60)[0]
    msg, untouched = zerolab.launch(_load_other_frozen_shape, 2, str(tmp_path), stage, echo=False, timeout=60)[0]
    assert msg and "base.weight" in msg and "Nothing was loaded" in msg and untouched
    msg = zerolab.launch(_load_unfrozen, 2, str(tmp_path), stage, False, echo=False, timeout=60)[0]
    assert isinstance(msg, str) and "frozen when this checkpoint was saved (no optimizer state): base." in msg \
        and "load_module_only=True" in msg, msg
    got = zerolab.launch(_load_unfrozen, 2, str(tmp_path), stage, True, echo=False, timeout=60)[0]
    assert all(torch.equal(got[n], weights[n].float()) for n in weights)   # base from the frozen part


def test_a_save_killed_between_its_renames_loses_nothing(tmp_path):
    import os
    import shutil
    import socket
    import subprocess
    import sys
    zerolab.launch(_save_frozen_base, 1, str(tmp_path), 1, echo=False, timeout=60)
    # what a save killed between "old aside" and "new in" leaves, by a process that is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    os.replace(tmp_path / "t", tmp_path / f".t.old-{host}-{dead.pid}")
    os.makedirs(tmp_path / f".t.tmp-{host}-{dead.pid}-abc")
    assert (tmp_path / "latest").read_text() == "t" and not (tmp_path / "t").exists()
    got = zerolab.launch(_load_unfrozen, 1, str(tmp_path), 1, True, echo=False, timeout=60)[0]
    assert isinstance(got, dict)                   # the previous checkpoint is still read
    zerolab.launch(_save_frozen_base, 1, str(tmp_path), 1, echo=False, timeout=60)   # the next save
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["latest", "t"], left           # old put back then replaced; the tmp swept
    shutil.rmtree(tmp_path / "t")


# -- parameter groups (issue 23 item 4) --------------------------------------------------------

class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(6, 20)
        self.norm = nn.LayerNorm(20)
        self.b = nn.Linear(20, 3)

    def forward(self, x):
        return self.b(self.norm(torch.relu(self.a(x))))


def _hf_groups(model):
    """Hugging Face's two groups: weight decay on weights, none on biases and norms."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "norm" not in n]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and "norm" not in n)]
    return [{"params": decay, "weight_decay": 0.5}, {"params": rest, "weight_decay": 0.0, "lr": 0.02}]


def _batches(world, steps=3):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(2 * world, 6, generator=g), torch.randn(2 * world, 3, generator=g)) for _ in range(steps)]


def _groups_run(stage, how, extra=None):
    world, rank = zerolab.world_size(), zerolab.rank()
    model = Normed()
    zero = {"stage": stage, "reduce_bucket_size": 50, **(extra or {})}
    cfg = {"train_batch_size": 2 * world, "gradient_clipping": 0.0, "zero_optimization": zero}
    if how == "instance":
        engine = zerolab.initialize(model, cfg, optimizer=torch.optim.AdamW(_hf_groups(model), lr=0.01))
    else:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 0.01}}
        engine = zerolab.initialize(model, cfg, param_groups=_hf_groups(model))
    for x, y in _batches(world):
        x, y = x[2 * rank:2 * rank + 2], y[2 * rank:2 * rank + 2]
        engine.backward(nn.functional.mse_loss(engine(x), y))
        engine.step()
    out = engine.full_params(), [(pg["lr"], pg["weight_decay"]) for pg in engine.optimizer.param_groups]
    engine.close()
    return out


def _plain_groups(world):
    model = Normed()
    opt = torch.optim.AdamW(_hf_groups(model), lr=0.01)
    for x, y in _batches(world):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("stage,how,extra", [
    (0, "instance", None), (1, "config", None), (2, "instance", None),
    (2, "config", {"offload_optimizer": {"device": "cpu"}, "use_multi_rank_bucket_allreduce": False}),
    (3, "instance", {"stage3_param_persistence_threshold": 10}),
    (3, "config", {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}})])
def test_parameter_groups_keep_their_own_settings(stage, how, extra):
    for world in (2, 3):
        params, groups = zerolab.launch(_groups_run, world, stage, how, extra, echo=False, timeout=120)[0]
        assert groups == [(0.01, 0.5), (0.02, 0.0)]
        ref = _plain_groups(world)
        for n in ref:
            assert torch.allclose(params[n], ref[n], atol=2e-6, rtol=1e-5), (stage, world, n)


def _groups_ckpt(path, stage, save):
    world = zerolab.world_size()
    model = Normed()
    engine = zerolab.initialize(model, {"train_batch_size": 2 * world, "zero_optimization": {"stage": stage}},
                                optimizer=torch.optim.AdamW(_hf_groups(model), lr=0.01))
    if save:
        for x, y in _batches(1, 2):
            engine.backward(nn.functional.mse_loss(engine(x[:2]), y[:2]))
            engine.step()
        engine.save_checkpoint(path, "g")
    else:
        engine.load_checkpoint(path, "g")
    x, y = _batches(1, 3)[2]
    engine.backward(nn.functional.mse_loss(engine(x[:2]), y[:2]))
    engine.step()
    out = engine.full_params()
    engine.close()
    return out


def test_parameter_groups_checkpoint_across_stages_and_ranks(tmp_path):
    saved = zerolab.launch(_groups_ckpt, 2, str(tmp_path), 2, True, echo=False, timeout=120)[0]
    resumed = zerolab.launch(_groups_ckpt, 3, str(tmp_path), 3, False, echo=False, timeout=120)[0]
    # the same next step from the same state (the batch is the same on every rank)
    assert all(torch.allclose(saved[n], resumed[n], atol=1e-6) for n in saved)
