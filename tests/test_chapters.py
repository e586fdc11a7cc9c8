"""zerolab/course/chapters/: the chapters' helpers, without ranks (the notebooks run them on ranks under nbval).

What a chapter prints rests on these: its configs must be configs DeepSpeed 0.19.8 (and zerolab)
accept, for every world size the chapter uses; its formulas must be the ring's; its byte
accounting must explain a rank's bytes exactly; its data must follow its stated rule.
"""
from __future__ import annotations

import pytest
import torch

import zerolab
from zerolab.course.chapters import ch02, ch03, ch04
from zerolab.memory import model_state_bytes


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_chapter3_configs_load_at_every_world_size(stage, n):
    for accumulate in (1, 4) if n == 3 else (1,):
        cfg = zerolab.load_config(ch03.ds_config(stage, n, accumulate=accumulate), world_size=n)
        assert cfg.train_batch_size == ch03.GLOBAL_BATCH
        assert cfg.zero.stage == stage


def test_chapter3_fp32_and_paper_switch_configs():
    cfg = ch03.ds_config(2, 3, "fp32", ideal=True, optimizer=ch03.SGD)
    assert "bf16" not in cfg and cfg["zerolab"] == {"ideal_reduce_scatter": True}
    zerolab.load_config(cfg, world_size=3)


def test_chapter3_known_extra_bytes_is_the_padding_the_frozen_scalar_and_step_counters():
    # stage 3 at N = 3, one group per module: padding p costs 16/N bytes an element, every group a counter
    run = {"padding": 6, "groups": 10}
    assert ch03.known_extra_bytes(3, 3, run) == pytest.approx(6 * 16 / 3 + 2 + 4 * 10)
    # stage 1: parameters and gradients whole (2 + 2), the optimizer's 12 split
    assert ch03.known_extra_bytes(3, 1, run) == pytest.approx(6 * (4 + 12 / 3) + 2 + 40)


def test_chapter3_verdict_names_the_bound_and_flags_a_bug():
    assert ch03.verdict(5e-7) == "< 1e-06"
    assert ch03.verdict(2e-4) == "< 3e-04"
    assert ch03.verdict(0.0, exact=True) == "0 (bit-identical)"
    assert ch03.verdict(1e-2).endswith("(!)")


def test_chapter3_formula_fractions_quoted_in_the_text():
    psi = 188_900
    ddp = model_state_bytes(psi, 0, 4)["total"]
    assert round(model_state_bytes(psi, 1, 4)["total"] / ddp, 3) == 0.438
    assert round(model_state_bytes(psi, 2, 4)["total"] / ddp, 3) == 0.344
    assert model_state_bytes(psi, 3, 4)["total"] / ddp == 0.25


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_chapter2_configs_load(n):
    zerolab.load_config(ch02.ds_config(n), world_size=n)
    zerolab.load_config(ch02.ds_config(n, "bf16", reduce_bucket_size=500), world_size=n)


def test_chapter2_ring_formula():
    assert ch02.ring_formula(1, 7204) == 0
    assert ch02.ring_formula(2, 7204) == 14_408
    assert ch02.ring_formula(4, 7204) == 21_612
    assert ch02.ring_formula(3, 7204) == pytest.approx(19_210.67, abs=0.01)


def test_chapter4_rule_batches_follow_the_rule():
    (x, y), = ch04.rule_batches(1, 5)
    assert x.shape == y.shape == (5, 16)
    assert torch.equal(y, (7 * x + 3) % 37)
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_chapter4_configs_spell_out_the_scaler():
    cfg = ch04.ds_config("fp16", scale_power=8, hysteresis=1)
    assert cfg["fp16"]["initial_scale_power"] == 8 and cfg["fp16"]["hysteresis"] == 1
    for precision in ("fp16", "bf16", "fp32"):
        zerolab.load_config(ch04.ds_config(precision), world_size=2)


# -- chapter 13 (ZeRO++ on 2 nodes of 2) ---------------------------------------------------------

@pytest.mark.parametrize("keys", [{}, {"zero_quantized_weights": True}, {"zero_quantized_gradients": True},
                                  {"zero_quantized_weights": False, "zero_quantized_gradients": False}])
def test_chapter13_configs_load_on_4_ranks(keys):
    from zerolab.course.chapters import ch13
    cfg = zerolab.load_config(ch13.config(4, **keys), world_size=4)
    assert cfg.zero.stage == 3 and cfg.zero.stage3_max_reuse_distance == 0 and not cfg.ignored_settings()
    assert ch13.VOCAB % 8 == 0 and ch13.VOCAB >= ch13.TOKENIZER.vocab


def test_chapter13_qwz_shards_are_multiples_of_8_on_4_ranks():
    """qwZ needs every gathered shard to be a multiple of 8 (DeepSpeed's quantizer): the chapter's GPT at N = 4."""
    from zerolab.course.chapters import ch13
    from zerolab.models import GPT
    model = GPT(vocab=ch13.VOCAB, d=ch13.D, heads=2, layers=2, seq_len=ch13.SEQ)
    for name, p in model.named_parameters():
        if p.numel() > 200:                        # gathered (the rest is persistent)
            assert (p.numel() // 4) % 8 == 0 and p.numel() % 4 == 0, name


def test_chapter13_block_errors_split_the_clamped_maxima():
    from zerolab.zeropp import quant
    from zerolab.course.chapters import ch13
    x = torch.tensor([1.0, -0.5, 0.25, 0.3, -1.0, 0.5, 0.1, 0.2])   # block 1's maximum is negative
    q, s = quant.quantize(x, 2)
    rest, tops = ch13.block_errors([(x.view(2, -1), quant.dequantize(q, s).view(2, -1), s)])
    assert tops.tolist() == [1.0] and rest.numel() == 7 and float(rest.max()) <= 0.5


def test_chapter13_byte_readers():
    from zerolab.course.chapters import ch13
    run = {"records": [("all_gather", "int8", 80, 60.0, "inter", "params tok"),
                       ("all_gather", "float32", 4, 12.0, "inter", "params tok scales"),
                       ("all_gather", "bfloat16", 8, 12.0, "inter", "params persistent (2 params)"),
                       ("all_to_all", "int8", 40, 20.0, "intra", "grads bucket 0 tok intra"),
                       ("reduce_scatter", "bfloat16", 8, 12.0, "inter", "grads bucket 0 persistent")]}
    assert ch13.fetch_bytes(run, "int8") == 60 and ch13.fetch_bytes(run, "bfloat16") == 0
    assert ch13.grad_bytes(run, "intra") == 20 and ch13.grad_bytes(run, "inter", "reduce_scatter") == 12
