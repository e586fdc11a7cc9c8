"""Every module's tensors in and out, passed through an identity autograd function, as DeepSpeed
0.19.8's stage 3 does (``parameter_offload.py``: ``PostBackwardFunctionModule`` on each positional
input, ``PreBackwardFunctionForModule`` on each output, for every module of the model).

The values do not change; the tensors do. A module called with the same tensor three times,
``attn(h, h, h)``, receives three different tensors: ``nn.MultiheadAttention`` then sees
``query is key`` false and projects q, k and v with three matmuls instead of one, which changes
the last bits of the gradient of ``h`` (and, through it, of what feeds ``h``). zerolab's own
gathering needs none of this (``hooks.py`` hooks tensors instead of wrapping them); it is here so
that stage 3 computes what DeepSpeed's stage 3 computes, bit for bit, on models that ask
"is this the same tensor?".
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["wrap_module_io"]


class _Same(torch.autograd.Function):
    """y = x, a new tensor (DeepSpeed's functions return ``x.detach()`` from their forward)."""

    # The forward takes ``ctx`` itself (no ``setup_context``): with one, torch's ``Function.apply``
    # runs ``inspect.signature`` on every call (14.2 against 3.8 us a call on a 2-core Xeon:
    # benchmarks/autograd_apply.py), and stage 3 makes two calls per module per step.
    @staticmethod
    def forward(ctx, x):
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        return grad


def _through(value):
    """DeepSpeed's ``apply_to_tensors_only``: every tensor in tuples, lists (namedtuples too) and
    dicts (in place), through :class:`_Same`; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return _Same.apply(value)
    if isinstance(value, (tuple, list)):
        items = [_through(v) for v in value]
        if hasattr(value, "_fields"):            # a namedtuple
            return value.__class__(*items)
        return value.__class__(items)
    if isinstance(value, dict):
        for k in value.keys():
            value[k] = _through(value[k])
        return value
    return value


def _inputs(module, args):
    return _through(args)


def _outputs(module, args, output):
    return _through(output)


def wrap_module_io(model: nn.Module) -> list:
    """Install the wrapping on every module of ``model`` (after the hooks already there, as
    DeepSpeed registers it after its gathering hooks). Returns the handles."""
    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(_inputs))
        handles.append(m.register_forward_hook(_outputs))
    return handles
