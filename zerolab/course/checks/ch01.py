"""Chapter 1 check: the four memory giants, counted by the learner, measured by the engine.

The learner writes ``model_state_bytes_per_rank(psi, precision, stage=0, world_size=1)``,
returning the bytes one rank holds for each model-state giant::

    {"params": ..., "grads": ..., "optimizer_states": ...}

:func:`check_model_state_bytes` trains a real :class:`~zerolab.models.TinyLM` for one step
with ``zerolab.initialize`` on a crew of ranks (Adam; fp32, bf16 and fp16; ZeRO stages 0-3),
reads ``engine.memory()`` on every rank, and compares each giant with the learner's number.
The engine pads each flat buffer to a multiple of N and Adam keeps a 4-byte step counter
per tensor, so a small slack is allowed on top of 1%. Last, the function must reproduce the
ZeRO paper's Figure 1 (Ψ = 7.5e9, N = 64: 120 / 31.4 / 16.6 / 1.9 GB per GPU).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ...i18n import catalogue, fill, is_zh
from . import ExerciseCheckFailed, passed

T = catalogue("checks.ch01")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_model_state_bytes", "measure_one_step", "CHECK_MODEL"]

GIANTS = ("params", "grads", "optimizer_states")
NAMES = {"params": T.mark("parameters (the furniture)"), "grads": T.mark("gradients (the door stickers)"),
         "optimizer_states": T.mark("optimizer states (the heavy notebook)")}
# A TinyLM big enough that 1% is a few hundred bytes: Ψ = 49,280 trainable parameters.
CHECK_MODEL = dict(vocab=101, d=64, hidden=160, layers=2, seq_len=16)
# (stage, precision) pairs the engine runs, in the order they are checked: the plain
# data-parallel backpack first, then what each ZeRO stage takes out of it.
# Every precision at every stage: a rule that is right at stage 0 only by luck (params and
# grads swapped in fp16, which both weigh 2 bytes there) fails where the stages tell them apart.
CASES = [(0, "fp32"), (0, "bf16"), (0, "fp16"),
         (1, "fp32"), (1, "bf16"), (1, "fp16"), (2, "fp32"), (2, "bf16"), (2, "fp16"),
         (3, "fp32"), (3, "bf16"), (3, "fp16")]
# What the engine measured, per world size: the engine does not change between two tries of
# the learner's function, so a second try (or a test of wrong answers) need not train again.
_MEASURED: dict[int, list] = {}


def _name(giant: str) -> str:
    return T.text(NAMES[giant])


def _names(giants) -> str:
    """'the parameters (the furniture), the gradients (...)', or in Chinese '参数（家具）、梯度（...）'."""
    return "、".join(map(_name, giants)) if is_zh() else ", ".join(f"the {NAMES[g]}" for g in giants)


def _wrap(line: str) -> str:
    """A Chinese hint in lines under 100 columns (the English lines are left as they were)."""
    return fill(line, 96, subsequent_indent="          ") if is_zh() else line


def _config(stage: int, precision: str) -> dict:
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           # stage 3 would otherwise keep these small modules whole ("persistent")
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    return cfg


def measure_one_step(cases, model_kwargs: dict | None = None, max_steps: int = 8) -> list[dict]:
    """Run on every rank: for each (stage, precision), build a TinyLM engine, train until one
    optimizer step has really been applied (Adam makes its states at the first step; an fp16
    overflow skips a step), and return ``engine.memory()`` with Ψ and the group count."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss

    model_kwargs = dict(CHECK_MODEL if model_kwargs is None else model_kwargs)
    rank, world = zerolab.rank(), zerolab.world_size()
    out = []
    for stage, precision in cases:
        model = TinyLM(**model_kwargs)
        psi = sum(p.numel() for p in model.parameters() if p.requires_grad)
        engine = zerolab.initialize(model, _config(stage, precision))
        dtype = engine.dtype
        batches = lm_batches(max_steps, 2 * world, model_kwargs["seq_len"], model_kwargs["vocab"])
        for x, y in batches:
            x, y = x[2 * rank: 2 * rank + 2], y[2 * rank: 2 * rank + 2]
            engine.backward(lm_loss(engine(x), y))
            engine.step()
            if engine.global_steps > engine.skipped_steps:
                break
        else:
            raise RuntimeError(f"stage {stage}, {precision}: every step was skipped (fp16 overflow)")
        mem = engine.memory()
        out.append({"stage": stage, "precision": precision, "psi": psi, "memory": mem,
                    "groups": len(engine.stage.groups), "dtype": str(dtype).replace("torch.", "")})
    return out


