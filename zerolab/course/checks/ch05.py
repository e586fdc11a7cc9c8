"""Exercise 5 check: the host optimizer step, designed by the learner, run in the real engine.

With ``offload_optimizer`` the fp32 masters and the optimizer's moments live in host memory
(the company warehouse), and the step runs there, one *sub-group* at a time (DeepSpeed's
``sub_group_size``; ``deepspeed/runtime/zero/stage3.py``, ``step``). The learner designs that
step from its contract::

    def host_step(home, optimizer, grads, combined):
        ...

``home`` is the engine's :class:`zerolab.offload.StateHome` (``sub_groups``, ``tiles``,
``tensors``, ``stage.write_params``), ``grads`` the reduced gradient shards (one per group, in
any dtype), ``combined`` the loss scale times the clipping factor (a float, or a 0-dim tensor in
DeepSpeed's dtype for the path: fp32 at stages 1-2, fp64 at stage 3). The contract:

* when it returns, every tile's fp32 master has taken one optimizer step with its own gradient,
  ``grads[i][a:b]`` in fp32 multiplied by ``1 / combined`` (DeepSpeed's ``unscale_and_clip_grads``
  multiplies by the reciprocal); the model's parameters hold the new masters, rounded once to
  the model's dtype (``write_params`` rounds); no tile holds a gradient;
* while it runs, at each ``optimizer.step()`` exactly one sub-group's tiles hold gradients (at
  most ``sub_group_size`` elements of fp32 gradient at once), the sub-groups in order, and a
  sub-group is finished (written up, gradients dropped) before the next one steps.

:func:`check_host_step` runs in two parts:

1. *Alone*: a real ``StateHome`` in host memory over three 16-bit groups that do not divide
   into sub-groups evenly, stepped twice by AdamW with the learner's step and with zerolab's
   (``StateHome.step``), at three ``sub_group_size`` values.
2. *In the engine*: on 2 ranks, ``StateHome.step`` is replaced by the learner's step (through an
   instrumented optimizer and ``write_params``) while a TinyLM trains with optimizer offload to
   the host: stages 1, 2 and 3 (3 also with its parameters offloaded), fp32, fp16 and bf16,
   gradient accumulation and clipping on, at three ``sub_group_size`` values; the same runs with
   zerolab's own step must end with bit-identical masters, parameters and losses.

In both parts every ``optimizer.step()`` call and every ``write_params`` is watched against the
contract. The first difference fails the check with a hint naming the likely design mistake:
forgetting to unscale, unscaling in 16 bits, twice, or dividing instead of multiplying by
``1 / combined``; stepping every sub-group at once, tile by tile, or out of order; zeroing the
gradients instead of dropping them, or keeping them; writing back before the step, after every
sub-group instead of after each, the gradient instead of the master, or a master rounded to
another dtype first; a wrong slice.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ... import i18n
from ...offload import StateHome
from ...offload.store import HostShards
from . import ExerciseCheckFailed, crew_of, not_implemented, passed, rank_failure

T = i18n.catalogue("checks.ch05")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_host_step", "check_alone", "check_engine", "reference_host_step", "what_arrives", "ENGINE_CASES",
           "ALONE_SIZES", "ALONE_SUB_GROUPS", "SUB_GROUP_SIZES"]

_BUILTIN_STEP = StateHome.step            # zerolab's own loop, whatever is patched later

ALONE_SIZES = (50, 23, 81)                # three groups' shards (elements)
ALONE_SUB_GROUPS = (40, 64, 10**9)        # tiles cut at 40 / packed to 64 / one sub-group
SUB_GROUP_SIZES = (37, 200, 10**9)        # in the engine: many sub-groups, a few, one
# (stage, precision, offload_param) for the engine part; each at every SUB_GROUP_SIZES value
ENGINE_CASES = tuple((stage, precision, False) for stage in (1, 2, 3) for precision in ("fp32", "fp16", "bf16")
                     ) + ((3, "fp16", True),)
ENGINE_STEPS = 3


def reference_host_step(home, optimizer, grads, combined) -> None:
    """zerolab's loop (``StateHome.step``), for comparison."""
    _BUILTIN_STEP(home, optimizer, grads, combined)


