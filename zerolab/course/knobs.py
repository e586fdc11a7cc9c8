"""Stage 3's knobs, measured on a small model, and a config's keys beside DeepSpeed's defaults.

The helpers behind chapter 8 (``notebooks/08_zero3_in_production.ipynb``, the knobs) and its
second part (``notebooks/08b_the_launch.ipynb``), kept here so that a notebook cell shows a call
and its result:

* :func:`measure` trains an MLP of :data:`LAYERS` ``Linear(WIDTH, WIDTH)`` layers at stage 3 on
  the calling rank (inside ``crew.run``) and returns the last step's numbers: parameter gathers,
  all-gather calls and bytes (ZeRO's own: zerolab's 16-byte order checks are filed apart in
  ``ledger.checks`` and counted only under ``"checks"``), groups prefetched, the peak of
  gathered elements, the persistent parameters, the bytes of parameters per rank, the host
  optimizer step's bars on the timeline, and the trained parameters; :func:`measure_all` runs
  several configs in one call.
* :func:`replay` is DeepSpeed 0.19.8's release rule for ``stage3_max_reuse_distance``
  (``partitioned_param_coordinator.py``, ``__params_to_release``) replayed on a recorded order of
  module fetches: a computation, set beside the measurement; :func:`llama2_7b_order` gives
  Llama-2-7B's modules and sizes to replay it on.
* :data:`DS_DEFAULTS` are DeepSpeed 0.19.8's defaults of the stage-3 keys, read from its source
  (``deepspeed/runtime/zero/config.py``, ``offload_config.py``), not its documentation page: a view
  of the declarations in :mod:`zerolab.config.keys`, where each default is written once;
  :func:`checklist_rows` sets a config's values beside them and beside what zerolab reads.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from ..config import keys as K

__all__ = ["WIDTH", "LAYERS", "PSI", "DS_DEFAULTS", "measure", "measure_all", "same_params", "replay",
           "llama2_7b_order", "checklist_rows", "show"]

WIDTH, LAYERS = 64, 8
PSI = LAYERS * (WIDTH * WIDTH + WIDTH)          # 33,280: 8 weights of 4,096 elements, 8 biases of 64



def _ds_default(key: str) -> Any:
    """DeepSpeed 0.19.8's default of a ``zero_optimization`` key (dotted into a sub-block), as
    declared in :mod:`zerolab.config.keys`; sizes as DeepSpeed's source writes them (5e8)."""
    table, name = K.ZERO, key
    while "." in name:
        head, name = name.split(".", 1)
        table = table[head].block
    v = table[name].deepspeed_default
    return float(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 1e5 else v


# DeepSpeed 0.19.8, read from its source (its documentation page says 5e8 for the prefetch bucket):
# the keys chapter 8 sets beside a config, their defaults from the declarations
DS_DEFAULTS = {k: _ds_default(k) for k in (
    "stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "offload_optimizer.device", "offload_optimizer.pin_memory", "offload_param.device", "offload_param.pin_memory",
    "sub_group_size", "round_robin_gradients")}


def measure(zero: dict | None = None, config: dict | None = None, steps: int = 4) -> dict:
    """On a rank: train the MLP at stage 3 for ``steps`` steps and return the last step's numbers.

    ``zero``: keys added to ``{"stage": 3, "stage3_max_reuse_distance": 0}`` (each module released
    after each use, so that one knob shows alone); or ``config``: a whole DeepSpeed config. An
    Adam optimizer is added to either."""
    import zerolab
    from zerolab.models import MLP, mse_loss, regression_batches

    world = zerolab.world_size()
    config = config or {"train_batch_size": 4 * world,
                        "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0, **(zero or {})}}
    config = {**config, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = zerolab.initialize(MLP(sizes=(WIDTH,) * (LAYERS + 1), seed=0), config)
    gas = engine.gradient_accumulation_steps
    seconds = []
    for x, y in regression_batches(steps, engine.train_batch_size(), d_in=WIDTH, d_out=WIDTH):
        mark, pre, tmark = engine.ledger.mark(), engine.stage.prefetches, engine.timeline.mark()
        fetched = engine.stage3_stats().fetches
        engine.reset_peaks()
        for i in range(gas):
            part = slice(i * len(x) // gas + zerolab.rank(), (i + 1) * len(x) // gas, world)
            xb = x[part].half() if engine.config.fp16.enabled else x[part]
            engine.backward(mse_loss(engine(xb), y[part]))
            engine.step()
        seconds.append(engine.timeline.since(tmark).summary()["wall"])
        led = engine.ledger.since(mark)
    stage, stats = engine.stage, engine.stage3_stats()
    gathers = [r for r in led.records if r.op == "all_gather" and r.tag.startswith("params")]
    out = {
        "checks": len(led.checks),               # zerolab's own order checks, filed apart
        # partitions gathered: each module's (engine.stage3_stats().fetches), and the persistent refresh
        "gathers": stats.fetches - fetched + sum(r.tag.startswith("params") and "persistent" in r.tag
                                                 for r in led.records),
        "calls": len(gathers),
        "gathered_bytes": sum(r.bytes for r in gathers),
        "order": [r.tag for r in gathers],
        "ops": sorted({(r.op, r.tag.split()[0]) for r in led.records}),
        "grad_calls": sum(r.tag.startswith("grads") for r in led.records),
        "prefetched": stage.prefetches - pre, "peak": stats.peak_gathered_numel,
        "persistent": stats.persistent_numel,
        "param_bytes": engine.memory()["params"],
        "host_steps": sum(e.kind == "host" for e in engine.timeline.since(tmark).events),
        "seconds": seconds[1:], "params": engine.full_params(),
    }
    engine.close()
    return out


def measure_all(runs: dict) -> dict:
    """On a rank: ``{name: measure(**kwargs)}`` for ``{name: kwargs}``."""
    return {name: measure(**kw) for name, kw in runs.items()}


def same_params(results: dict) -> bool:
    """True when every run trained bit-identical parameters."""
    first = next(iter(results.values()))["params"]
    return all(torch.equal(r["params"][k], first[k]) for r in results.values() for k in first)


def replay(order: list, numel: dict, distance: int) -> tuple[int, int, int]:
    """DeepSpeed's release rule on a recorded order of module fetches: after each use, a module
    stays gathered when its next use comes before ``distance`` elements of other modules have
    been passed. Returns (gathers, peak gathered elements, elements gathered in all)."""
    live, gathers, peak, moved = set(), 0, 0, 0
    for t, m in enumerate(order):
        if m not in live:
            live.add(m)
            gathers += 1
            moved += numel[m]
        peak = max(peak, sum(numel[j] for j in live))
        passed, keep = 0, False
        for nxt in order[t + 1:]:
            if passed >= distance:
                break
            if nxt == m:
                keep = True
                break
            passed += numel[nxt]
        if not keep:
            live.discard(m)
    return gathers, peak, moved


def llama2_7b_order() -> tuple[list[str], dict[str, int]]:
    """Llama-2-7B's gathered modules (the embedding, 7 Linear per layer for 32 layers, the head;
    the norm weights left out as persistent) fetched in forward then in backward, and their sizes
    in elements (hidden 4,096, MLP 11,008, vocabulary 32,000)."""
    mods = ["embed"] + [f"{layer}.{p}" for layer in range(32)
                        for p in ("q", "k", "v", "o", "gate", "up", "down")] + ["head"]
    size = {"embed": 32000 * 4096, "head": 32000 * 4096}
    size.update({m: 4096 * 4096 if m[-1] in "qkvo" else 4096 * 11008 for m in mods[1:-1]})
    return mods + mods[::-1], size


def show(v: Any) -> str:
    """A config value as the table prints it: 1e5 and up as 1e5, the rest as written."""
    big = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1e5
    return f"{float(v):.0e}".replace("e+0", "e") if big else str(v)


def _get(mapping_or_obj, key: str):
    head, _, tail = key.partition(".")
    if isinstance(mapping_or_obj, dict):              # a config as written: "-" where a key is left out
        value = mapping_or_obj.get(head, {}).get(tail, "-") if tail else mapping_or_obj.get(key, "-")
        return value
    return getattr(getattr(mapping_or_obj, head), tail) if tail else getattr(mapping_or_obj, key)


def checklist_rows(config: dict, world_size: int) -> list[tuple[str, Any, Any, Any]]:
    """For each key of :data:`DS_DEFAULTS`: (key, the config's value, DeepSpeed 0.19.8's default,
    what zerolab's ``load_config`` reads for ``world_size`` ranks)."""
    import zerolab

    cfg = zerolab.load_config(config, world_size)
    return [(k, _get(config["zero_optimization"], k), d, _get(cfg.zero, k)) for k, d in DS_DEFAULTS.items()]
