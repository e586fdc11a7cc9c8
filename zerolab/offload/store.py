"""Where shards live between uses: one shard store for the device, host memory and NVMe.

A stage keeps some tensors away from the compute (optimizer states with ``offload_optimizer``,
stage 3's parameter shards with ``offload_param``). What differs between the three places is
small and is all here, one class per place:

    DeviceShards   tensors on the compute device; nothing to move      (no offload)
    HostShards     tensors in host memory, pinned when asked and a GPU exists   (``"cpu"``)
    NvmeShards     tensors in files under ``nvme_path`` (``nvme.NvmeStore``), brought into
                   host memory for use and written back after           (``"nvme"``)

A user of a store (``offload.StateHome`` today) asks it for buffers (:meth:`buffer`), whether
what it holds stays in memory (``resident``), and, for files, to :meth:`write` and :meth:`read`
one keyed tensor. A store only stores: when a home's tiles go in and out of it is the home's swap
policy (``offload/swap.py``). ``place`` names the memory report a store's bytes are counted in
(``engine.memory(where)``: "device", "host", "nvme"); ``where`` is the config's word for it
("device", "cpu", "nvme").
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

import torch

from ..memory import Place
from .nvme import NvmeStore

__all__ = ["ShardStore", "DeviceShards", "HostShards", "NvmeShards", "shard_store", "pinned"]


def pinned(numel: int, dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """An empty host tensor, page-locked when ``pin`` and a GPU exists (straight from torch's
    caching host allocator: no pageable tensor first, no copy)."""
    return torch.empty(numel, dtype=dtype, pin_memory=pin and torch.cuda.is_available())


class ShardStore(Protocol):
    place: Place            # the memory report that counts what it holds (engine.memory(where))
    where: str              # the config's word: "device", "cpu", "nvme"
    on_device: bool         # buffers are on the compute device
    resident: bool          # what it holds stays in memory between uses (no files)
    pin: bool
    files: NvmeStore | None

    def buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor: ...

    def zeros(self, numel: int, dtype: torch.dtype) -> torch.Tensor: ...

    def write(self, key, name: str, t: torch.Tensor) -> Future: ...

    def read(self, key, name: str, out: torch.Tensor) -> Future: ...

    def bytes_on_disk(self) -> int: ...

    def close(self) -> None: ...


class DeviceShards:
    """Shards on the compute device (no offload)."""

    place, where = Place.DEVICE, "device"
    on_device, resident, pin, files = True, True, False, None

    def __init__(self, device: torch.device):
        self.device = device

    def buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, device=self.device)

    def zeros(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(numel, dtype=dtype, device=self.device)

    def write(self, key, name: str, t: torch.Tensor) -> Future:
        raise TypeError("shards on the device have no files")      # the engine's own bug: stays English

    read = write

    def bytes_on_disk(self) -> int:
        return 0

    def close(self) -> None:
        pass


class HostShards(DeviceShards):
    """Shards in host memory (``offload_*.device: "cpu"``), pinned when asked and a GPU exists."""

    place, where = Place.HOST, "cpu"
    on_device = False

    def __init__(self, pin: bool = False):
        self.pin = pin

    def buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return pinned(numel, dtype, self.pin)

    def zeros(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(numel, dtype=dtype, pin_memory=self.pin and torch.cuda.is_available())


class NvmeShards(HostShards):
    """Shards in files under ``nvme_path`` (``offload_*.device: "nvme"``), used through host
    buffers (pinned when asked)."""

    place, where = Place.NVME, "nvme"
    resident = False

    def __init__(self, files: NvmeStore, pin: bool = False):
        super().__init__(pin)
        self.files = files

    def write(self, key, name: str, t: torch.Tensor) -> Future:
        return self.files.write(key, name, t)

    def read(self, key, name: str, out: torch.Tensor) -> Future:
        return self.files.read(key, name, out)

    def bytes_on_disk(self) -> int:
        return self.files.bytes_on_disk()

    def close(self) -> None:
        self.files.close()


def shard_store(offload, device: torch.device, rank: int, needed_bytes, what: str,
                timeline=None) -> ShardStore:
    """The store an ``offload_optimizer`` / ``offload_param`` block asks for. ``needed_bytes``
    (a number, or a function of nothing, called only for NVMe): the files' size, checked against
    the free space."""
    place = Place.of(offload.device)
    if place is Place.NVME:
        need = needed_bytes() if callable(needed_bytes) else needed_bytes
        return NvmeShards(NvmeStore(offload.nvme_path, rank, need, what=what, timeline=timeline), offload.pin_memory)
    if place is Place.HOST:
        return HostShards(offload.pin_memory)
    return DeviceShards(device)
