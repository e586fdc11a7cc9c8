"""Exercise 3c's check (zerolab/course/checks/zero1.py), both ways: the solution passes at 2 and 3 ranks,
bit for bit against DDP; wrong sharded optimizers a learner might write fail, each with a hint
that names the mistake; correct ones written otherwise pass, saying how they compare.

The solution is read from the stored solution notebook (the source), and most wrong answers are
that source with one or two lines changed, so that each differs from the solution by exactly its
mistake (a replaced line that is not in the source fails the test: the edit would be a no-op).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from learner_source import LearnerCell

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.zero1 import check

pytestmark = pytest.mark.usefixtures("closes_check_crews")   # the checks' crews, closed at the end

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "03c_zero1_by_hand.ipynb"


ANSWER = LearnerCell(SOLUTION, "class ShardedOptimizer", "import torch\nimport torch.distributed as dist\n\n",
                     "zero1_learner_under_test")
_source, _load, _mutate = ANSWER.source, ANSWER.load, ANSWER.mutate


AVERAGE = "        flat_grad.mul_(1.0 / self.world_size)"
REDUCE = "        dist.reduce_scatter_single(self.shard.grad, flat_grad)"
GATHER = "        dist.all_gather_single(flat, self.shard.detach())"
MINE = "flat_grad[self.rank * self.shard_numel:(self.rank + 1) * self.shard_numel]"
WHOLE_MODEL = '''
import torch, torch.distributed as dist

class ShardedOptimizer:                 # DDP by hand: every rank steps (and keeps states for) everything
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.optimizer = optimizer_cls(self.params, **kwargs)

    def step(self):
        for p in self.params:
            p.grad.mul_(1.0 / dist.get_world_size())
            dist.all_reduce(p.grad)
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()
'''

WRONG = {
    "forgot to average": (lambda: _mutate((AVERAGE, "")), "forgot to average"),
    "averaged twice": (lambda: _mutate((REDUCE, REDUCE + "\n        self.shard.grad /= self.world_size")),
                       "averaged twice"),
    "divided by 2": (lambda: _mutate((AVERAGE, "        flat_grad.mul_(1.0 / 2)")),
                     "divided by 2, not by N = 3"),
    "stepped with its own gradient": (lambda: _mutate((REDUCE, f"        self.shard.grad = {MINE}.clone()")),
                                      "own rank's gradient"),
    "forgot to all-gather": (lambda: _mutate((GATHER, "        flat[:self.numel] = torch.cat([p.detach()"
                                              ".reshape(-1) for p in self.params])\n        flat[self.rank * "
                                              "self.shard_numel:(self.rank + 1) * self.shard_numel] = "
                                              "self.shard.detach()")), "forgot to all-gather"),
    "lost the tail": (lambda: _mutate(
        ("-(-self.numel // self.world_size) * self.world_size", "self.numel // self.world_size * self.world_size"),
        ("flat[:self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])",
         "flat[:] = torch.cat([p.detach().reshape(-1) for p in self.params])[:self.padded_numel]"),
        ("flat_grad[:self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])",
         "flat_grad[:] = torch.cat([p.grad.reshape(-1) for p in self.params])[:self.padded_numel]"),
        ("                p.copy_(flat[offset:offset + p.numel()].view_as(p))",
         "                k = min(p.numel(), self.padded_numel - offset)\n"
         "                p.view(-1)[:k].copy_(flat[offset:offset + k])")), "lost the tail"),
    "zero_grad does nothing": (lambda: _mutate(("        for p in self.params:\n            p.grad = None",
                                                "        pass")), "zero_grad() must clear"),
    "optimizer rebuilt every step": (lambda: _mutate(
        ("        self.optimizer = optimizer_cls([self.shard], **kwargs)",
         "        self.optimizer = optimizer_cls([self.shard], **kwargs)\n"
         "        self.new = lambda: optimizer_cls([self.shard], **kwargs)"),
        ("        self.optimizer.step()", "        self.optimizer = self.new()\n        self.optimizer.step()")),
        "must carry over"),
    "only lr passed on": (lambda: _mutate(("optimizer_cls([self.shard], **kwargs)",
                                           "optimizer_cls([self.shard], lr=kwargs['lr'])")), "keyword argument"),
    "whole model on every rank": (lambda: WHOLE_MODEL, "states for all parameters"),
    "parameters all-reduced": (lambda: _mutate(
        (REDUCE, "        full = flat_grad.clone()\n        dist.all_reduce(full)\n"
                 f"        self.shard.grad = {MINE.replace('flat_grad', 'full')}.clone()"),
        (GATHER, "        flat.zero_()\n        flat[self.rank * self.shard_numel:(self.rank + 1) * self.shard_numel]"
                 " = self.shard.detach()\n        dist.all_reduce(flat)")), "sent twice"),
}


# A shard that is a view of a whole buffer keeps the buffer alive: its size says 1/N, the memory
# behind it says N/N. The check weighs storages, so every view fails, whichever tensor it is.
VIEWS = {
    "the master shard": (lambda: _mutate(("flat[start:start + self.shard_numel].clone())",
                                          "flat[start:start + self.shard_numel])")),
                         "the tensor self.optimizer steps has 2,787 elements"),
    "the gradient shard": (lambda: _mutate(("        self.shard.grad = torch.empty(self.shard_numel)\n" + REDUCE,
                                            "        dist.all_reduce(flat_grad)\n        self.shard.grad = " + MINE)),
                           "the gradient it steps with (.grad) has 2,787 elements"),   # hint: reduce-scatter
    "the states": (lambda: _mutate(("        self.optimizer = optimizer_cls([self.shard], **kwargs)",
                                    "        self.optimizer = optimizer_cls([self.shard], **kwargs)\n"
                                    "        if optimizer_cls is torch.optim.AdamW:    # states made ahead, as slices\n"
                                    "            m, v = torch.zeros(self.padded_numel), torch.zeros(self.padded_numel)\n"
                                    "            self.optimizer.state[self.shard] = {'step': torch.tensor(0.0),\n"
                                    "                'exp_avg': m[start:start + self.shard_numel],\n"
                                    "                'exp_avg_sq': v[start:start + self.shard_numel]}")),
                   "a state is a view of a whole buffer"),
}


# That the solution passes is not run here: nbval runs solutions/03c_zero1_by_hand.ipynb (its cell
# `check(ShardedOptimizer)`) in each of run_tests.sh's three passes and compares its output with the stored
# one, which has "PASSED", "bit for bit equal to DDP" (x2), "bit for bit (x 1/3 before the sum: DDP's
# reducer)" (x2), "1 reduce_scatter + 1 all_gather = 22,296 bytes", "AdamW states per rank, N=3: 14,868
# bytes".


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_optimizer_fails_naming_the_mistake(name):
    make, expected = WRONG[name]
    with pytest.raises(ExerciseCheckFailed) as err:
        check(_load(make()))
    assert expected in err.value.message, f"{name}: {err.value.message}"
    assert "hint:" in err.value.message


@pytest.mark.timeout(120)
def test_dividing_instead_of_multiplying_matches_torchs_allreduce_hook(capsys):
    check(_load(_mutate((AVERAGE, "        flat_grad /= self.world_size"))))
    out = capsys.readouterr().out
    assert out.count("bit for bit (/ 3 before the sum: allreduce_hook, DeepSpeed)") == 2


@pytest.mark.timeout(120)
def test_another_order_of_the_sums_passes_within_the_stated_tolerance(capsys):
    per_tensor = ("        grads = []\n        for p in self.params:\n            g = p.grad / self.world_size\n"
                  "            dist.all_reduce(g)\n            grads.append(g.reshape(-1))\n"
                  "        full = torch.zeros(self.padded_numel)\n        full[:self.numel] = torch.cat(grads)\n"
                  f"        self.shard.grad = {MINE.replace('flat_grad', 'full')}.clone()")
    check(_load(_mutate((AVERAGE, ""), ("        self.shard.grad = torch.empty(self.shard_numel)\n" + REDUCE,
                                                 per_tensor))))
    out = capsys.readouterr().out
    assert out.count("bit for bit equal to DDP") == 2                       # order does not matter at 2
    assert out.count("NOT bit for bit") == 2 and "another order" in out
    assert "6 all_reduce + 1 all_gather" in out


@pytest.mark.timeout(60)
def test_the_exercise_as_shipped_says_it_is_not_written():
    text = _source().replace("        self.numel = sum(", "        raise NotImplementedError\n        self.numel = sum(")
    with pytest.raises(ExerciseCheckFailed, match="not written yet"):
        check(_load(text))


@pytest.mark.timeout(120)
def test_torchs_older_names_are_counted_once(capsys):
    # all_gather_into_tensor / reduce_scatter_tensor (torch < 2.13) call the new names inside
    check(_load(_mutate(("dist.reduce_scatter_single(", "dist.reduce_scatter_tensor("),
                        ("dist.all_gather_single(", "dist.all_gather_into_tensor("))))
    out = capsys.readouterr().out
    assert "N=2: 1 reduce_scatter + 1 all_gather = 22,296 bytes" in out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(VIEWS))
def test_a_shard_that_is_a_view_of_the_whole_buffer_fails(name):
    # these trained bit for bit and passed while the check weighed state_dict() tensors by their size
    make, expected = VIEWS[name]
    with pytest.raises(ExerciseCheckFailed) as err:
        check(_load(make()))
    assert expected in err.value.message and "view of a whole buffer" in err.value.message, err.value.message
    assert "hint:" in err.value.message


# A whole-size tensor kept anywhere in the learner's object (an attribute, a dict or a list of
# them), outside the optimizer's states and param groups, is memory every rank holds that ZeRO-1
# removes. The check weighs everything the object keeps reachable beyond the model's own parameters
# and gradients, and names where it is kept.
OPTIMIZER = "        self.optimizer = optimizer_cls([self.shard], **kwargs)"
KEPT = {
    "a full copy kept as an attribute": (lambda: _mutate(
        (OPTIMIZER, OPTIMIZER + "\n        self.full_copy = flat                    # the whole fp32 buffer, kept")),
        ["self.full_copy: 22,296 bytes (the whole model's size)"]),
    "a full gradient buffer kept in a dict": (lambda: _mutate(
        (OPTIMIZER, OPTIMIZER + "\n        self.buffers = {'flat_grad': torch.zeros(self.padded_numel)}"),
        ("        flat_grad = torch.zeros(self.padded_numel)", "        flat_grad = self.buffers['flat_grad'].zero_()")),
        ["self.buffers['flat_grad']: 22,296 bytes (the whole model's size)"]),
    "full-size moments kept in a list": (lambda: _mutate(
        (OPTIMIZER, OPTIMIZER + "\n        self.moments = [torch.zeros(self.padded_numel), "
                                "torch.zeros(self.padded_numel)]   # m and v, whole")),
        ["self.moments[0]: 22,296 bytes (the whole model's size)",
         "self.moments[1]: 22,296 bytes (the whole model's size)"]),
    "a full copy kept in a closure": (lambda: _mutate(
        (OPTIMIZER, OPTIMIZER + "\n        self.restore = lambda: flat.clone()   # keeps flat alive")),
        ["self.restore (closure variable 'flat'): 22,296 bytes (the whole model's size)"]),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(KEPT))
def test_a_whole_size_tensor_kept_as_an_attribute_fails(name):
    # these trained bit for bit and passed while the check weighed only what self.optimizer held
    make, expected = KEPT[name]
    with pytest.raises(ExerciseCheckFailed) as err:
        check(_load(make()))
    message = err.value.message
    assert message.startswith("N=2, rank 0: beyond the model's own parameters and gradients"), message
    assert all(line in message for line in expected), message
    assert "self.shard" not in message and "hint:" in message, message   # only what is more than a shard


@pytest.mark.timeout(120)
def test_a_whole_size_tensor_kept_fails_in_the_editions_language():
    from zerolab import i18n
    with i18n.using("zh"), pytest.raises(ExerciseCheckFailed) as err:
        check(_load(KEPT["a full copy kept as an attribute"][0]()))
    assert "self.full_copy：22,296 字节（整个模型的大小）" in err.value.message, err.value.message
    assert "提示：" in err.value.message


def test_kept_tensors_walks_attributes_containers_and_the_optimizer():
    import torch
    from zerolab.course.checks.zero1 import kept_bytes, kept_tensors

    model = torch.nn.Linear(4, 3)
    model(torch.ones(2, 4)).sum().backward()

    class Plain:
        pass

    class Learner:
        pass

    me = Learner()
    me.params = list(model.parameters())                        # the model's own: not counted
    me.shard = torch.nn.Parameter(torch.zeros(5))
    me.shard.grad = torch.zeros(5)
    me.optimizer = torch.optim.SGD([me.shard], lr=0.1, momentum=0.9)
    me.optimizer.step()                                          # a momentum buffer of 5
    whole = torch.zeros(100)
    me.view = whole[:10]                                         # a view: weighs its whole storage
    me.again = (whole[10:20],)                                   # the same storage: counted once
    me.nested = {"a": [Plain()]}
    me.nested["a"][0].deep = torch.zeros(7)                      # self.nested['a'][0].deep: depth 4
    me.nested["a"][0].deeper = Plain()
    me.nested["a"][0].deeper.t = torch.zeros(1000)               # depth 5: beyond DEPTH
    me.fn = lambda: torch.zeros(1000)                            # a function's globals are not entered
    paths = [p for p, _ in kept_tensors(me)]
    assert "self.nested['a'][0].deep" in paths and "self.shard.grad" in paths
    assert "self.optimizer.state[self.shard]['momentum_buffer']" in paths
    assert not any("deeper" in p for p in paths)
    kept = kept_bytes(me, model)
    assert kept["storages"][0] == ("self.view", 400)
    assert kept["total"] == 400 + 4 * (5 + 5 + 5 + 7), kept


def test_kept_tensors_sees_closures_defaults_partials_slots_and_numpy():
    import functools

    import numpy as np
    import torch
    from zerolab.course.checks.zero1 import kept_bytes

    model = torch.nn.Linear(4, 3)

    class Slotted:
        __slots__ = ("t",)

    class Learner:
        def __init__(self):
            full = torch.zeros(60)
            self.restore = lambda: full.clone()                  # a closure keeps full alive
            self.method = self.restore_all                       # a bound method: its self is seen
            self.default = lambda x=torch.zeros(30): x           # a default argument
            self.part = functools.partial(torch.add, torch.zeros(20))
            self.slotted = Slotted()
            self.slotted.t = torch.zeros(10)
            self.array = np.zeros(40, dtype=np.float32)[5:]      # a view: weighs its root array
            self.numpy_of = torch.zeros(25).numpy()              # weighs the tensor it views

        def restore_all(self):
            pass

    kept = dict(kept_bytes(Learner(), model)["storages"])
    assert kept == {"self.restore (closure variable 'full')": 240, "self.default (default 'x')": 120,
                    "self.part (argument 0)": 80, "self.slotted.t": 40, "self.array": 160,
                    "self.numpy_of": 100}, kept
