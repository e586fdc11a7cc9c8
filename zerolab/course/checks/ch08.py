"""Exercise 8 check: tune stage 3's knobs to meet stated goals, checked by running the engine.

The learner writes ``knobs(goal) -> dict``: for each goal ("A", "B", "C") a dict of stage-3 keys
(only :data:`ALLOWED`: ``stage3_param_persistence_threshold``, ``stage3_model_persistence_threshold``,
``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters``, ``stage3_max_reuse_distance``; a key
left out keeps DeepSpeed's default). The model is :data:`SIZES`, an MLP of 8 ``Linear(64, 64)`` layers (8 weights of 4,096
elements, 8 biases of 64) trained at stage 3 on 2 ranks for :data:`STEPS` steps; what is measured
is the last step (the trace recorded, prefetch on):

* **A** "biases whole, weights sharded": every bias persistent, no weight persistent.
* **B** "few calls in little memory": biases persistent, at most :data:`B_CALLS` parameter
  all-gather calls per step (ZeRO's own, in ``ledger.records``; zerolab's order checks are filed
  apart and not counted) and at most :data:`B_PEAK` parameter elements gathered or in flight at
  once.
* **C** "no prefetch, default prefetch bucket": no weight persistent,
  ``stage3_prefetch_bucket_size`` left at DeepSpeed's 5e7, and still no group gathered ahead of
  use.

The rule the goals exercise is DeepSpeed's (``fetch_sub_module``): at every module's fetch, the
root's included, one all-gather of the next groups of the recorded order, taken while fewer than
min(``stage3_max_live_parameters`` - available, ``stage3_prefetch_bucket_size``) elements are
taken, the group that crosses the limit included; *available* counts what is gathered or in
flight. So the peak stays below ``stage3_max_live_parameters`` plus one group (or the module
being fetched), plus what the reuse distance keeps, and only a budget of 0 stops prefetch
(at the root's fetch nothing is available yet).

:func:`check_knobs` runs each answer and one run with DeepSpeed's defaults in the engine on 2
ranks, compares the measurements with the goal, and checks that the trained parameters are
bit-identical to the defaults' (the knobs move memory and calls, never a number). A miss is
described with what was measured and a hint naming the likely mistake. :func:`measure` is the
same measurement, for the learner to try values before asking the check.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...i18n import catalogue, fill, width
from . import ExerciseCheckFailed, crew_of, passed, rank_failure

T = catalogue("checks.ch08")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_knobs", "measure", "GOALS", "ALLOWED", "SIZES", "STEPS", "B_CALLS", "B_PEAK"]

SIZES = (64,) * 9                  # 8 Linear(64, 64): weights 4,096 elements, biases 64
STEPS = 3
WORLD = 2
WEIGHT, BIAS, LAYERS = 64 * 64, 64, 8
# 19 calls: 11 for the weights, as before, and DeepSpeed's 8 refresh calls after the step (one per
# persistent bias, _post_step); 18,432 elements (4.5 weights)
B_CALLS, B_PEAK = 19, 9 * WEIGHT // 2
DEFAULT_PREFETCH = 50_000_000
ALLOWED = ("stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
           "stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance")
GOALS = {
    "A": T.mark("biases whole, weights sharded: all 8 biases (64 elements) persistent, no weight (4,096)"),
    "B": T.mark("biases persistent; at most {calls} parameter all-gather calls per step and at most "
         "{peak:,} elements gathered or in flight at once"),
    "C": T.mark("weights sharded, stage3_prefetch_bucket_size left at DeepSpeed's default (5e7), and "
         "no group gathered ahead of use (0 prefetched)"),
}


def _wrap(text: str) -> str:
    return fill(text, 96, initial_indent="  ", subsequent_indent="        ")


def _hint(hint: str) -> str:
    return _wrap(T("hint: {hint}", hint=hint))


def _ljust(text: str, columns: int) -> str:
    return text + " " * (columns - width(text))      # (a CJK character takes two columns)


def _rjust(text: str, columns: int) -> str:
    return " " * (columns - width(text)) + text


def _run(zero: dict) -> dict:
    """On a rank: train the MLP at stage 3 with ``zero``'s keys; the last step's numbers."""
    import zerolab
    from zerolab.models import MLP, mse_loss, regression_batches

    world = zerolab.world_size()
    engine = zerolab.initialize(MLP(sizes=SIZES, seed=0), {
        "train_batch_size": 4 * world, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3, **zero}})
    try:
        for x, y in regression_batches(STEPS, 4 * world, d_in=SIZES[0], d_out=SIZES[-1]):
            mark, pre = engine.ledger.mark(), engine.stage.prefetches
            engine.reset_peaks()
            engine.backward(mse_loss(engine(x), y))
            engine.step()
        led = engine.ledger.since(mark)
        stage, stats = engine.stage, engine.stage3_stats()
        persistent = stats.persistent_numel
        return {
            # ZeRO's parameter all-gathers (zerolab's own order checks are in led.checks)
            "calls": sum(1 for r in led.records if r.op == "all_gather" and r.tag.startswith("params")),
            "prefetches": stage.prefetches - pre,
            "peak": stats.peak_gathered_numel,
            "persistent": sorted(persistent),
            "param_bytes": engine.memory()["params"],
            "params": engine.full_params(),
        }
    finally:
        engine.close()


def _runs(configs: list[dict]) -> list[dict]:
    return [_run(z) for z in configs]


def _validate(goal: str, zero) -> dict:
    if not isinstance(zero, dict):
        raise ExerciseCheckFailed(T("goal {goal}: knobs({name}) returned {type}", goal=goal, name=repr(goal),
                                    type=type(zero).__name__) + "\n"
                                  + _hint(T("return a dict of stage-3 keys, e.g. {example}",
                                            example="{" + repr(ALLOWED[0]) + ": 100}")))
    bad = sorted(k for k in zero if k not in ALLOWED)
    if bad:
        raise ExerciseCheckFailed(
            T("goal {goal}: key(s) {bad} are not among the knobs of this exercise", goal=goal, bad=bad) + "\n"
            + _hint(T("use only {keys} (the stage stays 3, the model the same)", keys=", ".join(ALLOWED))))
    for k, v in zero.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or int(v) != v:
            raise ExerciseCheckFailed(T("goal {goal}: {key} = {value}", goal=goal, key=k, value=repr(v)) + "\n"
                                      + _hint(T("a whole number of elements, 0 or more (1e5 is fine)")))
    return {k: int(v) for k, v in zero.items()}


def measure(zero: dict, world_size: int = WORLD) -> dict:
    """Run the exercise's model at stage 3 with these keys on ``world_size`` ranks; rank 0's last
    step: calls (parameter all-gather calls), prefetches (groups gathered ahead of use), peak
    (elements gathered or in flight), persistent (their sizes), param_bytes
    (engine.memory()['params'])."""
    zero = _validate("?", zero)
    try:
        out = crew_of(world_size).run(_run, zero)[0]
    except Exception as exc:             # noqa: BLE001
        import zerolab
        if isinstance(exc, zerolab.RankError):
            raise rank_failure(exc, T("the engine with your knobs"), T("see the rank's error above")) from exc
        raise
    out.pop("params")
    return out


def _miss(goal: str, zero: dict, got: dict, what: str, fix: str, hint: str) -> ExerciseCheckFailed:
    """The first line says the mistake and its fix on its own (Jupyter's short display may cut the
    rest); then what was measured, the knobs, the goal and the hint that explains it."""
    return ExerciseCheckFailed(
        T("goal {goal}: {what}; fix: {fix}", goal=goal, what=what, fix=fix) + "\n"
        + T("  measured (last step, rank 0): calls {calls:,}, prefetches {prefetches:,}, peak {peak:,}\n"
            "    and {n} persistent parameters ({numel:,} elements)", calls=got["calls"],
            prefetches=got["prefetches"], peak=got["peak"], n=len(got["persistent"]), numel=sum(got["persistent"]))
        + "\n" + fill(T("your knobs: {zero}", zero=zero), 96, initial_indent="  ", subsequent_indent="    ") + "\n"
        + _wrap(T("the goal: {goal}", goal=T(GOALS[goal], calls=B_CALLS, peak=B_PEAK))) + "\n"
        + _hint(hint))


def _judge(goal: str, zero: dict, got: dict) -> None:
    persistent = got["persistent"]
    biases = persistent.count(BIAS)
    weights = persistent.count(WEIGHT)
    threshold = zero.get("stage3_param_persistence_threshold", 100_000)
    cap = zero.get("stage3_model_persistence_threshold")
    if weights:
        raise _miss(goal, zero, got, T("{n} weight(s) ({numel:,} elements) persistent", n=weights, numel=WEIGHT),
                    f"stage3_param_persistence_threshold < {WEIGHT:,}",
                    T("a parameter is persistent when its numel <= stage3_param_persistence_threshold "
                      "(DeepSpeed's default 1e5 keeps every parameter of this small model whole); "
                      "choose a threshold that a weight ({numel:,}) does not meet", numel=WEIGHT))
    if goal in ("A", "B"):
        if biases < LAYERS:
            fix = f"stage3_param_persistence_threshold >= {BIAS}"
            if cap is not None and cap < LAYERS * BIAS and threshold >= BIAS:
                fix = T("stage3_model_persistence_threshold >= {need}, or drop it", need=LAYERS * BIAS)
                hint = T("stage3_model_persistence_threshold = {cap:,} caps the total persistent elements: the 8 "
                         "biases need {need}", cap=cap, need=LAYERS * BIAS)
            elif threshold == BIAS - 1:
                hint = T("off by one: the rule is numel <= threshold, so a {n}-element bias needs {n} or more", n=BIAS)
            else:
                hint = T("only {biases} of the {layers} biases are persistent: the threshold must be at least {n} "
                         "(numel <= threshold)", biases=biases, layers=LAYERS, n=BIAS)
            raise _miss(goal, zero, got, T("{biases} of {layers} biases persistent", biases=biases, layers=LAYERS),
                        fix, hint)
    if goal == "B":
        reuse = zero.get("stage3_max_reuse_distance", 1_000_000_000)
        live = zero.get("stage3_max_live_parameters", 1_000_000_000)
        bucket = zero.get("stage3_prefetch_bucket_size", DEFAULT_PREFETCH)
        over = T("peak {peak:,} elements > {limit:,}", peak=got["peak"], limit=B_PEAK)
        if got["peak"] > B_PEAK and reuse >= WEIGHT:
            raise _miss(goal, zero, got, over, f"stage3_max_reuse_distance < {WEIGHT:,}",
                        T("stage3_max_reuse_distance = {reuse:,} keeps a weight gathered after its forward when it "
                          "is used again within that many elements (the last layers of forward are the first of "
                          "backward; DeepSpeed's 1e9 keeps the whole model gathered across the turn), and "
                          "stage3_max_live_parameters does not bound what reuse keeps: lower the reuse distance",
                          reuse=reuse))
        if got["peak"] > B_PEAK and live <= B_PEAK:
            raise _miss(goal, zero, got, over, f"stage3_max_live_parameters <= {B_PEAK - WEIGHT:,}",
                        T("stage3_max_live_parameters = {live:,} is a budget, not a cap: a top-up takes groups while "
                          "fewer than max_live - available elements are taken, and the group that crosses the "
                          "budget is taken too, so the peak can pass max_live by up to one weight ({weight:,}): "
                          "leave room for it (max_live + one weight within {limit:,}, or a whole number of "
                          "weights)", live=live, weight=WEIGHT, limit=B_PEAK))
        if got["peak"] > B_PEAK:
            raise _miss(goal, zero, got, over, T("set stage3_max_live_parameters, the budget"),
                        T("stage3_max_live_parameters bounds what is gathered plus in flight when prefetch tops up; "
                          "stage3_prefetch_bucket_size bounds only one top-up, and top-ups repeat at every "
                          "module's fetch: set the budget"))
        if got["calls"] > B_CALLS:
            fix = T("raise stage3_max_live_parameters within the peak")
            if bucket < 4 * WEIGHT:
                fix = T("raise stage3_prefetch_bucket_size")
                hint = T("stage3_prefetch_bucket_size = {bucket:,} caps what one top-up (one all-gather call) may "
                         "take: a larger prefetch bucket lets one call carry more weights, while "
                         "stage3_max_live_parameters keeps the peak", bucket=bucket)
            else:
                hint = T("each top-up is one all-gather call of the groups it takes, at most max_live - available "
                         "elements (the crossing group included): a larger stage3_max_live_parameters lets a call "
                         "carry more weights; raise it as far as the peak allows, and measure with "
                         "zerolab.course.checks.ch08.measure")
            raise _miss(goal, zero, got, T("{calls} all-gather calls per step > {limit}", calls=got["calls"],
                                           limit=B_CALLS), fix, hint)
    if goal == "C":
        if zero.get("stage3_prefetch_bucket_size", DEFAULT_PREFETCH) != DEFAULT_PREFETCH:
            raise _miss(goal, zero, got, T("stage3_prefetch_bucket_size was changed"),
                        T("leave it at 5e7 (drop the key)"),
                        T("leave the prefetch bucket at DeepSpeed's default (drop the key or set 5e7): another knob "
                          "can stop prefetching"))
        if got["prefetches"] > 0:
            live = zero.get("stage3_max_live_parameters", 1_000_000_000)
            raise _miss(goal, zero, got, T("{n} group(s) gathered ahead of use", n=got["prefetches"]),
                        T("lower stage3_max_live_parameters"),
                        T("stage3_max_live_parameters = {live:,} still leaves room: a top-up runs at every "
                          "module's fetch, the root's included, where nothing is gathered yet (available 0), and it "
                          "keeps taking groups while it has taken fewer than max_live - available elements, the "
                          "group that crosses that included; prefetch stops only where max_live - available <= 0 "
                          "at every fetch (a module's own gather is never blocked, only prefetch)", live=live))


def check_knobs(knobs: Callable[[str], dict], *, verbose: bool = True) -> None:
    """Check ``knobs(goal) -> dict`` for the goals A, B, C on 2 ranks (see the module doc)."""
    answers = {g: _validate(g, knobs(g)) for g in GOALS}      # an unfinished exercise raises here
    try:
        results = crew_of(WORLD).run(_runs, [{}] + list(answers.values()))
    except Exception as exc:             # noqa: BLE001
        import zerolab
        if isinstance(exc, zerolab.RankError):
            raise rank_failure(exc, T("the engine with your knobs"), T("see the rank's error above")) from exc
        raise
    ref, *mine = results[0]
    for (goal, zero), got in zip(answers.items(), mine):
        _judge(goal, zero, got)
        if not all(torch.equal(ref["params"][k], got["params"][k]) for k in ref["params"]):
            raise ExerciseCheckFailed(T("goal {goal}: the trained parameters differ from the run with DeepSpeed's "
                                        "defaults (this should never happen: report it)", goal=goal))
    if verbose:
        print(T("MLP{sizes}x{layers} at stage 3 on {n} ranks, last of {steps} steps, rank 0:", sizes=SIZES[:2],
                layers=LAYERS, n=WORLD, steps=STEPS))
        print("  " + _ljust(T("run"), 10) + _rjust(T("all-gather calls"), 17) + _rjust(T("prefetched"), 11)
              + _rjust(T("peak"), 8) + _rjust(T("persistent"), 11) + _rjust(T("param bytes"), 12))
        for name, got in [(T("defaults"), ref)] + list(zip(answers, mine)):
            print(f"  {_ljust(name, 10)}{got['calls']:>17}{got['prefetches']:>11}"
                  f"{got['peak']:>8,}{sum(got['persistent']):>11,}{got['param_bytes']:>12,}")
        print(T("  trained parameters: bit-identical in all four runs"))
    passed(T("your knobs meet goals A, B and C in the real engine on 2 ranks"))
