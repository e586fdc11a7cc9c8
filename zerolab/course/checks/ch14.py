"""Exercise 14 checks: does the move pay? Three numbers the learner computes, each held against
:mod:`zerolab.tools.simulate` (the same model the chapter uses) over a range of clusters.

The learner writes three functions (ZeRO stage 3, bf16/fp16 on the wire, one micro-step)::

    tokens_to_hide(peak_flops, mfu, beta_Bps, gpus, checkpointing=False)
        # tokens per GPU at which stage 3's traffic (3 x 2 Psi (N-1)/N bytes over a link of
        # beta_Bps; alpha neglected) takes as long as the compute (6 Psi FLOPs per token, 8 with
        # activation checkpointing, at mfu x peak_flops)
    inter_node_bytes(psi, gpus, ranks_per_node, qwz=False, hpz=False, qgz=False)
        # bytes that leave each node per micro-step, with ZeRO++'s options (hpz: a secondary
        # partition of one node, zero_hpz_partition_size = ranks_per_node)
    offload_hide_tokens(peak_flops, mfu, pcie_Bps, gpus, offload_param=False)
        # tokens per GPU at which ZeRO-3 + offload_optimizer's PCIe transfers (and, with
        # offload_param, the parameters brought up from the host) take as long as the compute

Each check compares the learner's numbers with ``zerolab.tools.simulate.simulate(...)`` at many
settings (several GPUs, links, world sizes and node sizes, with and without each option). A
wrong answer is matched against the mistakes a learner is likely to make (the ring's (N-1)/N
forgotten, stage 2's 2 Psi for stage 3's 3 Psi, 4 bytes instead of 2, the utilisation left out,
one node's k ranks counted once, ...): the message names the mistake when one explains every
setting, and otherwise shows the expected number term by term.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from ...i18n import catalogue
from . import ExerciseCheckFailed, passed

T = catalogue("checks.ch14")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_tokens_to_hide", "check_inter_node_bytes", "check_offload_hide_tokens",
           "reference_tokens_to_hide", "reference_inter_node_bytes", "reference_offload_hide_tokens"]

REL = 0.01                     # 1 %: the scales of qwZ and qgZ (at most 0.2 % here) may be left out
HIDDEN = 8192                  # the layer width the simulator's qgZ scales assume in these checks


# -- the references: zerolab.tools.simulate itself ---------------------------------------------------------

def _gpu_key(peak_flops: float) -> str:
    from ...tools.simulate import GPUS
    for key, (_, peak) in GPUS.items():
        if peak == peak_flops:
            return key
    raise ValueError(f"no GPU in zerolab.tools.simulate.GPUS has a peak of {peak_flops:g} FLOP/s")


def reference_tokens_to_hide(peak_flops, mfu, beta_Bps, gpus, checkpointing=False) -> float:
    from ...tools.simulate import simulate
    return simulate(1e9, 16, 2048, 1, 1, gpus, 3, gpu=_gpu_key(peak_flops), link=(0.0, beta_Bps), mfu=mfu,
                    checkpointing=checkpointing).hide_tokens


def reference_inter_node_bytes(psi, gpus, ranks_per_node, qwz=False, hpz=False, qgz=False) -> float:
    from ...tools.simulate import simulate
    return simulate(psi, 32, HIDDEN, 1, 1, gpus, 3, link="nvlink-h100", inter_link="ib-ndr-1x",
                    ranks_per_node=ranks_per_node, quantized_weights=qwz,
                    hpz_partition_size=ranks_per_node if hpz else 1, quantized_gradients=qgz).link_bytes["inter"]


def reference_offload_hide_tokens(peak_flops, mfu, pcie_Bps, gpus, offload_param=False) -> float:
    from ...tools.simulate import simulate
    return simulate(1e9, 16, 2048, 1, 1, gpus, 3, gpu=_gpu_key(peak_flops), link=(0.0, 1e30), mfu=mfu,
                    checkpointing=False, offload_optimizer=True, offload_param=offload_param,
                    pcie_Bps=pcie_Bps).hide_tokens


# -- the settings -------------------------------------------------------------------------------------
H100, A100 = 989e12, 312e12
TOKENS_CASES = [  # (peak_flops, mfu, beta_Bps, gpus, checkpointing)
    (H100, 0.4, 360e9, 8, False), (H100, 0.4, 45e9, 64, False), (A100, 0.5, 180e9, 2, False),
    (A100, 0.3, 23e9, 1024, False), (H100, 0.4, 360e9, 8, True), (A100, 0.45, 11e9, 3, True),
]
BYTES_CASES = [  # (psi, gpus, ranks_per_node, qwz, hpz, qgz)
    (7e9, 16, 8, False, False, False), (7e9, 16, 8, True, False, False), (7e9, 16, 8, False, True, False),
    (7e9, 16, 8, False, False, True), (7e9, 16, 8, True, True, True), (1e9, 12, 4, False, False, True),
    (1e9, 12, 4, True, True, False), (70e9, 1024, 8, True, True, True), (1e9, 8, 8, True, False, True),
    (13e9, 64, 8, True, False, False), (13e9, 32, 4, False, True, True),
]
OFFLOAD_CASES = [  # (peak_flops, mfu, pcie_Bps, gpus, offload_param)
    (H100, 0.4, 50e9, 8, False), (H100, 0.4, 50e9, 8, True), (A100, 0.5, 25e9, 2, False),
    (A100, 0.3, 25e9, 64, True), (H100, 0.45, 50e9, 3, True),
]


# -- mistakes a learner is likely to make, as the number they would give ----------------------------

def _tokens(peak, mfu, beta, n, ck, *, f=True, copies=3, nbytes=2, use_mfu=True, flops=None):
    flops = flops or (8 if ck else 6)
    return ((n - 1) / n if f else 1) * copies * nbytes * peak * (mfu if use_mfu else 1) / (flops * beta)


TOKENS_MISTAKES = [
    (dict(f=False), T.mark("each rank sends (N-1)/N of every tensor it gathers or reduce-scatters (the ring): "
                    "multiply by (N-1)/N")),
    (dict(copies=2), T.mark("stage 3 moves the parameters twice (a gather in forward, again in backward) and "
                     "reduce-scatters the gradients: 3 x 2 Psi bytes, not stage 2's 2 x 2 Psi")),
    (dict(copies=1), T.mark("stage 3 moves three tensors of Psi elements per micro-step (two gathers, one "
                     "reduce-scatter), not one")),
    (dict(nbytes=4), T.mark("bf16/fp16 on the wire: 2 bytes per element, not 4")),
    (dict(nbytes=1), T.mark("bf16/fp16 on the wire: 2 bytes per element, not 1")),
    (dict(use_mfu=False), T.mark("the GPU computes at mfu x peak_flops, not at its peak")),
    (dict(flops=6), T.mark("with activation checkpointing the forward runs twice: 8 Psi FLOPs per token, not 6")),
    (dict(flops=2), T.mark("2 Psi FLOPs per token is the forward alone; training (forward + backward) is 6 Psi "
                    "(8 with checkpointing)")),
]


def _bytes_terms(psi, n, k, qwz, hpz, qgz, *, f=True, m_f=True, hpz_crosses=False, qwz_bytes=1.0,
                 qwz_fwd_only=False, qwz_grads=False, qgz_per_rank=False, qgz_n=False, qgz_bits=4,
                 qgz_intra=False, one_node_counts=False):
    m = n // k
    fn = (n - 1) / n if f else 1.0
    fm = ((n - 1) / n if qgz_n else (m - 1) / m) if m_f else 1.0
    gather = qwz_bytes * psi if qwz else 2 * psi
    fwd = fn * gather
    bwd = 0.0 if (hpz and not hpz_crosses) else fn * (2 * psi if qwz_fwd_only else gather)
    if qgz:
        grad = fm * psi * qgz_bits / 8 / (k if qgz_per_rank else 1) + (
            (k - 1) / k * psi * qgz_bits / 8 if qgz_intra else 0.0)
    else:
        grad = fn * (psi if qwz_grads and qwz else 2 * psi)
    if m == 1 and not one_node_counts:      # one node: the gathers and the reduce-scatter stay inside
        fwd = bwd = 0.0
        grad = grad if qgz else 0.0
    return {T.mark("forward gather"): fwd, T.mark("backward gather"): bwd, T.mark("gradients"): grad}


BYTES_MISTAKES = [
    (dict(f=False), T.mark("a ring gather or reduce-scatter over N ranks sends (N-1)/N of the tensor out of each "
                    "node, not all of it (the node's own share stays home)")),
    (dict(m_f=False), T.mark("qgZ's step between nodes sends (m-1)/m of the node's 4-bit gradients (m = N/k nodes): "
                      "the node's own share stays home")),
    (dict(hpz_crosses=True), T.mark("with hpZ the backward gather runs inside the node (the secondary partition): "
                             "no parameter bytes leave the node in backward")),
    (dict(qwz_bytes=2.0), T.mark("qwZ sends int8: 1 byte per element (plus a scale per 8,000), not 2")),
    (dict(qwz_bytes=0.5), T.mark("qwZ sends int8: 1 byte per element, not 4 bits (4 bits is qgZ's, for gradients)")),
    (dict(qwz_fwd_only=True), T.mark("DeepSpeed quantizes every weight all-gather, the backward one too (when hpZ "
                              "does not keep it inside the node)")),
    (dict(qwz_grads=True), T.mark("qwZ quantizes the weights only; the gradients stay 2-byte unless qgZ is on")),
    (dict(qgz_per_rank=True), T.mark("count the whole node: each of its k ranks sends its own Psi/k share of the "
                              "4-bit gradients across, so (m-1)/m x Psi x 0.5 bytes leave the node")),
    (dict(qgz_n=True), T.mark("qgZ's step between nodes is an all-to-all among the m = N/k ranks with the same "
                       "local index: (m-1)/m, not (N-1)/N")),
    (dict(qgz_bits=8), T.mark("qgZ sends gradients in 4 bits: 0.5 bytes per element")),
    (dict(qgz_bits=16), T.mark("qgZ sends gradients in 4 bits: 0.5 bytes per element, not 2")),
    (dict(qgz_intra=True), T.mark("qgZ's first all-to-all stays inside the node (NVLink): only the second one, "
                           "between nodes, leaves it")),
    (dict(one_node_counts=True), T.mark("with a single node (N = ranks_per_node) every collective stays inside it: "
                                 "nothing leaves the node")),
]


def _offload(peak, mfu, pcie, n, par, *, per_rank=True, down=4, up=2, par_times=2, nbytes=2, use_mfu=True):
    # DeepSpeed: fp32 gradients down (4), 16-bit parameters up (nbytes), and with offload_param the
    # 16-bit shard up twice per micro-step
    moved = down + up * nbytes / 2 + (par_times * nbytes if par else 0)         # bytes per parameter / N
    return moved * peak * (mfu if use_mfu else 1) / (6 * (n if per_rank else 1) * pcie)


OFFLOAD_MISTAKES = [
    (dict(per_rank=False), T.mark("each GPU moves only its own shard over its own PCIe link: Psi/N elements, "
                           "not Psi")),
    # (the gradients down alone, 4 bytes, gives the same numbers as the paper's 2 + 2: one hint for both)
    (dict(down=2), T.mark("per element of the shard, offload_optimizer moves the gradients down as fp32 (DeepSpeed "
                   "converts them on the GPU before the copy: 4 bytes, not the ZeRO-Offload paper's 2) AND the "
                   "updated 16-bit parameters up (2 bytes): 4 + 2 bytes")),
    (dict(down=2, up=0), T.mark("offload_optimizer moves each step the gradients down (fp32: 4 bytes) AND the "
                         "updated 16-bit parameters up (2 bytes): 4 + 2 bytes per element of the shard")),
    (dict(par_times=1), T.mark("with offload_param the shard comes up from the host twice per micro-step: for the "
                        "forward gather and again for the backward one")),
    (dict(nbytes=4), T.mark("only the gradients go down as fp32; the parameters cross PCIe as 2-byte fp16/bf16, "
                     "not fp32")),
    (dict(use_mfu=False), T.mark("the GPU computes at mfu x peak_flops, not at its peak")),
]


# -- the machinery -------------------------------------------------------------------------------------

def _ask(fn: Callable, name: str, args: tuple) -> float:
    call = f"{name}{args}"
    try:
        got = fn(*args)
    except NotImplementedError as exc:
        raise ExerciseCheckFailed(T("{name} is not written yet (it raised NotImplementedError: {error}). "
                                    "Fill in the cell above, run it, then this check again.", name=name,
                                    error=exc)) from exc
    except Exception as exc:       # noqa: BLE001 - the learner's error, shown in a few lines
        raise ExerciseCheckFailed(T("{call} raised {error}\n  hint: call it by hand with these arguments to see "
                                    "the line", call=call, error=f"{type(exc).__name__}: {exc}")) from exc
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got) or got < 0:
        raise ExerciseCheckFailed(T("{call} returned {got}\n  hint: return one number (a float >= 0)", call=call,
                                    got=repr(got)))
    return float(got)


def _close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * abs(b) + 1e-9


def _diagnose(got: list, cases: list, mistakes: list, wrong: Callable) -> str | None:
    """The hint of the first mistake (or pair of mistakes) that gives the learner's numbers on every case."""
    for kw, hint in mistakes:
        if all(_close(g, wrong(c, kw)) for g, c in zip(got, cases)):
            return T.text(hint)
    for i, (kw1, h1) in enumerate(mistakes):
        for kw2, h2 in mistakes[i + 1:]:
            if set(kw1) & set(kw2):
                continue
            if all(_close(g, wrong(c, {**kw1, **kw2})) for g, c in zip(got, cases)):
                return T("two things: {first}; and {second}", first=T.text(h1), second=T.text(h2))
    return None


