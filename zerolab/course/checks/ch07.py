"""Exercise 7 check: the captain's pick, a config that fits the device budget and is fastest.

The learner writes two functions::

    def device_bytes(facts, stage, offload_optimizer, offload_param):
        # the peak bytes one rank's device holds with this config:
        # model states (sharded by stage, moved off by offload) + buffers + activations

    def choose_config(facts, budget):
        # the first config of the captain's rule whose device_bytes fit the budget,
        # as a DeepSpeed zero_optimization block; None if nothing fits

``facts`` is a :class:`Facts`: Psi, the number of ranks N, the precision, and two things
measured on the ranks (the activations autograd keeps, and the engine's own buffers at each
stage: gradient buckets at stage 2, gathered layers at stage 3).

**The rule** (cheapest first; the chapter measures why): no offload before offload, and among
configs with the same offload the lowest stage::

    stage 0, 1, 2, 3;  then offload_optimizer cpu at stage 1, 2, 3;  then stage 3 with
    offload_optimizer cpu and offload_param cpu

(stages 0-2 move the same bytes per step, stage 3 half again as much in far more calls; every
offload carries each step's gradients and parameters across the PCIe link and runs Adam on the
CPU; offloading the parameters too brings every gathered layer up from the host as well.)

:func:`check_choose_config` runs in three parts:

1. *device_bytes alone*: every config at four (Psi, N, precision) settings, against the formula
   (within 64 bytes, or 0.01 %). The first difference is named: the difference is matched
   against the terms a learner might have dropped or added (the activations, the buffers,
   Psi versus Psi/N of parameters, gradients or optimizer states, bytes per parameter).
2. *choose_config alone*: budgets equal to and just above the configs' needs at the same settings
   (and one below every config: None), against the rule.
3. *In the engine*: a TinyLM on 2 ranks in fp16 and on 3 ranks in fp32; the facts are measured
   there; for each budget the learner's choice trains two steps under ``device_budget`` and
   must not run out of memory, and every config the rule puts before it must need more than
   the budget (its peak measured by the engine).
"""
from __future__ import annotations

import math

import dataclasses
from collections.abc import Callable

from ...i18n import catalogue, fill
from . import ExerciseCheckFailed, crew_of, not_implemented, passed, rank_failure

T = catalogue("checks.ch07")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["Facts", "LADDER", "check_choose_config", "check_device_bytes", "check_choices", "check_engine",
           "reference_device_bytes", "reference_choose_config", "measure_facts", "zero_block", "rung_of",
           "rung_name", "ENGINE_SETTINGS"]

# The captain's rule, cheapest first: (stage, offload_optimizer, offload_param)
LADDER = ((0, False, False), (1, False, False), (2, False, False), (3, False, False),
          (1, True, False), (2, True, False), (3, True, False), (3, True, True))


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the captain knows about one rank's load.

    ``psi``: trainable parameters; ``world_size``: N; ``precision``: "fp16", "bf16" or "fp32"
    (with Adam or AdamW); ``activation_bytes``: what autograd keeps for backward at this
    micro-batch (the folding chair, measured); ``buffer_bytes``: the engine's working buffers
    at each stage, ``{stage: bytes}`` (gradient buckets at stage 2, gathered layers at stage 3;
    the same with or without offload), measured."""
    psi: int
    world_size: int
    precision: str
    activation_bytes: int
    buffer_bytes: dict

    @property
    def param_bytes(self) -> int:
        """Bytes of one parameter (and of one gradient) on the device: 2 in 16 bits, 4 in fp32."""
        return 4 if self.precision == "fp32" else 2

    @property
    def optimizer_bytes(self) -> int:
        """Bytes of optimizer state per parameter: Adam's two moments (8), plus the fp32 master
        copy (4) in mixed precision."""
        return 8 if self.precision == "fp32" else 12


def rung_name(stage: int, opt: bool, par: bool) -> str:
    return f"stage {stage}" + (" + offload_optimizer" if opt else "") + (" + offload_param" if par else "")


def zero_block(stage: int, opt: bool, par: bool) -> dict:
    """DeepSpeed's zero_optimization block for a rung."""
    block = {"stage": stage}
    if opt:
        block["offload_optimizer"] = {"device": "cpu"}
    if par:
        block["offload_param"] = {"device": "cpu"}
    return block


