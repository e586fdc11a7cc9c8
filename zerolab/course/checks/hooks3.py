"""Exercise 8c check: stage 3's gather and release, written by the learner as module hooks.

The learner writes a class with the interface :class:`zerolab.zero.stage3.gather.GatheredParams` expects of
its hooks (zerolab's is :class:`zerolab.zero.stage3.hooks.ModuleHooks`): ``__init__(params)`` registers on
every module of ``params.model``; ``remove``, ``pre_backward``, ``post_backward``,
``forward_failed``, ``register_external_parameter`` and ``on_param_read`` (called by the watched
parameter dicts, :func:`zerolab.zero.stage3.hooks.watch_params`). The lesson is *when*: gather a module's
groups before its forward, release them after it, gather them again before its backward
(:func:`zerolab.zero.stage3.hooks.on_first_output_grad`), gather a parameter read outside its own module's
forward and tie it to the module whose forward read it.

:func:`check_gather_hooks` runs the learner's class inside the engine
(:func:`zerolab.zero.stage3.hooks.use_module_hooks`) on 2 and 3 real ranks: stage 3, fp32, SGD with momentum,
``stage3_max_reuse_distance`` 0, persistence threshold 0 (every parameter gathered), no prefetch
(each gather is the module's own), on :class:`HooksNet`: a tied weight (the head is the
embedding's) and two weights read outside their module (``nn.MultiheadAttention`` reads
``out_proj.weight`` without calling ``out_proj``; the root computes ``F.linear(h, self.mix.weight)``).
The same run with zerolab's ModuleHooks beside it: a failure on a rank, the gathers and releases
(their order, per phase), the peak of gathered elements (``engine.stage3_stats()``), the
ledger's parameter all-gathers (calls and bytes), then losses and parameters bit for bit.

Then a second run on 2 ranks (:data:`SCENARIOS`): ``stage3_max_reuse_distance`` above 0
(:data:`REUSE`, so that DeepSpeed's rule keeps the last modules of forward gathered for backward)
and the MLP block checkpointed (``torch.utils.checkpoint``, ``use_reentrant=False``: its forward
runs again inside backward). A hook that releases every group after its forward, whatever the
reuse distance says, or one that releases after the recomputation in backward, passes the first
run and fails this one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...i18n import catalogue, fill
from . import ExerciseCheckFailed, close_crews, crew_of, not_implemented, passed, rank_failure  # noqa: F401

T = catalogue("checks.hooks3")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_gather_hooks", "HooksNet", "CONFIG", "WORLDS", "STEPS", "run_rank", "EXTERNAL",
           "make_batches", "loss_fn", "trial", "summary", "close_crews", "SCENARIOS", "REUSE"]

WORLDS, STEPS, VOCAB, BATCH, SEQ = (2, 3), 3, 32, 2, 6
EXTERNAL = ("attn.out_proj.weight", "attn.out_proj.bias", "mix.weight")   # read outside their own module
CONFIG = {"train_micro_batch_size_per_gpu": BATCH, "optimizer": {"type": "SGD", "params": {"lr": 0.1,
          "momentum": 0.9}}, "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
          "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0}}
REUSE = 1200      # elements: from the end of forward, mix and head stay gathered; mlp (2 x 512) does not
# (name, world sizes, zero_optimization overrides, HooksNet keywords); the first takes ``worlds``
SCENARIOS = (("reuse distance 0", None, {}, {}),
             (f"reuse distance {REUSE:,}, MLP checkpointed", (2,), {"stage3_max_reuse_distance": REUSE},
              {"checkpoint_mlp": True}))


class HooksNet(nn.Module):
    """A tiny language model with a tied weight and two weights used outside their module."""

    def __init__(self, vocab: int = VOCAB, d: int = 16, checkpoint_mlp: bool = False):
        super().__init__()
        torch.manual_seed(8)
        self.checkpoint_mlp = checkpoint_mlp     # recompute the MLP's forward in backward
        self.embed = nn.Embedding(vocab, d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)   # reads out_proj.weight itself
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.mix = nn.Linear(d, d, bias=False)   # never called: the root reads its weight
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight     # tied: one parameter, two modules

    def forward(self, x):
        h = self.embed(x)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        if self.checkpoint_mlp:
            from torch.utils.checkpoint import checkpoint
            h = h + checkpoint(self.mlp, h, use_reentrant=False)
        else:
            h = h + self.mlp(h)
        h = h + F.linear(h, self.mix.weight)
        return self.head(h)


def make_batches(world: int, steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This run's global batches (the same on every rank), each rank taking its own rows."""
    g = torch.Generator().manual_seed(80)
    tokens = [torch.randint(0, VOCAB, (BATCH * world, SEQ + 1), generator=g) for _ in range(steps)]
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def run_rank(cls, steps: int = STEPS, zero: dict | None = None, net: dict | None = None) -> dict:
    """On a rank: a fresh engine with ``cls`` as its module hooks (zerolab's when None), trained
    ``steps`` steps on this rank's rows (``zero`` over CONFIG's zero_optimization, ``net`` the
    HooksNet keywords). Every gather and release is logged as (phase, what, group); a failure stops
    the run and is returned (phase, error), not raised."""
    import contextlib

    import zerolab
    from zerolab.zero.stage3.hooks import use_module_hooks

    world, rank = zerolab.world_size(), zerolab.rank()
    config = {**CONFIG, "train_batch_size": BATCH * world,
              "zero_optimization": {**CONFIG["zero_optimization"], **(zero or {})}}
    with use_module_hooks(cls) if cls is not None else contextlib.nullcontext():
        eng = zerolab.initialize(HooksNet(**(net or {})), config)
    events: list[tuple[str, str, str]] = []

    class Log:                                # told every gather and release (the engine's observers)
        def on_gather(self, label, phase):
            events.append((phase, "gather", label))

        def on_release(self, label, phase):
            events.append((phase, "release", label))
    eng.observe_stage3(Log())
    mark = eng.ledger.mark()
    losses, failed, where, per_step = [], None, "forward", []
    try:
        for x, y in make_batches(world, steps):
            step_mark = eng.ledger.mark()
            rows = slice(rank * BATCH, (rank + 1) * BATCH)
            where = "forward"
            loss = loss_fn(eng(x[rows]), y[rows])
            where = "backward"
            eng.backward(loss)
            where = "step"
            eng.step()
            per_step.append(_param_gathers(eng.ledger.since(step_mark)))
            losses.append(float(loss.detach()))
            events.append(("step", "step", ""))
    except Exception as exc:                  # noqa: BLE001 (reported to the learner)
        failed = (where, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
    out = {"losses": losses, "failed": failed, "events": events, "gathers": _param_gathers(eng.ledger.since(mark)),
           "per_step": per_step, "peak": eng.stage3_stats().peak_gathered_numel, "params": None}
    if failed is None:
        out["params"] = {k: v.clone() for k, v in eng.full_params().items()}
    try:
        eng.close()
    except Exception:                        # noqa: BLE001 (a broken run may not close cleanly)
        pass
    return out


def _param_gathers(ledger) -> list[tuple[int, int]]:
    """(elements, bytes) of each parameter all-gather in ``ledger`` (ZeRO's calls, not the checks)."""
    return [(r.numel, r.bytes) for r in ledger.records
            if r.op == "all_gather" and r.kind == "zero" and r.tag.startswith("params")]


def trial(crew, cls, steps: int = 1) -> dict:
    """For the notebook: :func:`run_rank` with ``cls`` on every rank of ``crew``; rank 0's result.
    An unfinished exercise raises NotImplementedError, a failed run ExerciseCheckFailed."""
    res = crew.run(run_rank, cls, steps)[0]
    if res["failed"] is not None:
        if "NotImplementedError" in res["failed"][1]:
            raise NotImplementedError("Exercise: write pre_forward, post_forward and on_param_read")
        raise ExerciseCheckFailed(T("the {phase} raised on rank 0: {error}\n  hint: the check (below) names the "
                                    "likely mistake", phase=T.text(res["failed"][0]), error=res["failed"][1]))
    return res


def summary(events: list[tuple[str, str, str]], step: int = 1) -> list[str]:
    """Lines for step ``step``'s gathers (+) and releases (-), per phase (what the notebook prints)."""
    lines, cur, words = [], None, []
    ends = [k for k, e in enumerate(events) if e[1] == "step"]
    start = ends[step - 2] + 1 if step > 1 else 0
    for ph, what, label in events[start:]:
        if what == "step":
            break
        if ph != cur and words:
            lines.append(f"{cur:<9}" + " ".join(words))
            words = []
        cur = ph
        words.append(("+" if what == "gather" else "-") + label)
    if words:
        lines.append(f"{cur:<9}" + " ".join(words))
    out = []
    for line in lines:                       # under 100 characters a line
        while len(line) > 96:
            cut = line.rfind(" ", 0, 96)
            out.append(line[:cut])
            line = " " * 9 + line[cut + 1:]
        out.append(line)
    return out


def _both(cls, steps: int, zero: dict | None = None, net: dict | None = None) -> dict:
    return {"yours": run_rank(cls, steps, zero, net), "zerolab": run_rank(None, steps, zero, net)}


def _wrap(text: str) -> str:
    return fill(text, 96, subsequent_indent="  ")


def _hint(hint: str) -> str:
    return _wrap(T("hint: {hint}", hint=hint))


def _first_difference(mine: list, ref: list) -> tuple[int, tuple | None, tuple | None]:
    for k, (a, b) in enumerate(zip(mine, ref)):
        if a != b:
            return k, a, b
    k = min(len(mine), len(ref))
    return k, (mine[k] if k < len(mine) else None), (ref[k] if k < len(ref) else None)


def _show(ev: tuple | None) -> str:
    if ev is None:
        return T("(nothing: the run ended)")
    ph, what, label = ev
    return T("optimizer step") if what == "step" else T("{what} {label} in {phase}", what=T.text(what),
                                                         label=repr(label), phase=T.text(ph))


def _hint_for(mine: list, ref: list, failed: tuple | None, recomputed: bool = False) -> str:
    """The likely mistake, from the first place the learner's gathers and releases leave zerolab's
    (``recomputed``: the run with a checkpointed block, whose forward runs again in backward)."""
    k, got, want = _first_difference(mine, ref)
    if failed is not None and failed[0] == "backward" and not any(e[0] == "backward" and e[1] == "gather"
                                                                  for e in mine):
        return T("you release a module's groups after its forward and never gather them again before "
                 "its backward: in post_forward, on_first_output_grad(output, fn) with fn unsharding them")
    if (want is not None and want[1] == "gather" and want[2] in EXTERNAL and want[0] == "forward"
            and ("forward", "gather", want[2]) in mine[:k]):
        return T("you gather {name} where it is read but do not tie it to that module for good: in on_param_read "
                 "add it to self.registered[module] too, so that from the next forward on, pre_forward gathers it "
                 "with the module's own groups in one all-gather (DeepSpeed's register_external_parameter)",
                 name=repr(want[2]))
    if want is not None and want[1] == "gather" and want[2] in EXTERNAL and want[0] == "forward":
        return T("you forget the external weight: {name} is read by attribute outside its own module's forward; "
                 "gather it in on_param_read and tie it to the module running (self.frames[-1] now, "
                 "self.registered for the next steps), so that it is released after that forward and gathered "
                 "before its backward", name=repr(want[2]))
    if want is not None and want[1] == "release" and want[2] in EXTERNAL and want[0] == "forward":
        return T("{name} (read outside its own module) is not released when the forward that read it ends: in "
                 "on_param_read add it to the frame of the module running now (self.frames[-1]), whose "
                 "post_forward releases it and whose backward gathers it again", name=repr(want[2]))
    released = any(e[0] == "forward" and e[1] == "release" for e in mine)
    if want is not None and want[0] == "forward" and want[1] == "release" and not released:
        return T("you never release: after a module's forward call params.after_forward(group) for each of "
                 "its groups (it releases unless the reuse distance keeps the group)")
    if want is not None and want[0] == "forward" and got is not None and got[1] == "gather":
        return T("you gather {name} before its module's forward runs: gather only the groups of the module about "
                 "to run (params.module_groups[module]; module.parameters() recurses into every child)",
                 name=repr(got[2]))
    steps = [j for j, e in enumerate(mine[:k]) if e[1] == "step"]
    this_step = mine[(steps[-1] + 1 if steps else 0):k]
    if got is not None and want is not None and got[:2] == ("forward", "release") and want[0] == "backward":
        return T("you release {name} when its forward ends, where zerolab's hooks keep it for backward: "
                 "stage3_max_reuse_distance says it is used again soon. Release through "
                 "params.after_forward(group), which keeps what the reuse distance keeps (DeepSpeed's "
                 "__params_to_release), never params.reshard", name=repr(got[2]))
    if (recomputed and got is not None and want is not None and got[:2] == ("backward", "release")
            and want[:2] == ("backward", "release") and got[2] != want[2]):
        return T("you release {name} in backward before its module's backward has run: a forward that runs "
                 "inside backward (torch.utils.checkpoint recomputing a block) must not release in post_forward, "
                 "the backward that follows uses what it gathered (skip the release while params.in_backward)",
                 name=repr(got[2]))
    if want is not None and want[0] == "backward" and want[1] == "release":
        return T("you do not release after a module's backward: in pre_forward, on_inputs_grad(inputs, fn) with fn "
                 "calling params.after_backward(ids) for the module's groups and those tied to it (a tied weight "
                 "goes after each module's backward and is gathered again for the other's)")
    if got is not None and got[1] == "gather" and (got[0], "release", got[2]) in this_step:
        return T("a double gather: you gather {name} again in {phase} right after releasing it, where zerolab's "
                 "hooks keep it. Release only through params.after_forward and params.after_backward (they keep "
                 "what the reuse distance says) and gather through params.unshard_unit (it gathers nothing that is "
                 "gathered)", name=repr(got[2]), phase=T.text(got[0]))
    if want is not None and want[0] == "backward" and want[1] == "gather":
        if want[2] in EXTERNAL:
            return T("before a module's backward you gather its own groups but not {name}, read in its forward "
                     "from outside: re-gather the frame's groups too", name=repr(want[2]))
        return T("you re-gather the wrong module before backward: the function given to on_first_output_grad must "
                 "unshard the groups of the module whose forward produced that output (captured when post_forward "
                 "runs), not another's")
    if want is not None and want[1] == "release":
        return T("you never release: after a module's forward call params.after_forward(group) for each of "
                 "its groups (it releases unless the reuse distance keeps the group)")
    if got is not None and got[1] == "gather":
        return T("you gather a group zerolab does not gather here: a group gathered twice (a shared weight "
                 "released and gathered again by each module that uses it?) or one the module does not use "
                 "(parameters(recurse=True) gathers every child's too: use params.module_groups[module])")
    if got is not None and got[1] == "release":
        return T("you release a group that is still in use (after a child's forward, a group of the parent; "
                 "or a shared weight released by one of the two modules while the other needs it)")
    return T("compare your hooks' gathers and releases with zerolab.zero.stage3.hooks.ModuleHooks's")


def _compare(world: int, res: dict, scenario: str | None = None) -> None:
    mine, ref = res["yours"], res["zerolab"]
    where = T("stage 3 on {n} ranks, rank 0, your hooks in the engine", n=world)
    if scenario is not None:
        where += f" ({T.text(scenario)})"
    hint = _hint_for(mine["events"], ref["events"], mine["failed"], recomputed=scenario is not None)
    k, got, want = _first_difference(mine["events"], ref["events"])
    seen = T("  event {k}: zerolab's hooks {want}; yours {got}", k=k, want=_show(want), got=_show(got))
    if mine["failed"] is not None:
        ph, err = mine["failed"]
        raise ExerciseCheckFailed(T("{where}: the {phase} raised: {error}", where=where, phase=T.text(ph), error=err)
                                  + f"\n{seen}\n" + _hint(hint))
    if mine["peak"] > ref["peak"]:
        what = (T("never released") if not any(e[0] == "forward" and e[1] == "release" for e in mine["events"])
                else T("gathered too much at once"))
        raise ExerciseCheckFailed(
            T("{where}: {what}: peak {mine:,} vs {ref:,} gathered elements at once (zerolab's hooks)", where=where,
              what=what, mine=mine["peak"], ref=ref["peak"]) + f"\n{seen}\n" + _hint(hint))
    if mine["events"] != ref["events"] or mine["gathers"] != ref["gathers"]:
        n_m, n_r = len(mine["gathers"]), len(ref["gathers"])
        b_m, b_r = sum(b for _, b in mine["gathers"]), sum(b for _, b in ref["gathers"])
        if mine["events"] == ref["events"] and n_m > n_r and b_m == b_r:
            hint = T("the same groups, in more calls: you gather a module's groups one by one. Gather its unit (its "
                     "own groups and those tied to it) in one all-gather, params.unshard_unit(ids), as DeepSpeed's "
                     "fetch_sub_module does")
            seen = T("  every gather and release as zerolab's hooks, in the same order")
        raise ExerciseCheckFailed(
            T("{where}: your gathers and releases differ from zerolab's hooks'\n  parameter all-gathers: yours "
              "{n_m} calls, {b_m:,} bytes; zerolab's {n_r} calls, {b_r:,} bytes", where=where, n_m=n_m, b_m=b_m,
              n_r=n_r, b_r=b_r) + f"\n{seen}\n" + _hint(hint))
    if mine["losses"] != ref["losses"] or any(not torch.equal(mine["params"][n], t)
                                              for n, t in ref["params"].items()):
        raise ExerciseCheckFailed(
            T("{where}: the same gathers as zerolab's hooks, but the losses or parameters differ", where=where)
            + "\n" + _hint(T("a module ran with a stale or wrong copy of a parameter; release with params.reshard "
                             "or after_forward only, never by hand")))


def check_gather_hooks(cls, *, worlds: tuple[int, ...] = WORLDS, steps: int = STEPS,
                       verbose: bool = True) -> None:
    """Check the learner's hooks class inside the engine on each world size of ``worlds``."""
    import zerolab
    if not isinstance(cls, type):
        raise TypeError("check_gather_hooks(cls): pass your class itself (not an instance)")
    results = {}
    for k, (name, sworlds, zero, net) in enumerate(SCENARIOS):
        for world in (worlds if sworlds is None else sworlds):
            try:
                res = crew_of(world).run(_both, cls, steps, zero, net)
            except (zerolab.RankError, zerolab.CrewTimeout) as exc:
                if not_implemented(exc):
                    raise NotImplementedError("Exercise: write pre_forward, post_forward and on_param_read") from exc
                raise rank_failure(exc, T("your hooks on {n} ranks", n=world),
                                   T("your __init__ or a hook raised while the engine started; "
                                     "zerolab.course.checks.full_tracebacks(), then run again, shows the line")) from exc
            for r in range(world):
                if res[r]["yours"]["failed"] is not None and "NotImplementedError" in res[r]["yours"]["failed"][1]:
                    raise NotImplementedError("Exercise: write pre_forward, post_forward and on_param_read")
            _compare(world, res[0], name if k else None)
            for r in range(1, world):
                if res[r]["yours"]["losses"] != res[r]["zerolab"]["losses"]:
                    _compare(world, res[r], name if k else None)
            results[name, world] = res[0]
    if verbose:
        for (name, world), res in results.items():
            mine = res["yours"]
            n = len(mine["gathers"])
            print(fill(T("{world} ranks, {steps} steps: {n} all-gathers, {bytes:,} bytes on rank 0, peak {peak:,} "
                         "elements: as zerolab's hooks", world=world, steps=steps, n=n,
                         bytes=sum(b for _, b in mine["gathers"]), peak=mine["peak"]) + f" ({T.text(name)})",
                       96, subsequent_indent="    "))
        print(fill(T("losses and parameters bit for bit those of zerolab's hooks (tied head, two external weights, "
                     "a checkpointed block)"), 96, subsequent_indent="    "))
    passed(T("your hooks gather, release and gather again as zerolab's on {worlds} ranks",
             worlds=T.join_and(worlds)))