def _fail(name: str, args: tuple, want: float, got: float, unit: str, hint: str) -> ExerciseCheckFailed:
    ratio = T(" ({ratio:.3g} x the expected)", ratio=got / want) if want else ""
    return ExerciseCheckFailed(T("{call}:\n  expected {want:,.0f} {unit}, yours {got:,.0f}{ratio}\n  hint: {hint}",
                                 call=f"{name}{args}", want=want, unit=T.text(unit), got=got, ratio=ratio, hint=hint))


def _run(fn, name, cases, reference, mistakes, wrong, unit, fallback):
    got = [_ask(fn, name, c) for c in cases]
    want = [reference(*c) for c in cases]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if not _close(g, w)]
    if bad:
        i = bad[0]
        hint = _diagnose(got, cases, mistakes, wrong) or fallback(cases[i])
        raise _fail(name, cases[i], want[i], got[i], unit, hint)
    return got, want


# -- the checks -------------------------------------------------------------------------------------

def check_tokens_to_hide(fn: Callable, verbose: bool = True) -> None:
    """``fn(peak_flops, mfu, beta_Bps, gpus, checkpointing=False)`` against zerolab.tools.simulate's
    ``hide_tokens`` (alpha = 0) at six settings; within 1 %."""
    def fallback(c):
        peak, mfu, beta, n, ck = c
        return T("per micro-step: compute {flops} Psi T / (mfu x peak) seconds, traffic "
                 "3 x 2 Psi x (N-1)/N / beta seconds; set them equal and solve for T (Psi cancels)", flops=8 if ck else 6)
    got, want = _run(fn, "tokens_to_hide", TOKENS_CASES, reference_tokens_to_hide, TOKENS_MISTAKES,
                     lambda c, kw: _tokens(*c, **kw), T.mark("tokens"), fallback)
    if verbose:
        for c, g in zip(TOKENS_CASES, got):
            peak, mfu, beta, n, ck = c
            print(T("  {peak:>4.0f} TFLOP/s x {mfu:.2f}, {beta:>4.0f} GB/s, N = {n:>4}{ck:<15}: {tokens:>8,.0f} tokens "
                    "per GPU", peak=peak / 1e12, mfu=mfu, beta=beta / 1e9, n=n, ck=T(", checkpointing") if ck else "",
                    tokens=g))
    passed(T("tokens_to_hide equals the simulator's hide_tokens at {n} settings (within 1 %)", n=len(got)))


