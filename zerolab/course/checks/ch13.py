"""Exercise 13 check: qwZ's block quantizer, written by the learner, run in the real engine.

The learner writes the two halves of DeepSpeed 0.19.8's symmetric block quantizer (its
``csrc/quantization`` kernels, ``Params<Symmetric>`` in ``csrc/includes/quantization_utils.h``;
zerolab's copy is :func:`zerolab.zeropp.quant.quantize` / :func:`zerolab.zeropp.quant.dequantize`)::

    def quantize(x, groups, bits=8):   # -> (q: int8, one per element, flat; scales: fp32, one per block)
    def dequantize(q, scales):         # -> the values, q * scale block by block

:func:`check_block_quantizer` runs in two parts:

1. *Alone*: the learner's pair on tensors chosen to expose one mistake each (:data:`CASES`):
   blocks whose magnitudes differ by powers of ten (one scale for the whole tensor), a 2-D
   tensor (blocks are contiguous runs of the flat tensor, not rows or strided columns), a
   block whose largest value is positive (the clamp to 127), values exactly halfway between two
   steps (round half to even), a block of zeros (scale 1), fp16 input (arithmetic in fp32), int4
   (``bits`` is a parameter: qgZ calls the same quantizer with 4). The values and scales are
   compared with zerolab's, element by element; ``dequantize`` is given zerolab's ``(q, scales)``.
   The first difference is described with a hint that names the likely mistake. Every call is
   given a tensor whose clone the check keeps, and fails when the call wrote into it (``x`` for
   ``quantize``; ``q`` and ``scales`` for ``dequantize``): in the engine ``x`` is the rank's own
   parameter shard, and ``x.float()`` is ``x`` itself when ``x`` is float32.
2. *In the engine*: on 4 ranks as 2 nodes of 2, a small GPT at stage 3 in bf16 with
   ``zero_quantized_weights``, the learner's pair plugged into qwZ's all-gathers
   (:func:`zerolab.zeropp.quant.use_qwz_codec`); the same run with zerolab's quantizer and without qwZ
   beside it. The all-gathers (calls, dtypes, elements, bytes, link), the weights the first
   forward sees (each within half a step of its block, plus bf16's rounding; the clamped
   maxima within one step) and the losses are compared; every call qwZ makes to the pair is
   watched the same way (its inputs against clones kept before the call).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...i18n import catalogue, fill
from . import ExerciseCheckFailed, crew_of, not_implemented, passed, rank_failure

T = catalogue("checks.ch13")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_block_quantizer", "check_alone", "check_engine", "CASES", "ENGINE_STEPS", "ENGINE_WORLD",
           "ENGINE_NODES", "LOSS_TOL"]

ENGINE_WORLD, ENGINE_NODES, ENGINE_STEPS = 4, 2, 3
LOSS_TOL = 1e-2            # the learner's quantizer against zerolab's, same run (identical when exact)
NEAR_HALF = 1e-4           # x * q_scale this close to a half step: x / scale may round either way


def _cases() -> list[tuple[str, torch.Tensor, int, int, bool]]:
    """(what, x, groups, bits, exact): ``exact`` cases have power-of-two maxima, where every
    correct formulation gives the same bits; elsewhere a value within NEAR_HALF of a rounding
    boundary may land one step either way."""
    g = torch.Generator().manual_seed(13)
    randn = lambda *s: torch.randn(*s, generator=g)           # noqa: E731
    decades = torch.cat([randn(64) * 10.0 ** -k for k in range(4)])
    positive = randn(4, 32).clamp(-0.9, 0.9)
    positive[:, 5] = 1.0                                    # each block's largest magnitude, positive
    ties = torch.tensor([k / 256 for k in range(-255, 256, 2)])   # odd k: x * 128 = k / 2
    ties[0] = -1.0                                                  # max |x| = 1: q_scale = 128
    ties = torch.cat([ties, -ties])
    zeros = torch.cat([torch.zeros(48), randn(48) * 0.1])
    return [
        (T.mark("a weight shard in fp16, 4 blocks of 96"), (randn(384) * 0.02).half(), 4, 8, False),
        (T.mark("4 blocks whose magnitudes differ by powers of ten"), decades, 4, 8, False),
        (T.mark("a 2-D tensor (16 x 24): blocks are runs of the flat tensor"), randn(16, 24), 6, 8, False),
        (T.mark("each block's largest magnitude is positive (+1.0)"), positive.reshape(-1), 4, 8, True),
        (T.mark("values halfway between two steps (x * 128 = k / 2)"), ties, 2, 8, True),
        (T.mark("a block of zeros beside a block of values"), zeros, 2, 8, False),
        (T.mark("int4 (bits=4: qgZ uses the same quantizer)"), randn(96), 3, 4, False),
        (T.mark("many small blocks (8 elements each)"), (randn(256) * 0.05).half(), 32, 8, False),
    ]


CASES = _cases()


# ----------------------------------------------------------------------------- zerolab's, and the mistakes

def _reference(x: torch.Tensor, groups: int, bits: int):
    from zerolab.zeropp.quant import quantize
    return quantize(x, groups, bits)


def _steps(x: torch.Tensor, groups: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x * q_scale per element (fp32, flat) and q_scale per element, DeepSpeed's way."""
    blocks = x.reshape(-1).float().view(groups, -1)
    m = blocks.abs().amax(dim=1, keepdim=True)
    q_scale = torch.where(m == 0, torch.ones(()), (2 ** bits) / (2 * m))
    return (blocks * q_scale).reshape(-1), q_scale.expand_as(blocks).reshape(-1)


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    a, b = a.reshape(-1).double(), b.reshape(-1).double()
    return a.shape == b.shape and bool(torch.all((a - b).abs() <= rtol * b.abs() + 1e-30))