def _hint(giant: str, precision: str, stage: int, n: int, want: float, got: float) -> str:
    mixed = precision != "fp32"
    sharded = {"optimizer_states": stage >= 1, "grads": stage >= 2, "params": stage >= 3}[giant]
    if got and sharded and math.isclose(got, want * n, rel_tol=0.02):
        return T("your number is {n} times too big: stage {stage} splits the {name} "
                 "among the {n} ranks, so each keeps 1/{n} of them (divide by world_size)",
                 n=n, stage=stage, name=_name(giant))
    if got and not sharded and math.isclose(got, want / n, rel_tol=0.02):
        return T("your number is {n} times too small: stage {stage} does not split the "
                 "{name}; every rank carries all of them", n=n, stage=stage, name=_name(giant))
    if giant == "params":
        return T("every parameter is stored once in the training precision: 4 bytes in fp32, "
                 "2 bytes in fp16/bf16 (the fp32 master copy belongs to the optimizer states)")
    if giant == "grads":
        return T("there is one gradient per parameter, in the same dtype as the parameters: "
                 "4 bytes in fp32, 2 bytes in fp16/bf16")
    if mixed:
        return T("in mixed precision the optimizer keeps an fp32 master copy of the weights besides "
                 "Adam's fp32 momentum and variance: 4 + 4 + 4 = 12 bytes per parameter")
    return T("Adam keeps two fp32 numbers per parameter, momentum and variance: 4 + 4 = 8 bytes "
             "(in fp32 training the parameters themselves are the master weights)")


def _call(fn: Callable, psi: int, precision: str, stage: int, world_size: int) -> dict:
    where = f"model_state_bytes_per_rank({psi}, {precision!r}, stage={stage}, world_size={world_size})"
    try:
        got = fn(psi, precision, stage=stage, world_size=world_size)
    except NotImplementedError as exc:
        raise ExerciseCheckFailed(T("model_state_bytes_per_rank is not written yet (it raised "
                                    "NotImplementedError: {error}). Fill in the cell above, run it, then "
                                    "this check again.", error=exc)) from exc
    except Exception as exc:       # noqa: BLE001 - the learner's error, shown in a few lines
        raise ExerciseCheckFailed(T("{where} raised {name}: {error}\n"
                                    "  hint: call it by hand with these arguments to see the line",
                                    where=where, name=type(exc).__name__, error=exc)) from exc
    if not isinstance(got, Mapping):
        raise ExerciseCheckFailed(T("{where} returned {type}; return a dict with the "
                                    "keys {keys} (bytes per rank)", where=where, type=type(got).__name__,
                                    keys=", ".join(GIANTS)))
    missing = [k for k in GIANTS if k not in got]
    if missing:
        raise ExerciseCheckFailed(T("{where} has no key {missing}; return a dict with the keys {keys}",
                                    where=where, missing=", ".join(map(repr, missing)), keys=", ".join(GIANTS)))
    for k in GIANTS:
        if not isinstance(got[k], (int, float)) or isinstance(got[k], bool):
            raise ExerciseCheckFailed(T("{where}[{key}] is {value}; it should be a number of bytes",
                                        where=where, key=repr(k), value=repr(got[k])))
    return {k: float(got[k]) for k in GIANTS}


def _check_paper(fn: Callable) -> None:
    from zerolab.memory import model_state_bytes
    psi, n = 7_500_000_000, 64
    for stage in range(4):
        want = model_state_bytes(psi, stage, n)
        got = _call(fn, psi, "fp16", stage, n)
        total = sum(got.values())
        if not math.isclose(total, want["total"], rel_tol=1e-3):
            raise ExerciseCheckFailed(T(
                "the ZeRO paper's Figure 1 (Ψ = 7.5e9, N = 64, mixed precision, stage {stage}) says "
                "{want:.1f} GB per GPU; your function gives {got:.1f} GB (GB = 1e9 bytes)",
                stage=stage, want=want["total"] / 1e9, got=total / 1e9))