def _wrap(text: str) -> str:
    return i18n.fill(text, 96, initial_indent="  ", subsequent_indent="        ")


# ----------------------------------------------------------------------------- watching a step

class _Watch:
    """Stands in for the optimizer (and ``stage.write_params``) while the learner's loop runs,
    and notes the first thing that differs from the built-in loop."""

    def __init__(self, home, optimizer, grads, combined, where: str):
        self._home, self._opt, self._where = home, optimizer, where
        self._combined = combined
        self._grads = [g.detach().clone() for g in grads]     # as the engine handed them over
        self._real_write = home.stage.write_params
        self.calls = 0
        self.writes: dict[int, list[tuple[int, int, int]]] = {}   # tile -> [(call index, start, numel)]
        self.problem: tuple[str, str] | None = None
        self.late: tuple[int, int] | None = None    # (sub-group stepped, a tile of an earlier one not written)

    # the optimizer's face: everything but step() is the real optimizer's
    def __getattr__(self, name):
        return getattr(self._opt, name)

    def _note(self, what: str, hint: str) -> None:
        if self.problem is None:
            self.problem = (T("{where}: {what}", where=self._where, what=what), hint)

    def _tile_of(self, j: int) -> str:
        i, a, b = self._home.tiles[j]
        return T("tile {j} (group {i}, elements {a}:{b})", j=j, i=i, a=a, b=b)

    def _want(self, j: int) -> torch.Tensor:
        i, a, b = self._home.tiles[j]
        return self._grads[i][a:b].to(torch.float32) * (1.0 / self._combined)

    def step(self, closure=None):
        home, k = self._home, self.calls
        sgs = home.sub_groups
        live = [j for j, t in enumerate(home.tensors) if t.grad is not None]
        if k >= len(sgs):
            self._note(T("optimizer.step() called {calls} times; there are {n} sub-groups", calls=k + 1, n=len(sgs)),
                       T("step once per sub-group (for sg in home.sub_groups: ... optimizer.step() ...)"))
        else:
            self._check_live(k, sgs, live)
            for j in sgs[k]:
                if home.tensors[j].grad is not None:
                    self._check_grad(k, j)
            unwritten = [j for s in sgs[:k] for j in s if j not in self.writes]
            if unwritten and self.late is None:
                self.late = (k, unwritten[0])     # judged at the end: late, or never written at all
        self.calls += 1
        return self._opt.step()

    def _check_live(self, k, sgs, live) -> None:
        want = list(sgs[k])
        if live == want:
            return
        before = {j for s in sgs[:k] for j in s}
        after = {j for s in sgs[k + 1:] for j in s}
        extra = [j for j in live if j not in want]
        missing = [j for j in want if j not in live]
        other = [m for m, s in enumerate(sgs) if m != k and list(s) == live]
        zeroed = [j for j in extra if j in before and not bool(self._home.tensors[j].grad.any())]
        if other:
            self._note(T("optimizer.step() number {n} stepped sub-group {other}'s tiles; sub-group {k} was due",
                         n=k + 1, other=other[0], k=k),
                       T("step the sub-groups in order, as home.sub_groups lists them (with NVMe the engine "
                         "reads them in that order, the next while this one steps)"))
        elif zeroed:
            self._note(T("at the step of sub-group {k}, tiles {tiles} of earlier sub-groups held zero gradients",
                         k=k, tiles=zeroed[:4]),
                       T("zeroing is not dropping: AdamW still moves a tile whose gradient is zero (momentum, "
                         "weight decay); set home.tensors[j].grad = None after its step"))
        elif len(live) == 1 and not extra and len(want) > 1:
            self._note(T("at the step of sub-group {k} ({want}), only tiles {live} had a gradient", k=k, want=want,
                         live=live),
                       T("one optimizer.step() per sub-group, after ALL its tiles have their gradients "
                         "(stepping tile by tile calls the optimizer once per tile)"))
        elif len(sgs) > 1 and sorted(live) == sorted(j for s in sgs for j in s):
            self._note(T("at the step of sub-group {k}, all {n} tiles of all {m} sub-groups had a gradient", k=k,
                         n=len(live), m=len(sgs)),
                       T("stepping all at once: set the gradients of ONE sub-group, step, clear them, then the "
                         "next; sub_group_size bounds the fp32 gradients (and, with NVMe, the states) held "
                         "at once"))
        elif extra and all(j in before for j in extra):
            self._note(T("at the step of sub-group {k}, tiles {tiles} of earlier sub-groups still had their "
                         "gradients (the step moves them again)", k=k, tiles=extra[:4]),
                       T("after optimizer.step(), clear each tile's gradient: home.tensors[j].grad = None"))
        elif extra and any(j in after for j in extra):
            self._note(T("at the step of sub-group {k}, tiles {tiles} of later sub-groups already had gradients",
                         k=k, tiles=[j for j in extra if j in after][:4]),
                       T("stepping all at once: set only the current sub-group's gradients before each "
                         "optimizer.step()"))
        elif missing:
            self._note(T("at the step of sub-group {k} ({want}), {tile} had no gradient", k=k, want=want,
                         tile=self._tile_of(missing[0])),
                       T("give every tile of the sub-group its gradient (for j in sg: ...) before stepping"))
        else:
            self._note(T("at the step of sub-group {k}, tiles {live} had gradients; expected {want}", k=k,
                         live=live[:6], want=want),
                       T("loop over home.sub_groups in order, each a list of tile numbers"))

    def _check_grad(self, k: int, j: int) -> None:
        home = self._home
        got = home.tensors[j].grad
        i, a, b = home.tiles[j]
        want = self._want(j)
        where = T("sub-group {k}, {tile}", k=k, tile=self._tile_of(j))
        if got.dtype != torch.float32:
            self._note(T("{where}: the gradient is {dtype}, not float32", where=where,
                         dtype=str(got.dtype).replace("torch.", "")),
                       T("convert the gradient to fp32 (.to(torch.float32)) before unscaling: the masters "
                         "and the optimizer work in fp32"))
            return
        if got.shape != want.shape:
            self._note(T("{where}: the gradient has shape {shape}, expected {want}", where=where,
                         shape=tuple(got.shape), want=tuple(want.shape)),
                       T("wrong slice: tile j = (i, a, b) takes grads[i][a:b]"))
            return
        got = got.detach().to(want.device)
        if torch.equal(got, want):
            return
        g = self._grads[i][a:b]
        c = self._combined
        if torch.equal(got, g.to(torch.float32)) and c != 1.0:
            hint = T("forgot to unscale: multiply by 1 / combined ({c:.6g}: the loss scale times the clipping "
                     "factor) after converting to fp32", c=c)
        elif torch.equal(got, g.to(torch.float32) / c):
            hint = T("divided by combined: multiply by inv = 1.0 / combined instead, as the engine does "
                     "(the two round differently in the last bit)")
        elif torch.equal(got, (g * (1.0 / c)).to(torch.float32)):
            hint = T("unscaled in the gradient's 16-bit dtype: convert to fp32 first, then multiply by "
                     "1 / combined")
        elif torch.equal(got, g.to(torch.float32) * c):
            hint = T("multiplied by combined: unscaling multiplies by 1 / combined")
        elif torch.equal(got, g.to(torch.float32) * (1.0 / c) * (1.0 / c)):
            hint = T("unscaled twice: multiply by 1 / combined once (combined already holds the clipping)")
        elif self._other_slice(got):
            hint = T("wrong slice: tile j = (i, a, b) takes grads[i][a:b] (group i, from a to b)")
        else:
            hint = T("the gradient of tile j is grads[i][a:b] converted to fp32, times 1 / combined")
        diff = float((got - want).abs().max())
        self._note(T("{where}: the gradient at the step differs from grads[{i}][{a}:{b}] in fp32 x 1/combined "
                     "(max |difference| {diff:.3g})", where=where, i=i, a=a, b=b, diff=diff), hint)

    def _other_slice(self, got: torch.Tensor) -> bool:
        n, inv = got.numel(), 1.0 / self._combined
        for g in self._grads:
            full = g.to(torch.float32) * inv
            for a in range(0, max(full.numel() - n + 1, 0)):
                if torch.equal(full[a:a + n], got):
                    return True
        return False

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        home = self._home
        js = [j for j, (gi, a, b) in enumerate(home.tiles) if gi == i and a == start]
        if not js:
            self._note(T("write_params({i}, {start}, ...) starts at no tile of group {i}", i=i, start=start),
                       T("write each tile back from its own start: home.stage.write_params(i, a, t)"))
        else:
            j = js[0]
            _, a, b = home.tiles[j]
            self.writes.setdefault(j, []).append((self.calls, start, values.numel()))
            k = next(n for n, sg in enumerate(home.sub_groups) if j in sg)
            if self.calls <= k:
                self._note(T("{tile} was written up before the step of its sub-group {k}", tile=self._tile_of(j),
                             k=k),
                           T("write back after optimizer.step(), so that the parameters get the updated values"))
            elif values.numel() != b - a:
                self._note(T("{tile} was written up with {n} values, not {want}", tile=self._tile_of(j),
                             n=values.numel(), want=b - a),
                           T("wrong slice: write each tile whole, from its own start: "
                             "home.stage.write_params(i, a, home.tensors[j])"))
            else:
                self._check_written(j, values)
        return self._real_write(i, start, values)

    def _check_written(self, j: int, values: torch.Tensor) -> None:
        """What goes up must be tile j's updated master, rounded at most once, to the model's dtype."""
        home = self._home
        master = home.tensors[j].detach()
        values = values.detach().to(master.device)
        model_dtype = getattr(home.stage, "dtype", master.dtype)
        if values.dtype == torch.float32 and torch.equal(values, master):
            return
        if values.dtype == model_dtype and torch.equal(values, master.to(model_dtype)):
            return
        name = str(values.dtype).replace("torch.", "")
        grad = home.tensors[j].grad
        if values.dtype != torch.float32 and torch.equal(values, master.to(values.dtype)):
            hint = T("rounded the master to {name} before writing, and the model is {model}: pass the fp32 master "
                     "itself; write_params rounds it once to the model's dtype", name=name,
                     model=str(model_dtype).replace("torch.", ""))
        elif grad is not None and grad.shape == values.shape and torch.equal(values.float(), grad.float()):
            hint = T("wrote the gradient up: the parameters take the updated master, home.tensors[j]")
        elif any(t is not home.tensors[j] and t.shape == values.shape and torch.equal(values.float(), t)
                 for t in home.tensors):
            hint = T("wrote another tile's master: each tile j = (i, a, b) goes up from its own start, "
                     "home.stage.write_params(i, a, home.tensors[j])")
        else:
            hint = T("write the tile's updated fp32 master up: home.stage.write_params(i, a, home.tensors[j])")
        self._note(T("{tile} was written up with values that are not its updated master", tile=self._tile_of(j)),
                   hint)

    def finish(self) -> None:
        home = self._home
        n = len(home.sub_groups)
        if self.calls == 0:
            self._note(T("optimizer.step() was never called"), T("step once per sub-group"))
        elif self.calls < n:
            self._note(T("optimizer.step() called {calls} times for {n} sub-groups", calls=self.calls, n=n),
                       T("stepping all at once: step once per sub-group, with only its tiles' gradients set")
                       if self.calls == 1 else T("step every sub-group (for sg in home.sub_groups)"))
        if self.late is not None and self.writes:
            k, j = self.late
            self._note(T("when sub-group {k} stepped, {tile} of an earlier sub-group was not written up yet", k=k,
                         tile=self._tile_of(j)),
                       T("finish each sub-group before the next steps: write its tiles up right after its "
                         "step (with NVMe its masters leave host memory when it is done)"))
        unwritten = [j for j in range(len(home.tiles)) if j not in self.writes]
        if unwritten:
            self._note(T("{tile} (and {more} more) never written up", tile=self._tile_of(unwritten[0]),
                         more=len(unwritten) - 1),
                       T("not writing back: after the step, copy each tile up with "
                         "home.stage.write_params(i, a, home.tensors[j]); the parameters keep their old "
                         "values otherwise"))
        twice = [j for j, w in self.writes.items() if len(w) > 1]
        if twice:
            self._note(T("{tile} was written up {n} times", tile=self._tile_of(twice[0]),
                         n=len(self.writes[twice[0]])),
                       T("write each tile once, after the step of its sub-group"))
        left = [j for j, t in enumerate(home.tensors) if t.grad is not None]
        if left:
            self._note(T("after the step, tiles {tiles} still hold their gradients", tiles=left[:4]),
                       T("clear each tile's gradient after stepping (home.tensors[j].grad = None): the "
                         "host holds them for nothing, and the next step would move them again"))


