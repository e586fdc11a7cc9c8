"""Exercise 9 check: the DeepSpeed config of the capstone run, written by the learner, run in the real engine.

The learner writes ``capstone_config(world_size) -> dict``: the DeepSpeed config that trains
chapter 9's GPT with ZeRO-3, both offloads to the CPU, bf16, AdamW and a warmup-then-decay
schedule, with a global batch that stays the same whatever the number of ranks (so that a
checkpoint can resume on another number of ranks and the loss curve does not change).

:func:`check_capstone_config` runs in two parts:

1. *Alone* (no ranks): the config for 1, 2, 3, 4 and 6 ranks goes through zerolab's config
   parser (DeepSpeed's rules), then every choice the brief asks for is compared with
   :data:`BRIEF`: the batch triple, the stage, where the optimizer states and the parameters
   live, the precision, the optimizer, the clipping, the persistence threshold, and the
   learning rate of each of the 100 steps under the config's scheduler. The first difference is
   described with a hint that names the likely mistake.
2. *In the engine*: on 2 and then 3 ranks, the GPT of chapter 9 trains a few steps on the
   book with the learner's config and with :func:`reference_config`; the engine must report
   ZeRO-3, its parameter shards and optimizer states in host memory, and the losses and learning
   rates must be the same as the reference config's, step for step.
"""
from __future__ import annotations

import copy
from collections.abc import Callable

from ...i18n import catalogue, fill
from . import ExerciseCheckFailed, crew_of, passed, rank_failure

T = catalogue("checks.ch09")    # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["check_capstone_config", "check_alone", "check_engine", "reference_config", "BRIEF",
           "WORLD_SIZES", "ENGINE_WORLDS", "ENGINE_STEPS"]

# What the brief asks for (the exercise's markdown says the same in words).
BRIEF = {
    "train_batch_size": 24, "gradient_accumulation_steps": 2, "lr": 6e-3, "betas": (0.9, 0.95),
    "weight_decay": 0.01, "gradient_clipping": 1.0, "warmup_num_steps": 15, "total_num_steps": 100,
}
WORLD_SIZES = (1, 2, 3, 4, 6)
ENGINE_WORLDS = (2, 3)
ENGINE_STEPS = 5          # the first two steps have lr 0 (WarmupDecayLR from 0): train past them


def reference_config(world_size: int) -> dict:
    """zerolab's answer (the solution's)."""
    gas = BRIEF["gradient_accumulation_steps"]
    return {
        "train_batch_size": BRIEF["train_batch_size"],
        "train_micro_batch_size_per_gpu": BRIEF["train_batch_size"] // (gas * world_size),
        "gradient_accumulation_steps": gas,
        "gradient_clipping": BRIEF["gradient_clipping"],
        "optimizer": {"type": "AdamW", "params": {"lr": BRIEF["lr"], "betas": list(BRIEF["betas"]),
                                                  "weight_decay": BRIEF["weight_decay"]}},
        "scheduler": {"type": "WarmupDecayLR", "params": {
            "warmup_min_lr": 0.0, "warmup_max_lr": BRIEF["lr"], "warmup_num_steps": BRIEF["warmup_num_steps"],
            "total_num_steps": BRIEF["total_num_steps"], "warmup_type": "linear"}},
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                              "offload_param": {"device": "cpu"}, "stage3_param_persistence_threshold": 0},
    }


def _wrap(text: str) -> str:
    return fill(text, 96, initial_indent="  ", subsequent_indent="        ")


def _hint(hint: str) -> str:
    return _wrap(T("hint: {hint}", hint=hint))


def _at(where: str, key: str) -> str:
    return T("{where}: {key}", where=where, key=key)


def _fail(where: str, expected: str, got: str, hint: str) -> ExerciseCheckFailed:
    return ExerciseCheckFailed(T("{where}\n  expected: {expected}\n  yours:    {got}", where=where, expected=expected,
                                 got=got) + "\n" + _hint(hint))


