"""Chapter 4 check: the learner's dynamic loss-scale rule, driving the real engine.

The learner writes ``update_scale(state, overflow) -> None``: one call per optimizer step,
mutating the scaler's state as DeepSpeed 0.19.8's ``DynamicLossScaler.update_scale`` does.
``state`` holds the four fields that change (``cur_scale``, ``cur_hysteresis``,
``last_overflow_iter``, ``cur_iter``) and the five settings that do not (``scale_factor``,
``scale_window``, ``min_scale``, ``delayed_shift`` (the config's ``hysteresis``),
``consecutive_hysteresis``). See :mod:`zerolab.precision.loss_scaler` for the rule in words.

:func:`check_update_scale` tests it twice against zerolab's own :class:`DynamicLossScaler`
(itself tested against traces recorded from DeepSpeed):

1. *Sequences*, in this process: a few scaler settings, each fed a string of overflow flags;
   after every call the learner's state must equal the reference's.
2. *The engine, on real ranks*: fp16 training of a TinyLM at ZeRO stage 2 on a crew of 2. A
   :class:`RuleLossScaler` (a DynamicLossScaler whose ``update_scale`` calls the learner's
   rule) replaces ``engine.scaler`` right after ``zerolab.initialize``; at chosen steps rank 1's
   loss is multiplied by inf (a bad batch on one rank). Every update is compared with a
   reference scaler fed the same overflow flag; then the whole run is repeated with the
   engine's own scaler, and the two runs must use the same loss scale at every step, skip the
   same steps on every rank and end with bit-identical fp32 master weights.

The first difference fails the check with :class:`ExerciseCheckFailed`, naming the iteration,
the state before the call, the expected and the learner's state after it, and the rule to look at.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ... import i18n
from ...precision.loss_scaler import DynamicLossScaler, LossScaleAtMinimum, _fmt
from . import ExerciseCheckFailed, passed, rank_failure

T = i18n.catalogue("checks.ch04")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_update_scale", "new_state", "state_of", "RuleLossScaler", "SEQUENCES", "ENGINE_CASE"]

CHANGING = ("cur_scale", "cur_hysteresis", "last_overflow_iter", "cur_iter")
SETTINGS = ("scale_factor", "scale_window", "min_scale", "delayed_shift", "consecutive_hysteresis")
RAISES = "raises LossScaleAtMinimum"     # what the reference does at the floor


def new_state(init_scale: float = 2.0 ** 16, scale_window: int = 1000, min_scale: float = 1.0,
              delayed_shift: int = 2, consecutive_hysteresis: bool = False, scale_factor: float = 2.0) -> dict:
    """A fresh scaler state, as ``DynamicLossScaler.__init__`` sets it (argument names as DeepSpeed's)."""
    return state_of(DynamicLossScaler(init_scale=init_scale, scale_factor=scale_factor, scale_window=scale_window,
                                      min_scale=min_scale, delayed_shift=delayed_shift,
                                      consecutive_hysteresis=consecutive_hysteresis))


def state_of(scaler: DynamicLossScaler) -> dict:
    """The fields the exercise's ``update_scale`` reads and writes, from a scaler."""
    return {k: getattr(scaler, k) for k in CHANGING + SETTINGS}


def _scaler_from(state: Mapping) -> DynamicLossScaler:
    s = DynamicLossScaler(init_scale=state["cur_scale"], scale_factor=state["scale_factor"],
                          scale_window=state["scale_window"], min_scale=state["min_scale"],
                          delayed_shift=state["delayed_shift"],
                          consecutive_hysteresis=state["consecutive_hysteresis"])
    for k in CHANGING:
        setattr(s, k, state[k])
    return s


# -- one call, the learner's and the reference's ---------------------------------------------

def _call_rule(rule: Callable, state: dict, overflow: bool) -> dict | str:
    """Run the learner's rule on a copy of ``state``; the state after, or RAISES."""
    work = dict(state)
    try:
        result = rule(work, overflow)
    except NotImplementedError as exc:
        raise ExerciseCheckFailed(T("update_scale is not written yet (it raised NotImplementedError: {error}). "
                                    "Fill in the cell above, run it, then this check again.", error=exc)) from exc
    except Exception as exc:       # noqa: BLE001 - any error is the learner's to see
        if state["cur_scale"] == state["min_scale"] and overflow:
            return RAISES          # the floor: DeepSpeed raises; any exception will do
        raise ExerciseCheckFailed(T(
            "update_scale raised {name}: {error}\n  on the call with overflow={overflow} and state {state}\n"
            "  hint: only an overflow at cur_scale == min_scale may raise (LossScaleAtMinimum); call "
            "update_scale(new_state(), {overflow}) by hand to see the line", name=type(exc).__name__, error=exc,
            overflow=overflow, state=_show(state))) from exc
    if result is not None:
        hint = (T(" It returned a dict: write into the one you were given instead (state['cur_scale'] = ...).")
                if isinstance(result, Mapping) else "")
        raise ExerciseCheckFailed(T("update_scale returned {type}; it should return None and change `state` in "
                                    "place.{hint}", type=type(result).__name__, hint=hint))
    missing = [k for k in CHANGING + SETTINGS if k not in work]
    if missing:
        raise ExerciseCheckFailed(T("after update_scale the state has no {missing}; change the values, do not "
                                    "remove keys", missing=", ".join(map(repr, missing))))
    changed = [k for k in SETTINGS if work[k] != state[k]]
    if changed:
        raise ExerciseCheckFailed(T("update_scale changed the setting(s) {changed}; only {changing} change from "
                                    "call to call", changed=", ".join(map(repr, changed)),
                                    changing=", ".join(CHANGING)))
    for k in CHANGING:
        v = work[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ExerciseCheckFailed(T("after update_scale, state[{key}] is {value}; it should be a finite number",
                                        key=repr(k), value=repr(v)))
    return {k: work[k] for k in CHANGING}


def _reference(state: Mapping, overflow: bool) -> dict | str:
    s = _scaler_from(state)
    try:
        s.update_scale(overflow)
    except LossScaleAtMinimum:
        return RAISES
    return {k: getattr(s, k) for k in CHANGING}


def _show(d: Mapping | str) -> str:
    if isinstance(d, str):
        return d
    shown = [f"{k}: {_fmt(d[k]) if isinstance(d[k], float) else repr(d[k])}" for k in CHANGING if k in d]
    return "{" + ", ".join(shown) + "}"


def _hint(before: Mapping, overflow: bool, want: dict | str, got: dict | str) -> str:
    """Which part of the rule the first difference points at."""
    if want == RAISES:
        return T("the gradients overflowed and the scale is already min_scale, so it cannot be lowered: "
                 "DeepSpeed stops the run here. Raise LossScaleAtMinimum(state['cur_scale'], state['cur_iter']) "
                 "(only when the hysteresis is used up, i.e. when the scale would be cut)")
    if got == RAISES:
        if before["cur_hysteresis"] > 1 and before["delayed_shift"] > 1:
            return T("at min_scale, but cur_hysteresis is still {h}: this overflow is tolerated like any other "
                     "(cur_hysteresis - 1, the scale stays); raise only when the hysteresis is used up and the scale "
                     "would be cut", h=before["cur_hysteresis"])
        return T("only raise when an overflow would cut the scale and cur_scale == min_scale already")
    assert isinstance(want, dict) and isinstance(got, dict)
    diff = [k for k in CHANGING if got[k] != want[k]]
    old = before["cur_scale"]
    if "cur_iter" in diff:
        return T("cur_iter counts the calls: add 1 at the end of every call, overflow or not")
    if overflow:
        cut_wanted, cut_got = want["cur_scale"] != old, got["cur_scale"] != old
        h, d = before["cur_hysteresis"], before["delayed_shift"]
        if cut_wanted and not cut_got:
            return T("hysteresis is used up (delayed_shift = {d}, cur_hysteresis = {h}): when delayed_shift == 1 "
                     "or cur_hysteresis == 1, an overflow lowers the scale to max(cur_scale / scale_factor, "
                     "min_scale)", d=d, h=h)
        if cut_got and not cut_wanted:
            return T("hysteresis: cur_hysteresis is {h}, so this overflow is tolerated: it only lowers "
                     "cur_hysteresis by one, and the scale stays", h=h)
        if "cur_scale" in diff:
            if want["cur_scale"] == before["min_scale"]:
                return T("never below the floor: the new scale is max(cur_scale / scale_factor, min_scale)")
            f = before["scale_factor"]
            if f != 2 and got["cur_scale"] == old / 2:
                return T("you divided by 2, but this scaler's scale_factor is {f:g}: divide by "
                         "state['scale_factor']", f=f)
            return T("a cut divides the scale by scale_factor ({f:g}), once", f=f)
        if "cur_hysteresis" in diff:
            if cut_wanted:
                return T("a cut leaves cur_hysteresis as it is (DeepSpeed refills it only when the scale grows, or "
                         "on every clean step with consecutive_hysteresis); so after the first cut every overflow "
                         "cuts")
            return T("a tolerated overflow lowers cur_hysteresis by exactly one")
        if "last_overflow_iter" in diff:
            return T("every overflow, tolerated or not, restarts the count of clean steps: "
                     "last_overflow_iter = cur_iter (this call's iteration, before adding 1)")
    else:
        stable = before["cur_iter"] - before["last_overflow_iter"] - 1
        w = before["scale_window"]
        grow_wanted, grow_got = want["cur_scale"] != old, got["cur_scale"] != old
        window = T("stable = cur_iter - last_overflow_iter - 1 = {it} - ({last}) - 1 = {stable} clean steps came "
                   "before this one", it=before["cur_iter"], last=before["last_overflow_iter"], stable=stable)
        if grow_wanted and not grow_got:
            return T("the window: {window}; it is > 0 and a multiple of scale_window = {w}, so the scale doubles now "
                     "(DeepSpeed 0.19.8 doubles on the (window + 1)-th clean step in a row)", window=window, w=w)
        if grow_got and not grow_wanted:
            extra = (T(" (older DeepSpeed used cur_iter - last_overflow_iter without the - 1; 0.19.8 has it)")
                     if (stable + 1) % w == 0 else "")
            return T("the window: {window}; the scale doubles only when that is > 0 and a multiple of "
                     "scale_window = {w}{extra}", window=window, w=w, extra=extra)
        if "cur_scale" in diff:
            f = before["scale_factor"]
            if f != 2 and got["cur_scale"] == old * 2:
                return T("you doubled, but this scaler's scale_factor is {f:g}: multiply by "
                         "state['scale_factor']", f=f)
            return T("a growth multiplies the scale by scale_factor ({f:g}), once", f=f)
        if "cur_hysteresis" in diff:
            if before["consecutive_hysteresis"]:
                return T("with consecutive_hysteresis every clean step refills cur_hysteresis = delayed_shift")
            if grow_wanted:
                return T("when the scale grows, the hysteresis is refilled: cur_hysteresis = delayed_shift")
            return T("without consecutive_hysteresis, a clean step that does not grow the scale leaves "
                     "cur_hysteresis alone")
        if "last_overflow_iter" in diff:
            return T("a clean step leaves last_overflow_iter alone")
    return T("compare your state with the expected one field by field")


def _mismatch(where: str, it: int, before: Mapping, overflow: bool, want, got) -> ExerciseCheckFailed:
    return ExerciseCheckFailed(T(
        "{where}: the first difference is at iteration {it} (overflow={overflow}).\n"
        "  state before: {before}\n"
        "  expected:     {want}\n"
        "  yours:        {got}\n"
        "  hint: {hint}", where=where, it=it, overflow=overflow, before=_show(before), want=_show(want),
        got=_show(got), hint=_hint(before, overflow, want, got)))


def _same(want, got) -> bool:
    if isinstance(want, str) or isinstance(got, str):
        return want == got
    return all(got[k] == want[k] for k in CHANGING)


# -- 1. sequences ----------------------------------------------------------------------------

# (what it exercises, scaler settings, overflow flags: "1" = this step's gradients overflowed)
SEQUENCES = [
    (T.mark("DeepSpeed's defaults: 2^16, window 1000, hysteresis 2"),
     dict(init_scale=2.0 ** 16, scale_window=1000, delayed_shift=2), "11" + "0" * 1002 + "1" + "0" * 5 + "1"),
    (T.mark("the anchor trace: window 2, no hysteresis"), dict(init_scale=2.0 ** 16, scale_window=2, delayed_shift=1),
     "010000000"),
    (T.mark("hysteresis 3, not refilled by a cut"), dict(init_scale=2.0 ** 10, scale_window=3, delayed_shift=3),
     "1110101000000011"),
    (T.mark("consecutive_hysteresis: refilled on every clean step"),
     dict(init_scale=2.0 ** 12, scale_window=4, delayed_shift=2, consecutive_hysteresis=True),
     "1010101000001100000110"),
    (T.mark("the floor: min_scale 20 (the cut is clamped to it)"), dict(init_scale=48.0, scale_window=2, min_scale=20.0,
                                                                delayed_shift=1), "1100100000"),
    (T.mark("scale_factor 3: cuts divide by 3, growths multiply by 3"),
     dict(init_scale=3.0 ** 8, scale_factor=3.0, scale_window=2, delayed_shift=1, min_scale=1.0),
     "0010001100000"),
    (T.mark("at the floor with hysteresis left: tolerated twice, then the run stops"),
     dict(init_scale=8.0, scale_window=4, min_scale=8.0, delayed_shift=3), "1101"),
    (T.mark("at the floor: an overflow that cannot lower the scale stops the run"),
     dict(init_scale=4.0, scale_window=5, min_scale=1.0, delayed_shift=1), "111"),
]


def check_sequences(rule: Callable) -> int:
    """Feed every sequence to the learner's rule and to the reference; return the calls compared."""
    calls = 0
    for label, settings, flags in SEQUENCES:
        state = new_state(**settings)
        for ch in flags:
            overflow = ch == "1"
            before = dict(state)
            want, got = _reference(state, overflow), _call_rule(rule, state, overflow)
            calls += 1
            if not _same(want, got):
                raise _mismatch(T("sequence '{label}' (flags {flags})", label=T.text(label),
                                  flags=flags if len(flags) < 40 else flags[:12] + "..."),
                                before["cur_iter"], before, overflow, want, got)
            if want == RAISES:
                break
            state.update(got)
    return calls


# -- 2. the engine, on real ranks ------------------------------------------------------------

class RuleLossScaler(DynamicLossScaler):
    """A DynamicLossScaler whose ``update_scale`` is a function ``rule(state, overflow)``.

    It keeps a reference DynamicLossScaler beside it, fed the same overflow flags, and records
    every call as ``(iteration, overflow, state before, expected after, yours after)`` in
    ``self.calls``, so a difference can be reported at the first iteration it appears. The
    engine only sees ``cur_scale`` (through ``engine.loss_scale``) and the returned log line.
    """

    def __init__(self, rule: Callable, like: DynamicLossScaler):
        super().__init__(init_scale=like.cur_scale, scale_factor=like.scale_factor, scale_window=like.scale_window,
                         min_scale=like.min_scale, delayed_shift=like.delayed_shift,
                         consecutive_hysteresis=like.consecutive_hysteresis)
        self.rule = rule
        self.calls: list[tuple[int, bool, dict, Any, Any]] = []

    def update_scale(self, overflow: bool) -> str | None:
        overflow = bool(overflow)
        before = state_of(self)
        want, got = _reference(before, overflow), _call_rule(self.rule, before, overflow)
        self.calls.append((before["cur_iter"], overflow, before, want, got))
        if got == RAISES:
            raise LossScaleAtMinimum(self.cur_scale, self.cur_iter)
        for k in CHANGING:
            setattr(self, k, got[k])
        self.history.append((before["cur_iter"], self.cur_scale, overflow))
        old, new = before["cur_scale"], self.cur_scale
        if overflow:
            return (f"overflow: skipping step, loss scale {_fmt(old)} -> {_fmt(new)}" if new != old else
                    f"overflow: skipping step, loss scale stays {_fmt(old)}")
        return f"loss scale {_fmt(old)} -> {_fmt(new)}" if new != old else None


# fp16 TinyLM at ZeRO stage 2 on 2 ranks; rank 1's loss is multiplied by inf at these steps.
# With the reference rule this gives: step 2 tolerated (hysteresis 2 -> 1); 4 and 5 cut
# 1024 -> 512 -> 300 (no refill in between; the second cut clamped to min_loss_scale 300);
# growth to 600 at 9, refilling the hysteresis; 11 tolerated, 13 cut to the floor again;
# growth at 17, 20 and 23 (every 3 clean steps); 25 tolerated; growth at 29.
ENGINE_CASE = dict(
    fp16={"enabled": True, "loss_scale": 0, "initial_scale_power": 10, "loss_scale_window": 3,
          "hysteresis": 2, "min_loss_scale": 300},
    steps=30, bad_steps=(2, 4, 5, 11, 13, 25), bad_rank=1)


def _engine_config(fp16: dict) -> dict:
    return {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
            "zero_optimization": {"stage": 2, "reduce_bucket_size": 2000},
            "fp16": dict(fp16)}


def run_engine(rule: Callable | None, case: dict | None = None) -> dict:
    """On every rank: train with the learner's rule (``rule``) or the engine's own scaler (None)."""
    import torch

    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss

    case = dict(ENGINE_CASE if case is None else case)
    rank, world = zerolab.rank(), zerolab.world_size()
    engine = zerolab.initialize(TinyLM(), _engine_config(case["fp16"]))
    if rule is not None:
        engine.scaler = RuleLossScaler(rule, engine.scaler)
    micro = 4
    scales, skipped_at = [], []
    for step, (x, y) in enumerate(lm_batches(case["steps"], micro * world, seed=4)):
        x, y = x[rank * micro:(rank + 1) * micro], y[rank * micro:(rank + 1) * micro]
        scales.append(engine.loss_scale)            # the scale this step's backward uses
        loss = lm_loss(engine(x), y)
        if step in case["bad_steps"] and rank == case["bad_rank"]:
            loss = loss * float("inf")              # a bad batch, on one rank only
        before = engine.skipped_steps
        engine.backward(loss)
        engine.step()
        if engine.skipped_steps > before:
            skipped_at.append(step)
    masters = [m.detach().clone() for m in engine.stage.masters]
    return {"scales": scales, "skipped_at": skipped_at, "masters": masters,
            "calls": getattr(engine.scaler, "calls", None), "log": list(engine.log),
            "masters_fp32": all(m.dtype == torch.float32 for m in masters)}


def _both_runs(rule: Callable, language: str = "en") -> tuple[dict, dict]:
    with i18n.using(language):          # a rank speaks the language of the notebook that started it
        return run_engine(rule), run_engine(None)


def check_engine(rule: Callable, world_size: int = 2, crew=None) -> tuple[list[dict], list[dict]]:
    import torch

    import zerolab

    try:
        if crew is None:
            with zerolab.Crew(world_size, echo=False) as own:
                results = own.run(_both_runs, rule, i18n.lang())
        else:
            results = crew.run(_both_runs, rule, i18n.lang())
    except zerolab.RankError as exc:       # the rule raised on a rank: say so, with the rank's traceback
        raise rank_failure(exc, T("the engine run on {n} ranks (inside your update_scale)", n=world_size),
                           T("update_scale raised on a rank; the rank's traceback "
                             "(zerolab.course.checks.full_tracebacks(), then run again) names the line")) from exc
    mine, ref = [r[0] for r in results], [r[1] for r in results]
    where = T("the engine (fp16 TinyLM, ZeRO stage 2, {n} ranks; rank {bad}'s loss times inf at steps {steps})",
              n=world_size, bad=ENGINE_CASE["bad_rank"], steps=", ".join(map(str, ENGINE_CASE["bad_steps"])))
    for it, overflow, before, want, got in mine[0]["calls"]:
        if not _same(want, got):
            raise _mismatch(where, it, before, overflow, want, got)
    for r in range(1, world_size):
        if mine[r]["scales"] != mine[0]["scales"]:
            k = next(i for i, (a, b) in enumerate(zip(mine[0]["scales"], mine[r]["scales"])) if a != b)
            raise ExerciseCheckFailed(T("{where}: ranks 0 and {r} used different loss scales from step {k} ({a} vs "
                                        "{b}); the rule must depend only on the state and the overflow flag",
                                        where=where, r=r, k=k, a=mine[0]["scales"][k], b=mine[r]["scales"][k]))
    for step, (a, b) in enumerate(zip(mine[0]["scales"], ref[0]["scales"])):
        if a != b:
            raise ExerciseCheckFailed(T("{where}: at step {step} the engine used loss scale {a} with your rule and "
                                        "{b} with zerolab's", where=where, step=step, a=_fmt(a), b=_fmt(b)))
    for r in range(world_size):
        if mine[r]["skipped_at"] != ref[r]["skipped_at"]:
            raise ExerciseCheckFailed(T("{where}: rank {r} skipped steps {mine} with your rule, {ref} with zerolab's",
                                        where=where, r=r, mine=mine[r]["skipped_at"], ref=ref[r]["skipped_at"]))
        if not all(torch.equal(a, b) for a, b in zip(mine[r]["masters"], ref[r]["masters"])):
            raise ExerciseCheckFailed(T("{where}: rank {r}'s fp32 master weights differ at the end of the run "
                                        "although every loss scale matched", where=where, r=r))
    return mine, ref


def check_update_scale(rule: Callable, *, world_size: int = 2, crew=None, verbose: bool = True) -> None:
    """Check ``rule(state, overflow) -> None`` against DeepSpeed 0.19.8's rule, alone and in the engine.

    Pass a running :class:`zerolab.Crew` as ``crew`` to reuse it. Raises
    :class:`ExerciseCheckFailed` at the first iteration where the learner's state differs.
    """
    calls = check_sequences(rule)          # fast, and an unfinished exercise fails here
    if verbose:
        print(T("sequences: {n} scaler settings, {calls} calls, every state equal to the reference",
                n=len(SEQUENCES), calls=calls))
    mine, ref = check_engine(rule, world_size=world_size, crew=crew)
    if verbose:
        scales, skipped = mine[0]["scales"], mine[0]["skipped_at"]
        print(T("engine: {steps} fp16 steps on {n} ranks; loss scale per step with your rule:", steps=len(scales),
                n=world_size))
        for i in range(0, len(scales), 15):          # 15 per line: under 100 characters
            print(f"  {i:>2}-{min(i + 15, len(scales)) - 1:<2}  " + " ".join(f"{_fmt(s):>5}" for s in scales[i:i + 15]))
        print(T("  skipped steps (every rank): {skipped}", skipped=skipped))
        print(T("  fp32 master weights after the run: bit-identical to the run with zerolab's scaler on every rank"))
    passed(T("your update_scale follows DeepSpeed 0.19.8's rule in {calls} sequence calls\n"
             "  and drives the real engine on {n} ranks step for step", calls=calls, n=world_size))
