"""Chapter 3 checks: stage 1 from the inside, with the learner's pieces in the real engine.

(a) :func:`check_shard_range` takes the learner's ownership rule
    ``shard_range(padded_numel, world_size, rank) -> (start, end)``. It first checks that the
    ranges tile ``[0, padded_numel)`` in equal pieces, in rank order (no gap, no overlap), for
    a few sizes; then it replaces ``zerolab.memory.flat.FlatGroup.shard_range`` by the learner's rule
    on every rank and trains ZeRO stage 1 on 2 and on 3 ranks twice: in DeepSpeed's layout (one
    flat buffer of every trainable parameter, cut into N partitions, with parameters straddling
    two partitions and the padding at the end; each gradient bucket all-reduced, each rank
    keeping the slices in its partition) and in the paper's (zerolab's ``ideal_reduce_scatter``:
    one flat buffer per bucket, reduce-scattered). It checks the rule again on every buffer the
    engine really made, and compares every trained parameter with single-process training.

(b) :func:`check_adamw_step` takes the learner's in-place shard update
    ``adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)``. It
    compares three steps on a random shard with ``torch.optim.AdamW``; then it wraps the
    function in an optimizer (:class:`ShardAdamW`), hands it to ``zerolab.initialize`` as
    ``optimizer=`` (with ``"zero_allow_untested_optimizer": true``, as DeepSpeed asks for any
    optimizer it does not know), trains stage 1 on 2 and 3 ranks, and compares with
    single-process training under torch's AdamW.

Both raise :class:`~zerolab.course.checks.ExerciseCheckFailed` saying what is wrong (which rank,
which elements, how far off) with a hint. The crews of ranks are started once and reused by
both checks (call :func:`close_crews` to stop them early).
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch

from ...i18n import catalogue
from . import ExerciseCheckFailed, passed, rank_failure
from . import close_crews, crew_of as _crew  # noqa: F401  (close_crews: the exercise imports it from here)

T = catalogue("checks.ch03")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_shard_range", "check_adamw_step", "ShardAdamW", "close_crews"]

# TinyLM's own sizes do not divide by 2 or 3 (vocabulary 37, width 26), and buckets of 700
# elements make several buckets with parameters cut between ranks and padding at the end.
CHECK_MODEL = dict(vocab=37, d=26, hidden=53, layers=2, seq_len=16)
BUCKET = 700
WORLD_SIZES = (2, 3)
GLOBAL_BATCH = 12           # 6 sequences per rank on 2 ranks, 4 on 3
STEPS = 3
HP = dict(lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
# The unit check also runs with hyperparameters far from torch's defaults, so that a constant
# written into the step (eps = 1e-8, betas = (0.9, 0.999)) instead of the argument fails.
HP_UNUSUAL = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-3, weight_decay=0.3)
# |a - b| <= ATOL + RTOL |b| everywhere (torch.testing's rule; fp32, a few Adam steps)
RTOL, ATOL = 1e-5, 1e-6
# (padded_numel, world_size) pairs tried before any rank starts
RULE_CASES = [(6, 1), (6, 2), (6, 3), (12, 4), (700, 2), (702, 3), (1_000_000, 4), (188_901, 3)]

def _config(world_size: int, with_optimizer: bool = True, ideal: bool = False) -> dict:
    cfg = {"train_batch_size": GLOBAL_BATCH,
           "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
           "zero_optimization": {"stage": 1, "reduce_bucket_size": BUCKET}}
    if ideal:          # the paper's layout: every bucket its own flat buffer (zerolab's switch)
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    if with_optimizer:
        cfg["optimizer"] = {"type": "AdamW", "params": {**HP, "betas": list(HP["betas"])}}
    else:
        cfg["zero_allow_untested_optimizer"] = True
    return cfg


def _worst(got: dict, ref: dict) -> tuple[str, float, float]:
    """(name, largest |a - b| / (ATOL + RTOL |b|), largest |a - b|) over every parameter."""
    worst = ("", 0.0, 0.0)
    for k in ref:
        err = (got[k] - ref[k]).abs()
        score = float((err / (ATOL + RTOL * ref[k].abs())).max())
        if score > worst[1]:
            worst = (k, score, float(err.max()))
    return worst


def _rank_error(exc: BaseException, what: str) -> ExerciseCheckFailed:
    text = str(exc)
    if "NotImplementedError" in text:
        return ExerciseCheckFailed(T("{what} raised NotImplementedError on the ranks: write the part marked "
                                     "'Exercise' first.", what=what), details=text)
    return rank_failure(exc, what, T("the error is raised by your function on a rank; the rank's traceback "
                                     "(zerolab.course.checks.full_tracebacks(), then run again) names the line"))


# ------------------------------------------------------------------------------ (a) the rule

def _ranges(fn: Callable, padded: int, n: int) -> list[tuple[int, int]]:
    out = []
    for r in range(n):
        try:
            got = fn(padded, n, r)
        except NotImplementedError as exc:
            raise ExerciseCheckFailed(T("shard_range raises NotImplementedError: write the part marked "
                                        "'Exercise' first")) from exc
        call = f"shard_range({padded}, {n}, {r})"
        try:
            start, end = got
            start, end = operator.index(start), operator.index(end)
        except (TypeError, ValueError):
            raise ExerciseCheckFailed(T("{call} returned {got}; return a pair of integers (start, end): the "
                                        "elements [start, end) rank {r} owns", call=call, got=repr(got),
                                        r=r)) from None
        out.append((start, end))
    return out


def rule_problem(ranges: list[tuple[int, int]], padded: int) -> str | None:
    """What is wrong with these per-rank ranges of a flat buffer of ``padded`` elements."""
    n = len(ranges)
    size = padded // n
    where = T("padded_numel = {padded:,}, world_size = {n}: ", padded=padded, n=n)
    for r, (s, e) in enumerate(ranges):
        if not 0 <= s <= e <= padded:
            return where + T("rank {r} gets [{s:,}, {e:,}), which is not inside the buffer [0, {padded:,}). \n"
                             "  hint: start <= end, both between 0 and padded_numel", r=r, s=s, e=e, padded=padded)
    order = sorted(range(n), key=lambda r: ranges[r])
    pos = 0
    for k, r in enumerate(order):
        s, e = ranges[r]
        if s > pos:
            return where + T("a gap: elements [{pos:,}, {s:,}) have no owner, so no rank would step them and they "
                             "would never train.\n  hint: rank r + 1 starts where rank r ends", pos=pos, s=s)
        if s < pos:
            prev = order[k - 1]
            return where + T("an overlap: ranks {prev} and {r} both own elements [{s:,}, {e:,}) (rank {prev}: "
                             "{mine_prev}, rank {r}: {mine}), so they would be updated twice.\n  hint: rank r + 1 "
                             "starts where rank r ends", prev=prev, r=r, s=s, e=min(pos, e),
                             mine_prev=ranges[prev], mine=ranges[r])
        pos = e
    if pos != padded:
        return where + T("a gap at the end: elements [{pos:,}, {padded:,}) have no owner. \n"
                         "  hint: the last rank's piece ends at padded_numel", pos=pos, padded=padded)
    for r, (s, e) in enumerate(ranges):
        if e - s != size:
            return where + T("rank {r} owns {numel:,} elements ([{s:,}, {e:,})), but the all-gather after the step "
                             "collects equal pieces of padded_numel / world_size = {size:,}.\n  hint: every rank "
                             "owns exactly padded_numel // world_size elements", r=r, numel=e - s, s=s, e=e,
                             size=size)
    for r, (s, e) in enumerate(ranges):
        if (s, e) != (r * size, (r + 1) * size):
            return where + T("the pieces tile the buffer, but not in rank order: rank {r} owns [{s:,}, {e:,}), "
                             "while the all-gather puts rank {r}'s piece at number {r}, [{start:,}, {end:,}).\n"
                             "  hint: rank r's piece starts at r * shard size", r=r, s=s, e=e, start=r * size,
                             end=(r + 1) * size)
    return None


LAYOUTS = ((T.mark("DeepSpeed's flat buffer"), False), (T.mark("the paper's buckets"), True))


def _train_with_rule(rule: Callable) -> dict:
    """On every rank: stage 1 with FlatGroup.shard_range replaced by ``rule``, in DeepSpeed's
    layout and in the paper's, then the single-process reference; per layout the worst
    difference and what the engine made (buffer sizes, buckets, parameters cut between ranks)."""
    import zerolab
    import zerolab.memory.flat as flat
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine, train_reference

    world = zerolab.world_size()
    batches = lm_batches(STEPS, GLOBAL_BATCH, CHECK_MODEL["seq_len"], CHECK_MODEL["vocab"], seed=3)
    original = flat.FlatGroup.shard_range

    def learner_shard_range(self, rank=None):     # the method's signature, the learner's rule
        start, end = rule(self.padded_numel, self.world_size, self.rank if rank is None else rank)
        return int(start), int(end)

    ref = train_reference(TinyLM(**CHECK_MODEL), _config(world), batches, lm_loss)
    out = {}
    for name, ideal in LAYOUTS:
        cfg = _config(world, ideal=ideal)
        flat.FlatGroup.shard_range = learner_shard_range
        try:
            engine = zerolab.initialize(TinyLM(**CHECK_MODEL), cfg)
            train_engine(engine, batches, lm_loss)
            got = engine.full_params()
            groups = engine.stage.groups
            straddling = sum(1 for g in groups for i in range(len(g.params)) if len(g.owner_ranges(i)) > 1)
            made = {"sizes": [g.padded_numel for g in groups], "padding": sum(g.padding for g in groups),
                    "buckets": len(engine.stage.grads.buckets), "straddling": straddling,
                    "grad_calls": {op: sum(1 for r in engine.ledger.records
                                            if r.op == op and r.tag.startswith("grads")) // STEPS
                                   for op in ("all_reduce", "reduce_scatter")}}
        finally:
            flat.FlatGroup.shard_range = original
        out[name] = {"worst": _worst(got, ref), **made}
    return out


def _made(n: int, res: dict) -> str:
    """What the engine made, in both layouts, in two lines."""
    ds, paper = res[LAYOUTS[0][0]], res[LAYOUTS[1][0]]
    return T("{n} ranks: DeepSpeed's flat buffer of {numel:,} elements ({padding} padding, {cut} parameter(s)\n"
             "    cut between ranks, {all_reduces} bucket all-reduces per step) and the paper's {buckets} buckets\n"
             "    ({paper_padding} padding in all, {reduce_scatters} reduce-scatters per step)", n=n,
             numel=ds["sizes"][0], padding=ds["padding"], cut=ds["straddling"],
             all_reduces=ds["grad_calls"]["all_reduce"], buckets=len(paper["sizes"]),
             paper_padding=paper["padding"], reduce_scatters=paper["grad_calls"]["reduce_scatter"])


def check_shard_range(fn: Callable, *, world_sizes=WORLD_SIZES) -> None:
    """Check the learner's ownership rule, then train stage 1 with it on real ranks."""
    for padded, n in RULE_CASES:
        problem = rule_problem(_ranges(fn, padded, n), padded)
        if problem:
            raise ExerciseCheckFailed(T("shard_range: {problem}", problem=problem))
    lines = []
    for n in world_sizes:
        try:
            per_rank = _crew(n).run(_train_with_rule, fn)
        except Exception as exc:             # a RankError (a rank raised) or a CrewTimeout
            raise _rank_error(exc, T("stage 1 with your shard_range on {n} ranks", n=n)) from None
        for layout, _ in LAYOUTS:
            for padded in sorted(set(per_rank[0][layout]["sizes"])):
                problem = rule_problem(_ranges(fn, padded, n), padded)
                if problem:
                    raise ExerciseCheckFailed(T("shard_range, on a flat buffer the engine really made ({layout}): "
                                                "{problem}", layout=T.text(layout), problem=problem))
            for rank, res in enumerate(per_rank):
                name, score, err = res[layout]["worst"]
                if not score <= 1:
                    raise ExerciseCheckFailed(T(
                        "stage 1 on {n} ranks ({layout}) with your shard_range trained to different parameters "
                        "than one process: on rank {rank}, {name} is off by up to {err:.3g} (allowed: {atol:g} + "
                        "{rtol:g} x |value|). Your ranges tile the buffer, so look for a rule that depends on more "
                        "than (padded_numel, world_size, rank).", n=n, layout=T.text(layout), rank=rank, name=name,
                        err=err, atol=ATOL, rtol=RTOL))
        lines.append(_made(n, per_rank[0]))
    print(T("for example, a buffer of 12 elements on 3 ranks:") + "\n   ",
          ", ".join(T("rank {r} owns {range}", r=r, range=tuple(fn(12, 3, r))) for r in range(3)))
    passed(T("your shard_range tiles every flat buffer in equal pieces, in rank order, and ZeRO stage 1\n"
             "  built on it trains exactly like one process on") + "\n  " + "\n  ".join(lines))


