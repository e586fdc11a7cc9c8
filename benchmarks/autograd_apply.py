"""What one call of a custom autograd function costs, in the two forms torch accepts.

Stage 3 passes every module's inputs and outputs through an identity function
(``zerolab/zero/stage3/module_io.py``) and computes each ``nn.Linear`` through its own function
(``linear.py``): about 20 calls a step on ResMLP. With a ``setup_context`` staticmethod, torch's
``Function.apply`` binds the arguments with ``inspect.signature`` on every call; with ``ctx`` as the
forward's first argument it does not. This times ``apply`` on a (32, 284) tensor both ways, and
zerolab's own ``_Same`` beside them.

    python benchmarks/autograd_apply.py [--calls 20000]
"""
from __future__ import annotations

import argparse
import statistics
import timeit

import torch

from zerolab.zero.stage3.module_io import _Same


class WithSetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.detach()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


class WithCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        return grad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    x = torch.randn(32, 284, requires_grad=True)
    print(f"one apply() on a (32, 284) tensor, median of {a.repeats} x {a.calls} calls, us")
    for name, fn in (("setup_context form", WithSetupContext), ("ctx-in-forward form", WithCtx),
                     ("zerolab's _Same", _Same)):
        us = [timeit.timeit(lambda: fn.apply(x), number=a.calls) / a.calls * 1e6 for _ in range(a.repeats)]
        print(f"  {name:22}{statistics.median(us):7.1f}")


if __name__ == "__main__":
    main()
