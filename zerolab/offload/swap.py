"""When an offloaded home's tiles go in and out of its shard store: the swap policy of
``offload.StateHome`` (the store, ``offload/store.py``, only stores).

    InMemory        the store keeps the tiles in memory (device, host): nothing to swap
    SwapSubGroups   the store is files (NVMe): each sub-group is read into host buffers before it
                    steps and written back after, pipelined on I/O threads when asked

DeepSpeed's counterpart is its optimizer swapper (``runtime/swap_tensor/partitioned_optimizer_swapper.py``
and the pipelined one beside it), driven by ``offload_optimizer.pipeline_read`` / ``pipeline_write``.
"""
from __future__ import annotations

from concurrent.futures import Future

import torch

from ..memory import tensor_bytes

__all__ = ["InMemory", "SwapSubGroups"]


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
