"""One small language model's training steps, measured on a rank: the helpers behind chapter 10
(``notebooks/10_misconceptions.ipynb``, ``notebooks/10b_the_beliefs.ipynb``), kept here so that
a notebook cell shows a call and its result.

The model is :func:`make_lm`, a :class:`zerolab.models.TinyLM` (Ψ = :data:`PSI_LM` trainable
parameters, the output head tied to the embedding), trained from a DeepSpeed config made by
:func:`lm_config`: AdamW, bf16 by default, ``reduce_bucket_size`` 50,000 elements, and at stage 3
``stage3_param_persistence_threshold`` 0 and ``stage3_max_reuse_distance`` 0 (every module
gathered in forward and again in backward, the paper's 3Ψ). Every function below that takes no
``world`` runs on a rank, inside ``crew.run``:

* :func:`phases_of_a_step`: the collectives of one step, split into forward, backward and step;
* :func:`measure`: one warm-up step, then one measured step: memory, wire bytes, calls and the
  seconds it took (DeepSpeed's calls, the gradient-norm all-reduce among them, less the 1-byte
  overflow flag that stages 1-2 send in bf16; zerolab's own order checks are counted apart);
* :func:`train_20`: twenty steps, with the loss scale and the skipped steps;
* :func:`activations_per_stage`: the bytes autograd saves during one forward, parameters left out;
* :func:`offload_run`: where the bytes live with and without ``offload_optimizer``, and the time.
"""
from __future__ import annotations

import time

import numpy as np
import torch

import zerolab
from zerolab.memory import tensor_bytes
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine

__all__ = ["VOCAB", "SEQ", "PSI_LM", "make_lm", "lm_config", "in_psi", "phases_of_a_step", "measure",
           "train_20", "activations_per_stage", "offload_run"]

VOCAB, SEQ = 257, 16


def make_lm() -> TinyLM:
    """seed=0 every time: every rank, and every single-process reference, starts from the same weights."""
    return TinyLM(vocab=VOCAB, d=100, hidden=400, layers=2, seq_len=SEQ, seed=0)


PSI_LM = sum(p.numel() for p in make_lm().parameters() if p.requires_grad)


def lm_config(stage: int, world: int, precision: str = "bf16", global_batch: int = 12, accumulate: int = 1,
              ideal: bool = False, **zero) -> dict:
    """A DeepSpeed config for :func:`make_lm` on ``world`` ranks. ``ideal=True`` adds zerolab's own
    switch, the paper's reduce-scatter at stages 1-2 (not DeepSpeed's all-reduce)."""
    cfg = {"train_batch_size": global_batch,
           "train_micro_batch_size_per_gpu": global_batch // (world * accumulate),
           "gradient_accumulation_steps": accumulate,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 50_000,
                                 "stage3_param_persistence_threshold": 0,
                                 "stage3_max_reuse_distance": 0, **zero}}
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    if ideal:
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg


def in_psi(wire: float, n: int) -> float:
    """Bytes per rank in units of (N−1)/N·Ψ of bf16 (the paper's "Ψ" of traffic)."""
    return wire / ((n - 1) / n * PSI_LM * 2)


def phases_of_a_step(stage: int, **zero) -> dict:
    """On a rank: the first training step's collectives, {phase: {op: (calls, wire bytes)}} for the
    phases forward, backward and step (ZeRO's calls only: order checks are in ledger.checks)."""
    engine = zerolab.initialize(make_lm(), lm_config(stage, zerolab.world_size(), **zero))
    rank, world = zerolab.rank(), zerolab.world_size()
    (x, y), = lm_batches(1, 12, SEQ, VOCAB)
    x, y = x[rank::world], y[rank::world]
    marks = [engine.ledger.mark()]
    loss = lm_loss(engine(x), y)
    marks.append(engine.ledger.mark())
    engine.backward(loss)
    marks.append(engine.ledger.mark())
    engine.step()
    marks.append(engine.ledger.mark())
    out = {}
    for phase, a, b in zip(("forward", "backward", "step"), marks, marks[1:]):
        ops = {}
        for r in engine.ledger.since(a).records[: b - a]:
            calls, wire = ops.get(r.op, (0, 0))
            ops[r.op] = (calls + 1, wire + r.wire_bytes)
        out[phase] = ops
    return out