def check_inter_node_bytes(fn: Callable, verbose: bool = True) -> None:
    """``fn(psi, gpus, ranks_per_node, qwz, hpz, qgz)`` against zerolab.tools.simulate's
    ``link_bytes["inter"]`` at eleven settings; within 1 % (the scales may be left out)."""
    def fallback(c):
        psi, n, k, qwz, hpz, qgz = c
        terms = _bytes_terms(psi, n, k, qwz, hpz, qgz)
        parts = ", ".join(f"{T.text(name)} {v / psi:.3g} Psi" for name, v in terms.items())
        return T("compare term by term; leaving each node (N = {n}, {m} nodes of {k}): {parts}", n=n, m=n // k, k=k,
                 parts=parts)
    got, want = _run(fn, "inter_node_bytes", BYTES_CASES, reference_inter_node_bytes, BYTES_MISTAKES,
                     lambda c, kw: sum(_bytes_terms(*c, **kw).values()), T.mark("bytes"), fallback)
    if verbose:
        for c, g in zip(BYTES_CASES, got):
            psi, n, k, qwz, hpz, qgz = c
            on = "+".join(x for x, v in (("qwZ", qwz), ("hpZ", hpz), ("qgZ", qgz)) if v) or "plain"
            print(T("  {psi:>3.0f}B parameters, N = {n:>4} in nodes of {k}, {on:<11}: {g:>5.3f} Psi leave each node",
                    psi=psi / 1e9, n=n, k=k, on=on, g=g / psi))
    passed(T("inter_node_bytes equals the simulator's inter-node bytes at {n} settings (within 1 %)", n=len(got)))