def _scale_hint(got: torch.Tensor, x: torch.Tensor, groups: int, bits: int) -> str:
    """Which wrong scale the learner computed, if it is a usual one."""
    flat = x.reshape(-1).float()
    blocks = flat.view(groups, -1)
    half = 2 ** (bits - 1)
    m = blocks.abs().amax(1)
    if not torch.isfinite(got).all() or bool((got[m == 0] == 0).any()):
        return T("a block of zeros gives nan, inf or 0: DeepSpeed's kernel sets q_scale = 1 when the "
                 "block's max is 0 (so its scale is 1.0 and every q is 0)")
    guesses = [
        (flat.abs().max() / half * torch.ones(groups), T("one scale for the whole tensor: qwZ keeps one scale "
         "per block (max |x| of that block / 2^(bits-1)), so a block of small values keeps its precision")),
        (flat.view(-1, groups).abs().amax(0) / half, T("strided blocks (x.view(-1, groups)): a block is a "
         "contiguous run of numel // groups elements of the flat tensor: x.reshape(groups, -1)")),
        (m / (half - 1), T("max |x| / 127 (the textbook symmetric scale): DeepSpeed maps max |x| to 2^(bits-1) "
         "= 128 steps (q_scale = 2^bits / (2 max)) and clamps the top to 127; its scale is max |x| / 128")),
        (half / m, T("that is q_scale, the multiplier: DeepSpeed stores and sends its inverse, the step "
         "scale = 1 / q_scale = max |x| / 2^(bits-1)")),
        ((blocks.amax(1) - blocks.amin(1)) / (2 ** bits - 1), T("asymmetric (max - min) / 255: qwZ's quantizer "
         "is symmetric: the scale comes from max |x| alone, no offset, 0 stays 0")),
        (m / 2 ** bits, T("max |x| / 2^bits: the range -max..max is 2^bits steps of 2 max / 2^bits = max / "
         "2^(bits-1)")),
        (m / 2 ** 7 * torch.ones(groups) if bits != 8 else None, T("bits is a parameter: with bits=4 (qgZ) the "
         "scale is max |x| / 2^(4-1) = max / 8, not max / 128 (no hard-coded 127 or 128)")),
    ]
    for want, hint in guesses:
        if want is not None and got.numel() == want.numel() and _close(got, want, 1e-3):
            return hint
    ref = _reference(x, groups, bits)[1]
    if _close(got, ref, 2e-3):
        return T("almost: compute in float32 (x.float()): DeepSpeed's kernel reads fp16 values but computes "
                 "max, q_scale and x * q_scale in fp32; fp16 arithmetic rounds them")
    return T("scale = 1 / q_scale with q_scale = 2^bits / (2 max|x|) per block (= max|x| / 2^(bits-1))")