def check_model_state_bytes(fn: Callable, *, world_size: int = 2, crew=None, verbose: bool = True) -> None:
    """Compare ``fn`` with what a real engine holds per rank; raise ExerciseCheckFailed if off.

    ``fn(psi, precision, stage=..., world_size=...)`` must return bytes per rank for
    ``params``, ``grads`` and ``optimizer_states`` (Adam; precision "fp32", "fp16" or "bf16").
    Pass a running :class:`zerolab.Crew` as ``crew`` to reuse it.
    """
    import zerolab

    # Ask the learner first: an unfinished exercise fails at once, before any rank starts.
    _call(fn, 1000, "fp32", 0, world_size)

    if crew is not None and crew.world_size != world_size:
        raise ValueError(f"the crew has {crew.world_size} ranks, world_size={world_size}")
    if world_size not in _MEASURED:
        if crew is None:
            with zerolab.Crew(world_size) as own:
                _MEASURED[world_size] = own.run(measure_one_step, CASES)
        else:
            _MEASURED[world_size] = crew.run(measure_one_step, CASES)
    per_rank = _MEASURED[world_size]

    rows = []
    for i, (stage, precision) in enumerate(CASES):
        psi = per_rank[0][i]["psi"]
        got = _call(fn, psi, precision, stage, world_size)
        problems = []
        for rank, results in enumerate(per_rank):
            r = results[i]
            mem, groups = r["memory"], r["groups"]
            # padding: up to N-1 elements per flat group and giant (at most 4 bytes each),
            # Adam's fp32 step counter per tensor it steps, the frozen 1-element parameter
            slack = groups * (world_size * 4 + 4) + 16
            for giant in GIANTS:
                want = mem[giant]
                if abs(got[giant] - want) > 0.01 * want + slack:
                    if not any(p[0] == giant for p in problems):
                        problems.append((giant, rank, want))
        if problems:
            lines = [T("stage {stage}, {precision}, {n} ranks, Adam, Ψ = {psi:,} parameters:",
                       stage=stage, precision=precision, n=world_size, psi=psi)]
            mem0 = per_rank[0][i]["memory"]
            if (stage in (2, 3) and not math.isclose(mem0["params"], mem0["grads"], rel_tol=0.02)
                    and math.isclose(got["params"], mem0["grads"], rel_tol=0.02)
                    and math.isclose(got["grads"], mem0["params"], rel_tol=0.02)):
                lines += [T("  your parameters and gradients are swapped: {params:,.0f} bytes of "
                            "parameters, {grads:,.0f} of gradients; measured the other way round.",
                            params=got["params"], grads=got["grads"]),
                          T("    hint: stage 2 splits the gradients (not the parameters); stage 3 "
                            "splits both")]
                raise ExerciseCheckFailed("\n".join(lines))
            giant, rank, want = problems[0]          # the first one in full: a few lines, not a page
            mine = got[giant]
            lines += [T("  the {name} are off.", name=_name(giant)),
                      T("    measured on rank {rank}: {bytes:>12,.0f} bytes ({per:.2f} bytes per parameter)",
                        rank=rank, bytes=want, per=want / psi),
                      T("    your function:      {bytes:>12,.0f} bytes ({per:.2f} bytes per parameter)",
                        bytes=mine, per=mine / psi),
                      _wrap(T("    hint: {hint}", hint=_hint(giant, precision, stage, world_size, want, mine)))]
            if len(problems) > 1:
                lines.append(T("  also off: {names}", names=_names(g for g, _, _ in problems[1:])))
            if stage > 0:
                lines.append(T("  (stage 0 is right; the stages split the giants among the ranks: "
                               "1 the optimizer states, 2 also the gradients, 3 also the parameters)"))
            raise ExerciseCheckFailed("\n".join(lines))
        rows.append((stage, precision, got, per_rank[0][i]["memory"]))

    _check_paper(fn)

    if verbose:
        print(T("TinyLM, Ψ = {psi:,} trainable parameters, {n} ranks, Adam; "
                "bytes per rank (measured on rank 0 / yours)", psi=per_rank[0][0]["psi"], n=world_size))
        print(f"{'stage':>5} {'precision':>9} | {'params':>19} | {'grads':>19} | {'optimizer states':>19}")
        for stage, precision, got, mem in rows:
            cells = " | ".join(f"{mem[g]:>8,} / {got[g]:>8,.0f}" for g in GIANTS)
            print(f"{stage:>5} {precision:>9} | {cells}")
    passed(T("your byte count matches the engine's backpacks in {n} configurations on "
             "{world} ranks,\n  and the ZeRO paper's Figure 1 (120 / 31.4 / 16.6 / 1.9 GB)",
             n=len(rows), world=world_size))
