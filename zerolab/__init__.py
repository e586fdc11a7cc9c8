"""zerolab: learn DeepSpeed ZeRO by running it on real ranks.

Its folders are its layers (what may import what): the table in docs/ARCHITECTURE.md, which is
the import-linter contract in pyproject.toml row for row (tests/test_layers.py checks it). This
file hands on the names a training script uses (``zerolab.initialize``, ``zerolab.Crew``, ...).
"""
from .crew import Crew, CrewError, CrewTimeout, RankError, RankInfo, device, launch, rank, rank_info, world_size
from .crew import TooManyRanks, fit_ranks, max_ranks, set_max_ranks

__version__ = "0.1.0"
from . import comm, memory
from .comm import Comm, Ledger
from .zero.engine import Engine, initialize
from .zero.stage3.gather import ModuleOrderError
from .zero.stage3.hooks import ExternalParameterError
from .zero.stage import UnusedParameterError
from .memory.budget import DeviceOutOfMemoryError
from .offload.nvme import NvmePathError
from .checkpoint import CheckpointError, consolidate
from .config import ConfigError, load_config
from . import deepspeed, scheduler          # DeepSpeed's initialize call; its scheduler block's classes
from .scheduler import LRRangeTest, OneCycle, WarmupCosineLR, WarmupDecayLR, WarmupLR
