"""Plain single-process training on the whole global batch: the yardstick for parity.

Every ZeRO stage must train to the same parameters as this loop (fp32: within float
rounding). :func:`train_engine` is the matching loop on the ranks: each rank takes its
micro-batches out of the same global batch, so both see exactly the same samples.
"""
from __future__ import annotations

import json

import torch
from torch import nn

from ..config import load_config
from .optim import build_optimizer

__all__ = ["train_reference", "train_reference_per_rank", "train_engine", "micro_batches"]


def micro_batches(batch, rank: int, world_size: int, gas: int):
    """The ``gas`` micro-batches rank ``rank`` takes from a global batch (tuple of tensors)."""
    n = batch[0].shape[0]
    micro = n // (world_size * gas)
    if micro * world_size * gas != n:
        raise ValueError(f"global batch {n} is not micro x gas x world ({world_size} x {gas} x ?)")
    for k in range(gas):
        start = (k * world_size + rank) * micro
        yield tuple(t[start:start + micro] for t in batch)


def train_reference(model: nn.Module, config, batches, loss_fn, optimizer=None) -> dict[str, torch.Tensor]:
    """Train ``model`` in fp32 on each whole global batch; return the final named parameters."""
    cfg = load_config(_whole_batch(config, batches[0][0].shape[0]), 1)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(optimizer, cfg.optimizer, params, allow_untested=True)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        if cfg.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.gradient_clipping)
        opt.step()
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def train_reference_per_rank(model: nn.Module, config, batches, loss_fn, world_size: int,
                             gas: int = 1, prepare=None, optimizer=None) -> dict[str, torch.Tensor]:
    """Single-process training that runs each rank's micro-batches as a separate forward,
    averaging the losses: what data parallelism computes, exactly, for models whose forward
    depends on the batch it sees (BatchNorm's batch statistics) or on the rank (a branch one
    rank takes: DDP with ``find_unused_parameters=True``). ``prepare(model, rank, step)`` is
    called before each forward, as the engine's loop calls it on rank ``rank``.

    A parameter that got no gradient in a step (a branch no rank took) is stepped with a zero
    gradient, as ZeRO's flat gradient buffers do (DeepSpeed's semantics and zerolab's): with
    momentum or weight decay it still moves. torch's optimizers would skip it (``grad`` None)."""
    cfg = load_config(_whole_batch(config, batches[0][0].shape[0]), 1)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(optimizer, cfg.optimizer, params, allow_untested=True)
    for step, batch in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        for rank in range(world_size):
            for x, y in micro_batches(batch, rank, world_size, gas):
                if prepare is not None:
                    prepare(model, rank, step)
                (loss_fn(model(x), y) / (world_size * gas)).backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if cfg.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.gradient_clipping)
        opt.step()
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def _whole_batch(config, batch_size: int) -> dict:
    """The same config, but one process taking each global batch in one go."""
    if not isinstance(config, dict):
        with open(config) as f:
            config = json.load(f)
    config = {k: v for k, v in config.items()
              if k not in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    config["train_batch_size"] = batch_size
    return config


def train_engine(engine, batches, loss_fn, prepare=None) -> list[float]:
    """Train on the ranks: per global batch, ``gas`` micro-steps of this rank's slice.
    Returns this rank's micro-batch losses. ``prepare(model, rank, step)`` as above."""
    rank, world = engine.comm.rank, engine.comm.world_size
    gas = engine.gradient_accumulation_steps
    losses = []
    for step, batch in enumerate(batches):
        for x, y in micro_batches(batch, rank, world, gas):
            if prepare is not None:
                prepare(engine.module, rank, step)
            x = x.to(engine.device)
            if x.is_floating_point():
                x = x.to(engine.dtype)
            loss = loss_fn(engine(x), y.to(engine.device))
            engine.backward(loss)
            engine.step()
            losses.append(float(loss.detach()))
    return losses