# ------------------------------------------------------------------------ (b) the AdamW step

class ShardAdamW(torch.optim.Optimizer):
    """An optimizer that steps each tensor it is given (in ZeRO: this rank's flat shards)
    with the learner's ``adamw_step``; its state is that of torch's AdamW."""

    def __init__(self, params, step_fn: Callable, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.step_fn = step_fn

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                self.step_fn(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"],
                             group["lr"], group["betas"], group["eps"], group["weight_decay"])
        return None


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a - b).abs() <= 1e-7 + 1e-5 * b.abs()).all())


def _variant(param, grad, m, v, step, lr, betas, eps, wd, *, decay=True, correct=True, eps_inside=False):
    """Plain AdamW, optionally without weight decay, without bias correction or with eps inside
    the square root (for hints)."""
    b1, b2 = betas
    m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad * grad
    bc1, bc2 = (1 - b1 ** step, 1 - b2 ** step) if correct else (1.0, 1.0)
    p = param * (1 - lr * wd) if decay else param.clone()
    if eps_inside:
        return p - lr / bc1 * m / (v / bc2 + eps).sqrt()
    return p - lr / bc1 * m / (v.sqrt() / math.sqrt(bc2) + eps)


def _param_hint(before, grad, m_prev, v_prev, step, got, hp=HP) -> str:
    kw = dict(lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], wd=hp["weight_decay"])
    if _close(got, _variant(before, grad, m_prev, v_prev, step, eps_inside=True, **kw)):
        return T("eps is inside the square root: AdamW divides by sqrt(exp_avg_sq / (1 - beta2^step)) + eps, "
                 "eps added after the root")
    if hp["eps"] != 1e-8 and _close(got, _variant(before, grad, m_prev, v_prev, step, **{**kw, "eps": 1e-8})):
        return T("it matches eps = 1e-8, but this call's eps is {eps:g}: use the eps argument", eps=hp["eps"])
    if _close(got, before):
        return T("param did not change: update it in place (param.mul_, param.addcdiv_, ...), do not rebind it")
    if _close(got, _variant(before, grad, m_prev, v_prev, step, decay=False, **kw)):
        return T("it matches AdamW without weight decay: first shrink the weights, "
                 "param <- param * (1 - lr * weight_decay)")
    if step > 1 and _close(got, _variant(before, grad, m_prev, v_prev, step, correct=False, **kw)):
        return T("it matches AdamW without bias correction: divide exp_avg by (1 - beta1^step) and "
                 "exp_avg_sq by (1 - beta2^step), as in step 4")
    if _close(got, _variant(before, grad, m_prev, v_prev, 1, **kw)) and step > 1:
        return T("it matches AdamW with step = 1: use the step argument in the bias corrections")
    return T("follow the four lines above in order: decay, the two moments, then "
             "param - lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)")


