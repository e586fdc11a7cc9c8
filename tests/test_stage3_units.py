"""Stage 3 gathers what DeepSpeed 0.19.8 gathers, call by call, on models that are not plain stacks
of layers (benchmarks/ds_reference/ds_stage3_units.py recorded DeepSpeed's calls on 2 and 3 CPU
ranks into benchmarks/results/ds_stage3_units.json):

* a module's fetch is one all-gather of its own parameters and of those tied to it;
* a weight read outside its module (``nn.MultiheadAttention``'s ``out_proj.weight``, a root's
  ``F.linear`` on a child's weight) is tied to the reading module for good: from the second step it
  comes in that module's all-gather;
* a tied weight is released after each module's backward and gathered again for the other's;
* frozen parameters are partitioned and gathered with their module (a LoRA-style model);
* the persistent parameters' refresh after a step is one all-gather, whatever the optimizer groups.

At 2 ranks nothing is padded and the calls match element for element. At 3 ranks DeepSpeed pads
each parameter to a multiple of the ranks where zerolab pads each module's flat group: the calls
are the same, each at most a few elements apart (said in the README's differences).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import zerolab
from zerolab.course.checks import hooks3

RECORD = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "results"
                     / "ds_stage3_units.json").read_text())
ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ds_stage3_units", ROOT / "benchmarks" / "ds_reference" / "ds_stage3_units.py")
DS = importlib.util.module_from_spec(_spec)       # the recording script's models and config (torch only at import)
_spec.loader.exec_module(DS)
VOCAB, SEQ, LoraNet = DS.VOCAB, DS.SEQ, DS.LoraNet
CONFIG = DS.CONFIG


def _model(name):
    # exercise 8c's model is zerolab's own (the recorded shapes say it is the script's)
    return hooks3.HooksNet() if name == "hooks" else LoraNet()


def _run(name: str, steps: int = 3) -> dict:
    world, rank = zerolab.world_size(), zerolab.rank()
    model = _model(name)
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    eng = zerolab.initialize(model, {**CONFIG, "train_batch_size": 2 * world})
    g = torch.Generator().manual_seed(80)
    out = {"steps": [], "losses": [], "shapes": shapes}
    for _ in range(steps):
        t = torch.randint(0, VOCAB, (2 * world, SEQ + 1), generator=g)
        x, y = t[2 * rank:2 * rank + 2, :-1], t[2 * rank:2 * rank + 2, 1:]
        calls = {}
        m = eng.ledger.mark()
        loss = F.cross_entropy(eng(x).reshape(-1, VOCAB), y.reshape(-1))
        calls["forward"], m = [r.numel for r in eng.ledger.since(m).records if r.op == "all_gather"], eng.ledger.mark()
        eng.backward(loss)
        calls["backward"], m = [r.numel for r in eng.ledger.since(m).records if r.op == "all_gather"], eng.ledger.mark()
        eng.step()
        calls["step"] = [r.numel for r in eng.ledger.since(m).records if r.op == "all_gather"]
        out["steps"].append(calls)
        out["losses"].append(float(loss.detach()))
    out["param_bytes"] = eng.memory("device")["params"]
    eng.close()                                   # every parameter whole again, frozen ones unchanged
    named = dict(model.named_parameters())
    out["frozen_kept"] = all(torch.equal(named[n], v) for n, v in frozen.items())
    out["whole"] = all(list(p.shape) == shapes[n] for n, p in named.items())
    return out


@pytest.fixture(scope="module")
def runs():
    out = {}
    for world in (2, 3):
        with zerolab.Crew(world, echo=False, timeout=120) as crew:
            for name in ("hooks", "lora"):
                out[f"{name}@{world}"] = crew.run(_run, name)[0]
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("key", ["hooks@2", "lora@2"])
def test_the_calls_are_deepspeeds_at_two_ranks(runs, key):
    ds, zl = RECORD[key], runs[key]
    assert zl["shapes"] == ds["shapes"], "the model changed since DeepSpeed's calls were recorded"
    first = 1 if key.startswith("hooks") else 0   # (step 1: DeepSpeed gathers an external weight's parameters one by one)
    assert zl["steps"][first:] == ds["steps"][first:]
    assert zl["losses"] == pytest.approx(ds["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.timeout(300)
def test_step_one_gathers_external_parameters_one_by_one_as_deepspeed_does(runs):
    ds, zl = RECORD["hooks@2"]["steps"][0], runs["hooks@2"]["steps"][0]
    assert zl["backward"] == ds["backward"]
    # out_proj.weight (256) and out_proj.bias (16), each gathered as nn.MultiheadAttention reads it
    assert ds["forward"] == [512, 816, 256, 16, 544, 528, 256, 512]
    assert zl["forward"] == ds["forward"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("key", ["hooks@3", "lora@3"])
def test_the_calls_are_deepspeeds_with_per_parameter_padding_at_three_ranks(runs, key):
    ds, zl = RECORD[key], runs[key]
    first = 1 if key.startswith("hooks") else 0
    for a, b in zip(zl["steps"][first:], ds["steps"][first:]):
        for phase in ("forward", "backward", "step"):
            # each parameter padded to a multiple of 3 on both sides: the same elements, call for call
            assert a[phase] == b[phase], (phase, a, b)
    assert zl["losses"] == pytest.approx(ds["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.timeout(300)
def test_frozen_parameters_are_partitioned_and_come_back_whole(runs):
    for world in (2, 3):
        zl = runs[f"lora@{world}"]
        assert zl["frozen_kept"] and zl["whole"]
        # about 1/N of every parameter (frozen ones too) per rank, not the frozen ones whole
        psi = sum(torch.Size(s).numel() for s in zl["shapes"].values())
        assert zl["param_bytes"] <= 4 * (psi // world + 16)


def _two_optimizer_groups(module_groups=False):
    world = zerolab.world_size()
    model = LoraNet()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith("weight")]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=0.1)
    cfg = {k: v for k, v in CONFIG.items() if k != "optimizer"} | {"train_batch_size": 2 * world}
    cfg["zero_optimization"] = {**cfg["zero_optimization"], "stage3_param_persistence_threshold": 100}
    if module_groups:
        cfg["zerolab"] = {"module_groups": True}
    eng = zerolab.initialize(model, cfg, optimizer=opt)
    x = torch.randint(0, VOCAB, (2, SEQ))
    eng.backward(eng(x).float().pow(2).mean())
    m = eng.ledger.mark()
    eng.step()
    refresh = [(r.numel, r.tag) for r in eng.ledger.since(m).records if r.op == "all_gather"]
    persistent = sum(g.numel for g in eng.stage.params.groups if eng.stage.params.persistent[g.index])
    eng.close()
    return refresh, persistent


@pytest.mark.timeout(120)
def test_the_persistent_refresh_is_one_all_gather_per_parameter_as_deepspeed_does():
    with zerolab.Crew(2, echo=False, timeout=60) as crew:
        refresh, persistent = crew.run(_two_optimizer_groups)[0]
        module_refresh, _ = crew.run(_two_optimizer_groups, True)[0]
    # persistent (at most 100 elements): a.weight, b.weight, norm.weight (decay), norm.bias (no decay),
    # base.bias and head.bias (frozen): DeepSpeed's _post_step gathers each in a call of its own
    assert persistent == 64 + 64 + 16 + 16 + 16 + 32
    assert [n for n, _ in refresh] == [64, 64, 16, 16, 16, 32]
    assert all(tag.endswith("(persistent)") for _, tag in refresh)
    # zerolab's module groups (opt-in): one call for all of them
    assert len(module_refresh) == 1 and module_refresh[0][0] == persistent
