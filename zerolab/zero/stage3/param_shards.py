"""Where stage 3 keeps this rank's shard of each parameter group between uses (``offload_param``):
on the device, in host memory (offload "cpu"), or in files (offload "nvme": beyond the first ``max_in_cpu``
elements, which stay in host memory). A persistent group's shard is a view of its whole buffer,
which stays on the device, as in DeepSpeed.

The places are ``store.py``'s shard stores (the optimizer states' too): ``DeviceShards``,
``HostShards``, and, once :meth:`ParamShards.swap_out` has sized the files, ``NvmeShards``.

The optimizer's step writes each updated shard piece by piece (:meth:`ParamShards.write`); for a
shard in a file the new file is assembled in memory without reading the old one, and written at
:meth:`ParamShards.flush` (the step's ``publish``). ``gather.py`` asks for a shard on the compute
device (:meth:`ParamShards.on_device`) when it all-gathers it.
"""
from __future__ import annotations

import torch

from ...memory import Place, tensor_bytes
from ...offload.store import DeviceShards, HostShards, NvmeShards

__all__ = ["ParamShards"]


class ParamShards:
    """This rank's shard of each group, indexed by group, wherever ``offload_param`` puts them."""

    def __init__(self, where: Place, dtype: torch.dtype, device: torch.device, pin: bool = False):
        self.where = where
        self.dtype, self.device, self.pin = dtype, device, pin
        self.store = DeviceShards(device) if where is Place.DEVICE else HostShards(pin)   # NvmeShards at swap_out
        self.shards: list[torch.Tensor] = []        # a group's shard (empty when in a file)
        self.on_nvme: set[int] = set()
        self._staged: dict[int, torch.Tensor] = {}  # file shards assembled from the step's values
        self._covered: dict[int, int] = {}

    def add(self, shard: torch.Tensor, whole: bool) -> None:
        """The next group's shard: a view kept as it is (``whole``: a persistent group), else a
        copy on the device or in (pinned) host memory."""
        self.shards.append(shard if whole else self.store.buffer(shard.numel(), self.dtype).copy_(shard))

    @property
    def files(self):
        """The NvmeStore of the shards swapped to files (None before :meth:`swap_out`)."""
        return self.store.files

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.shards[i]

    def swap_out(self, groups, persistent: list[bool], max_in_cpu: int, nvme_path, rank: int, world: int,
                 timeline=None) -> None:
        """Keep the first ``max_in_cpu`` elements of gathered groups' shards in host memory and
        write the rest to files under ``nvme_path``."""
        from ...offload.nvme import NvmeStore
        kept, out = 0, []
        for g in groups:
            if persistent[g.index]:
                continue
            n = self.shards[g.index].numel()
            if kept + n <= max_in_cpu:
                kept += n
            else:
                out.append(g.index)
        need = sum(self.shards[i].numel() for i in out) * self.shards[0].element_size() * world
        self.store = NvmeShards(NvmeStore(nvme_path, rank, need, what="parameter shards of every rank",
                                          timeline=timeline), self.pin)
        for i in out:
            self.store.write(i, "param", self.shards[i]).result()
            self.on_nvme.add(i)
            self.shards[i] = torch.empty(0, dtype=self.dtype)

    def on_device(self, i: int, numel: int) -> torch.Tensor:
        """Group ``i``'s shard (``numel`` elements) on the compute device (copied up when offloaded)."""
        if i in self.on_nvme:
            shard = self._staged.get(i)
            if shard is None:
                shard = torch.empty(numel, dtype=self.dtype)
                self.store.read(i, "param", shard).result()
        else:
            shard = self.shards[i]
        return shard if shard.device == self.device else shard.to(self.device, non_blocking=True)

    def write(self, i: int, start: int, values: torch.Tensor, numel: int) -> None:
        """The step's new values for elements ``start:`` of group ``i``'s shard (of ``numel``)."""
        if i in self.on_nvme:
            buf = self._staged.get(i)
            if buf is None:
                buf = self._staged[i] = torch.empty(numel, dtype=self.dtype)
                self._covered[i] = 0
            buf[start:start + values.numel()].copy_(values)
            self._covered[i] += values.numel()
        else:
            self.shards[i][start:start + values.numel()].copy_(values, non_blocking=True)

    def flush(self) -> None:
        """After the step: the shards assembled for files go back to their files."""
        for i, buf in self._staged.items():
            if self._covered.get(i, buf.numel()) < buf.numel():    # (not the case in a step: an internal
                # invariant no learner can break, so its message stays English)
                raise RuntimeError(f"stage 3: the step updated only part of group {i}'s shard")
        for w in [self.store.write(i, "param", buf) for i, buf in self._staged.items()]:
            w.result()
        self._staged.clear()

    def replace(self, i: int, shard: torch.Tensor) -> None:
        """Replace group ``i``'s shard by ``shard`` (a checkpoint's values)."""
        if i in self.on_nvme:
            self.store.write(i, "param", shard.to(self.dtype).clone()).result()
        else:
            self.shards[i].copy_(shard)

    def offloaded_bytes(self, where: Place, persistent: list[bool]) -> int:
        """Bytes of shards in host memory ("host") or in files ("nvme")."""
        if where == Place.HOST and self.where.offloaded:
            return tensor_bytes([s for i, s in enumerate(self.shards) if not persistent[i] and i not in self.on_nvme])
        if where == Place.NVME:
            return self.store.bytes_on_disk()
        return 0

    def device_bytes(self, persistent: list[bool]) -> int:
        """Bytes of the gathered groups' shards on the device (persistent buffers are counted apart)."""
        return 0 if self.where.offloaded else tensor_bytes(
            [s for i, s in enumerate(self.shards) if not persistent[i]])

    def close(self) -> None:
        self.store.close()
