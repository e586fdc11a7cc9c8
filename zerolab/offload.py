"""Where the optimizer states live: on the device, in host memory, or on NVMe.

This is one of a stage's switches (the others: how gradients are reduced, where parameters
live). A :class:`StateHome` holds what the optimizer steps, this rank's fp32 master copy of
its parameters (the *register*) and the optimizer's moments, and runs the step:

    device   masters on the compute device; in fp32 training they *are* the parameters
             (views, no copy), in fp16/bf16 they are fp32 copies       (no offload)
    cpu      masters, moments and the fp32 gradients in host memory   (ZeRO-Offload,
             ``offload_optimizer.device: "cpu"``); pinned when asked and a GPU exists
    nvme     masters and moments in files under ``nvme_path``, brought into host memory one
             sub-group at a time                                        (ZeRO-Infinity)

The step is tiled into sub-groups of at most ``sub_group_size`` elements (DeepSpeed's key):
for each sub-group the gradient is copied down and unscaled, the optimizer steps it, and the
updated values are copied up into the stage's own parameter shard (cast to the model dtype).
With NVMe the sub-groups stream: the next one's read (``pipeline_read``) and the previous
one's write (``pipeline_write``) run on I/O threads while the current one steps.

The arithmetic is the same wherever the states live: an elementwise optimizer (Adam, AdamW,
SGD...) stepped tile by tile gives the same bits as stepped whole, so an offloaded fp32 run
equals the same run without offload, bit for bit. On the host the optimizer runs its
``foreach`` form (bit-identical to torch's default CPU loop and faster; torch's ``fused`` CPU
Adam is faster still but rounds differently in the last bit, so it is used only if you pass
an optimizer built with ``fused=True``).
"""
from __future__ import annotations

import time
from concurrent.futures import Future

import torch

from .flat import pack_sizes
from .memory import tensor_bytes
from .nvme import NvmeStore

__all__ = ["StateHome", "make_state_home", "tile_ranges"]


