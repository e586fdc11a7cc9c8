"""A device-memory budget: "this rank's device has 2 GB", enforced while training.

A zerolab option outside DeepSpeed's keys (``zerolab.initialize(..., device_budget="2GB")``),
so that a laptop can show what a GPU would do: DDP running out of memory where ZeRO-3 with
offload fits the same model. The engine counts what it places on the device:

    model states   parameters, gradients, optimizer states (``engine.memory()``)
    buffers        gradient buckets and gathered parameters alive now
    activations    what autograd saves for backward (through saved-tensor hooks; parameters
                   and gathered parameter buffers left out), from forward until backward frees it

and, the moment their sum would pass the capacity, raises :class:`DeviceOutOfMemoryError` (a
``torch.OutOfMemoryError``, so code that catches a real OOM catches it too), naming the
biggest consumers and the configs that would fit. On a GPU the CUDA allocator's own figure
(``torch.cuda.memory_allocated``) is used instead of the count.
"""
from __future__ import annotations

import re

import torch

from ..config.stages import GRADS, OPTIMIZER_STATES, PARAMS, parts, shards, stages_from
from ..i18n import catalogue, width
from .memory import format_bytes
from .place import Place

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["DeviceOutOfMemoryError", "Budget", "parse_bytes"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class DeviceOutOfMemoryError(torch.OutOfMemoryError):
    """The engine's device use would pass ``device_budget``."""


def parse_bytes(value) -> int:
    """``2_000_000_000``, ``"2GB"``, ``"1.5 GiB"``, ``"300MB"`` -> bytes (GB decimal, GiB binary)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(T("device_budget must be positive, not {value}", value=value))
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b|b)?\s*", str(value), re.IGNORECASE)
    if not m:
        raise ValueError(T("device_budget {value}: give bytes as a number or text like '2GB' or '1.5GiB'",
                           value=repr(value)))
    n = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if n <= 0:
        raise ValueError(T("device_budget must be positive, not {value}", value=repr(value)))
    return int(n)


class Budget:
    """The capacity of one rank's device and the running count checked against it."""

    def __init__(self, engine, capacity):
        self.engine = engine
        self.capacity = parse_bytes(capacity)
        self.activation_bytes = 0          # saved for backward now (unique storages)
        self.peak_activation_bytes = 0
        self.peak_bytes = 0                # the most counted at once
        self._saved: dict[int, int] = {}   # storage address -> bytes
        self.cuda = engine.device.type == "cuda"
        self._states: dict[str, int] | None = None   # model-state bytes, measured once per phase
        self._module_ptrs: set[int] = set()          # the model's parameter storages, at forward start
        # the most elements one module gathers (measured by the stage while they were whole)
        self.largest_layer = engine.stage.largest_unit

    # -- counting ----------------------------------------------------------------------------
    def pack(self, t: torch.Tensor):
        """The saved-tensor hook: count an activation (once per storage)."""
        if not (t.is_meta or isinstance(t, torch.nn.Parameter)) and t.device == self.engine.device:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr and ptr not in self._saved and not self._is_param(ptr):
                self._saved[ptr] = st.nbytes()
                self.activation_bytes += st.nbytes()
                self.peak_activation_bytes = max(self.peak_activation_bytes, self.activation_bytes)
                self.check("forward")
        return t

    def _is_param(self, ptr: int) -> bool:
        """A storage of the model's parameters (as they were when this forward began), or one of
        the parameter buffers stage 3 gathered since."""
        if ptr in self._module_ptrs:
            return True
        return any(f.untyped_storage().data_ptr() == ptr for f in self.engine.stage.params.full.values())

    def begin_forward(self) -> None:
        """Called by the engine before each forward: what the model states weigh now is measured
        once here, not again for every tensor autograd saves."""
        self._states = None
        self._module_ptrs = {p.untyped_storage().data_ptr() for p in self.engine.module.parameters()}

    def backward_done(self) -> None:
        self._saved.clear()
        self.activation_bytes = 0

    def used(self) -> dict[str, int]:
        if self._states is None:
            m = self.engine.memory()
            self._states = {k: m[k] for k in ("params", "grads", "optimizer_states", "model_buffers")}
        st = self._states
        return {"params": st["params"], "grads": st["grads"], "optimizer_states": st["optimizer_states"],
                "buffers (buckets, gathered parameters)": self.engine.stage.buffer_bytes() + st["model_buffers"],
                "activations": self.activation_bytes}

    def check(self, where: str, fresh: bool = False) -> None:
        """``fresh``: measure the model states again (at set-up, and after an optimizer step,
        where Adam's moments appear); otherwise the forward's measurement is reused and only
        the buffers and activations, which change within a step, are counted anew."""
        if fresh:
            self._states = None
        if self.cuda:
            total = torch.cuda.memory_allocated(self.engine.device)
            parts = {"allocated by torch on the GPU": total}
        else:
            parts = self.used()
            total = sum(parts.values())
        self.peak_bytes = max(self.peak_bytes, total)
        if total > self.capacity:
            raise DeviceOutOfMemoryError(self._message(where, total, parts))

    # -- the message ---------------------------------------------------------------------------
    def _message(self, where: str, total: int, parts: dict[str, int]) -> str:
        e = self.engine
        biggest = sorted(parts.items(), key=lambda kv: -kv[1])
        lines = [T("rank {rank}: out of device memory in {where}: {total} needed, the budget is {capacity} "
                   "(device_budget). Biggest consumers:", rank=e.comm.rank, where=T.text(where),
                   total=format_bytes(total), capacity=format_bytes(self.capacity))]
        lines += [f"  {_ljust(T.text(name), 40)} {format_bytes(b):>12}" for name, b in biggest if b]
        fits = self.configs_that_fit()
        measured = (T.text("plus the activations and buffers measured so far") if self.peak_activation_bytes
                    else T.text("activations not measured yet: they come on top"))
        if fits:
            lines.append(T("Configs whose device memory would fit (model states by the formula, {measured}):",
                           measured=measured))
            lines += [f"  {label:<52} ~{format_bytes(b)}" for label, b in fits[:4]]
        else:
            lines.append(T("No ZeRO stage or offload fits this budget with these activations: lower the micro "
                           "batch (activations), recompute activations (torch.utils.checkpoint), or add ranks."))
        return "\n".join(lines)

    def configs_that_fit(self) -> list[tuple[str, int]]:
        """(config change, estimated device bytes) for each option that would fit, smallest
        change first: a higher stage, then optimizer offload, then parameter offload."""
        e = self.engine
        psi = sum(p.numel() for _, p in e.stage.named)
        n = e.comm.world_size
        p_b = torch.empty(0, dtype=e.dtype).element_size()
        masters = 0 if e.dtype == torch.float32 else 4
        opt_b = masters + 8                       # fp32 master (mixed) + Adam's two moments
        extra = self.peak_activation_bytes + e.stage.peak_buffer_bytes
        # stage 3: one layer's params + grads (4L), plus what the reuse distance keeps gathered at
        # the turn from forward to backward: the last modules of forward, about half the distance
        kept = min(psi, e.config.zero.stage3_max_reuse_distance // 2)
        gathered = 2 * p_b * self.largest_layer + p_b * kept
        now = e.config.zero.stage
        z = e.config.zero
        current = (now, Place.of(z.offload_optimizer.device).offloaded, Place.of(z.offload_param.device).offloaded)
        out = []
        for stage in stages_from(now):
            # offload moves only what the stage shards: the optimizer states from stage 1 on, the
            # parameters at stage 3 (DeepSpeed's rule; config/parse.py refuses the other blocks)
            sharded_params = shards(stage, PARAMS)
            for opt_off, par_off in ((False, False), (True, False), (True, True)):
                if par_off and not sharded_params or opt_off and not shards(stage, OPTIMIZER_STATES) \
                        or (stage, opt_off, par_off) == current:
                    continue
                params = psi * p_b / parts(stage, PARAMS, n)
                # offloaded optimizer states take the sharded gradients to the host with them
                grads = 0 if opt_off and shards(stage, GRADS) else psi * p_b / parts(stage, GRADS, n)
                opt = 0 if opt_off else psi * opt_b / parts(stage, OPTIMIZER_STATES, n)
                if par_off:
                    params = 0
                dev = int(params + grads + opt + max(extra, gathered if sharded_params else 0))
                if dev <= self.capacity:
                    label = f"stage {stage}" + (" + offload_optimizer cpu" if opt_off else "") + (
                        " + offload_param cpu" if par_off else "")
                    out.append((label, dev))
        return out


# what the budget is checked in (the callers' ``where``) and the consumers it names: their Chinese
# is in the catalogue, passed through T.text
WHERE = (T.mark("forward"), T.mark("backward"), T.mark("the optimizer step"), T.mark("a parameter gather"),
         T.mark("set-up (model states)"))
CONSUMERS = (T.mark("params"), T.mark("grads"), T.mark("optimizer_states"),
             T.mark("buffers (buckets, gathered parameters)"), T.mark("activations"),
             T.mark("allocated by torch on the GPU"))


def _ljust(text: str, columns: int) -> str:
    """``f"{text:<columns}"`` by the columns ``text`` takes (a CJK character takes two)."""
    return text + " " * max(0, columns - width(text))