def check_offload_hide_tokens(fn: Callable, verbose: bool = True) -> None:
    """``fn(peak_flops, mfu, pcie_Bps, gpus, offload_param=False)`` against zerolab.tools.simulate's
    ``hide_tokens`` with a free network (only PCIe counts) at five settings; within 1 %."""
    def fallback(c):
        return T("per step: compute 6 Psi T / (mfu x peak); PCIe: the bytes of this GPU's shard (Psi/N "
                 "elements) that cross it, over pcie_Bps; set them equal and solve for T")
    got, want = _run(fn, "offload_hide_tokens", OFFLOAD_CASES, reference_offload_hide_tokens, OFFLOAD_MISTAKES,
                     lambda c, kw: _offload(*c, **kw), T.mark("tokens"), fallback)
    if verbose:
        for c, g in zip(OFFLOAD_CASES, got):
            peak, mfu, pcie, n, par = c
            what = "optimizer + params" if par else "optimizer"
            print(T("  {peak:>4.0f} TFLOP/s x {mfu:.2f}, PCIe {pcie:.0f} GB/s, N = {n:>2}, offload {what:<18}: "
                    "{tokens:>6,.0f} tokens per GPU", peak=peak / 1e12, mfu=mfu, pcie=pcie / 1e9, n=n, what=what,
                    tokens=g))
    passed(T("offload_hide_tokens equals the simulator's hide_tokens at {n} settings (within 1 %)", n=len(got)))