def _run_watched(fn: Callable, home, optimizer, grads, combined, where: str) -> tuple[str, str] | None:
    """Run the learner's loop on ``home`` under a :class:`_Watch`; the first problem, or None.
    A NotImplementedError (the unfinished exercise) propagates."""
    watch = _Watch(home, optimizer, grads, combined, where)
    saved = home.optimizer
    home.optimizer = watch
    home.stage.write_params = watch.write_params
    try:
        fn(home, watch, grads, combined)
    except NotImplementedError:
        raise
    except Exception as exc:                      # noqa: BLE001  (the learner's error, explained)
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        hint = T("your host_step raised")
        if "size" in text or "shape" in text:
            hint = T("wrong slice: tile j = (i, a, b) takes grads[i][a:b] and home.tensors[j]")
        elif "dtype" in text or "type" in text:
            hint = T("the gradient must be float32, like the master it belongs to")
        return (T("{where}: {what}", where=where, what=text), hint)
    finally:
        home.optimizer = saved
        del home.stage.write_params               # the stage's own method again
    watch.finish()
    return watch.problem


def _fail(problem: tuple[str, str]) -> ExerciseCheckFailed:
    what, hint = problem
    return ExerciseCheckFailed(i18n.fill(what, 96, subsequent_indent="  ") + "\n"
                               + _wrap(T("hint: {hint}", hint=hint)))


