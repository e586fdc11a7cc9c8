"""Exercise 6 check: the bucket assignment, written by the learner, run in the real engine.

The learner writes :func:`zerolab.memory.flat.bucket_params`, the rule that packs gradients into the
boxes of chapter 6::

    def bucket_params(named, bucket_numel):
        # named: [(name, parameter), ...] already in gradient order
        # return: a list of buckets, each a list of indices into `named`

A bucket takes parameters in the order given until the next one would make it hold more than
``bucket_numel`` elements; then it is closed and a new one opened. A parameter larger than a
bucket gets a bucket of its own (DeepSpeed's rule). No bucket is empty, every index appears
exactly once, in order.

:func:`check_bucket_params` runs in two parts:

1. *Alone*: the learner's function on a handful of parameter lists (small parameters, a bucket
   filled exactly to the limit, parameters larger than a bucket, everything in one bucket,
   everything alone, a real model's gradient order), each compared with zerolab's rule. The
   first difference is described with a hint that names the likely mistake: ``>=`` instead of
   ``>`` at the boundary, an empty bucket before an oversized parameter, a bucket that
   overflows, the order changed, a parameter left out.
2. *In the engine*: on 2 ranks, ``zerolab.zero.params.bucket_params`` (the rule stages 1-3 pack their
   gradient buckets by) is replaced by the learner's function for the duration of the run;
   an MLP trains at stages 1 and 2, and the collectives in the ledger (calls, elements, bytes)
   and the trained weights are compared with the same runs using zerolab's own rule.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...i18n import catalogue, fill
from . import ExerciseCheckFailed, passed, rank_failure

T = catalogue("checks.ch06")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_bucket_params", "reference_bucket_params", "CASES", "ENGINE_SIZES", "ENGINE_BUCKETS"]

# (what, parameter sizes in gradient order, bucket_numel)
CASES = (
    (T.mark("small parameters"), (30, 20, 25, 10, 40, 5, 35), 100),
    (T.mark("buckets filled exactly to the limit"), (60, 40, 100, 50, 50, 1), 100),
    (T.mark("parameters larger than a bucket"), (500, 30, 40, 250, 20, 70, 300), 100),
    (T.mark("everything fits in one bucket"), (10,) * 7, 1000),
    (T.mark("every parameter larger than a bucket"), (7, 9, 8), 5),
)
# The engine runs: MLP(sizes=ENGINE_SIZES); gradient order (reversed) is b8, w192, b24, w576,
# b24, w288: at 224 a bucket filled exactly, then oversized weights alone; at 100 every parameter
# alone but the first; at 1000 two buckets.
ENGINE_SIZES = (12, 24, 24, 8)
ENGINE_BUCKETS = (224, 100, 1000)
ENGINE_STEPS = 2


def reference_bucket_params(named, bucket_numel: int) -> list[list[int]]:
    from zerolab.memory.flat import bucket_params
    return bucket_params(named, bucket_numel)


def _named(sizes) -> list[tuple[str, torch.nn.Parameter]]:
    return [(f"p{i}", torch.nn.Parameter(torch.zeros(n))) for i, n in enumerate(sizes)]


def _model_case() -> tuple[str, tuple[int, ...], int]:
    from zerolab.models import MLP
    named = list(reversed(list(MLP(sizes=(13, 64, 64, 32, 7)).named_parameters())))
    return (T.mark("an MLP's parameters in gradient order"), tuple(p.numel() for _, p in named), 4200)


def _show(buckets, sizes) -> str:
    """[[0, 1], [2]] with sizes (30, 20, 70) -> '[0, 1] (50) | [2] (70)'."""
    parts = []
    for b in buckets:
        try:
            parts.append(f"{list(b)} ({sum(sizes[i] for i in b)})")
        except Exception:          # noqa: BLE001  (an index out of range: show it as it is)
            parts.append(f"{b!r}")
    text = " | ".join(parts)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrap(text: str) -> str:
    """A hint in lines under 100 characters."""
    return fill(text, 96, initial_indent="  ", subsequent_indent="        ")


def _well_formed(got) -> bool:
    return (isinstance(got, (list, tuple)) and
            all(isinstance(b, (list, tuple)) and all(isinstance(i, int) for i in b) for b in got))


def _diagnose(got, want, sizes, limit) -> str:
    """The hint for a wrong assignment (got != want)."""
    if not _well_formed(got):
        return T("return a list of buckets, each a list of indices (ints) into named, e.g. [[0, 1], [2]]")
    flat = [i for b in got for i in b]
    if any(len(b) == 0 for b in got):
        return T("an empty bucket: a parameter larger than a bucket must close the bucket only if "
                 "it holds something (if current and size + n > bucket_numel)")
    if sorted(flat) != list(range(len(sizes))):
        missing = sorted(set(range(len(sizes))) - set(flat))
        if missing:
            return T("parameter(s) {missing} are in no bucket (did the last bucket get appended after the loop?)",
                     missing=missing)
        return T("a parameter is in two buckets (or an index out of range): each index exactly once")
    if flat != list(range(len(sizes))):
        return T("wrong order: keep the parameters in the order given (the gradient order): do "
                 "not sort, reverse or regroup them")
    for b in got:
        total = sum(sizes[i] for i in b)
        if len(b) > 1 and total > limit:
            return T("bucket {bucket} holds {total} elements > bucket_numel {limit}: close the "
                     "bucket before adding a parameter that would overflow it; a parameter "
                     "larger than a bucket goes alone", bucket=list(b), total=total, limit=limit)
    for b, nxt in zip(got, got[1:]):
        total = sum(sizes[i] for i in b)
        if total + sizes[nxt[0]] == limit:
            return T("off by one at the boundary: bucket {bucket} ({total}) could still take "
                     "parameter {index} ({size}), filling it to exactly {limit}; "
                     "close only when size + n > bucket_numel (not >=)", bucket=list(b), total=total,
                     index=nxt[0], size=sizes[nxt[0]], limit=limit)
        if total + sizes[nxt[0]] < limit:
            return T("bucket {bucket} ({total} elements) was closed although parameter "
                     "{index} ({size}) still fits: close a bucket only when the next "
                     "parameter would overflow it", bucket=list(b), total=total, index=nxt[0], size=sizes[nxt[0]])
    return T("compare your buckets with the expected ones above")


def check_alone(fn: Callable) -> int:
    """Part 1: the learner's function on CASES (and a real model's order). Returns the count."""
    cases = list(CASES) + [_model_case()]
    for what, sizes, limit in cases:
        want = reference_bucket_params(_named(sizes), limit)
        got = fn(_named(sizes), limit)
        if _well_formed(got):
            got = [list(b) for b in got]
        if got != want:
            raise ExerciseCheckFailed(
                T("{what}: sizes {sizes}, bucket_numel {limit}\n  expected: {want}\n  yours:    {got}\n",
                  what=T.text(what), sizes=list(sizes), limit=limit, want=_show(want, sizes),
                  got=_show(got, sizes) if _well_formed(got) else repr(got)[:80])
                + _wrap(T("hint: ") + _diagnose(got, want, sizes, limit)))
    return len(cases)


def _engine_runs(fn: Callable | None) -> dict:
    """On a rank: train the MLP at stages 1 and 2 for each bucket size, with ``fn`` as
    zerolab.zero.params.bucket_params (None: zerolab's own); the ledger's collectives and the weights."""
    import zerolab
    import zerolab.zero.params as replicated
    from zerolab.models import MLP, mse_loss, regression_batches
    from zerolab.zero.reference import train_engine

    saved = replicated.bucket_params
    out = {}
    try:
        if fn is not None:
            replicated.bucket_params = fn
        for stage in (1, 2):
            for limit in ENGINE_BUCKETS:
                engine = zerolab.initialize(MLP(sizes=ENGINE_SIZES, seed=1), {
                    "train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1e-2}},
                    "zero_optimization": {"stage": stage, "reduce_bucket_size": limit,
                                          "overlap_comm": False}})
                mark = engine.ledger.mark()
                train_engine(engine, regression_batches(ENGINE_STEPS, 8, d_in=ENGINE_SIZES[0],
                                                        d_out=ENGINE_SIZES[-1]), mse_loss)
                recs = [(r.op, r.numel, r.bytes) for r in engine.ledger.since(mark).records
                        if r.tag.startswith(("grads", "params"))]
                weights = [p.detach().clone() for p in engine.module.parameters()]
                out[stage, limit] = {"records": recs, "weights": weights}
    finally:
        replicated.bucket_params = saved
    return out


def _both(fn: Callable) -> tuple[dict, dict]:
    return _engine_runs(fn), _engine_runs(None)


def check_engine(fn: Callable, world_size: int = 2) -> dict:
    """Part 2: the learner's function cuts the engine's buckets on ``world_size`` ranks."""
    import zerolab

    try:
        with zerolab.Crew(world_size, echo=False, threads=1) as crew:
            results = crew.run(_both, fn)
    except zerolab.RankError as exc:
        raise rank_failure(exc, T("the engine on {n} ranks (inside your bucket_params)", n=world_size),
                           T("bucket_params raised on a rank; zerolab.course.checks.full_tracebacks(), then "
                             "run again, shows the line")) from exc
    for r, (mine, ref) in enumerate(results):
        for key in ref:
            stage, limit = key
            where = T("the engine, stage {stage}, reduce_bucket_size {limit}, rank {rank}", stage=stage,
                      limit=limit, rank=r)
            if mine[key]["records"] != ref[key]["records"]:
                got = [f"{op} {n}" for op, n, _ in mine[key]["records"]][:6]
                want = [f"{op} {n}" for op, n, _ in ref[key]["records"]][:6]
                raise ExerciseCheckFailed(
                    T("{where}: the collectives differ from zerolab's\n  expected: {want}\n  yours:    {got}\n"
                      "  hint: the engine sends one collective per bucket you return", where=where,
                      want=", ".join(want), got=", ".join(got)))
            if not all(torch.equal(a, b) for a, b in zip(mine[key]["weights"], ref[key]["weights"])):
                raise ExerciseCheckFailed(T("{where}: the trained weights differ from zerolab's although the "
                                            "collectives matched", where=where))
    return results[0][1]


def check_bucket_params(fn: Callable, *, world_size: int = 2, verbose: bool = True) -> None:
    """Check ``fn(named, bucket_numel) -> list of index lists`` against zerolab's rule, alone
    and as the engine's bucket assignment on ``world_size`` ranks."""
    n = check_alone(fn)               # fast, and an unfinished exercise fails here
    if verbose:
        print(T("alone: {n} parameter lists, every bucket as zerolab cuts it", n=n))
    ref = check_engine(fn, world_size)
    if verbose:
        print(T("engine: MLP{sizes} on {n} ranks, {steps} steps, your buckets inside zerolab",
                sizes=ENGINE_SIZES, n=world_size, steps=ENGINE_STEPS))
        for (stage, limit), run in ref.items():
            recs = run["records"]
            grads = [n for op, n, _ in recs if op in ("all_reduce", "reduce", "reduce_scatter")]
            ops = sorted({op for op, _, _ in recs})
            print(T("  stage {stage}, reduce_bucket_size {limit}: {calls} collectives ({ops}), {bytes:,} bytes;",
                    stage=stage, limit=limit, calls=len(recs), ops=", ".join(ops), bytes=sum(b for _, _, b in recs)))
            print(T("    gradient buckets per step (elements): {sizes}", sizes=grads[:len(grads) // ENGINE_STEPS]))
        print(T("  calls, elements, bytes and trained weights: the same as with zerolab's rule"))
    passed(T("your bucket_params cuts {n} parameter lists as zerolab does\n"
             "  and packs the real engine's buckets on {world} ranks (stages 1 and 2)", n=n, world=world_size))
