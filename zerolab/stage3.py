"""Stage 3: shard the parameters too (nobody carries the whole household any more).

Every rank keeps only its shard of each module's parameters (plus, in mixed precision, the
fp32 master and Adam states of that shard): 16 Psi / N bytes per rank. A module's full
parameters exist only while they are needed:

    forward   pre-hook:  all-gather the module's parameters      (Psi on the wire, in total)
              post-hook: release them (``param.data`` becomes an empty tensor)
    backward  when the gradient reaches the module's outputs: all-gather again   (Psi)
              when all its parameters have their gradient: reduce-scatter it     (Psi)
              and release the parameters
    step      each rank steps its shard; nothing is gathered until the next forward

One :class:`FlatGroup` per module (its own parameters, ``recurse=False``), so a gather
brings exactly what the module is about to use. A parameter of at most
``stage3_param_persistence_threshold`` elements is *persistent* (DeepSpeed's per-parameter
rule, the total capped by ``stage3_model_persistence_threshold``): all persistent parameters
share one group that is kept whole, refreshed by one all-gather after each step, and never
gathered in forward or backward (many tiny all-gathers cost more in latency than the memory
they save).

Parameters used outside their own module's forward. ``nn.MultiheadAttention`` reads
``self.out_proj.weight`` without calling ``out_proj``; a model may compute
``F.linear(h, self.embed.weight)`` in its own forward. Every module's parameter dict is
watched: reading a released parameter while some module's forward runs gathers it on the
spot, ties it to that module (released after its forward, gathered again before its backward),
and it is otherwise treated like the module's own. Reading one between the end of forward and
``backward`` (e.g. in the loss) is an :class:`ExternalParameterError` naming the parameter.
A parameter reached some other way (kept in a list, say) can be tied to a module with
:meth:`Stage3.register_external_parameter`.

Every rank must run the same modules in the same order. How groups are gathered, prefetched
from the previous step's trace, checked across ranks (16-byte headers: ranks that disagree
raise an error naming the modules instead of hanging) and released, and where the shards live
(``offload_param``), is in ``gather.py``. Gradients are reduced in the reverse of the order groups were first gathered in forward (the
same on every rank), whatever order they complete in. Frozen parameters are kept whole.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .flat import FlatGroup
from .gather import GatheredParams, ModuleOrderError
from .memory import tensor_bytes
from .reduce import ReduceScatterGrads
from .stage_base import StageBase, broadcast_

__all__ = ["Stage3", "ModuleOrderError", "ExternalParameterError"]


class ExternalParameterError(RuntimeError):
    """A stage-3 parameter was used where zerolab cannot gather it (outside any forward)."""


class _WatchedParams(dict):
    """A module's ``_parameters`` that tells stage 3 when a parameter is read by attribute
    (``module.weight``), so a released one can be gathered first. Iteration (``parameters()``,
    ``state_dict()``) does not go through ``__getitem__`` and triggers nothing."""

    def __init__(self, stage: "Stage3", module_name: str, params: dict):
        super().__init__(params)
        self._stage = stage
        self._module_name = module_name

    def __getitem__(self, name):
        p = dict.__getitem__(self, name)
        if p is not None:
            self._stage._on_param_read(p, f"{self._module_name}.{name}" if self._module_name else name)
        return p

    def __reduce__(self):                    # a copied or pickled model gets a plain dict
        return (dict, (dict(self),))


class Stage3(GatheredParams, ReduceScatterGrads, StageBase):
    stage = 3
    shards_optimizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shards: list[torch.Tensor] = []       # this rank's shard of each group (model dtype)
        self.full: dict[int, torch.Tensor] = {}    # group index -> gathered flat buffer, while alive
        self._live_gathered = 0                    # elements of non-persistent groups in self.full
        self._flight = 0                           # elements of all-gathers in flight
        # offload_param: where the shards of the gathered groups live between uses ("device",
        # "cpu": host memory, "nvme": files, beyond the first max_in_cpu elements kept on the host).
        # Persistent parameters stay whole on the device, as in DeepSpeed.
        po = self.zero.offload_param
        self.param_where = po.device if po.device in ("cpu", "nvme") else "device"
        pin = po.pin_memory and torch.cuda.is_available()
        for g in self.groups:
            flat = g.flatten([p.data for p in g.params], self.dtype, self.device)
            broadcast_(self.comm, flat)            # everyone starts from rank 0's weights
            if self.persistent[g.index]:
                self.shards.append(g.shard_of(flat))       # a view: the whole buffer stays
                self.full[g.index] = flat
                g.bind(flat)
            else:
                shard = g.shard_of(flat)
                if self.param_where != "device":
                    host = torch.empty(shard.numel(), dtype=self.dtype, pin_memory=pin)
                    self.shards.append(host.copy_(shard))
                else:
                    self.shards.append(shard.clone())
                self._release(g)
        self._make_home(self.shards)
        self._param_files = None                   # NvmeStore of the shards swapped to files
        self._on_nvme: set[int] = set()
        self._staged: dict[int, torch.Tensor] = {} # nvme shards assembled from the step's values
        self._staged_covered: dict[int, int] = {}
        if self.param_where == "nvme":
            self._swap_params_out(po)
        self._init_grad_shards()
        self._in_backward = False
        self._forward_done = False                 # a forward ran (with grad) since the last backward
        self._frames: list[list] = []              # modules whose forward is running: [module, extra ids]
        self._trace: list[int] = []                # groups gathered in forward, in order
        self._registered: dict[nn.Module, set[int]] = {}   # register_external_parameter
        self.fetches = 0                           # all-gathers issued for parameters
        self.prefetches = 0                        # ... of them issued ahead, from the trace
        self.peak_gathered_numel = 0               # most parameter elements gathered (or in flight) at once
        self.prefetch_numel = self.zero.stage3_prefetch_bucket_size
        self.max_live = self.zero.stage3_max_live_parameters
        self._traces: dict[str, list[int] | None] = {}   # last pass's fetch order, per kind of pass
        self._record: dict[str, list[int]] = {}
        self._pos: dict[str, int] = {}
        self._inflight: dict[int, tuple] = {}      # group index -> (pending all-gather, its buffer)
        self._pass_phase, self._following_pass = "forward", False
        self._install_hooks()

    # -- groups: one per module with parameters of its own, plus one of persistent params --
    def make_groups(self, named):
        trainable = {id(p): n for n, p in named}
        threshold = self.zero.stage3_param_persistence_threshold
        budget = self.zero.stage3_model_persistence_threshold
        seen: set[int] = set()
        persistent: list[nn.Parameter] = []
        modules = []                               # (name, module, its params, its new non-persistent)
        for mname, m in self.model.named_modules():
            own = [p for p in m.parameters(recurse=False) if id(p) in trainable]
            new = []
            for p in own:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if p.numel() <= threshold and p.numel() <= budget:
                    persistent.append(p)
                    budget -= p.numel()
                else:
                    new.append(p)
            modules.append((mname, m, own, new))
        groups: list[FlatGroup] = []
        self.persistent: list[bool] = []
        owner: dict[int, int] = {}

        def add(params, label, keep):
            g = FlatGroup(len(groups), params, [trainable[id(p)] for p in params], self.rank,
                          self.world_size, label=label)
            groups.append(g)
            self.persistent.append(keep)
            owner.update({id(p): g.index for p in params})

        if persistent:
            add(persistent, f"persistent ({len(persistent)} params)", True)
        for mname, _, _, new in modules:
            if new:
                add(new, mname or "(root)", False)
        self.module_groups: dict[nn.Module, list[int]] = {}
        for _, m, own, _ in modules:
            ids = sorted({owner[id(p)] for p in own if not self.persistent[owner[id(p)]]})
            if ids:
                self.module_groups[m] = ids
        return groups

    def _install_hooks(self) -> None:
        self._module_hooks = []
        watched = {id(p) for g in self.groups if not self.persistent[g.index] for p in g.params}
        self._watched_modules = []
        for mname, m in self.model.named_modules():
            self._module_hooks.append(m.register_forward_pre_hook(self._pre_forward))
            self._module_hooks.append(m.register_forward_hook(self._post_forward))
            if any(p is not None and id(p) in watched for p in m._parameters.values()):
                m._parameters = _WatchedParams(self, mname, m._parameters)
                self._watched_modules.append(m)

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        """Gather ``param`` whenever ``module``'s forward runs (DeepSpeed's function of the same
        name), for a parameter that ``module`` reaches other than by attribute."""
        g = self.group_of.get(id(param))
        if g is None:
            raise ValueError("register_external_parameter: that parameter is not trained by this engine")
        if not self.persistent[g.index]:
            self._registered.setdefault(module, set()).add(g.index)

    # -- forward and backward hooks -----------------------------------------------------------
    def _pre_forward(self, module, inputs):
        if not self._frames and not self._in_backward:
            self._start_pass(self._phase())         # a new forward pass begins at the outermost module
        ids = self.module_groups.get(module, [])
        extra = self._registered.get(module)
        frame = [module, []]
        self._frames.append(frame)
        for i in ids:
            self._fetch(self.groups[i])
        if extra:
            for i in sorted(extra):
                self._fetch(self.groups[i])
                frame[1].append(i)

    def _post_forward(self, module, inputs, output):
        while self._frames:                        # (a forward that raised left frames behind)
            frame = self._frames.pop()
            if frame[0] is module:
                break
        else:
            return output
        ids = [*self.module_groups.get(module, []), *frame[1]]
        if not self._frames and not self._in_backward:
            if torch.is_grad_enabled():
                self._forward_done = True
            if self._following_pass:
                self._following_pass = False
                self._check_pass()
        if not ids:
            return output
        if not self._in_backward:
            for i in ids:
                self._maybe_release(self.groups[i])
        if torch.is_grad_enabled():
            def before_backward():
                self._in_backward = True
                for i in ids:
                    self._fetch(self.groups[i])
            _on_first_output_grad(output, before_backward)
        return output

    def _on_param_read(self, p: nn.Parameter, name: str) -> None:
        g = self.group_of.get(id(p))
        if g is None or g.index in self.full:
            return
        if self._frames:                           # inside some module's forward: gather it there
            self._fetch(g)
            self._frames[-1][1].append(g.index)
        elif self._in_backward:
            self._fetch(g)                         # released again once its gradient is reduced
        elif self._forward_done and torch.is_grad_enabled():
            raise ExternalParameterError(
                f"parameter {name!r} was used outside the model's forward (after forward, before "
                f"backward: in the loss, say). ZeRO stage 3 keeps only a 1/{self.world_size} shard "
                "of it on each rank, and gathers it only while a module's forward runs. Compute "
                "with it inside the model's forward (e.g. the top-level forward: zerolab gathers it "
                "there), or use ZeRO stage 0-2 for this model.")

    # -- gradients -----------------------------------------------------------------------
    def reduce_order(self) -> list[int]:
        """The reverse of the order groups were first gathered in forward: roughly the order
        backward finishes them, and identical on every rank (gathers are checked)."""
        first = list(dict.fromkeys(self._trace))
        return first[::-1]

    def begin_backward(self, boundary: bool = True) -> None:
        super().begin_backward(boundary)
        self._frames.clear()                      # (a forward that raised left frames behind)
        self._in_backward = True
        self._forward_done = False
        self._start_pass("backward")

    def forward_failed(self) -> None:
        """The model's forward raised: forget its open frames, so the next forward starts a pass."""
        self._frames.clear()

    def _after_reduce(self, g: FlatGroup) -> None:
        self._maybe_release(g)                    # its gradient is done: the furniture goes back

    def end_backward(self) -> None:
        super().end_backward()
        # recomputation in backward (torch.utils.checkpoint) may stop a forward early, by an
        # exception inside torch: its module frames never closed
        self._frames.clear()
        self._finish_inflight()
        for g in self.groups:
            self._maybe_release(g)
        self._in_backward = False
        self._trace.clear()

    def publish(self) -> None:
        # the step wrote each shard already (write_params); swapped shards go back to their files
        for i, buf in self._staged.items():
            if self._staged_covered.get(i, buf.numel()) < buf.numel():    # (not the case in a step)
                raise RuntimeError(f"stage 3: the step updated only part of group {i}'s shard")
        writes = [self._param_files.write(i, "param", buf) for i, buf in self._staged.items()]
        for w in writes:
            w.result()
        self._staged.clear()
        for g, shard in zip(self.groups, self.shards):
            if self.persistent[g.index]:          # kept whole: refresh it now
                flat = self.full[g.index]
                self.comm.all_gather(flat, shard.clone(), tag=f"params {g.label}")

    def write_params(self, i: int, start: int, values: torch.Tensor) -> None:
        if i in self._on_nvme:
            # the step writes every element of the shard (tile by tile), so the new file is
            # assembled in memory without reading the old one; publish() writes it
            buf = self._staged.get(i)
            if buf is None:
                buf = self._staged[i] = torch.empty(self.groups[i].shard_numel, dtype=self.dtype)
                self._staged_covered[i] = 0
            buf[start:start + values.numel()].copy_(values)
            self._staged_covered[i] += values.numel()
        else:
            self.shards[i][start:start + values.numel()].copy_(values, non_blocking=True)

    def store_flat(self, g: FlatGroup, flat: torch.Tensor) -> None:
        if g.index in self._on_nvme:
            self._param_files.write(g.index, "param", g.shard_of(flat).to(self.dtype).clone()).result()
        else:
            self.shards[g.index].copy_(g.shard_of(flat))
        if self.persistent[g.index]:
            self.full[g.index].copy_(flat)

    def memory(self) -> dict[str, int]:
        persistent = [self.full[i] for i in self.full if self.persistent[i]]
        on_device = [s for g, s in zip(self.groups, self.shards)
                     if self.param_where == "device" and not self.persistent[g.index]]
        return {"params": tensor_bytes([*on_device, *persistent]) + self._frozen_bytes(),
                "grads": 0 if self.grads_on_host else tensor_bytes(self.grad_shards),
                "optimizer_states": 0,          # the engine adds the masters and optimizer state
                "buffers": self.buffer_bytes()}

    def close(self) -> None:
        if self.closed:
            return
        self._finish_inflight()
        for h in self._module_hooks:
            h.remove()
        self._module_hooks = []
        for m in self._watched_modules:
            m._parameters = dict(m._parameters)
        self._watched_modules = []
        super().close()
        self.full.clear()
        self._live_gathered = 0
        if self._param_files is not None:
            self._param_files.close()


def _tensors(obj, out: list) -> list:
    """Every tensor inside a module's output: a tensor, or tuples, lists, dicts (Hugging Face's
    ModelOutput is one) and dataclasses of them."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, Mapping):
        for o in obj.values():
            _tensors(o, out)
    elif hasattr(obj, "__dataclass_fields__"):
        for k in obj.__dataclass_fields__:
            _tensors(getattr(obj, k, None), out)
    return out


def _on_first_output_grad(output, fn) -> None:
    """Run ``fn`` once, when the first gradient reaches any of ``output``'s tensors: before the
    module's own backward. A hook on the tensor (not a wrapper around it) leaves the output
    untouched, so a caller may still modify it in place (``ReLU(inplace=True)``, ``out += x``)."""
    tensors = [t for t in _tensors(output, []) if t.requires_grad and t.grad_fn is not None]
    if not tensors:
        return
    fired = [False]

    def hook(grad):
        if not fired[0]:
            fired[0] = True
            fn()

    for t in tensors:
        t.register_hook(hook)
