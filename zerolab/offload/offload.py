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

Where they live is a shard store (``store.py``: ``DeviceShards``, ``HostShards``,
``NvmeShards``); with files, :class:`~zerolab.offload.swap.SwapSubGroups` moves each sub-group in and out.

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

import torch

from ..memory.flat import pack_sizes
from ..i18n import catalogue
from ..memory import Place, tensor_bytes
from .nvme import NvmeStore
from .store import ShardStore, shard_store
from .swap import InMemory, SwapSubGroups

__all__ = ["StateHome", "ParamWriter", "make_state_home", "tile_ranges"]

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)


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


class ParamWriter:
    """What a home writes the step's values through: the parameter switch's ``write``, in the
    model's dtype. (Exercise 5's contract calls it ``home.stage.write_params``.)"""

    def __init__(self, params, dtype: torch.dtype):
        self.params, self.dtype = params, dtype

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        """The optimizer updated ``values`` (fp32) of group ``i``'s owned part from ``start``:
        put them into this rank's parameters, in the model dtype."""
        self.params.write(i, start, values)


class StateHome:
    """This rank's optimizer-side state, in a shard store (``store.py``: the device, host memory
    or NVMe files).

    ``owned``: per group, the stage's own parameter shard that the step updates (a view into
    the parameter switch's storage, model dtype); the values are written through ``writer``
    (a :class:`ParamWriter`). ``groups``: the flat groups (their parameter pieces, for
    ``sub_group_size`` 0, and their optimizer groups); ``sharded``: ``owned`` is a shard of each
    group (stages 1-3), not all of it; ``copies_needed``: the masters cannot be the parameters
    themselves (mixed precision, or parameters that leave the device).
    """

    def __init__(self, owned: list[torch.Tensor], groups, store: ShardStore, writer, *, sharded: bool = True,
                 copies_needed: bool = True, sub_group_size: int = 1_000_000_000, opt_group_hps=None,
                 pipeline_read: bool = False, pipeline_write: bool = False, timeline=None):
        self.store, self.writer, self.groups = store, writer, groups
        self.where, self.pin = store.where, store.pin
        self.sharded = sharded
        self.opt_group_hps = opt_group_hps or [{}]
        self.budget_check = None                  # the engine's device budget, when it has one
        self.timeline = None if store.on_device else timeline   # host steps are spans of their own
        # masters are separate fp32 tensors unless the parameters are fp32 and stay on the device
        self.copies = copies_needed or not store.on_device
        # tiles[j] = (group index, start, end); tensors[j] the tensor the optimizer steps
        self.tiles: list[tuple[int, int, int]] = []
        self.tensors: list[torch.Tensor] = []
        self.group_tiles: list[list[int]] = []
        for i, own in enumerate(owned):
            # on the device a tile is a whole group (nothing to swap, no reason to cut);
            # offloaded, groups are cut so that a sub-group never exceeds sub_group_size
            if store.on_device:
                ranges = [(0, own.numel())]
            elif sub_group_size <= 0:                   # DeepSpeed: every parameter a sub-group of its own
                ranges = _param_pieces(groups[i], own.numel(), sharded)
            else:
                ranges = tile_ranges(own.numel(), sub_group_size)
            self.group_tiles.append([])
            for a, b in ranges:
                src = own[a:b].detach()
                if not self.copies:
                    t = src                                     # the parameters themselves
                elif store.on_device:
                    t = src.float().clone()
                else:
                    t = store.buffer(b - a, torch.float32)
                    t.copy_(src)
                self.group_tiles[i].append(len(self.tiles))
                self.tiles.append((i, a, b))
                self.tensors.append(t)
        self.sub_groups = pack_sizes([b - a for _, a, b in self.tiles], sub_group_size)
        self.swap = InMemory() if store.resident else SwapSubGroups(self, pipeline_read, pipeline_write)
        self.optimizer = None

    @property
    def stage(self) -> ParamWriter:
        """Exercise 5's name for :attr:`writer` (``home.stage.write_params(i, a, values)``)."""
        return self.writer

    @property
    def nvme(self) -> NvmeStore | None:
        """The files of the NVMe store (None in memory)."""
        return self.store.files

    @property
    def swap_peak_bytes(self) -> int:
        return self.swap.peak_bytes

    # -- the optimizer ----------------------------------------------------------------------
    @property
    def optimizer_params(self) -> list:
        """What the optimizer is built over: the tiles, or, when the optimizer has parameter groups,
        one group per parameter group (its tiles and its own settings)."""
        hps = self.opt_group_hps
        if len(hps) == 1 and not hps[0]:
            return self.tensors
        return [{**hp, "params": [t for (i, _, _), t in zip(self.tiles, self.tensors) if self.groups[i].opt_group == k]}
                for k, hp in enumerate(hps)]

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        # the fastest bit-exact form on the host: offloaded states, or CPU training with several
        # tiles (stage 3's one per group), where torch's default steps tile by tile in Python
        on_host = not self.store.on_device or (len(self.tensors) > 1 and
                                               all(t.device.type == "cpu" for t in self.tensors))
        if on_host:
            for pg in optimizer.param_groups:
                if pg.get("foreach") is None and not pg.get("fused"):
                    pg["foreach"] = True

    def step(self, optimizer: torch.optim.Optimizer, grads: list[torch.Tensor], combined: float) -> None:
        """Step every sub-group with ``grads`` (aligned with the groups, any dtype and device)
        divided by ``combined`` (loss scale x clipping factor), and write the results up."""
        inv = 1.0 / combined
        # A tensor factor (DeepSpeed's dtype on stages 1-3) is multiplied in always, as DeepSpeed
        # does (x * 1.0 is x, bit for bit): comparing it with 1 would read it back, one wait for
        # the GPU per tile. A float is skipped when it is 1. Every tile lives on one device: with
        # the states offloaded the factor comes there once (DeepSpeed computes it on the host).
        scaled = isinstance(inv, torch.Tensor) or inv != 1.0
        if isinstance(inv, torch.Tensor) and self.tensors:
            inv = inv.to(self.tensors[0].device)
        self.swap.begin()
        for k, sg in enumerate(self.sub_groups):
            t0 = time.perf_counter()
            self.swap.bring_in(k)
            # every tile's gradient comes down first (asynchronously from a GPU), then one wait:
            # the host reads them next, and a copy still in flight would be read half-written
            down, from_gpu = [], None
            for j in sg:
                i, a, b = self.tiles[j]
                src = grads[i][a:b]
                g = src.to(self.tensors[j].device, torch.float32, non_blocking=True)
                if src.is_cuda and not g.is_cuda:
                    from_gpu = src.device
                down.append((j, g))
            if from_gpu is not None:
                torch.cuda.synchronize(from_gpu)
            for j, g in down:
                # unscaled and clipped in place, as DeepSpeed does its gradient partition: where no
                # copy was needed g is the reduced shard itself, which is zeroed after the step
                if scaled:
                    g.mul_(inv)
                self.tensors[j].grad = g
            optimizer.step()
            if self.store.on_device and self.budget_check is not None:
                self.budget_check("the optimizer step", fresh=True)   # Adam's moments appear now
            for j in sg:
                t = self.tensors[j]
                t.grad = None
                if self.copies:
                    i, a, b = self.tiles[j]
                    self.stage.write_params(i, a, t)
            self.swap.put_away(k, sg)
            if self.timeline is not None:
                self.timeline.add("host", f"host step sub-group {k}", t0, time.perf_counter())
        self.swap.end()

    # -- whole groups: checkpoints, full_params, loading -------------------------------------
    def _tile_value(self, j: int, key: str | None) -> torch.Tensor | None:
        t = self.tensors[j]
        if key is None:
            return self.swap.read_master(j) if self.swap.swapped(j, None) else t
        st = self.optimizer.state.get(t, {}) if self.optimizer is not None else {}
        v = st.get(key)
        if self.swap.swapped(j, key):
            buf = torch.empty(t.numel() or (self.tiles[j][2] - self.tiles[j][1]), dtype=v.dtype)
            self.store.read(j, key, buf).result()
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
        resident = self.store.resident
        for j in self.group_tiles[i]:
            _, a, b = self.tiles[j]
            t = self.tensors[j]
            if master is not None:
                if resident:
                    t.detach().copy_(master[a:b])
                else:
                    self.store.write(j, "master", master[a:b].float().contiguous().clone()).result()
            if state is None:
                continue
            if not state:
                self.optimizer.state.pop(t, None)
                self.swap.forget(j)
                continue
            st = {}
            keys = []
            for key, v in state.items():
                if torch.is_tensor(v) and v.dim() == 1 and v.numel() == master_numel(self, i):
                    piece = v[a:b].to(torch.float32 if v.is_floating_point() else v.dtype).clone()
                    if resident:
                        st[key] = piece.to(t.device)
                    else:
                        self.store.write(j, key, piece).result()
                        st[key] = torch.empty(0, dtype=piece.dtype)
                        keys.append(key)
                else:
                    st[key] = v.clone() if torch.is_tensor(v) else v
            self.optimizer.state[t] = st
            self.swap.note_keys(j, keys)

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
        return self.store.bytes_on_disk()

    def memory(self) -> dict[Place, dict[str, int]]:
        """This switch's bytes by place, under ``engine.memory(where)``'s keys: what is held in
        memory is optimizer state where the store keeps it, a swap buffer in host memory when
        the store's home is files (then the files are the optimizer states)."""
        if self.store.resident:
            return {self.store.place: {"optimizer_states": self.optimizer_bytes()}}
        return {Place.HOST: {"buffers": self.optimizer_bytes(), "peak_buffers": self.swap_peak_bytes},
                Place.NVME: {"optimizer_states": self.file_bytes()}}

    def describe(self) -> str:
        """Where the optimizer states live, for ``engine.switches()``."""
        where = {Place.DEVICE: "on the device", Place.HOST: "in host memory, stepped there",
                 Place.NVME: "on NVMe, streamed through host memory sub-group by sub-group"}[self.store.place]
        return ("sharded" if self.sharded else "replicated") + f", {where}"

    def gradient_shards(self, numels: list[int], dtype: torch.dtype) -> tuple[Place, list[torch.Tensor]]:
        """Where the gradient switch keeps the reduced gradient shards the step reads: on the
        device in the model dtype, or, when the states are offloaded, in host memory in fp32,
        where the host step reads them (DeepSpeed's CPU gradient buffer). (place, zeroed shards)"""
        if self.store.on_device:
            return Place.DEVICE, [self.store.zeros(n, dtype) for n in numels]
        return Place.HOST, [self.store.zeros(n, torch.float32) for n in numels]

    def close(self) -> None:
        self.store.close()


