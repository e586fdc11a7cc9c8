"""``memory_efficient_linear`` (true by default): stage 3's own ``torch.nn.functional.linear``, as
DeepSpeed 0.19.8 installs it (``runtime/zero/linear.py``, set by ``zero.Init`` when a stage-3
engine is built, for the whole process).

DeepSpeed's linear saves its input and weight itself and computes in its own order:

    forward     2-D input with a bias: addmm(bias, x, W^T), as torch's; otherwise x @ W^T, then the
                bias added in place: two roundings where torch's fused op on 3-D inputs has one
    backward    grad_x = g @ W; grad_W = g^T @ x with both flattened to 2-D (torch: (x^T @ g)^T);
                grad_b = g summed over every dimension but the last at once

so on a transformer (3-D activations) its results differ from plain ``F.linear`` in the last
bits, in fp32 too. zerolab reproduces it so that a stage-3 run gives DeepSpeed's numbers, not
torch's: ``nn.Linear`` calls ``F.linear`` by attribute, and ``nn.MultiheadAttention``'s
projections call the module's global ``linear``, so replacing the attribute reaches both.

One difference, named: DeepSpeed leaves the replacement in place for the whole process from
``initialize`` on; zerolab puts it in place only while the model's forward and ``engine.backward``
run (the model's own computation, recomputed forwards included), so that anything else the
process computes, a reference beside the engine, a stage-0 engine after a stage-3 one, keeps
torch's. ``"memory_efficient_linear": false`` keeps torch's throughout.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["Zero3Linear", "zero3_linear", "install", "uninstall", "LinearScope"]

_TORCH_LINEAR = F.linear
_USERS = [0]                      # open engines that asked for it


def _autocast_state(device_type: str):
    try:
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError):
        return False, None


class Zero3Linear(torch.autograd.Function):
    """y = x W^T + b with DeepSpeed's stage-3 arithmetic (module docstring)."""

    # ``ctx`` in the forward, no ``setup_context``: see module_io._Same (inspect.signature per call).
    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.device_type = x.device.type
        ctx.autocast, ctx.autocast_dtype = _autocast_state(ctx.device_type)
        ctx.save_for_backward(x, weight, bias)
        if bias is not None and x.dim() == 2:
            return torch.addmm(bias, x, weight.t())
        y = x.matmul(weight.t())
        if bias is not None:
            y += bias
        return y

    @staticmethod
    def backward(ctx, g):
        x, weight, bias = ctx.saved_tensors
        gx = gw = gb = None
        # (under the forward's autocast state, as DeepSpeed's custom_bwd)
        with torch.autocast(device_type=ctx.device_type, enabled=ctx.autocast, dtype=ctx.autocast_dtype):
            nd = g.dim()
            if ctx.needs_input_grad[0]:
                gx = g.matmul(weight)
            if ctx.needs_input_grad[1]:
                if nd > 2:
                    gw = g.reshape(-1, g.shape[-1]).t().matmul(x.reshape(-1, x.shape[-1]))
                elif nd == 1:
                    gw = g.unsqueeze(-1) * x.unsqueeze(0)
                else:
                    gw = g.t().matmul(x)
            if bias is not None and ctx.needs_input_grad[2]:
                if nd > 2:
                    gb = g.sum(list(range(nd - 1)))
                elif nd == 1:
                    gb = g
                else:
                    gb = g.sum(0)
        return gx, gw, gb


def zero3_linear(input, weight, bias=None):
    """What ``torch.nn.functional.linear`` is while a stage-3 engine with the key on is open."""
    return Zero3Linear.apply(input, weight, bias)


def install() -> None:
    """One more user wants it now (the first puts it in place)."""
    _USERS[0] += 1
    F.linear = zero3_linear


def uninstall() -> None:
    """That user is done; torch's linear is back once none is left."""
    _USERS[0] = max(0, _USERS[0] - 1)
    if _USERS[0] == 0 and F.linear is zero3_linear:
        F.linear = _TORCH_LINEAR


class LinearScope:
    """One stage-3 engine's use of it: in place from the root module's forward pre-hook to its
    forward hook, and from ``engine.backward``'s start to its end (recomputed forwards included).
    ``set`` is idempotent, so a forward or backward that raised cannot unbalance the count."""

    def __init__(self, model, enabled: bool):
        self.enabled, self.on = bool(enabled), False
        self._handles = ([model.register_forward_pre_hook(lambda m, a: self.set(True)),
                          model.register_forward_hook(lambda m, a, o: self.set(False))] if self.enabled else [])

    def set(self, on: bool) -> None:
        if on and self.enabled and not self.on:
            self.on = True
            install()
        elif not on and self.on:
            self.on = False
            uninstall()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.set(False)
