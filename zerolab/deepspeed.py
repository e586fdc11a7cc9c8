"""DeepSpeed's own API, for a DeepSpeed training script: change one line and it runs on zerolab.

    import zerolab.deepspeed as deepspeed          # was: import deepspeed

    parser = argparse.ArgumentParser()
    parser = deepspeed.add_config_arguments(parser)            # --deepspeed, --deepspeed_config
    args = parser.parse_args()
    engine, optimizer, loader, lr_scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=dataset)
    for x, y in loader:
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()

and start it with ``torchrun --nproc_per_node N train.py --deepspeed_config ds.json`` (where
DeepSpeed's launcher would be ``deepspeed --num_gpus N train.py --deepspeed_config ds.json``), or
with plain ``python`` for one rank. The rule is simple: :func:`zerolab.initialize` is zerolab's
call (``initialize(model, config)`` returns the engine), and :func:`initialize` here is
DeepSpeed's (keywords ``args``, ``model``, ``model_parameters``, ``config`` / ``config_params`` /
``args.deepspeed_config``, ``optimizer``, ``lr_scheduler``, ``training_data``, ``collate_fn``)
and returns DeepSpeed's 4-tuple ``(engine, optimizer, training_dataloader, lr_scheduler)``.

The engine answers what such scripts call: ``engine(x)``, ``backward``, ``step``, ``module``,
``train()`` / ``eval()``, ``zero_optimization_stage()``, ``global_steps``, ``get_lr()``,
``gradient_accumulation_steps()``, ``train_micro_batch_size_per_gpu()``, ``train_batch_size()``,
``save_checkpoint`` / ``load_checkpoint``, ``is_gradient_accumulation_boundary()`` and
``set_gradient_accumulation_boundary``. And zerolab's own: ``engine.ledger`` (every collective),
``engine.memory()`` (what the rank holds).
"""
from __future__ import annotations

import argparse
import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from .crew import crew
from .zero.engine import Engine
from .i18n import catalogue

# the messages in the edition's language (zerolab/i18n/messages_zh.py); those that are DeepSpeed's own words
# stay DeepSpeed's words in English, and the Chinese quotes them after saying what to do
T = catalogue("around")

__all__ = ["initialize", "init_distributed", "add_config_arguments", "DeepSpeedEngine"]

class DeepSpeedEngine(Engine):
    """zerolab's engine with the few more names DeepSpeed's example scripts use."""

    @property
    def global_rank(self) -> int:
        return self.comm.rank

    @property
    def local_rank(self) -> int:
        return crew.rank_info().local_rank

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    dp_world_size = world_size

    def fp16_enabled(self) -> bool:
        return self.config.fp16.enabled

    def bfloat16_enabled(self) -> bool:
        return self.config.bf16.enabled

    def zero_optimization(self) -> bool:
        return self.stage.spec.zero_enabled

    def gradient_clipping(self) -> float:
        return self.config.gradient_clipping


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """DeepSpeed's: adds ``--deepspeed``, ``--deepspeed_config`` (and the deprecated
    ``--deepscale``, ``--deepscale_config``) to ``parser``."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (helper flag for user code, no impact on DeepSpeed backend)")
    group.add_argument("--deepspeed_config", default=None, type=str, help="DeepSpeed json configuration file.")
    group.add_argument("--deepscale", default=False, action="store_true", help="Deprecated enable DeepSpeed")
    group.add_argument("--deepscale_config", default=None, type=str, help="Deprecated DeepSpeed json configuration file.")
    return parser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(dist_backend: str | None = None, **_ignored: Any) -> None:
    """Join the process group, as DeepSpeed's ``init_distributed``: the one torchrun describes
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), or, started with plain
    ``python``, a group of one rank. Nothing to do inside ``zerolab.launch`` / a Crew."""
    if dist.is_available() and dist.is_initialized():
        return
    if not crew.under_torchrun():
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    crew.init_from_env(dist_backend or "auto")


def _param_groups(model: torch.nn.Module, model_parameters):
    """DeepSpeed builds the config's optimizer over ``model_parameters``: the parameters it
    trains, in groups that may carry their own settings (Hugging Face's two groups: no weight
    decay on biases and norms). None when that is every trainable parameter in one plain group."""
    if model_parameters is None:
        return None
    items = list(model_parameters)
    if any(isinstance(item, dict) for item in items):
        return items
    want = {id(p) for p in model.parameters() if p.requires_grad}
    if {id(p) for p in items} == want:
        return None
    return [{"params": items}]


def _training_dataloader(engine: DeepSpeedEngine, dataset, collate_fn):
    """DeepSpeed's ``deepspeed_io``: micro-batches of ``train_micro_batch_size_per_gpu``, each
    rank its own part of the data set (a ``DistributedSampler``, shuffled as DeepSpeed's is,
    seed 0: call ``loader.sampler.set_epoch(e)`` for a new order each epoch), ``drop_last`` from
    the config's ``dataloader_drop_last``. No worker processes: the same batches, in this process."""
    if not isinstance(dataset, torch.utils.data.Dataset):
        raise ValueError(T("Training data must be a torch Dataset"))      # DeepSpeed's words (engine.py)
    sampler = None
    if not isinstance(dataset, torch.utils.data.IterableDataset):
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=engine.comm.world_size,
                                                      rank=engine.comm.rank)
    return torch.utils.data.DataLoader(dataset, batch_size=engine.config.train_micro_batch_size_per_gpu,
                                       sampler=sampler, collate_fn=collate_fn,
                                       drop_last=engine.config.dataloader_drop_last)


def initialize(args=None, model: torch.nn.Module | None = None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, distributed_port: int = 29500, mpu=None,
               dist_init_required: bool | None = None, collate_fn=None, config=None, mesh_param=None,
               config_params=None):
    """DeepSpeed's ``deepspeed.initialize``: returns ``(engine, optimizer, training_dataloader,
    lr_scheduler)``; the data loader is None without ``training_data``, the scheduler None
    without a ``scheduler`` block or ``lr_scheduler``. The config comes from ``config``, or
    ``config_params`` (its old name), or ``args.deepspeed_config``; exactly one of them."""
    if model is None:
        raise ValueError(T("deepspeed.initialize requires a model"))      # DeepSpeed's words (__init__.py)
    if mpu is not None or mesh_param is not None:
        raise NotImplementedError(T("mpu / mesh_param (model or sequence parallelism): zerolab is data parallel "
                                    "only"))
    if config is None and config_params is not None:
        config = config_params
    from_args = getattr(args, "deepspeed_config", None) or getattr(args, "deepscale_config", None)
    if from_args is not None:
        if config is not None:
            raise ValueError(T("Not sure how to proceed, we were given deepspeed configs in the deepspeed "
                               "arguments and deepspeed.initialize() function call"))     # DeepSpeed's words
        config = from_args
    if config is None:
        raise ValueError(T("DeepSpeed requires --deepspeed_config to specify configuration file"))  # DeepSpeed's
    init_distributed()
    groups = None if isinstance(optimizer, torch.optim.Optimizer) else _param_groups(model, model_parameters)
    engine = DeepSpeedEngine(model, config, optimizer, lr_scheduler=lr_scheduler, param_groups=groups)
    loader = _training_dataloader(engine, training_data, collate_fn) if training_data is not None else None
    engine.training_dataloader = loader
    return engine, engine.optimizer, loader, engine.lr_scheduler