def measure(stage: int, precision: str = "bf16", accumulate: int = 1, global_batch: int = 12,
            ideal: bool = False, **zero) -> dict:
    """On a rank: one warm-up step (Adam's states appear), then the measured step."""
    world = zerolab.world_size()
    engine = zerolab.initialize(make_lm(), lm_config(stage, world, precision, global_batch, accumulate,
                                                     ideal, **zero))
    batches = lm_batches(2, global_batch, SEQ, VOCAB)
    train_engine(engine, batches[:1], lm_loss)
    mark = engine.ledger.mark()
    t0 = time.perf_counter()
    train_engine(engine, batches[1:], lm_loss)
    seconds = time.perf_counter() - t0
    step = engine.ledger.since(mark)
    step.records = [r for r in step.records if not r.tag.startswith("overflow")]   # the 1-byte flag (norms.py)
    return {"memory": engine.memory(), "seconds": seconds, "wire": step.wire_bytes, "calls": len(step.records),
            "by_op": {op: (int(v["calls"]), v["wire_bytes"]) for op, v in step.totals().items()},
            "checks": len(step.checks)}     # zerolab's own order checks: never among ZeRO's calls


def train_20(precision: str) -> dict:
    """On a rank: twenty steps at stage 2; the losses, the loss scale, skipped steps, the scaler's log."""
    engine = zerolab.initialize(make_lm(), lm_config(2, zerolab.world_size(), precision))
    losses = train_engine(engine, lm_batches(20, 12, SEQ, VOCAB, seed=3), lm_loss)
    return {"losses": losses, "scale": engine.loss_scale, "skipped": engine.skipped_steps, "log": engine.log}


def activations_per_stage(stage: int, micro: int) -> dict:
    """On a rank: the bytes autograd saves during one forward of ``micro`` sequences (each saved
    tensor checked against the parameters at the moment it is saved: at stage 3 they are gathered
    into new storage during the forward), and the model states after the step."""
    world = zerolab.world_size()
    engine = zerolab.initialize(make_lm(), lm_config(stage, world, global_batch=micro * world))
    x, y = lm_batches(1, micro * world, SEQ, VOCAB)[0]
    x, y = x[zerolab.rank()::world], y[zerolab.rank()::world]
    saved = []

    def pack(t):
        live = {p.untyped_storage().data_ptr() for p in engine.module.parameters() if p.numel()}
        if t.untyped_storage().data_ptr() not in live:
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = lm_loss(engine(x), y)
    activation_bytes = tensor_bytes(saved)
    saved.clear()                      # let the saved tensors go before backward
    engine.backward(loss)
    engine.step()
    return {"activations": activation_bytes, "model_states": engine.memory()["model_states"]}


def offload_run(device: str | None, steps: int = 5) -> dict:
    """On a rank: stage 2, with ``offload_optimizer`` on ``device`` (None: none); a warm-up step,
    then ``steps`` timed steps. Device and host bytes, the losses, the median step time and the
    host optimizer step per step (from the timeline)."""
    zero = {"offload_optimizer": {"device": device}} if device else {}
    engine = zerolab.initialize(make_lm(), lm_config(2, zerolab.world_size(), **zero))
    batches = lm_batches(steps + 1, 12, SEQ, VOCAB, seed=0)
    losses = train_engine(engine, batches[:1], lm_loss)           # warm-up: Adam's states appear
    engine.timeline.clear()
    times = []
    for batch in batches[1:]:
        t0 = time.perf_counter()
        losses += train_engine(engine, [batch], lm_loss)
        times.append(time.perf_counter() - t0)
    return {"device": engine.memory(), "host": engine.memory("host"), "losses": losses,
            "seconds": float(np.median(times)),
            "host_step": engine.timeline.summary()["host_step"] / steps}   # the CPU optimizer, per step