def _q_hint(got: torch.Tensor, x: torch.Tensor, groups: int, bits: int) -> str:
    """Which wrong rounding, clamping or range the learner's values show."""
    t, _ = _steps(x, groups, bits)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    got = got.reshape(-1).long()

    def like(want: torch.Tensor) -> bool:     # the same up to a rare step at a rounding boundary
        d = (got - want.long()).abs()
        return bool(d.max() <= 1) and float((d > 0).float().mean()) <= 0.02

    if like(torch.trunc(t).clamp(lo, hi)):
        return T("your values are truncated toward zero (.to(torch.int8) cuts off the fraction): round first, "
                 "torch.round (half to even, as the kernel's float-to-int conversion)")
    if like(torch.floor(t).clamp(lo, hi)):
        return T("your values are rounded down (floor): round to nearest, torch.round")
    wrapped = torch.round(t)
    wrapped = torch.where(wrapped > hi, wrapped - 2 ** bits, wrapped).clamp(lo, hi)
    if bool((torch.round(t) > hi).any()) and like(wrapped):
        return T("the block's largest positive value x = max lands on 2^(bits-1) = {top} steps, which does not fit "
                 "in int{bits} and wraps to {lo}: clamp to [{lo}, {hi}] before converting", top=hi + 1, bits=bits,
                 lo=lo, hi=hi)
    away = (torch.sign(t) * torch.floor(t.abs() + 0.5)).clamp(lo, hi).long()
    up = torch.floor(t + 0.5).clamp(lo, hi).long()
    if torch.equal(got, away) or torch.equal(got, up):
        return T("halfway values round the wrong way: DeepSpeed rounds half to even (2.5 -> 2, 3.5 -> 4), "
                 "which torch.round does; floor(x + 0.5) or round-half-away-from-zero do not")
    if bool((got > hi).any()) or bool((got < lo).any()):
        return T("values outside [{lo}, {hi}]: clamp to the signed {bits}-bit range", lo=lo, hi=hi, bits=bits)
    return T("q = clamp(round(x * q_scale), -2^(bits-1), 2^(bits-1) - 1) with q_scale = 2^bits / (2 max|x|) "
             "of x's block, in fp32")