# ----------------------------------------------------------------------------- part 1: alone

class _Shard:
    """What a StateHome writes through (``home.stage``): the 16-bit shards themselves."""

    def __init__(self, owned):
        self.owned = owned
        self.dtype = owned[0].dtype        # the model's dtype, as the engine's writer has it

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        self.owned[i][start:start + values.numel()].copy_(values)


def _alone_home(sub_group_size: int, dtype=torch.float16):
    gen = torch.Generator().manual_seed(5)
    owned = [torch.randn(n, generator=gen).to(dtype) for n in ALONE_SIZES]
    stage = _Shard(owned)
    home = StateHome(owned, None, HostShards(), stage, sub_group_size=sub_group_size)
    opt = torch.optim.AdamW(home.optimizer_params, lr=1e-2, weight_decay=0.1)
    home.attach(opt)
    return home, opt, stage


def _alone_grads(step: int, dtype=torch.float16):
    gen = torch.Generator().manual_seed(100 + step)
    return [(torch.randn(n, generator=gen) * 256).to(dtype) for n in ALONE_SIZES]


def check_alone(fn: Callable) -> int:
    """Part 1: the learner's loop on a StateHome of three fp16 groups, against zerolab's, at
    each of ALONE_SUB_GROUPS; two AdamW steps with combined = 256 x 1.7 (loss scale x clipping).
    Returns the number of sub-group sizes checked."""
    combined = 256 * 1.7
    for size in ALONE_SUB_GROUPS:
        mine, opt_m, stage_m = _alone_home(size)
        ref, opt_r, stage_r = _alone_home(size)
        where = T("alone, groups of {sizes} elements, sub_group_size {size:,} ({n} sub-groups)",
                  sizes=list(ALONE_SIZES), size=size, n=len(mine.sub_groups))
        for step in range(2):
            grads = _alone_grads(step)
            problem = _run_watched(fn, mine, opt_m, grads, combined, T("{where}, step {step}", where=where,
                                                                       step=step + 1))
            if problem:
                raise _fail(problem)
            _BUILTIN_STEP(ref, opt_r, [g.clone() for g in grads], combined)
        for i, (a, b) in enumerate(zip(stage_m.owned, stage_r.owned)):
            if not torch.equal(a, b):
                raise _fail((T("{where}: group {i}'s parameters after 2 steps differ from zerolab's", where=where, i=i),
                             T("compare your loop with the steps above: grads down and unscaled, step, "
                               "grad = None, write up")))
        for j, (a, b) in enumerate(zip(mine.tensors, ref.tensors)):
            if not torch.equal(a, b):
                raise _fail((T("{where}: tile {j}'s fp32 master after 2 steps differs from zerolab's", where=where,
                               j=j),
                             T("step each tile exactly once per call, with its own gradient")))
    return len(ALONE_SUB_GROUPS)