def reference_device_bytes(facts: Facts, stage: int, offload_optimizer: bool, offload_param: bool) -> float:
    n = facts.psi / facts.world_size
    p, k = facts.param_bytes, facts.optimizer_bytes
    params = 0 if offload_param else (p * n if stage == 3 else p * facts.psi)
    grads = 0 if (offload_optimizer and stage >= 2) else (p * n if stage >= 2 else p * facts.psi)
    states = 0 if offload_optimizer else (k * n if stage >= 1 else k * facts.psi)
    return params + grads + states + facts.buffer_bytes[stage] + facts.activation_bytes


def reference_choose_config(facts: Facts, budget: int):
    for rung in LADDER:
        if reference_device_bytes(facts, *rung) <= budget:
            return zero_block(*rung)
    return None


def _device(block) -> bool | str:
    """An offload sub-block -> True (cpu/nvme), False (none/absent); a bad one -> its repr."""
    if block is None:
        return False
    if isinstance(block, dict):
        dev = str(block.get("device", "none")).lower()
        return dev in ("cpu", "nvme") if dev in ("cpu", "nvme", "none") else repr(block)
    return repr(block)


def rung_of(block):
    """A zero_optimization block -> (stage, offload_optimizer, offload_param), or a str saying
    why it is not one of the rungs."""
    if block is None:
        return None
    if not isinstance(block, dict) or "stage" not in block:
        return T("return a zero_optimization dict like {{'stage': 2}}, not {block}", block=repr(block))[:120]
    stage = block["stage"]
    opt, par = _device(block.get("offload_optimizer")), _device(block.get("offload_param"))
    if isinstance(opt, str) or isinstance(par, str):
        return T("offload blocks look like {'device': 'cpu'}")
    rung = (stage, opt, par)
    if rung not in LADDER:
        return T("{config} is not a config DeepSpeed accepts (offload_optimizer needs stage 1+, offload_param "
                 "stage 3 and offload_optimizer)", config=rung_name(*rung) if isinstance(stage, int) else block)
    return rung


def _wrap(text: str) -> str:
    return fill(text, 96, initial_indent="  ", subsequent_indent="        ")


# -- part 1: device_bytes alone ------------------------------------------------------------------
# (psi, N, precision, activation bytes, buffers per stage)
SETTINGS = (
    (150_465, 2, "fp16", 173_760, {0: 0, 1: 0, 2: 34_944, 3: 134_656}),
    (1_000_000, 4, "fp32", 250_000, {0: 0, 1: 0, 2: 80_000, 3: 300_000}),
    (7_000_000_000, 8, "bf16", 9_000_000_000, {0: 0, 1: 0, 2: 1_000_000_000, 3: 1_048_576_000}),
    (999_999, 3, "fp16", 1_000, {0: 0, 1: 0, 2: 4_000, 3: 6_000}),
)


def _facts(setting) -> Facts:
    psi, n, prec, act, buf = setting
    return Facts(psi, n, prec, act, dict(buf))


def _explain(facts: Facts, rung, diff: float) -> str:
    """Name the term that ``diff`` (yours - expected) matches."""
    stage, opt, par = rung
    psi, n = facts.psi, facts.psi / facts.world_size
    p, k = facts.param_bytes, facts.optimizer_bytes
    terms = [
        (facts.activation_bytes, T("the activations (facts.activation_bytes) are on the device at the peak: add "
                                   "them once")),
        (facts.buffer_bytes[stage], T("the buffers of stage {stage} (facts.buffer_bytes[{stage}]) come on top of "
                                      "the model states: add them (they stay with offload)", stage=stage)),
        (p * psi - p * n, T("Psi against Psi/N in the parameters or gradients: stages 0-1 keep the full gradient "
                            "and stages 0-2 the full parameters; stage 2 shards gradients, stage 3 parameters")),
        (k * psi - k * n, T("the optimizer states are sharded (k Psi / N) from stage 1 on, whole at stage 0")),
        (p * psi, T("a full copy of parameters or gradients (p Psi) too many or too few: with offload_optimizer, "
                    "stage 1 still keeps the full gradient on the device, stages 2-3 none")),
        (p * n, T("one shard (p Psi / N) too many or too few: with offload_optimizer at stages 2-3 the gradient "
                  "shard goes to the host too; offload_param takes stage 3's parameter shard off")),
        (k * n, T("the optimizer shard (k Psi / N): offload_optimizer takes all of it to the host")),
        (k * psi, T("the optimizer states (k Psi): offload_optimizer takes them all to the host")),
    ]
    if facts.precision == "fp32" and not opt:   # 12 optimizer bytes where fp32 keeps 8 (no master copy)
        extra = 4 * (psi if stage == 0 else n)
        terms.insert(0, (extra, T("fp32 training keeps no separate master copy: its optimizer states are Adam's two "
                                  "moments, 8 bytes per parameter, not mixed precision's 12 (master + moments); "
                                  "otherwise look for a copy of parameters or gradients too many or too few")))
    for value, why in terms:
        if value and abs(abs(diff) - value) <= max(64, 1e-6 * value):
            return why
    return T("compare term by term: {precision} keeps {p} bytes per parameter and per gradient "
             "and {k} of optimizer state (facts.param_bytes, facts.optimizer_bytes)", precision=facts.precision, p=p, k=k)


