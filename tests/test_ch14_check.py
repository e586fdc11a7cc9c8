"""Exercise 14's checks (zerolab/course/checks/ch14.py), both ways: the solutions pass; wrong numbers a
learner might compute fail, each with a hint that names the mistake; an unwritten exercise fails."""
from __future__ import annotations

import pytest

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.ch14 import check_inter_node_bytes, check_offload_hide_tokens, check_tokens_to_hide


def tokens_to_hide(peak_flops, mfu, beta_Bps, gpus, checkpointing=False, *, ring=True, copies=3, nbytes=2,
                   use_mfu=True, flops=None):
    flops = flops or (8 if checkpointing else 6)
    traffic = copies * nbytes * ((gpus - 1) / gpus if ring else 1) / beta_Bps        # seconds per parameter
    return traffic * (mfu if use_mfu else 1) * peak_flops / flops


def inter_node_bytes(psi, gpus, ranks_per_node, qwz=False, hpz=False, qgz=False, *, ring=True, hpz_crosses=False,
                     qwz_bytes=1, per_rank=False, qgz_bytes=0.5, qgz_ring_n=False, qgz_intra=False,
                     one_node_counts=False):
    nodes = gpus // ranks_per_node
    if nodes == 1 and not (qgz_ring_n or qgz_intra or one_node_counts):
        return 0.0
    f = (gpus - 1) / gpus if ring else 1
    gather = (qwz_bytes if qwz else 2) * psi
    fwd = f * gather
    bwd = 0 if hpz and not hpz_crosses else f * gather
    if qgz:
        fm = (gpus - 1) / gpus if qgz_ring_n else (nodes - 1) / nodes
        grads = fm * qgz_bytes * psi / (ranks_per_node if per_rank else 1)
        grads += (ranks_per_node - 1) / ranks_per_node * qgz_bytes * psi if qgz_intra else 0
    else:
        grads = f * 2 * psi
    if nodes == 1 and not one_node_counts:
        return grads if qgz else 0.0
    return fwd + bwd + grads


def offload_hide_tokens(peak_flops, mfu, pcie_Bps, gpus, offload_param=False, *, shard=True, down_only=False,
                        param_once=False, nbytes=2, paper=False):
    down = nbytes if paper else 4                        # DeepSpeed: fp32 gradients down; the paper: 16-bit
    per_param = (down if down_only else down + nbytes) + ((1 if param_once else 2) * nbytes if offload_param else 0)
    moved = per_param / (gpus if shard else 1)
    return moved / pcie_Bps * mfu * peak_flops / 6


def _with(fn, **mistake):
    return lambda *a: fn(*a, **mistake)


def test_the_solutions_pass(capsys):
    check_tokens_to_hide(tokens_to_hide)
    check_inter_node_bytes(inter_node_bytes)
    check_offload_hide_tokens(offload_hide_tokens)
    out = capsys.readouterr().out
    assert out.count("PASSED") == 3 and "tokens per GPU" in out and "leave each node" in out


@pytest.mark.parametrize("mistake,words", [
    (dict(ring=False), "(N-1)/N"),
    (dict(copies=2), "not stage 2's 2 x 2 Psi"),
    (dict(nbytes=4), "2 bytes per element, not 4"),
    (dict(use_mfu=False), "mfu x peak_flops"),
    (dict(flops=6), "forward runs twice"),
    (dict(ring=False, nbytes=4), "two things"),
])
def test_wrong_tokens_to_hide_fail_with_a_hint(mistake, words):
    with pytest.raises(ExerciseCheckFailed, match="hint") as err:
        check_tokens_to_hide(_with(tokens_to_hide, **mistake), verbose=False)
    assert words in err.value.message, err.value.message


@pytest.mark.parametrize("mistake,words", [
    (dict(ring=False), "(N-1)/N"),
    (dict(hpz_crosses=True), "inside the node"),
    (dict(qwz_bytes=2), "1 byte per element"),
    (dict(per_rank=True), "count the whole node"),
    (dict(qgz_bytes=2), "not 2"),
    (dict(qgz_ring_n=True), "(m-1)/m, not (N-1)/N"),
    (dict(qgz_intra=True), "stays inside the node"),
    (dict(one_node_counts=True), "nothing leaves the node"),
])
def test_wrong_inter_node_bytes_fail_with_a_hint(mistake, words):
    with pytest.raises(ExerciseCheckFailed, match="hint") as err:
        check_inter_node_bytes(_with(inter_node_bytes, **mistake), verbose=False)
    assert words in err.value.message, err.value.message


@pytest.mark.parametrize("mistake,words", [
    (dict(shard=False), "own shard"),
    (dict(down_only=True), "4 + 2 bytes"),
    (dict(paper=True), "not the ZeRO-Offload paper's 2"),
    (dict(param_once=True), "twice per micro-step"),
    (dict(nbytes=4), "only the gradients go down as fp32"),
])
def test_wrong_offload_hide_tokens_fail_with_a_hint(mistake, words):
    with pytest.raises(ExerciseCheckFailed, match="hint") as err:
        check_offload_hide_tokens(_with(offload_hide_tokens, **mistake), verbose=False)
    assert words in err.value.message, err.value.message


def test_a_hard_coded_number_fails_and_shows_the_expected_one():
    with pytest.raises(ExerciseCheckFailed, match="expected") as err:
        check_tokens_to_hide(lambda *a, **k: 1100.0, verbose=False)
    assert "compute 6 Psi T" in err.value.message or "hint" in err.value.message
    with pytest.raises(ExerciseCheckFailed, match="term by term"):
        check_inter_node_bytes(lambda psi, *a: 1.5 * psi, verbose=False)


def test_unwritten_and_non_numbers_fail_clearly():
    def todo(*a, **k):
        raise NotImplementedError("Exercise: write this part")
    for check in (check_tokens_to_hide, check_inter_node_bytes, check_offload_hide_tokens):
        with pytest.raises(ExerciseCheckFailed, match="not written yet"):
            check(todo, verbose=False)
    with pytest.raises(ExerciseCheckFailed, match="return one number"):
        check_tokens_to_hide(lambda *a, **k: "1100", verbose=False)
    with pytest.raises(ExerciseCheckFailed, match="return one number"):
        check_offload_hide_tokens(lambda *a, **k: None, verbose=False)