def tile_ranges(numel: int, size: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of at most ``size`` elements covering ``numel``."""
    size = max(1, int(size))
    return [(a, min(a + size, numel)) for a in range(0, numel, size)] or [(0, 0)]


def _param_pieces(g, numel: int, sharded: bool) -> list[tuple[int, int]]:
    """``[start, end)`` of each parameter's piece of this rank's part of group ``g`` (``numel``
    elements; the padding at the end, if any, is a piece of its own)."""
    lo = g.shard_range()[0] if sharded else 0
    out = []
    for off, n in zip(g.offsets, g.numels):
        a, b = max(lo, off) - lo, min(lo + numel, off + n) - lo
        if a < b:
            out.append((a, b))
    end = out[-1][1] if out else 0
    if end < numel:
        out.append((end, numel))
    return out or [(0, numel)]


def _pinned(numel: int, dtype: torch.dtype, pin: bool) -> torch.Tensor:
    t = torch.empty(numel, dtype=dtype)
    if pin and torch.cuda.is_available():
        t = t.pin_memory()
    return t


class StateHome:
    """This rank's optimizer-side state, on ``where`` = "device", "cpu" or "nvme".

    ``owned``: per group, the stage's own parameter shard that the step updates (a view into
    the stage's storage, model dtype); the stage writes values through ``stage.write_params``.
    """

    def __init__(self, stage, owned: list[torch.Tensor], where: str = "device", *,
                 sub_group_size: int = 1_000_000_000, pin_memory: bool = False, nvme: "NvmeStore | None" = None,
                 pipeline_read: bool = False, pipeline_write: bool = False):
        self.stage, self.where = stage, where
        self.pin = pin_memory
        self.nvme = nvme
        self.pipeline_read, self.pipeline_write = pipeline_read, pipeline_write
        # masters are separate fp32 tensors unless the parameters are fp32 and stay on the device
        self.copies = stage.mixed or where != "device" or stage.param_where != "device"
        # tiles[j] = (group index, start, end); tensors[j] the tensor the optimizer steps
        self.tiles: list[tuple[int, int, int]] = []
        self.tensors: list[torch.Tensor] = []
        self.group_tiles: list[list[int]] = []
        for i, own in enumerate(owned):
            # on the device a tile is a whole group (nothing to swap, no reason to cut);
            # offloaded, groups are cut so that a sub-group never exceeds sub_group_size
            if where == "device":
                ranges = [(0, own.numel())]
            elif sub_group_size <= 0:                   # DeepSpeed: every parameter a sub-group of its own
                ranges = _param_pieces(stage.groups[i], own.numel(), stage.shards_optimizer)
            else:
                ranges = tile_ranges(own.numel(), sub_group_size)
            self.group_tiles.append([])
            for a, b in ranges:
                src = own[a:b].detach()
                if not self.copies:
                    t = src                                     # the parameters themselves
                elif where == "device":
                    t = src.float().clone()
                else:
                    t = _pinned(b - a, torch.float32, pin_memory)
                    t.copy_(src)
                self.group_tiles[i].append(len(self.tiles))
                self.tiles.append((i, a, b))
                self.tensors.append(t)
        self.sub_groups = pack_sizes([b - a for _, a, b in self.tiles], sub_group_size)
        self.state_keys: dict[int, list[str]] = {}   # nvme: tensor states of each tile, once known
        self.swap_peak_bytes = 0
        if where == "nvme":
            for j, t in enumerate(self.tensors):
                self.nvme.write(j, "master", t).result()
                self.tensors[j].data = torch.empty(0)
        self.optimizer = None

    # -- the optimizer ----------------------------------------------------------------------
    @property
    def optimizer_params(self) -> list:
        """What the optimizer is built over: the tiles, or, when the optimizer has parameter groups,
        one group per parameter group (its tiles and its own settings)."""
        hps = getattr(self.stage, "opt_group_hps", [{}])      # (a stand-in stage has one group)
        if len(hps) == 1 and not hps[0]:
            return self.tensors
        groups = self.stage.groups
        return [{**hp, "params": [t for (i, _, _), t in zip(self.tiles, self.tensors) if groups[i].opt_group == k]}
                for k, hp in enumerate(hps)]

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        if self.where != "device":
            for pg in optimizer.param_groups:     # the fastest bit-exact form on the host
                if pg.get("foreach") is None and not pg.get("fused"):
                    pg["foreach"] = True

    def step(self, optimizer: torch.optim.Optimizer, grads: list[torch.Tensor], combined: float) -> None:
        """Step every sub-group with ``grads`` (aligned with the groups, any dtype and device)
        divided by ``combined`` (loss scale x clipping factor), and write the results up."""
        inv = 1.0 / combined
        reads: dict[int, list[Future]] = {}
        writes: list[Future] = []
        if self.where == "nvme":
            reads[0] = self._read_sub_group(0)
        timeline = getattr(self.stage.comm, "timeline", None) if self.where != "device" else None
        for k, sg in enumerate(self.sub_groups):
            t0 = time.perf_counter()
            if self.where == "nvme":
                if self.pipeline_read and k + 1 < len(self.sub_groups):
                    reads[k + 1] = self._read_sub_group(k + 1)
                for f in reads.pop(k):
                    f.result()
                self._note_swap()
            for j in sg:
                i, a, b = self.tiles[j]
                g = grads[i][a:b].to(self.tensors[j].device, torch.float32, non_blocking=True)
                self.tensors[j].grad = g * inv if inv != 1.0 else g.clone()
            optimizer.step()
            if self.where == "device" and self.stage.budget_check is not None:
                self.stage.budget_check("the optimizer step", fresh=True)   # Adam's moments appear now
            for j in sg:
                t = self.tensors[j]
                t.grad = None
                if self.copies:
                    i, a, b = self.tiles[j]
                    self.stage.write_params(i, a, t)
            if self.where == "nvme":
                ws = self._write_sub_group(sg)
                if self.pipeline_write:
                    writes.extend(ws)
                else:
                    for f in ws:
                        f.result()
                if not self.pipeline_read and k + 1 < len(self.sub_groups):
                    reads[k + 1] = self._read_sub_group(k + 1)
            if timeline is not None:
                timeline.add("host", f"host step sub-group {k}", t0, time.perf_counter())
        for f in writes:
            f.result()

    # -- NVMe: swap a sub-group in and out --------------------------------------------------
    def _read_sub_group(self, k: int) -> list[Future]:
        futures = []
        for j in self.sub_groups[k]:
            n = self.tiles[j][2] - self.tiles[j][1]
            buf = _pinned(n, torch.float32, self.pin)
            futures.append(self.nvme.read(j, "master", buf))
            self.tensors[j].data = buf
            st = self.optimizer.state.get(self.tensors[j]) if self.optimizer is not None else None
            for key in self.state_keys.get(j, []):
                sbuf = _pinned(n, st[key].dtype, self.pin)
                futures.append(self.nvme.read(j, key, sbuf))
                st[key] = sbuf
        return futures

    def _write_sub_group(self, sg: list[int]) -> list[Future]:
        futures = []
        for j in sg:
            t = self.tensors[j]
            futures.append(self.nvme.write(j, "master", t.data))
            st = self.optimizer.state.get(t, {})
            keys = [k for k, v in st.items() if torch.is_tensor(v) and v.dim() == 1 and v.numel() == t.numel()]
            self.state_keys[j] = keys
            for key in keys:
                futures.append(self.nvme.write(j, key, st[key]))
                st[key] = torch.empty(0, dtype=st[key].dtype)      # a placeholder: the file holds it
            t.data = torch.empty(0)
        return futures

    def _note_swap(self) -> None:
        live = [t for t in self.tensors if t.numel()]
        live += [v for t in self.tensors for v in self.optimizer.state.get(t, {}).values()
                 if torch.is_tensor(v) and v.dim() == 1]
        self.swap_peak_bytes = max(self.swap_peak_bytes, tensor_bytes(live))

    # -- whole groups: checkpoints, full_params, loading -------------------------------------
    def _tile_value(self, j: int, key: str | None) -> torch.Tensor | None:
        t = self.tensors[j]
        if key is None:
            if self.where == "nvme":
                buf = torch.empty(self.tiles[j][2] - self.tiles[j][1], dtype=torch.float32)
                self.nvme.read(j, "master", buf).result()
                return buf
            return t
        st = self.optimizer.state.get(t, {}) if self.optimizer is not None else {}
        v = st.get(key)
        if self.where == "nvme" and key in self.state_keys.get(j, []):
            buf = torch.empty(t.numel() or (self.tiles[j][2] - self.tiles[j][1]), dtype=v.dtype)
            self.nvme.read(j, key, buf).result()
            return buf
        return v

    def group_master(self, i: int) -> torch.Tensor:
        """Group ``i``'s fp32 master shard (a fresh tensor when it is stored in tiles or files)."""
        parts = [self._tile_value(j, None) for j in self.group_tiles[i]]
        return parts[0] if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])

    def group_state(self, i: int) -> dict:
        """Group ``i``'s optimizer state: per-element tensors joined across its tiles, scalars
        (Adam's ``step``) from its first tile."""
        js = self.group_tiles[i]
        first = self.optimizer.state.get(self.tensors[js[0]], {}) if self.optimizer is not None else {}
        out = {}
        for key, v in first.items():
            if v is None:
                continue
            elementwise = torch.is_tensor(v) and v.dim() == 1
            if elementwise:
                parts = [self._tile_value(j, key) for j in js]
                out[key] = parts[0] if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])
            else:
                out[key] = v
        return out

    def set_group(self, i: int, master: torch.Tensor | None = None, state: dict | None = None) -> None:
        """Set group ``i``'s master (and optimizer state, when given; ``{}`` clears it)."""
        for j in self.group_tiles[i]:
            _, a, b = self.tiles[j]
            t = self.tensors[j]
            if master is not None:
                if self.where == "nvme":
                    self.nvme.write(j, "master", master[a:b].float().contiguous().clone()).result()
                else:
                    t.detach().copy_(master[a:b])
            if state is None:
                continue
            if not state:
                self.optimizer.state.pop(t, None)
                self.state_keys.pop(j, None)
                continue
            st = {}
            keys = []
            for key, v in state.items():
                if torch.is_tensor(v) and v.dim() == 1 and v.numel() == master_numel(self, i):
                    piece = v[a:b].to(torch.float32 if v.is_floating_point() else v.dtype).clone()
                    if self.where == "nvme":
                        self.nvme.write(j, key, piece).result()
                        st[key] = torch.empty(0, dtype=piece.dtype)
                        keys.append(key)
                    else:
                        st[key] = piece.to(t.device)
                else:
                    st[key] = v.clone() if torch.is_tensor(v) else v
            self.optimizer.state[t] = st
            if self.where == "nvme":
                self.state_keys[j] = keys

    # -- bytes --------------------------------------------------------------------------------
    def resident_tensors(self) -> list[torch.Tensor]:
        """The masters (when copies) and optimizer state tensors held in memory now."""
        out = [t for t in self.tensors if self.copies and t.numel()]
        if self.optimizer is not None:
            masters = {t.untyped_storage().data_ptr() for t in self.tensors if t.numel()}
            for t in self.tensors:
                for v in self.optimizer.state.get(t, {}).values():
                    if torch.is_tensor(v) and v.numel() and v.untyped_storage().data_ptr() not in masters:
                        out.append(v)
        return out

    def optimizer_bytes(self) -> int:
        """Bytes of masters (copies) + optimizer state held in memory (device or host)."""
        return tensor_bytes(self.resident_tensors())

    def file_bytes(self) -> int:
        return self.nvme.bytes_on_disk() if self.nvme is not None else 0

    def close(self) -> None:
        if self.nvme is not None:
            self.nvme.close()


def master_numel(home: StateHome, i: int) -> int:
    js = home.group_tiles[i]
    return home.tiles[js[-1]][2] if js else 0


def make_state_home(stage, owned: list[torch.Tensor], zero, needed_state_factor: int = 2) -> StateHome:
    """The home ``zero.offload_optimizer`` asks for."""
    cfg = zero.offload_optimizer
    where = cfg.device if cfg.device in ("cpu", "nvme") else "device"
    if where != "device" and cfg.ratio < 1:      # the parser refuses it; a Config built by hand might not
        raise NotImplementedError("offload_optimizer.ratio < 1 (partial offload) is not implemented in zerolab")
    nvme = None
    if where == "nvme":
        numel = sum(o.numel() for o in owned)
        nvme = NvmeStore(cfg.nvme_path, stage.rank, numel * 4 * (1 + needed_state_factor) * stage.world_size,
                         what="optimizer states (fp32 masters and moments of every rank)",
                         timeline=getattr(stage.comm, "timeline", None))
    return StateHome(stage, owned, where, sub_group_size=zero.sub_group_size, pin_memory=cfg.pin_memory,
                     nvme=nvme, pipeline_read=cfg.pipeline_read, pipeline_write=cfg.pipeline_write)