def _unit_check(fn: Callable) -> None:
    """Three steps on a random 1-D shard against torch.optim.AdamW, with the engine's
    hyperparameters and with unusual ones."""
    for hp in (HP, HP_UNUSUAL):
        _unit_check_with(fn, hp)


def _unit_check_with(fn: Callable, hp: dict) -> None:
    g = torch.Generator().manual_seed(0)
    n = 1000
    ref_p = torch.nn.Parameter(torch.randn(n, generator=g))
    ref = torch.optim.AdamW([ref_p], **hp)
    param, exp_avg, exp_avg_sq = ref_p.detach().clone(), torch.zeros(n), torch.zeros(n)
    for step in range(1, 4):
        grad = torch.randn(n, generator=g) * 10.0 ** -step      # shrinking gradients: bias correction shows
        before, m_prev, v_prev = param.clone(), exp_avg.clone(), exp_avg_sq.clone()
        try:
            result = fn(param, grad.clone(), exp_avg, exp_avg_sq, step, hp["lr"], hp["betas"], hp["eps"],
                        hp["weight_decay"])
        except NotImplementedError as exc:
            raise ExerciseCheckFailed(T("adamw_step raises NotImplementedError: write the part marked "
                                        "'Exercise' first")) from exc
        ref_p.grad = grad
        ref.step()
        st = ref.state[ref_p]
        shown = ", ".join(f"{k}={v}" for k, v in hp.items())
        where = T("adamw_step on a random shard of {n} elements, step {step} ({shown})", n=n, step=step,
                  shown=shown)
        note = (T(" (your function returned a value: the engine ignores it; update the tensors in place)")
                if result is not None else "")
        if not _close(exp_avg, st["exp_avg"]):
            b1 = hp["betas"][0]
            coupled = b1 * m_prev + (1 - b1) * (grad + hp["weight_decay"] * before)
            hint = (T("exp_avg <- beta1 * exp_avg + (1 - beta1) * grad, in place (exp_avg.mul_(...).add_(...))")
                    if not _close(exp_avg, coupled) else
                    T("that is coupled weight decay (Adam's L2: grad + weight_decay * param). AdamW decouples "
                      "it: param <- param * (1 - lr * weight_decay), and the moments see the plain grad"))
            raise ExerciseCheckFailed(T("{where}: exp_avg is off by up to {err:.3g}{note}.\n  hint: {hint}",
                                        where=where, err=float((exp_avg - st["exp_avg"]).abs().max()), note=note,
                                        hint=hint))
        if not _close(exp_avg_sq, st["exp_avg_sq"]):
            raise ExerciseCheckFailed(T(
                "{where}: exp_avg_sq is off by up to {err:.3g}{note}.\n"
                "  hint: exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * grad^2, in place", where=where,
                err=float((exp_avg_sq - st["exp_avg_sq"]).abs().max()), note=note))
        if not _close(param, ref_p.detach()):
            raise ExerciseCheckFailed(T(
                "{where}: param is off by up to {err:.3g} from torch.optim.AdamW{note}.\n  hint: {hint}",
                where=where, err=float((param - ref_p.detach()).abs().max()), note=note,
                hint=_param_hint(before, grad, m_prev, v_prev, step, param, hp)))


