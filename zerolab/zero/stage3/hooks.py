"""When stage 3 gathers: the hooks that call ``unshard`` and ``reshard`` (``gather.py``).

    module forward pre-hook     unshard the module's units (a new forward pass begins at the
                                outermost module: the pass's trace starts there)
    module forward hook         reshard them; hook the module's outputs so that the first
                                gradient reaching them unshards the units again, before the
                                module's own backward runs
    watched parameter dicts     a released parameter read by attribute is gathered on the spot

Parameters used outside their own module's forward. ``nn.MultiheadAttention`` reads
``self.out_proj.weight`` without calling ``out_proj``; a model may compute
``F.linear(h, self.embed.weight)`` in its own forward. Every module's parameter dict is
watched: reading a released parameter while some module's forward runs gathers it on the
spot, ties it to that module (released after its forward, gathered again before its backward),
and it is otherwise treated like the module's own. Reading one between the end of forward and
``backward`` (e.g. in the loss) is an :class:`ExternalParameterError` naming the parameter.
A parameter reached some other way (kept in a list, say) can be tied to a module with
``engine.register_external_parameter`` (DeepSpeed's function of the same name).

zerolab's own hook (exercise 8c plugs the learner's class in there): inside
``with use_module_hooks(MyHooks):`` an engine initialized in the block installs ``MyHooks(params)``
instead of :class:`ModuleHooks` (the same interface: ``remove``, ``pre_backward``,
``post_backward``, ``forward_failed``, ``register_external_parameter``, ``fetch_ids`` (the trace
asks it what a module's fetch gathers), ``on_param_read``).
It acts in the process that enters it (on a crew: inside the function each rank runs).
:func:`watch_params` and :func:`on_first_output_grad` are the plumbing such a class may use.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from ...i18n import catalogue
from .lifecycle import ModuleEvent

T = catalogue("engine")        # the messages in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["ModuleHooks", "ExternalParameterError", "use_module_hooks", "module_hooks_class",
           "watch_params", "unwatch_params", "on_first_output_grad", "on_inputs_grad"]


class ExternalParameterError(RuntimeError):
    """A stage-3 parameter was used where zerolab cannot gather it (outside any forward)."""


class _WatchedParams(dict):
    """A module's ``_parameters`` that tells stage 3 when a parameter is read by attribute
    (``module.weight``), so a released one can be gathered first. Iteration (``parameters()``,
    ``state_dict()``) does not go through ``__getitem__`` and triggers nothing."""

    def __init__(self, hooks: "ModuleHooks", module_name: str, params: dict):
        super().__init__(params)
        self._hooks = hooks
        self._module_name = module_name

    def __getitem__(self, name):
        p = dict.__getitem__(self, name)
        if p is not None:
            self._hooks.on_param_read(p, f"{self._module_name}.{name}" if self._module_name else name)
        return p

    def __reduce__(self):                    # a copied or pickled model gets a plain dict
        return (dict, (dict(self),))


def watch_params(hooks, params) -> list[nn.Module]:
    """Replace the parameter dict of every module holding a gathered (not persistent) parameter
    of ``params`` (a GatheredParams) by one that calls ``hooks.on_param_read(p, name)`` whenever
    a parameter is read by attribute. Returns the modules changed (for :func:`unwatch_params`)."""
    watched = {id(p) for g in params.groups if not params.persistent[g.index] for p in g.params}
    out = []
    for mname, m in params.model.named_modules():
        if any(p is not None and id(p) in watched for p in m._parameters.values()):
            m._parameters = _WatchedParams(hooks, mname, m._parameters)
            out.append(m)
    return out


def unwatch_params(modules: list[nn.Module]) -> None:
    """Give the modules :func:`watch_params` changed plain parameter dicts again."""
    for m in modules:
        m._parameters = dict(m._parameters)


_HOOKS_CLASS: list[type] = []          # classes entered by use_module_hooks, innermost last


def module_hooks_class() -> type:
    """The class stage 3 installs on the model now: :class:`ModuleHooks`, unless a
    :func:`use_module_hooks` block replaced it."""
    return _HOOKS_CLASS[-1] if _HOOKS_CLASS else ModuleHooks


@contextlib.contextmanager
def use_module_hooks(cls: type) -> Iterator[None]:
    """Inside the block, stage-3 engines initialized here install ``cls(params)`` as their module
    hooks (zerolab's own seam, for exercise 8c). ``cls`` needs ModuleHooks's interface."""
    missing = [m for m in ("remove", "pre_backward", "post_backward", "forward_failed",
                           "register_external_parameter", "fetch_ids") if not callable(getattr(cls, m, None))]
    if not isinstance(cls, type) or missing:
        raise TypeError(T("use_module_hooks(cls): cls must be a class with the methods {methods}",
                          methods=", ".join(missing)))
    _HOOKS_CLASS.append(cls)
    try:
        yield
    finally:
        _HOOKS_CLASS.remove(cls)


class ModuleHooks:
    """Installed on every module of the model for a :class:`~zerolab.zero.stage3.gather.GatheredParams`."""

    def __init__(self, params):
        self.params = params
        self.frames: list[list] = []               # modules whose forward is running: [module, extra ids]
        self.forward_done = False                  # a forward ran (with grad) since the last backward
        self._registered: dict[nn.Module, set[int]] = {}   # register_external_parameter
        self._handles = []
        for m in params.model.modules():
            self._handles.append(m.register_forward_pre_hook(self._pre_forward))
            self._handles.append(m.register_forward_hook(self._post_forward))
        self._watched_modules = watch_params(self, params)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        unwatch_params(self._watched_modules)
        self._watched_modules = []

    def register_external_parameter(self, module: nn.Module, param: nn.Parameter) -> None:
        """Gather ``param`` whenever ``module``'s forward runs, for a parameter that ``module``
        reaches other than by attribute."""
        g = self.params.unit_of.get(id(param))
        if g is None:
            raise ValueError(T("register_external_parameter: that parameter is not trained by this engine"))
        if not self.params.persistent[g.index]:
            self._registered.setdefault(module, set()).add(g.index)

    def fetch_ids(self, module: nn.Module) -> list[int]:
        """The groups a fetch of ``module`` gathers now: its own and those tied to it."""
        return [*self.params.module_groups.get(module, []), *sorted(self._registered.get(module, ()))]

    # -- the step's events ----------------------------------------------------------------------
    def pre_backward(self) -> None:
        self.frames.clear()                        # (a forward that raised left frames behind)
        self.forward_done = False

    def post_backward(self) -> None:
        # recomputation in backward (torch.utils.checkpoint) may stop a forward early, by an
        # exception inside torch: its module frames never closed
        self.frames.clear()

    def forward_failed(self) -> None:
        self.frames.clear()

    # -- forward and backward hooks -----------------------------------------------------------
    def _pre_forward(self, module, inputs):
        ps = self.params
        if not self.frames and not ps.in_backward:
            ps.start_forward_pass()                # a new forward pass begins at the outermost module
        ps.module_event(module, ModuleEvent.PRE_FORWARD)
        extra = sorted(self._registered.get(module, ()))
        frame = [module, list(extra)]
        self.frames.append(frame)
        ids = [*ps.module_groups.get(module, []), *extra]
        if ids:
            ps.unshard_unit(ids, module)           # its own and its tied groups: one all-gather
            if torch.is_grad_enabled():
                # after the module's backward (the gradients of its inputs are in): release
                def after_backward():
                    ps.module_event(module, ModuleEvent.POST_BACKWARD)
                    ps.after_backward([*ps.module_groups.get(module, []), *frame[1]])
                on_inputs_grad(inputs, after_backward)
        else:
            ps.top_up(module)                      # DeepSpeed prefetches at every module's fetch

    def _post_forward(self, module, inputs, output):
        ps = self.params
        while self.frames:                         # (a forward that raised left frames behind)
            frame = self.frames.pop()
            if frame[0] is module:
                break
        else:
            return output
        ps.module_event(module, ModuleEvent.POST_FORWARD)
        ids = [*ps.module_groups.get(module, []), *frame[1]]
        outermost = not self.frames and not ps.in_backward
        if outermost:
            if torch.is_grad_enabled():
                self.forward_done = True
            ps.check_forward_pass()
        if not ps.in_backward:
            for i in ids:
                ps.after_forward(ps.groups[i])
        if outermost:
            ps.end_forward_pass()
        if torch.is_grad_enabled():
            def before_backward():
                ps.begin_backward()
                ps.module_event(module, ModuleEvent.PRE_BACKWARD)
                ps.unshard_unit(ids, module)       # (no parameters: still an event of the trace)
            on_first_output_grad(output, before_backward)
        return output

    def on_param_read(self, p: nn.Parameter, name: str) -> None:
        ps = self.params
        g = ps.unit_of.get(id(p))
        if g is None or ps.persistent[g.index]:
            return
        if self.frames:                            # inside some module's forward: gather it there
            if g.index not in ps.full:
                # and tie it to that module for good (DeepSpeed's ZeROOrderedDict registers it as
                # the module's external parameter): from the next forward on, it is gathered with
                # the module's own groups, in the same all-gather
                module, extra = self.frames[-1]
                self._registered.setdefault(module, set()).add(g.index)
                ps.unshard(g)
                extra.append(g.index)
        elif ps.in_backward:
            if g.index not in ps.full:
                ps.unshard(g)                      # released again once its gradient is reduced
        elif self.forward_done and torch.is_grad_enabled():
            # (an error even when the reuse distance kept it gathered: the same rule every step)
            raise ExternalParameterError(T(
                "parameter {name} was used outside the model's forward (after forward, before "
                "backward: in the loss, say). ZeRO stage 3 keeps only a 1/{n} "
                "shard of it on each rank, and gathers it only while a module's forward runs. "
                "Compute with it inside the model's forward (e.g. the top-level forward: zerolab "
                "gathers it there), or use ZeRO stage 0-2 for this model.", name=repr(name), n=ps.world_size))


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


def on_first_output_grad(output, fn) -> None:
    """Run ``fn`` once, when the first gradient reaches any of ``output``'s tensors: before the
    module's own backward. A hook on the tensor (not a wrapper around it) leaves the output
    untouched, so a caller may still modify it in place (``ReLU(inplace=True)``, ``out += x``).
    When several modules return the same tensor (a root returning its head's output), the
    outermost module's ``fn`` runs first, as DeepSpeed's nested output wrappers run."""
    tensors = [t for t in _tensors(output, []) if t.requires_grad and t.grad_fn is not None]
    if not tensors:
        return
    fired = [False]

    def once():
        if not fired[0]:
            fired[0] = True
            fn()

    for t in tensors:
        calls = getattr(t, "_zerolab_before_backward", None)
        if calls is None:
            calls = t._zerolab_before_backward = []
            t.register_hook(_run_outermost_first(calls))
        calls.append(once)


def _run_outermost_first(calls: list):
    def hook(grad):
        for c in reversed(calls):                  # registered innermost first
            c()
    return hook


def on_inputs_grad(inputs, fn) -> None:
    """Run ``fn`` once, when the gradients of all of ``inputs``' tensors that need one are
    computed: after the module's backward (DeepSpeed's post-backward module hook counts the
    module's inputs that require grad the same way). Leaf tensors are skipped (a hook on them
    would outlive the step); with none left, ``fn`` never runs."""
    tensors = list({id(t): t for t in _tensors(inputs, [])
                    if t.requires_grad and not t.is_leaf}.values())
    if not tensors:
        return
    left = [len(tensors)]

    def hook(grad):
        left[0] -= 1
        if left[0] == 0:
            fn()

    for t in tensors:
        t.register_hook(hook)


_on_first_output_grad = on_first_output_grad     # (the name it had)