def _dq_hint(got: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> str:
    per = q.numel() // s.numel()
    qf, sf = q.reshape(s.numel(), per).float(), s.reshape(-1, 1).float()
    if _close(got, qf / sf, 1e-3):
        return T("you divide by the scale: DeepSpeed's scale is the step size, so the value is q * scale")
    if _close(got, (q.reshape(per, s.numel()).float() * s.view(1, -1)), 1e-3):
        return T("strided blocks: scale b belongs to elements b * block .. (b + 1) * block - 1 (contiguous): "
                 "q.reshape(len(scales), -1) * scales[:, None]")
    if _close(got, qf * sf * 2 ** 7, 1e-3) or _close(got, qf * sf / 2 ** 7, 1e-3):
        return T("an extra factor of 128: the stored scale already is the step size (max / 2^(bits-1))")
    return T("values = q * scale, block by block: q.reshape(len(scales), -1).float() * scales[:, None], flat")


def _wrap(text: str) -> str:
    return fill(text, 96, initial_indent="  ", subsequent_indent="        ")


def _hint(hint: str) -> str:
    return _wrap(T("hint: {hint}", hint=hint))


def _fail(where: str, lines: list[str], hint: str) -> ExerciseCheckFailed:
    body = "".join(f"\n  {line}" for line in lines)
    return ExerciseCheckFailed(f"{where}{body}\n" + _hint(hint))


def _first_diff(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor | None = None) -> str:
    d = (got.reshape(-1).double() != want.reshape(-1).double()).nonzero()
    if not len(d):
        return ""
    i = int(d[0])
    at = T(" (x = {x:.6g})", x=float(x.reshape(-1)[i])) if x is not None else ""
    return T("element {i}{at}: expected {want:.6g}, yours {got:.6g}", i=i, at=at, want=float(want.reshape(-1)[i]),
             got=float(got.reshape(-1)[i]))


def _changed(kept: torch.Tensor, now: torch.Tensor) -> str:
    """"" when ``now`` holds what ``kept`` (a clone taken before the call) held, bit for bit; else
    where it first differs."""
    if kept.shape == now.shape and kept.dtype == now.dtype and torch.equal(kept, now):
        return ""
    a, b = kept.reshape(-1).double(), now.reshape(-1).double()
    if a.numel() != b.numel():
        return T("its shape became {shape}", shape=tuple(now.shape))
    i = int((a != b).nonzero()[0])
    return T("element {i} was {was:.6g}, is now {now:.6g}", i=i, was=float(a[i]), now=float(b[i]))


def _watched(call: Callable, args: tuple, names: tuple[str, ...], kwargs: dict | None = None):
    """``call(*args, **kwargs)`` and the first tensor among its arguments it changed, as (name,
    where), or None (compared with clones kept before the call)."""
    kwargs = kwargs or {}
    given = list(zip(names, args)) + list(kwargs.items())
    kept = [a.clone() if isinstance(a, torch.Tensor) else None for _, a in given]
    out = call(*args, **kwargs)
    for (name, now), before in zip(given, kept):
        where = _changed(before, now) if before is not None else ""
        if where:
            return out, (name, where)
    return out, None


def _untouched(call: Callable, args: tuple, names: tuple[str, ...], what: str):
    """``call(*args)``; :class:`InputChanged` if it wrote into a tensor it was given (in the engine
    they are the rank's parameter shard, the gathered values, their scales)."""
    out, change = _watched(call, args, names)
    if change:
        raise InputChanged(what, *change)
    return out


class InputChanged(Exception):
    """The learner's quantize or dequantize wrote into a tensor it was given."""

    def __init__(self, what: str, name: str, where: str):
        super().__init__(f"{what} changed {name}: {where}")
        self.what, self.name, self.where = what, name, where

    def failure(self, where: str) -> ExerciseCheckFailed:
        hint = (T("{name} is the caller's tensor (in the engine: the rank's parameter shard, which the next "
                  "gather sends again). Compute on a copy: x.float() is x itself when x is already float32, so "
                  "mul_, div_, round_ or clamp_ on it write into the caller's tensor; use x * s, or "
                  "x.float().clone()", name=self.name) if self.what == "quantize" else
                T("q and scales are the tensors the all-gather received; return a new tensor (q.float() * "
                  "scale), never write into them"))
        return _fail(where, [T("{what} changed its input {name} in place: {change}", what=self.what,
                               name=self.name, change=self.where)], hint)


# ----------------------------------------------------------------------------- part 1: alone

def _check_case(quantize: Callable, dequantize: Callable, what, x, groups, bits, exact) -> None:
    from zerolab.zeropp.quant import dequantize as ref_dequantize
    where = T("{what}: {numel} x {dtype}, groups={groups}, bits={bits}", what=T.text(what), numel=x.numel(),
              dtype=str(x.dtype)[6:], groups=groups, bits=bits)
    want_q, want_s = _reference(x, groups, bits)
    try:                        # the check's own copy of x, compared afterwards with the one kept
        got = _untouched(quantize, (x.clone(), groups, bits), ("x", "groups", "bits"), "quantize")
    except InputChanged as exc:
        raise exc.failure(where) from None
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
        raise _fail(where, [T("quantize returned {type}", type=type(got).__name__)],
                    T("return a pair of tensors: (q, scales)"))
    q, s = got
    if q.dtype != torch.int8 or q.numel() != x.numel():
        raise _fail(where, [T("q: expected int8, {n} values; yours {dtype}, {numel} values", n=x.numel(),
                              dtype=q.dtype, numel=q.numel())],
                    T("one int8 per element (that byte instead of bf16's two is what halves qwZ's all-gathers): "
                      "round, clamp, then .to(torch.int8)"))
    if s.numel() != groups:
        hint = (T("one scale per block: groups of them") if s.numel() == 1 else
                T("cut the flat tensor into groups = {groups} blocks of numel // groups = {per} elements, one scale "
                  "each", groups=groups, per=x.numel() // groups))
        raise _fail(where, [T("scales: expected {groups} (one per block), yours {n}", groups=groups, n=s.numel())],
                    hint)
    if s.dtype != torch.float32:
        raise _fail(where, [T("scales: expected float32, yours {dtype}", dtype=s.dtype)],
                    T("compute in float32 (x.float()) and return float32 scales: they travel as fp32, 4 bytes "
                      "per block (DeepSpeed's kernel computes in fp32 and writes float scales)"))
    if not _close(s, want_s, 1e-6):
        raise _fail(where, [T("scales differ from DeepSpeed's: block {diff}",
                              diff=_first_diff(s, want_s).split(" ", 1)[1])],
                    _scale_hint(s.reshape(-1), x, groups, bits))
    t, _ = _steps(x, groups, bits)
    differ = q.reshape(-1).long() != want_q.long()
    if not exact:        # a value at a half step may land either way when computed as x / scale
        near = (t.abs() - t.abs().floor() - 0.5).abs() < NEAR_HALF
        one = (q.reshape(-1).long() - want_q.long()).abs() <= 1
        differ &= ~(near & one)
    if bool(differ.any()):
        i = int(differ.nonzero()[0])
        raise _fail(where, [T("q differs from DeepSpeed's at element {i}: x = {x:.6g}, x * q_scale = {t:.6g}", i=i,
                              x=float(x.reshape(-1)[i]), t=float(t[i])),
                            T("expected q = {want}, yours {got}", want=int(want_q[i]), got=int(q.reshape(-1)[i]))],
                    _q_hint(q, x, groups, bits))
    try:
        back = _untouched(dequantize, (want_q.clone(), want_s.clone()), ("q", "scales"), "dequantize")
    except InputChanged as exc:
        raise exc.failure(T("dequantize, {where}", where=where)) from None
    want = ref_dequantize(want_q, want_s)
    if not isinstance(back, torch.Tensor) or back.numel() != want.numel() or not back.is_floating_point():
        shape = (T("{dtype}, {n} values", dtype=back.dtype, n=back.numel()) if isinstance(back, torch.Tensor)
                 else type(back).__name__)
        raise _fail(T("dequantize, {where}", where=where),
                    [T("expected float values, {n} of them; yours {shape}", n=want.numel(), shape=shape)],
                    T("return q * scale as a float tensor with one value per element of q"))
    rtol = 2 ** -10 if back.dtype in (torch.float16, torch.bfloat16) else 1e-6
    if not _close(back.float(), want, rtol):
        raise _fail(T("dequantize, {where}", where=where), [_first_diff(back.float(), want)],
                    _dq_hint(back.float(), want_q, want_s))


def check_alone(quantize: Callable, dequantize: Callable) -> int:
    """Part 1: the learner's pair on :data:`CASES`. Returns the number of cases."""
    for case in CASES:
        _check_case(quantize, dequantize, *case)
    return len(CASES)


# ----------------------------------------------------------------------------- part 2: in the engine

def _engine_config(world: int, zero: dict) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * world, "gradient_clipping": 1.0,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            # biases and LayerNorms persistent; every weight gathered in forward and again in backward
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 200,
                                  "stage3_max_reuse_distance": 0, "reduce_bucket_size": 20000, **zero}}


def _one_run(pair, qwz: bool, steps: int) -> dict:
    """On a rank: a fresh engine (qwZ with ``pair``, zerolab's when None); the weights the first
    forward sees against the exact ones, then ``steps`` steps: the parameter all-gathers and losses."""
    import contextlib

    import zerolab
    from zerolab.zeropp import quant
    from zerolab.models import GPT, lm_loss
    from zerolab.zero.reference import train_engine

    world = zerolab.world_size()
    g = torch.Generator().manual_seed(7)
    tokens = [torch.randint(0, 48, (2 * world, 25), generator=g) for _ in range(steps)]
    batches = [(t[:, :-1], t[:, 1:]) for t in tokens]
    changed: list = []
    if pair:
        pair = (_guarded(pair[0], ("x", "groups", "bits"), "quantize", changed),
                _guarded(pair[1], ("q", "scales"), "dequantize", changed))
    with quant.use_qwz_codec(*pair) if pair else contextlib.nullcontext():
        eng = zerolab.initialize(GPT(vocab=48, d=48, heads=2, layers=2, seq_len=24),
                                 _engine_config(world, {"zero_quantized_weights": qwz}))
        exact = eng.full_params()
        names = {id(p): n for n, p in eng.module.named_parameters()}
        seen: dict = {}

        def grab(mod, args):
            for p in mod.parameters(recurse=False):
                n = names[id(p)]
                if p.numel() == exact[n].numel() and n not in seen:
                    seen[n] = p.data.detach().float().clone()
        hooks = [m.register_forward_pre_hook(grab) for m in eng.module.modules()]
        mark = eng.ledger.mark()
        losses = train_engine(eng, batches, lm_loss)
        for h in hooks:
            h.remove()
        recs = [(r.op, r.dtype, r.numel, r.wire_bytes, r.link) for r in eng.ledger.since(mark).records
                if r.op == "all_gather" and "persistent" not in r.tag]
        kept = {label for label, _, keep in eng.stage3_stats().partitions if keep}
        shard = {gr.label: gr.shard_numel for gr in eng.stage.groups if gr.label not in kept}
        eng.close()
    worst = 0.0
    for n, w in seen.items():                 # gathered weights: within half a step (+ bf16), one at the top
        if n not in exact or exact[n].numel() <= 200:
            continue
        ex = exact[n].float().reshape(-1)
        err = (w.reshape(-1) - ex).abs()
        step = ex.abs().max() / 128           # the largest step any of its blocks can have
        bound = step * (1 + 1e-3) + 2 ** -8 * ex.abs() + 2 ** -24
        worst = max(worst, float((err / bound).max()))
    return {"records": recs, "losses": losses, "weights": seen, "worst": worst, "shards": shard,
            "changed": changed[:1]}


def _guarded(fn: Callable, names: tuple[str, ...], what: str, changed: list) -> Callable:
    """``fn`` as qwZ calls it, noting in ``changed`` the first call that wrote into its inputs."""
    def call(*args, **kwargs):
        out, change = _watched(fn, args, names, kwargs)
        if change and not changed:
            changed.append((what, *change))
        return out
    return call


def _engine_runs(pair, steps: int) -> dict:
    return {"yours": _one_run(pair, True, steps), "zerolab": _one_run(None, True, steps),
            "bf16": _one_run(None, False, steps)}


def check_engine(quantize: Callable, dequantize: Callable, world_size: int = ENGINE_WORLD,
                 nodes: int = ENGINE_NODES, steps: int = ENGINE_STEPS) -> dict:
    """Part 2: the learner's pair as qwZ's quantizer on ``world_size`` ranks as ``nodes`` nodes."""
    import zerolab
    try:
        results = crew_of(world_size, nodes=nodes).run(_engine_runs, (quantize, dequantize), steps)
    except (zerolab.RankError, zerolab.CrewTimeout) as exc:
        if not_implemented(exc):
            raise NotImplementedError("Exercise: write quantize and dequantize") from exc
        raise rank_failure(exc, T("the engine on {n} ranks (qwZ with your quantizer)", n=world_size),
                           T("your quantize or dequantize raised inside qwZ's all-gather; "
                             "zerolab.course.checks.full_tracebacks(), then run again, shows the line")) from exc
    for r, res in enumerate(results):
        mine, ref = res["yours"], res["zerolab"]
        where = T("the engine, stage 3 + zero_quantized_weights, rank {r}", r=r)
        if mine.get("changed"):
            raise InputChanged(*mine["changed"][0]).failure(where)
        if mine["records"] != ref["records"]:
            got = [f"{op} {dt} {n}" for op, dt, n, _, _ in mine["records"]][:4]
            want = [f"{op} {dt} {n}" for op, dt, n, _, _ in ref["records"]][:4]
            raise ExerciseCheckFailed(
                T("{where}: the parameter all-gathers differ from qwZ's with zerolab's quantizer\n"
                  "  expected: {want}\n  yours:    {got}", where=where, want=", ".join(want), got=", ".join(got))
                + "\n" + _hint(T("one int8 value per element and one fp32 scale per block (groups of them)")))
        if mine["worst"] > 1:
            raise ExerciseCheckFailed(
                T("{where}: a weight the forward pass saw is {worst:.2f}x the largest error qwZ allows (half a step "
                  "of its block, bf16's rounding, one step for a clamped maximum)", where=where, worst=mine["worst"])
                + "\n" + _hint(T("dequantize must give back q * scale of the same block")))
        gap = max(abs(a - b) for a, b in zip(mine["losses"], ref["losses"]))
        if gap > LOSS_TOL:
            raise ExerciseCheckFailed(T("{where}: the losses are {gap:.3g} from those with zerolab's quantizer "
                                        "(tolerance {tol})", where=where, gap=gap, tol=LOSS_TOL)
                                      + "\n" + _hint(T("compare your round trip with zerolab.zeropp.quant's")))
    return results[0]


def check_block_quantizer(quantize: Callable, dequantize: Callable, *, verbose: bool = True) -> None:
    """Check ``quantize(x, groups, bits=8) -> (q, scales)`` and ``dequantize(q, scales)`` against
    DeepSpeed's symmetric block quantizer, alone and as qwZ's quantizer in the engine."""
    n = check_alone(quantize, dequantize)        # fast; an unfinished exercise fails here
    if verbose:
        print(T("alone: {n} tensors (fp16, fp32; 1-D, 2-D; 8 and 4 bits): values and scales as DeepSpeed's", n=n))
    res = check_engine(quantize, dequantize)
    if verbose:
        mine, bf16 = res["yours"], res["bf16"]
        q_bytes = sum(b for op, dt, _, b, _ in mine["records"] if dt == "int8")
        s_bytes = sum(b for op, dt, _, b, _ in mine["records"] if dt == "float32")
        plain = sum(b for *_, b, _ in bf16["records"])
        links = sorted({lk for *_, lk in mine["records"]})
        same = all(torch.equal(mine["weights"][k], res["zerolab"]["weights"][k]) for k in mine["weights"])
        print(T("engine: GPT on {world} ranks as {nodes} nodes of {k}, stage 3, bf16, {steps} steps, your quantizer "
                "inside qwZ:", world=ENGINE_WORLD, nodes=ENGINE_NODES, k=ENGINE_WORLD // ENGINE_NODES,
                steps=ENGINE_STEPS))
        print(T("  rank 0 sent in parameter all-gathers ({links}-node): {q:,.0f} bytes of int8", links=", ".join(links),
                q=q_bytes))
        print(T("    + {s:,.0f} of fp32 scales, against {plain:,.0f} bytes in bf16: {ratio:.4f}x", s=s_bytes,
                plain=plain, ratio=(q_bytes + s_bytes) / plain))
        print(T("  every weight the forward saw within half a step of its block (+ bf16 rounding)"))
        print(T("  the same gathered weights as zerolab's quantizer: {same}; losses within {tol}", same=same,
                tol=LOSS_TOL))
    passed(T("your quantize and dequantize are DeepSpeed's symmetric block quantizer on {n} tensors\n"
             "  and carry qwZ's all-gathers in the engine on {world} ranks ({nodes} nodes)", n=n, world=ENGINE_WORLD,
             nodes=ENGINE_NODES))