def master_numel(home: StateHome, i: int) -> int:
    js = home.group_tiles[i]
    return home.tiles[js[-1]][2] if js else 0


def make_state_home(owned: list[torch.Tensor], groups, zero, writer: ParamWriter, *, device: torch.device,
                    rank: int, world_size: int, sharded: bool, copies_needed: bool, opt_group_hps=None,
                    timeline=None, needed_state_factor: int = 2) -> StateHome:
    """The home ``zero.offload_optimizer`` asks for."""
    cfg = zero.offload_optimizer
    if Place.of(cfg.device).offloaded and cfg.ratio < 1:   # the parser refuses it; a Config built by hand might not
        raise NotImplementedError(T("offload_optimizer.ratio < 1 (partial offload) is not implemented in zerolab"))
    need = lambda: sum(o.numel() for o in owned) * 4 * (1 + needed_state_factor) * world_size  # noqa: E731
    store = shard_store(cfg, device, rank, need, "optimizer states (fp32 masters and moments of every rank)",
                        timeline=timeline)
    return StateHome(owned, groups, store, writer, sharded=sharded, copies_needed=copies_needed,
                     sub_group_size=zero.sub_group_size, opt_group_hps=opt_group_hps,
                     pipeline_read=cfg.pipeline_read, pipeline_write=cfg.pipeline_write, timeline=timeline)