# ----------------------------------------------------------------------------- part 2: the engine

def _config(stage: int, precision: str, sub_group_size: int, offload_param: bool) -> dict:
    import zerolab
    world = zerolab.world_size()
    zero = {"stage": stage, "reduce_bucket_size": 700, "stage3_param_persistence_threshold": 30,
            "sub_group_size": sub_group_size, "offload_optimizer": {"device": "cpu"}}
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
           "train_batch_size": 4 * world, "gradient_clipping": 0.05,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}},
           "zero_optimization": zero}
    if precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    elif precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def _train(cfg: dict, fn: Callable | None, where: str) -> dict:
    """One run; ``fn``: the learner's loop in place of StateHome.step (None: zerolab's)."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine

    problems: list = []
    state = {"step": 0}

    def patched(home, optimizer, grads, combined):
        state["step"] += 1
        if home.where != "cpu" or problems:
            return _BUILTIN_STEP(home, optimizer, grads, combined)
        p = _run_watched(fn, home, optimizer, grads, combined, T("{where}, optimizer step {step}", where=where,
                                                                 step=state["step"]))
        if p:
            problems.append(p)

    engine = zerolab.initialize(TinyLM(), cfg)
    if fn is not None:
        StateHome.step = patched
    try:
        losses = train_engine(engine, lm_batches(ENGINE_STEPS, cfg["train_batch_size"], seed=3), lm_loss)
    finally:
        StateHome.step = _BUILTIN_STEP
    out = {"problem": problems[0] if problems else None, "losses": [float(x) for x in losses],
           "masters": engine.full_params(),
           "params": {n: p.detach().clone() for n, p in engine.module.named_parameters()},
           "sub_groups": len(engine.stage.home.sub_groups), "tiles": len(engine.stage.home.tiles),
           "skipped": engine.skipped_steps}
    engine.close()
    return out


def _engine_runs(fn: Callable, cases, sizes, language: str = "en") -> list[dict]:
    with i18n.using(language):          # a rank speaks the language of the notebook that started it
        return _engine_runs_here(fn, cases, sizes)


def _engine_runs_here(fn: Callable, cases, sizes) -> list[dict]:
    out = []
    for stage, precision, param in cases:
        for size in sizes:
            what = f"stage {stage}{' + offload_param' if param else ''}, {precision}, sub_group_size {size:,}"
            cfg = _config(stage, precision, size, param)
            mine = _train(cfg, fn, T("the engine, {what}", what=what))
            ref = _train(cfg, None, "")
            out.append({"what": what, "mine": mine, "ref": ref})
            if mine["problem"]:
                break
        if out and out[-1]["mine"]["problem"]:
            break
    return out


def _compare(run: dict, rank: int) -> tuple[str, str] | None:
    mine, ref, what = run["mine"], run["ref"], run["what"]
    if mine["problem"]:
        return mine["problem"]
    where = T("the engine, {what}, rank {rank}", what=what, rank=rank)
    for key, label in (("masters", T("fp32 masters")), ("params", T("model parameters"))):
        for name, want in ref[key].items():
            if not torch.equal(mine[key][name], want):
                d = float((mine[key][name].float() - want.float()).abs().max())
                return (T("{where}: after {steps} steps the {label} of {name} differ from zerolab's (max |difference| "
                          "{d:.3g})", where=where, steps=ENGINE_STEPS, label=label, name=name, d=d),
                        T("every step above matched: look at what happens between the steps (write every "
                          "tile up, clear every gradient)"))
    if mine["losses"] != ref["losses"]:
        return (T("{where}: the losses differ from zerolab's: {mine} vs {ref}", where=where, mine=mine["losses"],
                  ref=ref["losses"]),
                T("the parameters the forward pass sees come from write_params: write every tile up"))
    return None


def what_arrives(cases=(("1", "bf16"), ("2", "fp16"), ("3", "fp32"))) -> list[dict]:
    """On a rank: what the engine hands the host step in one optimizer step, for each
    (stage, precision) of ``cases`` (exercise 5's config, optimizer offloaded to the host)."""
    import zerolab
    from zerolab.models import TinyLM, lm_batches, lm_loss
    from zerolab.zero.reference import train_engine

    out = []
    for stage, precision in cases:
        seen = {}

        def peek(home, optimizer, grads, combined):
            seen.update(dtypes=sorted({str(g.dtype).replace("torch.", "") for g in grads}), groups=len(grads),
                        tiles=len(home.tiles), combined=float(combined),   # (a 0-dim tensor at stages 1-3)
                        master=str(home.tensors[0].dtype).replace("torch.", ""))
            return _BUILTIN_STEP(home, optimizer, grads, combined)

        cfg = _config(int(stage), precision, 10**9, False)
        engine = zerolab.initialize(TinyLM(), cfg)
        StateHome.step = peek
        try:
            train_engine(engine, lm_batches(1, cfg["train_batch_size"], seed=3), lm_loss)
        finally:
            StateHome.step = _BUILTIN_STEP
        out.append({"stage": int(stage), "precision": precision, "scale": engine.loss_scale,
                    "model": str(engine.stage.dtype).replace("torch.", ""), **seen})
        engine.close()
    return out


def check_engine(fn: Callable, world_size: int = 2, cases=ENGINE_CASES, sizes=SUB_GROUP_SIZES) -> list[dict]:
    """Part 2: the learner's loop as the engine's host step on ``world_size`` ranks."""
    import zerolab

    crew = crew_of(world_size)
    try:
        results = crew.run(_engine_runs, fn, cases, sizes, i18n.lang())
    except (zerolab.RankError, zerolab.CrewTimeout) as exc:
        if not_implemented(exc):
            raise NotImplementedError("Exercise: write host_step") from exc
        raise rank_failure(exc, T("the engine on {n} ranks (with your host_step)", n=world_size),
                           T("zerolab.course.checks.full_tracebacks(), then run again, shows the line")) from exc
    for r, runs in enumerate(results):
        for run in runs:
            problem = _compare(run, r)
            if problem:
                raise _fail(problem)
    return results[0]


def check_host_step(fn: Callable, *, world_size: int = 2, verbose: bool = True) -> None:
    """Check ``fn(home, optimizer, grads, combined)`` against zerolab's tiled host step, alone
    and inside the engine on ``world_size`` ranks."""
    n = check_alone(fn)                # fast; an unfinished exercise fails here
    if verbose:
        print(T("alone: 3 fp16 groups ({numel} elements), {n} sub_group_size values, 2 AdamW steps each:",
                numel=sum(ALONE_SIZES), n=n))
        print(T("  the same bits as zerolab's loop"))
    runs = check_engine(fn, world_size)
    if verbose:
        print(T("engine: TinyLM on {n} ranks, offload_optimizer cpu, {steps} steps of 2 micro-batches, "
                "clipping 0.05;", n=world_size, steps=ENGINE_STEPS))
        print(T("  sub-groups per rank at sub_group_size {sizes}:",
                sizes=", ".join(f"{s:,}" for s in SUB_GROUP_SIZES)))
        by_case: dict = {}
        for run in runs:
            by_case.setdefault(run["what"].rsplit(", sub_group_size", 1)[0], []).append(run["mine"]["sub_groups"])
        for what, counts in by_case.items():
            print(f"    {what:<34} {' / '.join(str(c) for c in counts)}")
        skipped = sum(run["mine"]["skipped"] for run in runs)
        print(T("  {runs} runs ({skipped} steps skipped by the fp16 scaler): masters, parameters and losses",
                runs=len(runs), skipped=skipped))
        print(T("  bit-identical to zerolab's"))
    passed(T("your host_step steps {n} sub-group layouts alone as zerolab does,\n"
             "  and is the engine's host optimizer step on {world} ranks (stages 1-3, fp32/fp16/bf16)", n=n,
             world=world_size))
