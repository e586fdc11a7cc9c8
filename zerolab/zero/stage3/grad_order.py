"""The order stage 3's gradients fill the reduce buckets in (a collaborator of ``gather.py``).

DeepSpeed fills its buckets in gradient-hook order: the modules of this forward reversed, each
module's own parameters in their order (persistent ones included). That order is per rank: at the
first backward the ranks agree on it once (zerolab's own 16-byte check, with the order checks);
where they differ (a module only some ranks run, with persistent parameters only), every rank uses,
for good, the units gathered in forward, reversed (the same on every rank: gathers are checked).
With one partition per module (``"zerolab": {"module_groups": true}``) the order is the reverse
of the order groups were first gathered in forward.

:class:`GradOrder` is told what forward ran (:meth:`~GradOrder.unit_gathered`,
:meth:`~GradOrder.group_gathered`, and its own forward pre-hooks, installed by
:meth:`~GradOrder.install`), answers :meth:`~GradOrder.order`, and forgets the pass at
:meth:`~GradOrder.end_step`.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

__all__ = ["GradOrder"]


class GradOrder:
    """Stage 3's gradient order, from what this rank's forward ran."""

    def __init__(self, model: nn.Module, unit_of: dict, n_trained: int, per_parameter: bool,
                 in_backward: Callable[[], bool], agree: Callable[[list[int]], bool]):
        """``unit_of``: id(parameter) -> its group; ``in_backward``: is autograd in backward now?;
        ``agree``: do all ranks hold this order? (called once, at the first backward)."""
        self.model, self.n_trained, self.per_parameter = model, n_trained, per_parameter
        self._in_backward, self._agree = in_backward, agree
        # each module's own trained groups, in its parameters' order
        self._own_trained: dict[nn.Module, list[int]] = {}
        for m in model.modules():
            own = [unit_of[id(p)].index for p in m.parameters(recurse=False) if id(p) in unit_of]
            own = [i for i in dict.fromkeys(own) if i < n_trained]
            if own:
                self._own_trained[m] = own
        self._first_gathered: list[int] = []       # groups gathered in forward, in order
        self._forward_modules: list[list[int]] = []    # per module run in forward (with grad), its groups
        self._first_units: list[list[int]] = []        # per unit gathered in forward (with grad), its groups
        self._agreed: bool | None = None          # do the ranks share the gradient hook order?
        self._in_order: set[int] = set()
        self._handles = []

    def install(self) -> None:
        """Note each module's forward (per-parameter partitions only: DeepSpeed's hook order)."""
        if self.per_parameter:
            self._handles = [m.register_forward_pre_hook(self._note_forward_module) for m in self._own_trained]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _note_forward_module(self, module, inputs) -> None:
        """A module with trained parameters runs its forward: note its groups for the gradient
        order (first use only; not in backward's recomputation, not without grad)."""
        if self._in_backward() or not torch.is_grad_enabled():
            return
        new = [i for i in self._own_trained[module] if i not in self._in_order]
        if new:
            self._in_order.update(new)
            self._forward_modules.append(new)

    def unit_gathered(self, ids: list[int]) -> None:
        """A unit is gathered in forward (with grad)."""
        self._first_units.append(ids)

    def group_gathered(self, i: int) -> None:
        """Group ``i``'s all-gather completed in forward (with grad)."""
        self._first_gathered.append(i)

    def order(self) -> list[int]:
        """The trained groups in the order their gradients are expected (see the module's docstring)."""
        if self.per_parameter:
            hook_order = [i for unit in reversed(self._forward_modules) for i in unit]
            if self._agreed is None:
                self._agreed = self._agree(hook_order)
            if self._agreed:
                return hook_order
            seen: set[int] = set()
            units = []
            for unit in self._first_units:
                new = [i for i in unit if i < self.n_trained and i not in seen]
                seen.update(new)
                if new:
                    units.append(new)
            return [i for unit in reversed(units) for i in unit]
        first = [i for i in dict.fromkeys(self._first_gathered) if i < self.n_trained]
        return first[::-1]

    def full_order(self) -> list[int]:
        """:meth:`order`, then every trained group it lacks, in index order."""
        order = self.order()
        seen = set(order)
        return order + [i for i in range(self.n_trained) if i not in seen]

    def end_step(self) -> None:
        """Backward is over: the next forward is noted afresh."""
        self._first_gathered.clear()
        self._forward_modules.clear()
        self._first_units.clear()
        self._in_order.clear()
