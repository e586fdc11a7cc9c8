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
one keyed tensor; a home's tiles either stay in memory (:class:`InMemory`) or are swapped
through host buffers one sub-group at a time (:class:`SwapSubGroups`). ``place`` names the memory report a store's bytes are counted in
(``engine.memory(where)``: "device", "host", "nvme"); ``where`` is the config's word for it
("device", "cpu", "nvme").
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

import torch

from ..memory import tensor_bytes
from .nvme import NvmeStore

__all__ = ["ShardStore", "DeviceShards", "HostShards", "NvmeShards", "shard_store", "pinned", "InMemory",
           "SwapSubGroups"]


def pinned(numel: int, dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """An empty host tensor, page-locked when ``pin`` and a GPU exists."""
    t = torch.empty(numel, dtype=dtype)
    if pin and torch.cuda.is_available():
        t = t.pin_memory()
    return t


class ShardStore(Protocol):
    place: str              # the memory report that counts what it holds: "device", "host", "nvme"
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

    place = where = "device"
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

    place, where = "host", "cpu"
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

    place = where = "nvme"
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
    if offload.device == "nvme":
        need = needed_bytes() if callable(needed_bytes) else needed_bytes
        return NvmeShards(NvmeStore(offload.nvme_path, rank, need, what=what, timeline=timeline), offload.pin_memory)
    if offload.device == "cpu":
        return HostShards(offload.pin_memory)
    return DeviceShards(device)


# -- a home's tiles between steps: in memory, or swapped sub-group by sub-group (offload.StateHome) --

class InMemory:
    """The states stay in memory: nothing to swap (the null object of :class:`SwapSubGroups`)."""
    peak_bytes = 0

    def begin(self) -> None:
        pass

    def bring_in(self, k: int) -> None:
        pass

    def put_away(self, k: int, sg: list[int]) -> None:
        pass

    def end(self) -> None:
        pass

    def swapped(self, j: int, key: str | None) -> bool:
        return False

    def forget(self, j: int) -> None:
        pass

    def note_keys(self, j: int, keys: list[str]) -> None:
        pass


class SwapSubGroups:
    """The states live in files (NVMe): each sub-group is read into host buffers before it
    steps and written back after; with ``pipeline_read`` the next sub-group's read, with
    ``pipeline_write`` the previous one's write, runs on I/O threads while one steps."""

    def __init__(self, home, pipeline_read: bool, pipeline_write: bool):
        self.home, self.store = home, home.store
        self.pipeline_read, self.pipeline_write = pipeline_read, pipeline_write
        self.state_keys: dict[int, list[str]] = {}   # tensor states of each tile, once known
        self.peak_bytes = 0
        self._reads: dict[int, list[Future]] = {}
        self._writes: list[Future] = []
        for j, t in enumerate(home.tensors):
            self.store.write(j, "master", t).result()
            home.tensors[j].data = torch.empty(0)

    def begin(self) -> None:
        self._reads, self._writes = {0: self._read_sub_group(0)}, []

    def bring_in(self, k: int) -> None:
        if self.pipeline_read and k + 1 < len(self.home.sub_groups):
            self._reads[k + 1] = self._read_sub_group(k + 1)
        for f in self._reads.pop(k):
            f.result()
        self._note_swap()

    def put_away(self, k: int, sg: list[int]) -> None:
        ws = self._write_sub_group(sg)
        if self.pipeline_write:
            self._writes.extend(ws)
        else:
            for f in ws:
                f.result()
        if not self.pipeline_read and k + 1 < len(self.home.sub_groups):
            self._reads[k + 1] = self._read_sub_group(k + 1)

    def end(self) -> None:
        for f in self._writes:
            f.result()
        self._writes = []

    def _read_sub_group(self, k: int) -> list[Future]:
        home = self.home
        futures = []
        for j in home.sub_groups[k]:
            n = home.tiles[j][2] - home.tiles[j][1]
            buf = self.store.buffer(n, torch.float32)
            futures.append(self.store.read(j, "master", buf))
            home.tensors[j].data = buf
            st = home.optimizer.state.get(home.tensors[j]) if home.optimizer is not None else None
            for key in self.state_keys.get(j, []):
                sbuf = self.store.buffer(n, st[key].dtype)
                futures.append(self.store.read(j, key, sbuf))
                st[key] = sbuf
        return futures

    def _write_sub_group(self, sg: list[int]) -> list[Future]:
        home = self.home
        futures = []
        for j in sg:
            t = home.tensors[j]
            futures.append(self.store.write(j, "master", t.data))
            st = home.optimizer.state.get(t, {})
            keys = [k for k, v in st.items() if torch.is_tensor(v) and v.dim() == 1 and v.numel() == t.numel()]
            self.state_keys[j] = keys
            for key in keys:
                futures.append(self.store.write(j, key, st[key]))
                st[key] = torch.empty(0, dtype=st[key].dtype)      # a placeholder: the file holds it
            t.data = torch.empty(0)
        return futures

    def _note_swap(self) -> None:
        home = self.home
        live = [t for t in home.tensors if t.numel()]
        live += [v for t in home.tensors for v in home.optimizer.state.get(t, {}).values()
                 if torch.is_tensor(v) and v.dim() == 1]
        self.peak_bytes = max(self.peak_bytes, tensor_bytes(live))

    def swapped(self, j: int, key: str | None) -> bool:
        """Is tile ``j``'s master (``key`` None) or state ``key`` in its file?"""
        return key is None or key in self.state_keys.get(j, [])

    def read_master(self, j: int) -> torch.Tensor:
        buf = torch.empty(self.home.tiles[j][2] - self.home.tiles[j][1], dtype=torch.float32)
        self.store.read(j, "master", buf).result()
        return buf

    def forget(self, j: int) -> None:
        self.state_keys.pop(j, None)

    def note_keys(self, j: int, keys: list[str]) -> None:
        self.state_keys[j] = keys
