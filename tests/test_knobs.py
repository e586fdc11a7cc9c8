"""zerolab.course.knobs (chapter 8's helpers) without ranks: DeepSpeed's release rule replayed on a
recorded order, Llama-2-7B's shapes, and a config's keys beside DeepSpeed 0.19.8's defaults.
The measurement itself (``knobs.measure``) runs on ranks in chapter 8's notebooks, which nbval
compares output by output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerolab.course import knobs

ROOT = Path(__file__).resolve().parent.parent
ORDER = [f"layers.{i}" for i in range(8)] + [f"layers.{i}" for i in reversed(range(8))]
NUMEL = {m: 4096 for m in ORDER}


@pytest.mark.parametrize("distance, gathers, peak", [(0, 16, 4096), (4096, 15, 4096), (16384, 14, 8192),
                                                     (10 ** 9, 8, 32768)])
def test_replay_on_the_small_house(distance, gathers, peak):
    # the same numbers chapter 8 measures on 2 ranks (less the persistent group's refresh)
    g, p, moved = knobs.replay(ORDER, NUMEL, distance)
    assert (g, p, moved) == (gathers, peak, gathers * 4096)


def test_replay_keeps_only_a_module_used_again_within_the_distance():
    order, numel = ["a", "b", "a"], {"a": 10, "b": 5}
    assert knobs.replay(order, numel, 5)[0] == 3          # 5 elements passed: not within, released
    assert knobs.replay(order, numel, 6)[0] == 2          # within: kept, gathered once


def test_llama2_7b_order():
    order, size = knobs.llama2_7b_order()
    assert len(size) == 226 and len(order) == 452 and order[:1] == order[-1:] == ["embed"]
    assert sum(size.values()) == 6_738_149_376
    assert knobs.replay(order, size, 0)[0] == 452
    assert knobs.replay(order, size, 10 ** 9)[0] == 439


def test_checklist_rows_against_deepspeed_defaults():
    seed = json.loads((ROOT / "configs" / "seed002_zero3_offload.json").read_text())
    rows = {k: (v, d, r) for k, v, d, r in knobs.checklist_rows(seed, 8)}
    assert rows["stage3_prefetch_bucket_size"] == (5e8, 5e7, 5e8)      # the code's 5e7, not the docs' 5e8
    assert rows["sub_group_size"] == (1e8, 1e9, 1e8)
    assert rows["offload_optimizer.device"][:2] == ("cpu", "none")
    bare = knobs.checklist_rows({"train_batch_size": 8, "zero_optimization": {"stage": 3}}, 8)
    assert all(v == "-" for k, v, _, _ in bare if k != "stage")
    assert knobs.show(5e7) == "5e7" and knobs.show(64) == "64" and knobs.show(True) == "True"