def _lrs(cfg, steps: int) -> list[float]:
    """The learning rate of each optimizer step under the config's scheduler (no ranks)."""
    import torch

    from ...zero.optim import build_optimizer
    from ...scheduler import build_scheduler
    p = torch.nn.Parameter(torch.zeros(1))
    opt = build_optimizer(None, cfg.optimizer, [p], allow_untested=True)
    sched = build_scheduler(cfg.scheduler, opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        if sched is not None:
            sched.step()
    return out


def _schedule_hint(mine, cfg) -> str:
    s = cfg.scheduler
    if s is None:
        return T("no 'scheduler' block: the lr stays at the optimizer's lr; add WarmupDecayLR")
    params = dict(s.params)
    if s.type == "WarmupLR":
        return T("WarmupLR warms up and then stays at its maximum; the brief decays to 0 at step 100: "
                 "that is WarmupDecayLR (with total_num_steps)")
    if s.type != "WarmupDecayLR":
        return T("scheduler type {type}: the brief's schedule is DeepSpeed's WarmupDecayLR", type=repr(s.type))
    if params.get("warmup_type", "log") != "linear":
        return T("DeepSpeed's default warmup_type is 'log' (a fast start, then slow); the brief asks for "
                 "a straight line: \"warmup_type\": \"linear\"")
    if params.get("warmup_max_lr", 0.001) != BRIEF["lr"]:
        return T("warmup_max_lr is {got} (DeepSpeed's default is 0.001, whatever the optimizer's lr): set it to the "
                 "peak lr, {lr}", got=params.get("warmup_max_lr", 0.001), lr=BRIEF["lr"])
    if params.get("warmup_num_steps") != BRIEF["warmup_num_steps"]:
        return T("warmup_num_steps: the warmup lasts {n} steps", n=BRIEF["warmup_num_steps"])
    if params.get("total_num_steps") != BRIEF["total_num_steps"]:
        return T("total_num_steps: the lr reaches 0 at step {n}", n=BRIEF["total_num_steps"])
    if params.get("warmup_min_lr", 0.0) != 0.0:
        return T("warmup_min_lr: the warmup starts from 0")
    return T("compare your scheduler block with the brief")


def check_one(fn: Callable, world_size: int) -> dict:
    """Part 1 for one world size: the learner's config, parsed and compared with the brief."""
    from ...config import ConfigError, load_config
    where = f"capstone_config({world_size})"
    raw = fn(world_size)
    if not isinstance(raw, dict):
        raise ExerciseCheckFailed(T("{where} returned {type}, not a dict\n  hint: return the DeepSpeed config as a "
                                    "Python dict", where=where, type=type(raw).__name__))
    raw = copy.deepcopy(raw)
    try:
        cfg = load_config(raw, world_size)
    except ConfigError as e:
        first = str(e).strip().splitlines()
        text = "\n".join(fill(line, 96, initial_indent="  ", subsequent_indent="    ") for line in first[:3])
        hint = (T("the three batch keys must agree on every number of ranks: train_batch_size = "
                  "train_micro_batch_size_per_gpu x gradient_accumulation_steps x world_size; compute "
                  "the micro-batch from world_size") if "batch" in str(e) else
                T("DeepSpeed (and zerolab) refuse this config; the lines above say which key"))
        raise ExerciseCheckFailed(T("{where}: the config does not load on {n} rank(s):", where=where, n=world_size)
                                  + "\n" + text + "\n" + _hint(hint)) from None
    missing = [k for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
               if k not in raw]
    if missing:
        raise _fail(T("{where}: the batch keys", where=where), T("all three keys of the batch triple"),
                    T("missing {keys}", keys=", ".join(missing)),
                    T("give train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps, "
                      "so that a reader (and DeepSpeed) can check they agree"))
    if cfg.train_batch_size != BRIEF["train_batch_size"]:
        raise _fail(_at(where, "train_batch_size"),
                    T("{n} sequences per step on any number of ranks", n=BRIEF["train_batch_size"]),
                    str(cfg.train_batch_size),
                    T("the global batch must not change with the number of ranks, or a run resumed on "
                      "another number of ranks trains on another problem: divide it, do not multiply it"))
    if cfg.gradient_accumulation_steps != BRIEF["gradient_accumulation_steps"]:
        raise _fail(_at(where, "gradient_accumulation_steps"), str(BRIEF["gradient_accumulation_steps"]),
                    str(cfg.gradient_accumulation_steps), T("the brief accumulates 2 micro-batches per step"))
    z = cfg.zero
    if z.stage != 3:
        raise _fail(_at(where, "zero_optimization.stage"), "3", str(z.stage),
                    T("stages 1 and 2 leave every rank a whole copy of the parameters (the furniture); only "
                      "stage 3 shards them, and offload_param needs stage 3"))
    if z.offload_optimizer.device != "cpu":
        raise _fail(_at(where, "zero_optimization.offload_optimizer.device"), "'cpu'",
                    repr(z.offload_optimizer.device),
                    T("the heavy notebook (fp32 masters and Adam moments) goes to the warehouse: "
                      "\"offload_optimizer\": {\"device\": \"cpu\"}"))
    if z.offload_param.device != "cpu":
        raise _fail(_at(where, "zero_optimization.offload_param.device"), "'cpu'", repr(z.offload_param.device),
                    T("the parameter shards go to the warehouse too: \"offload_param\": {\"device\": \"cpu\"} "
                      "(a separate block from offload_optimizer)"))
    if z.stage3_param_persistence_threshold != 0:
        raise _fail(_at(where, "zero_optimization.stage3_param_persistence_threshold"), "0",
                    f"{z.stage3_param_persistence_threshold:g}",
                    T("DeepSpeed's default (1e5 elements) keeps every tensor smaller than that whole on every "
                      "rank; every tensor of this small GPT is smaller, so nothing would be sharded"))
    if cfg.fp16.enabled or not cfg.bf16.enabled:
        raise _fail(T("{where}: precision", where=where),
                    T("bf16 enabled (\"bf16\": {\"enabled\": true}), fp16 off"),
                    "fp16" if cfg.fp16.enabled else T("fp32 (no bf16 block, or enabled false)"),
                    T("bf16 has fp32's range, so it needs no loss scaler; fp16 would scale the loss"))
    o = cfg.optimizer
    if o is None or o.type.lower() != "adamw":
        raise _fail(_at(where, "optimizer.type"), "'AdamW'", repr(o.type if o else None),
                    T("decoupled weight decay: AdamW (Adam with weight_decay would add it to the gradient)"))
    p = dict(o.params)
    got = (p.get("lr"), tuple(p.get("betas", ())), p.get("weight_decay"))
    want = (BRIEF["lr"], BRIEF["betas"], BRIEF["weight_decay"])
    if got != want:
        raise _fail(_at(where, "optimizer.params (lr, betas, weight_decay)"), str(want), str(got),
                    T("lr 6e-3, betas [0.9, 0.95], weight_decay 0.01, as in the brief"))
    if cfg.gradient_clipping != BRIEF["gradient_clipping"]:
        raise _fail(_at(where, "gradient_clipping"), str(BRIEF["gradient_clipping"]), str(cfg.gradient_clipping),
                    T("clip the global gradient norm to 1.0 (a top-level key, not inside the optimizer; "
                      "DeepSpeed's default is 1.0 too, 0 turns clipping off)"))
    mine = _lrs(cfg, BRIEF["total_num_steps"] + 2)
    want_lrs = _lrs(load_config(reference_config(world_size), world_size), BRIEF["total_num_steps"] + 2)
    bad = [i for i, (a, b) in enumerate(zip(mine, want_lrs)) if abs(a - b) > 1e-12]
    if bad:
        i = bad[0]
        raise _fail(T("{where}: the learning rate at step {i}", where=where, i=i),
                    T("{lr:.3g} (warmup 0 -> 6e-3 over 15 steps, then down to 0 at step 100)", lr=want_lrs[i]),
                    f"{mine[i]:.3g}", _schedule_hint(mine, cfg))
    return raw


def check_alone(fn: Callable) -> int:
    for n in WORLD_SIZES:
        check_one(fn, n)
    return len(WORLD_SIZES)


def _engine_run(config: dict, steps: int) -> dict:
    """On a rank: chapter 9's GPT, ``steps`` steps on the book with ``config``."""
    import zerolab
    from zerolab.models import GPT, CharTokenizer, lm_loss, public_domain_text, text_batches
    from zerolab.zero.reference import train_engine

    text = public_domain_text()
    tok = CharTokenizer(text)
    engine = zerolab.initialize(GPT(tok.vocab), config)
    losses, lrs = [], []
    for batch in text_batches(tok.encode(text), steps, BRIEF["train_batch_size"], 64, seed=3):
        lrs.append(engine.get_lr()[0])
        losses += train_engine(engine, [batch], lm_loss)
    host = engine.memory("host")
    out = {"losses": losses, "lrs": lrs, "stage": engine.zero_optimization_stage(),
           "host_params": host["params"], "host_states": host["optimizer_states"],
           "dtype": str(engine.dtype)}
    engine.close()
    return out


def _both(config: dict, reference: dict, steps: int):
    return _engine_run(config, steps), _engine_run(reference, steps)


def check_engine(fn: Callable, worlds=ENGINE_WORLDS, steps: int = ENGINE_STEPS) -> dict:
    """Part 2: the learner's config trains the GPT on ``worlds`` ranks like the reference config."""
    import zerolab

    seen = {}
    for n in worlds:
        config = fn(n)
        try:
            results = crew_of(n).run(_both, config, reference_config(n), steps)
        except (zerolab.RankError, zerolab.CrewTimeout) as exc:
            raise rank_failure(exc, T("training with your config on {n} ranks", n=n),
                               T("zerolab.course.checks.full_tracebacks(), then run again, shows the rank's error")) from exc
        for r, (mine, ref) in enumerate(results):
            where = T("the engine on {n} ranks, rank {r}", n=n, r=r)
            if mine["stage"] != 3 or mine["host_params"] == 0 or mine["host_states"] == 0:
                raise ExerciseCheckFailed(T(
                    "{where}: stage {stage}, host memory: parameters {params:,} bytes, optimizer states {states:,} "
                    "bytes\n  expected: stage 3, both in host memory\n  hint: offload_param and offload_optimizer "
                    "to the cpu", where=where, stage=mine["stage"], params=mine["host_params"],
                    states=mine["host_states"]))
            if mine["lrs"] != ref["lrs"]:
                raise ExerciseCheckFailed(T("{where}: learning rates {mine}\n  expected: {ref}\n  hint: the scheduler "
                                            "block", where=where, mine=mine["lrs"], ref=ref["lrs"]))
            if mine["losses"] != ref["losses"]:
                raise ExerciseCheckFailed(T("{where}: the losses differ from the brief's config\n  expected: {ref}\n"
                                            "  yours:    {mine}\n  hint: some setting changes the training; "
                                            "compare key by key", where=where,
                                            ref=[round(v, 4) for v in ref["losses"]],
                                            mine=[round(v, 4) for v in mine["losses"]]))
        seen[n] = results[0][1]
    return seen


def check_capstone_config(fn: Callable, *, verbose: bool = True) -> None:
    """Check ``fn(world_size) -> DeepSpeed config dict`` against the brief, alone and in the engine."""
    n = check_alone(fn)
    if verbose:
        sizes = ", ".join(str(w) for w in WORLD_SIZES)
        print(T("alone: your config loads on {sizes} ranks with every choice of the brief,", sizes=sizes))
        print(T("       and its scheduler gives the brief's lr at each of the {n} steps", n=BRIEF["total_num_steps"]))
    seen = check_engine(fn)
    if verbose:
        for w, ref in seen.items():
            micro = BRIEF["train_batch_size"] // (BRIEF["gradient_accumulation_steps"] * w)
            print(T("engine: {w} ranks, micro-batch {micro} x 2 accumulation steps x {w} ranks = {batch}; stage "
                    "{stage}, {dtype};", w=w, micro=micro, batch=BRIEF["train_batch_size"], stage=ref["stage"],
                    dtype=ref["dtype"]))
            print(T("        parameter shards and optimizer states in host memory;"))
            print(T("        {n} steps: losses and lrs the same as the brief's config", n=ENGINE_STEPS))
    passed(T("your config runs the capstone: ZeRO-3, both offloads, bf16, WarmupDecayLR,\n"
             "  and a global batch of {batch} on {n} world sizes (trained on {worlds} ranks)",
             batch=BRIEF["train_batch_size"], n=len(WORLD_SIZES), worlds=T.join_and(ENGINE_WORLDS)))
