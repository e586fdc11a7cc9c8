"""zerolab: learn DeepSpeed ZeRO by running it on real ranks.

Its folders are its layers (what may import what): the table in docs/ARCHITECTURE.md, which is
the import-linter contract in pyproject.toml row for row (tests/test_layers.py checks it). This
file hands on the names a training script uses (``zerolab.initialize``, ``zerolab.Crew``, ...).

They load on first use (PEP 562): ``import zerolab`` alone imports neither torch nor the engine,
so the command line's config commands (``zerolab explain``, ``estimate``, ``simulate``) answer
in a tenth of a CPU-second instead of the two of importing torch. The first name asked for
(``zerolab.initialize``, ``zerolab.zero``, ...) loads them all, as this file once did on import.
The crew's ranks start with them loaded (its forkserver preloads ``zerolab._face``).
"""
from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec
from typing import TYPE_CHECKING as _TYPE_CHECKING

__version__ = "0.1.0"

# name -> the module (relative to this package) that defines it; a module's own name maps to "".
_FACE = {
    **dict.fromkeys(("Crew", "CrewError", "CrewTimeout", "RankError", "RankInfo", "device", "launch", "rank",
                     "rank_info", "world_size", "TooManyRanks", "fit_ranks", "max_ranks", "set_max_ranks"), ".crew"),
    **dict.fromkeys(("Comm", "Ledger"), ".comm"),
    **dict.fromkeys(("Engine", "initialize"), ".zero.engine"),
    "ModuleOrderError": ".zero.stage3.gather",
    "ExternalParameterError": ".zero.stage3.hooks",
    "UnusedParameterError": ".zero.stage",
    "DeviceOutOfMemoryError": ".memory.budget",
    "NvmePathError": ".offload.nvme",
    **dict.fromkeys(("CheckpointError", "consolidate"), ".checkpoint"),
    **dict.fromkeys(("ConfigError", "load_config"), ".config"),
    **dict.fromkeys(("LRRangeTest", "OneCycle", "WarmupCosineLR", "WarmupDecayLR", "WarmupLR"), ".scheduler"),
    **dict.fromkeys(("comm", "memory", "deepspeed", "scheduler"), ""),     # the submodules handed on by name
}
__all__ = sorted(_FACE)


def _load_face() -> None:
    """Import every name above (and with them their modules), as ``import zerolab`` once did."""
    for name, where in _FACE.items():
        if name not in globals():
            module = _import_module(where or "." + name, __name__)
            globals()[name] = module if not where else getattr(module, name)


def __getattr__(name: str):
    # The first name asked for loads them all: then ``zerolab.zero.engine`` and every other path
    # into the package resolves as it did when this file imported everything.
    if name.startswith("__") or (name not in _FACE and _find_spec(f"{__name__}.{name}") is None):
        raise AttributeError(f"module 'zerolab' has no attribute {name!r}")
    _load_face()
    if name not in globals():          # a subpackage the face does not name (zerolab.course, ...)
        _import_module("." + name, __name__)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FACE))


if _TYPE_CHECKING:                      # what type checkers and editors see: the names, eagerly
    from . import comm, deepspeed, memory, scheduler
    from .checkpoint import CheckpointError, consolidate
    from .comm import Comm, Ledger
    from .config import ConfigError, load_config
    from .crew import (Crew, CrewError, CrewTimeout, RankError, RankInfo, TooManyRanks, device, fit_ranks, launch,
                       max_ranks, rank, rank_info, set_max_ranks, world_size)
    from .memory.budget import DeviceOutOfMemoryError
    from .offload.nvme import NvmePathError
    from .scheduler import LRRangeTest, OneCycle, WarmupCosineLR, WarmupDecayLR, WarmupLR
    from .zero.engine import Engine, initialize
    from .zero.stage import UnusedParameterError
    from .zero.stage3.gather import ModuleOrderError
    from .zero.stage3.hooks import ExternalParameterError