def _train_with_step(step_fn: Callable) -> dict:
    """On every rank: stage 1 with ShardAdamW(step_fn) stepping this rank's shards, then the
    single-process reference with torch's AdamW."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine, train_reference

    world = zerolab.world_size()
    cfg = _config(world, with_optimizer=False)
    batches = lm_batches(STEPS, GLOBAL_BATCH, CHECK_MODEL["seq_len"], CHECK_MODEL["vocab"], seed=4)
    engine = zerolab.initialize(TinyLM(**CHECK_MODEL), cfg,
                                optimizer=lambda params: ShardAdamW(params, step_fn, **HP))
    train_engine(engine, batches, lm_loss)
    got = engine.full_params()
    shard_numel = [p.numel() for p in engine.stage.masters]
    ref = train_reference(TinyLM(**CHECK_MODEL), cfg, batches, lm_loss,
                          optimizer=lambda params: torch.optim.AdamW(params, **HP))
    return {"worst": _worst(got, ref), "shard_numel": shard_numel,
            "full_numel": sum(g.numel for g in engine.stage.groups)}


def check_adamw_step(fn: Callable, *, world_sizes=WORLD_SIZES) -> None:
    """Check the learner's shard AdamW step, then train stage 1 with it on real ranks."""
    _unit_check(fn)
    lines = []
    for n in world_sizes:
        try:
            per_rank = _crew(n).run(_train_with_step, fn)
        except Exception as exc:
            raise _rank_error(exc, T("stage 1 with your adamw_step on {n} ranks", n=n)) from None
        for rank, res in enumerate(per_rank):
            name, score, err = res["worst"]
            if not score <= 1:
                raise ExerciseCheckFailed(T(
                    "stage 1 on {n} ranks with your adamw_step trained to different parameters than one process "
                    "with torch's AdamW: on rank {rank}, {name} is off by up to {err:.3g} (allowed: {atol:g} + "
                    "{rtol:g} x |value|).\n  hint: the step must use only the tensors it is given, element by "
                    "element (no norms or means over the whole tensor: a shard cuts across parameters)", n=n,
                    rank=rank, name=name, err=err, atol=ATOL, rtol=RTOL))
        mine = sum(per_rank[0]["shard_numel"])
        lines.append(T("{n} ranks (each stepping {mine:,} of {full:,} elements)", n=n, mine=mine,
                       full=per_rank[0]["full_numel"]))
    passed(T("your adamw_step matches torch.optim.AdamW (two sets of hyperparameters), and ZeRO stage 1\n"
             "  stepping only each rank's shard with it trains exactly like one process on")
           + "\n  " + "\n  ".join(lines))