def check_device_bytes(fn: Callable) -> int:
    """Part 1: ``fn(facts, stage, offload_optimizer, offload_param)`` at every rung of SETTINGS."""
    count = 0
    for setting in SETTINGS:
        facts = _facts(setting)
        for rung in LADDER:
            want = reference_device_bytes(facts, *rung)
            got = fn(facts, *rung)
            count += 1
            try:
                got_f = float(got)
            except (TypeError, ValueError):
                raise ExerciseCheckFailed(T("device_bytes returned {got}\n  hint: return a number of bytes", got=repr(got)))
            if abs(got_f - want) > max(64, 1e-4 * want):
                raise ExerciseCheckFailed(
                    T("device_bytes, {config}: Psi = {psi:,}, N = {n}, {precision}\n"
                      "  expected {want:,.0f} bytes, yours {got:,.0f} (difference {diff:+,.0f})\n",
                      config=rung_name(*rung), psi=facts.psi, n=facts.world_size, precision=facts.precision,
                      want=want, got=got_f, diff=got_f - want)
                    + _wrap(T("hint: ") + _explain(facts, rung, got_f - want)))
    return count


# -- part 2: choose_config alone ------------------------------------------------------------------
def _budgets(facts: Facts) -> list[int]:
    """Each distinct need exactly ("at most the budget": a config whose need equals it fits), a budget
    just above each (so each rung is someone's answer), and one below all."""
    needs = sorted({math.ceil(reference_device_bytes(facts, *r)) for r in LADDER})
    return needs + [int(x * 1.002) + 1 for x in needs] + [int(needs[0] * 0.9)]


def _wrong_choice(facts: Facts, budget: int, got, want, need) -> str:
    """The message for a choice that differs from the rule's (device_bytes already checked)."""
    head = T("Psi = {psi:,}, N = {n}, {precision}, budget {budget:,} bytes\n  expected: {want}\n  yours:    ",
             psi=facts.psi, n=facts.world_size, precision=facts.precision, budget=budget,
             want=rung_name(*rung_of(want)) if want else None)
    rung = rung_of(got)
    if isinstance(rung, str):
        return head + f"{got!r}"[:80] + "\n" + _wrap(T("hint: ") + rung)
    head += (rung_name(*rung) if rung else "None") + "\n"
    if rung is None:
        return head + _wrap(T("hint: {config} needs {need:,.0f} bytes <= the budget: return the first config that "
                              "fits, None only when none does", config=rung_name(*rung_of(want)),
                              need=need(rung_of(want))))
    mine = need(rung)
    if mine > budget:
        return head + _wrap(T("hint: yours needs {need:,.0f} bytes > the budget: choose only a config whose "
                              "device_bytes(...) <= budget", need=mine))
    if want is None:
        return head + _wrap(T("hint: nothing fits; return None"))
    w = rung_of(want)
    if LADDER.index(rung) > LADDER.index(w):
        why = (T("raise the stage before offloading: offload_optimizer comes only when no stage 0-3 "
                 "fits") if rung[1] and not w[1] else
               T("the lowest stage that fits comes first") if rung[1] == w[1] and rung[2] == w[2] else
               T("offload the optimizer before the parameters"))
        return head + _wrap(T("hint: {config} also fits ({need:,.0f} bytes) and comes first in the "
                              "captain's rule: {why}", config=rung_name(*w), need=need(w), why=why))
    return head + _wrap(T("hint: the rule: stages 0, 1, 2, 3 without offload, then offload_optimizer at "
                          "stages 1, 2, 3, then stage 3 with both offloads; the first that fits"))


