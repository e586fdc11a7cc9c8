"""Stage 3 as DeepSpeed schedules it (issue 33): the partition states and module events with their
transitions asserted (zerolab/zero/stage3/lifecycle.py), the public stats, no course code touching the engine's
privates, and the stored DeepSpeed 0.19.8 reference held call for call."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import pytest
import torch
from torch import nn

import zerolab
from zerolab.zero.stage3.lifecycle import IllegalTransition, Lifecycle, ModuleEvent, PartitionState

ROOT = pathlib.Path(__file__).resolve().parents[1]


# -- the life cycle's rules ------------------------------------------------------------------------
def test_partition_transitions_are_asserted():
    life = Lifecycle(["a.weight", "b.weight"], [False, True])
    seen = []

    class Log:
        def on_gather(self, label, phase):
            seen.append(("gather", label, phase))

        def on_release(self, label, phase):
            seen.append(("release", label, phase))
    life.observe(Log())
    life.to(0, PartitionState.IN_FLIGHT)
    life.to(0, PartitionState.GATHERED, "forward")
    with pytest.raises(IllegalTransition, match="a.weight.*gathered to in flight"):
        life.to(0, PartitionState.IN_FLIGHT)          # gathered twice without a release
    life.to(0, PartitionState.SHARDED, "forward")
    with pytest.raises(IllegalTransition, match="sharded to sharded"):
        life.to(0, PartitionState.SHARDED)            # released twice
    with pytest.raises(IllegalTransition, match="b.weight"):
        life.to(1, PartitionState.SHARDED)            # a persistent partition is never released
    with pytest.raises(IllegalTransition, match="not persistent"):
        life.refreshed(0)
    assert seen == [("gather", "a.weight", "forward"), ("release", "a.weight", "forward")]


def test_module_events_are_asserted():
    life, m = Lifecycle([], []), nn.Linear(2, 2)
    E = ModuleEvent
    with pytest.raises(IllegalTransition, match="post_forward after nothing"):
        life.module_event(m, E.POST_FORWARD, "fc")
    with pytest.raises(IllegalTransition, match="pre_backward"):
        life.module_event(m, E.PRE_BACKWARD, "fc")       # no forward ran
    for e in (E.PRE_FORWARD, E.POST_FORWARD, E.PRE_FORWARD, E.POST_FORWARD,   # used twice in a forward
              E.PRE_BACKWARD, E.PRE_FORWARD, E.POST_FORWARD,                  # recomputed in backward
              E.POST_BACKWARD, E.PRE_BACKWARD, E.POST_BACKWARD):
        life.module_event(m, e, "fc")
    life.end_step()
    with pytest.raises(IllegalTransition, match="post_backward"):
        life.module_event(m, E.POST_BACKWARD, "fc")


# -- on real ranks --------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        h = torch.relu(self.a(x))
        h = checkpoint(lambda t: torch.relu(self.b(t)), h, use_reentrant=False)   # recomputed in backward
        return self.c(h)


def _run(zero: dict, steps: int = 4):
    world, rank = zerolab.world_size(), zerolab.rank()
    eng = zerolab.initialize(Net(), {"train_batch_size": 4 * world, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                                     "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                                           **zero}})
    events = []

    class Log:
        def on_gather(self, label, phase):
            events.append(("gather", label, phase))

        def on_release(self, label, phase):
            events.append(("release", label, phase))
    eng.observe_stage3(Log())
    g = torch.Generator().manual_seed(3)
    per_step = []
    for _ in range(steps):
        x, y = torch.randn(4 * world, 16, generator=g), torch.randn(4 * world, 4, generator=g)
        rows = slice(4 * rank, 4 * rank + 4)
        mark, events[:] = eng.ledger.mark(), []
        eng.reset_peaks()
        eng.backward(((eng(x[rows]) - y[rows]) ** 2).mean())
        eng.step()
        gathers = [r.numel for r in eng.ledger.since(mark).records if r.op == "all_gather"]
        per_step.append({"events": list(events), "gathers": gathers, "stats": eng.stage3_stats()})
    states = [s.value for s in eng.stage.params.life.state]
    eng.close()
    return per_step, states


@pytest.fixture(scope="module")
def lifecycle_runs():
    with zerolab.Crew(2, echo=False, timeout=120) as crew:
        return {name: crew.run(_run, zero)[0] for name, zero in (
            ("noprefetch", {"stage3_prefetch_bucket_size": 0}),
            ("prefetch-reuse0", {"stage3_max_reuse_distance": 0}),
            ("noprefetch-reuse0", {"stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0}))}


@pytest.mark.timeout(180)
def test_every_gather_is_released_and_every_partition_ends_sharded(lifecycle_runs):
    for name, (steps, states) in lifecycle_runs.items():
        for s in steps:
            held = {}
            for what, label, _ in s["events"]:
                held[label] = held.get(label, 0) + (1 if what == "gather" else -1)
                assert held[label] in (0, 1), (name, label, s["events"])
            assert all(v == 0 for v in held.values()), (name, held)
            assert s["stats"].gathered_now == 0 and s["stats"].layout == "parameter"
        assert set(states) == {"sharded"}, (name, states)


@pytest.mark.timeout(180)
def test_deepspeeds_release_rules_show_in_the_gathers(lifecycle_runs):
    psi_padded = sum(n for _, n, _ in lifecycle_runs["noprefetch"][0][-1]["stats"].partitions)
    steady = {name: steps[-1] for name, (steps, _) in lifecycle_runs.items()}
    for s in steady.values():
        assert s["stats"].trace == "complete"
    # reuse distance 1e9 (DeepSpeed's default): forward keeps every partition for backward
    assert sum(steady["noprefetch"]["gathers"]) == psi_padded
    # reuse distance 0 without prefetch: backward gathers again (each module, and the checkpointed
    # block's recomputation once more)
    assert sum(steady["noprefetch-reuse0"]["gathers"]) > 2 * psi_padded - 64
    # reuse distance 0 with prefetch: what the prefetcher scanned stays gathered for its later use
    # (DeepSpeed's __most_recent_step_id_param_fetched_for): one gather of everything
    assert sum(steady["prefetch-reuse0"]["gathers"]) == psi_padded
    assert steady["prefetch-reuse0"]["stats"].prefetches > 0


# -- nothing in the course reaches into the engine --------------------------------------------------
PRIVATE = re.compile(r"\.stage\.params\b|\b(?:engine|eng)\.(?:stage\.)?_[a-z]\w*|\bps\._[a-z]\w*\s*=")


def test_no_check_or_chapter_touches_an_engine_private():
    files = [*ROOT.glob("zerolab/course/checks/*.py"), *ROOT.glob("zerolab/course/chapters/*.py"),
             *ROOT.glob("zerolab/course/lab/*.py"), ROOT / "zerolab/course/knobs.py", *ROOT.glob("book/*/*.py"),
             *ROOT.glob("book/*/zh/*.md")]
    bad = []
    for f in files:
        for k, line in enumerate(f.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{k}: {line.strip()}")
    for nb in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code" and PRIVATE.search("".join(cell["source"])):
                bad.append(f"{nb.relative_to(ROOT)}: {''.join(cell['source'])[:80]!r}")
    assert not bad, "\n".join(bad)


def test_the_private_pattern_catches_what_it_should():
    for line in ("x = engine.stage.params.fetches", "eng._closed", "ps._wait = logged", "engine.stage._hooks"):
        assert PRIVATE.search(line), line
    for line in ("engine.stage3_stats().fetches", "engine.stage.groups", "eng.reset_peaks()"):
        assert not PRIVATE.search(line), line


# -- the stored DeepSpeed reference, call for call --------------------------------------------------
def _side_by_side():
    spec = importlib.util.spec_from_file_location("side_by_side", ROOT / "benchmarks/side_by_side.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world,names", [
    (2, ["s3-persist-default", "s3-prefetch-reuse0", "s3-prefetch4096-reuse0", "s3-tied-default", "s3-ckpt-prefetch",
         "s2-owner-reduce", "s1-default"]),
    (3, ["s3-noprefetch", "s3-tied-noprefetch", "s2-owner-reduce"]),
])
def test_the_stored_deepspeed_reference_holds_call_for_call(world, names):
    sbs = _side_by_side()
    ref = sbs.load_reference()
    zl = sbs.run_zerolab(names, world)
    for name in names:
        key = sbs.DS.key(name, world)
        assert key in ref["runs"], f"no DeepSpeed record for {key}"
        ds_rows, _ = sbs.steady(ref["runs"][key])
        zl_rows, varies = sbs.steady(zl[name])
        assert not varies, name
        for fam in set(ds_rows) | set(zl_rows):
            if fam in ("small", "check"):
                continue
            assert sbs.verdict(zl_rows.get(fam), ds_rows.get(fam)), (name, fam, zl_rows.get(fam), ds_rows.get(fam))
            # and call for call: the same sizes in the same order
            assert sbs.same_sizes(zl[name], ref["runs"][key], fam) == "same", (name, fam)