def check_choices(device_fn: Callable, choose_fn: Callable) -> int:
    """Part 2: ``choose_fn(facts, budget)`` at budgets between the needs, against the rule."""
    count = 0
    for setting in SETTINGS:
        facts = _facts(setting)
        for budget in _budgets(facts):
            want = reference_choose_config(facts, budget)
            got = choose_fn(facts, budget)
            count += 1
            if rung_of(got) != rung_of(want):
                raise ExerciseCheckFailed(
                    "choose_config: " + _wrong_choice(facts, budget, got, want,
                                                      lambda r: reference_device_bytes(facts, *r)))
    return count


# -- part 3: in the engine -----------------------------------------------------------------------
# (world size, precision, micro-batch, budgets in bytes); TinyLM(vocab=257, d=64, hidden=256, layers=4)
ENGINE_SETTINGS = (
    (2, "fp16", 2, (3_000_000, 1_620_000, 1_540_000, 1_000_000, 480_000, 350_000, 250_000)),
    (3, "fp32", 2, (1_700_000, 1_450_000, 1_200_000, 700_000)),
)
ENGINE_STEPS = 2


def _config(stage, opt, par, world, precision, micro) -> dict:
    # stage 3: one layer gathered at a time (no prefetch, no reuse across the turn to backward)
    zero = {"stage": stage, "reduce_bucket_size": 20_000, "stage3_param_persistence_threshold": 0,
            "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0}
    if opt:
        zero["offload_optimizer"] = {"device": "cpu"}
    if par:
        zero["offload_param"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": micro, "train_batch_size": micro * world,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": zero}
    if precision != "fp32":
        cfg[precision] = {"enabled": True, **({"initial_scale_power": 8} if precision == "fp16" else {})}
    return cfg


def _model():
    from zerolab.models import TinyLM
    return TinyLM(vocab=257, d=64, hidden=256, layers=4)


def _train(rung, precision, micro, budget):
    """On a rank: train ENGINE_STEPS steps; the peak, or the out-of-memory message."""
    import zerolab
    from zerolab.memory.budget import DeviceOutOfMemoryError
    from zerolab.models import lm_batches, lm_loss
    from zerolab.zero.reference import train_engine
    world = zerolab.world_size()
    cfg = _config(*rung, world, precision, micro)
    try:
        engine = zerolab.initialize(_model(), cfg, device_budget=budget)
        train_engine(engine, lm_batches(ENGINE_STEPS, cfg["train_batch_size"], 16, 257, seed=0), lm_loss)
    except DeviceOutOfMemoryError as exc:
        return {"oom": str(exc)}
    m = engine.memory()
    out = {"oom": None, "peak": engine.budget.peak_bytes, "activations": engine.budget.peak_activation_bytes,
           "buffers": m["peak_buffers"], "steps": engine.global_steps}
    engine.close()
    return out


def _ladder_peaks(precision, micro):
    """On a rank: every rung under a generous budget (nothing refused): its peak and parts."""
    return {rung: _train(rung, precision, micro, "1GB") for rung in LADDER}


def measure_facts(world_size: int = 2, precision: str = "fp16", micro: int = 2, crew=None):
    """The facts of the exercise's TinyLM on ``world_size`` ranks, measured by the engine, and
    each rung's measured peak per rank ``{rung: [peak on rank 0, ...]}``."""
    from zerolab.memory import count_params
    crew = crew or crew_of(world_size)
    runs = crew.run(_ladder_peaks, precision, micro)
    first = runs[0]
    facts = Facts(psi=count_params(_model()), world_size=world_size, precision=precision,
                  activation_bytes=first[LADDER[0]]["activations"],
                  buffer_bytes={s: max(r[rung]["buffers"] for r in runs for rung in LADDER if rung[0] == s)
                                for s in range(4)})
    peaks = {rung: [r[rung]["peak"] for r in runs] for rung in LADDER}
    return facts, peaks


def check_engine(choose_fn: Callable, verbose: bool = True) -> list:
    """Part 3: the learner's choice trains under the budget, and no earlier rung fits."""
    import zerolab
    rows = []
    for world, precision, micro, budgets in ENGINE_SETTINGS:
        crew = crew_of(world)
        try:
            facts, peaks = measure_facts(world, precision, micro, crew)
        except (zerolab.RankError, zerolab.CrewTimeout) as exc:
            raise rank_failure(exc, T("measuring the facts on {n} ranks", n=world), T("run the check again")) from exc
        for budget in budgets:
            got = choose_fn(facts, budget)
            rung = rung_of(got)
            where = T("the engine, TinyLM on {n} ranks, {precision}, device_budget {budget:,} bytes", n=world,
                      precision=precision, budget=budget)
            fits = [r for r in LADDER if max(peaks[r]) <= budget]
            want = zero_block(*fits[0]) if fits else None
            if isinstance(rung, str):
                raise ExerciseCheckFailed(T("{where}: you returned {got}", where=where, got=repr(got))[:200] + "\n"
                                          + _wrap(T("hint: ") + rung))
            if rung is not None:
                try:
                    res = crew.run(_train, rung, precision, micro, budget)
                except (zerolab.RankError, zerolab.CrewTimeout) as exc:
                    raise rank_failure(exc, f"{where}: {rung_name(*rung)}", T("run the check again")) from exc
                if any(r["oom"] for r in res):
                    msg = next(r["oom"] for r in res if r["oom"]).splitlines()[0]
                    raise ExerciseCheckFailed(
                        T("{where}:\n  your {config} ran out of memory:\n  {message}\n", where=where,
                          config=rung_name(*rung), message=msg[:180])
                        + _wrap(T("hint: it needs {peak:,} bytes at its peak; device_bytes(...) said {need:,.0f}: "
                                  "is every term there?", peak=max(peaks[rung]), need=_safe_need(rung, facts))))
            if rung_of(want) != rung:
                if rung is None:
                    hint = T("{config} trains under this budget (peak {peak:,} bytes): return it",
                             config=rung_name(*fits[0]), peak=max(peaks[fits[0]]))
                else:
                    hint = T("{config} also fits (peak {peak:,} bytes) and comes first in the captain's rule: it "
                             "moves less per step", config=rung_name(*fits[0]), peak=max(peaks[fits[0]]))
                raise ExerciseCheckFailed(T("{where}:\n  expected: {want}\n  yours:    {got}\n", where=where,
                                            want=rung_name(*fits[0]) if fits else None,
                                            got=rung_name(*rung) if rung else None) + _wrap(T("hint: ") + hint))
            rows.append((world, precision, budget, rung, max(peaks[rung]) if rung else None,
                         [(r, max(peaks[r])) for r in LADDER[:LADDER.index(rung) if rung else len(LADDER)]]))
    return rows


_LEARNER_DEVICE_BYTES = None


def _safe_need(rung, facts) -> float:
    try:
        return float(_LEARNER_DEVICE_BYTES(facts, *rung)) if _LEARNER_DEVICE_BYTES else float("nan")
    except Exception:          # noqa: BLE001
        return float("nan")


def check_choose_config(device_bytes: Callable, choose_config: Callable, *, verbose: bool = True) -> None:
    """Check the learner's ``device_bytes`` and ``choose_config`` against the formula and the rule,
    then run the choices in the engine under device budgets."""
    global _LEARNER_DEVICE_BYTES
    n1 = check_device_bytes(device_bytes)
    if verbose:
        print(T("device_bytes: {n} configs at {settings} settings (Psi up to 7e9, N = 2, 3, 4, 8,\n"
                "  fp16, bf16, fp32), as the formula", n=n1, settings=len(SETTINGS)))
    n2 = check_choices(device_bytes, choose_config)
    if verbose:
        print(T("choose_config: {n} budgets, each config's need exactly (it fits: at most the budget),\n"
                "  just under another, and one below all: the rule's pick", n=n2))
    _LEARNER_DEVICE_BYTES = device_bytes
    try:
        rows = check_engine(choose_config, verbose)
    finally:
        _LEARNER_DEVICE_BYTES = None
    if verbose:
        print(T("engine: TinyLM, {steps} steps per run, facts measured on the ranks", steps=ENGINE_STEPS))
        for world, precision, budget, rung, peak, before in rows:
            pick = rung_name(*rung) if rung else "None"
            over = T("; {n} earlier config(s) over the budget", n=len(before)) if before else ""
            print(f"  N = {world}, {precision}, budget {budget:>9,}: {pick:<38} peak {peak:>9,}"
                  + (f"\n    {over[2:]}" if over else "")
                  if rung else T("  N = {n}, {precision}, budget {budget:>9,}: None: every config over it", n=world,
                                 precision=precision, budget=budget))
    passed(T("your device_bytes and choose_config pick, for every budget, the config that trains\n"
             "  under it in the real engine and no config earlier in the captain's rule fits"))
