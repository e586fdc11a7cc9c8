"""Exercise 8c's check (zerolab/course/checks/hooks3.py), both ways: the solution passes at 2 and 3 ranks,
gathering and releasing exactly as zerolab's ModuleHooks; wrong hooks a learner might write fail,
each with a message that names the mistake. The seam (zerolab.zero.stage3.hooks.use_module_hooks) is tested
too: it swaps the class only inside its block.

The solution is read from the stored solution notebook (the source), and each wrong answer is
that source with a few lines changed, so that it differs from the solution by exactly its mistake
(a replaced line that is not in the source fails the test: the edit would be a no-op).
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from learner_source import LearnerCell

from zerolab.course.checks import ExerciseCheckFailed
from zerolab.course.checks.hooks3 import check_gather_hooks
from zerolab.zero.stage3.hooks import ModuleHooks, module_hooks_class, use_module_hooks

pytestmark = pytest.mark.usefixtures("closes_check_crews")   # the checks' crews, closed at the end

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "08c_gather_hooks.ipynb"
IMPORTS = ("import torch\nfrom zerolab.zero.stage3.hooks import on_first_output_grad, on_inputs_grad, unwatch_params, "
           "watch_params\n\n")


ANSWER = LearnerCell(SOLUTION, "class MyHooks", IMPORTS, "hooks3_learner_under_test", at_start=True)
_source, _load, _mutate = ANSWER.source, ANSWER.load, ANSWER.mutate


RELEASE = "                ps.after_forward(ps.groups[i])   # release, unless the reuse distance keeps it\n"
REGATHER = "            ps.unshard_unit(ids, module)         # (no parameters: still an event of the trace)\n        if"
HOOK_OUTPUT = "            on_first_output_grad(output, before_backward)"
READ = "            ps.unshard(g)\n            extra.append(g.index)"
TIE = "            extra.append(g.index)                # released (and re-gathered) with that module"
REGISTER = "            self.registered.setdefault(module, set()).add(g.index)   # its unit from now on"
UNIT = "            ps.unshard_unit(ids, module)         # its own groups and those tied to it: one call"
KEEP = "                ps.after_forward(ps.groups[i])   # release, unless the reuse distance keeps it"
RECOMPUTE = "        if not ps.in_backward:                   # (backward's recomputation keeps them)"
AFTER_BACKWARD = ("                on_inputs_grad(inputs, lambda: ps.after_backward(ps.module_groups.get(module, []) "
                  "+ frame[1]))")

WRONG = {
    "gathers but never releases": (lambda: _mutate((RELEASE, "                pass\n")),
                                   ["never released: peak 2,928 vs 1,344", "never release"]),
    "releases before backward, never re-gathers": (lambda: _mutate((HOOK_OUTPUT, "            pass")),
                                                   ["the backward raised", "never gather them again"]),
    "re-gathers the wrong module": (lambda: _mutate(
        ("        ids = ps.module_groups.get(module, []) + extra\n",
         "        ids = ps.module_groups.get(module, []) + extra\n        self.last_ids = ids\n"),
        (REGATHER, REGATHER.replace("unshard_unit(ids, module)", "unshard_unit(self.last_ids, module)"))),
        ["re-gather the wrong module", "zerolab's hooks gather 'embed.weight' in backward"]),
    "forgets the external weight": (lambda: _mutate((READ, "            pass")),
                                    ["the forward raised", "forget the external weight", "'attn.out_proj.weight'"]),
    "gathers the external weight but never releases it": (lambda: _mutate((TIE, "            pass")),
                                                          ["'attn.out_proj.weight' (read outside its own module) is not "
                                                           "released", "yours 37 calls"]),
    "ties the external weight to the outermost module": (lambda: _mutate(("module, extra = self.frames[-1]",
                                                                          "module, extra = self.frames[0]")),
                                                         ["is not released when the forward", "self.frames[-1]"]),
    "never ties the external weight for good": (lambda: _mutate((REGISTER, "            pass")),
                                                ["do not tie it", "self.registered", "yours 42 calls"]),
    "re-gathers only the module's own groups": (lambda: _mutate(
        (REGATHER, REGATHER.replace("unshard_unit(ids, module)", "unshard_unit(ps.module_groups.get(module, []), module)"))),
        ["the backward raised", "but not 'mix.weight'"]),
    "gathers a unit group by group": (lambda: _mutate(
        (UNIT, "            for i in ids:\n                ps.unshard(ps.groups[i])")),
        ["one all-gather", "unshard_unit", "yours 51 calls", "in the same order"]),
    "never releases after a module's backward": (lambda: _mutate((AFTER_BACKWARD, "                pass")),
                                                 ["after a module's backward", "after_backward", "peak 1,600 vs 1,344"]),
    "gathers the children's parameters too": (lambda: _mutate(
        ("        ids = ps.module_groups.get(module, []) + frame[1]\n",
         "        ids = sorted({ps.unit_of[id(p)].index for p in module.parameters()}) + frame[1]\n")),
        ["gathered too much at once: peak 2,928 vs 1,344", "module.parameters() recurses"]),
    # the two below pass the first run (reuse distance 0, nothing recomputed) and fail the second
    "ignores the reuse distance": (lambda: _mutate((KEEP, "                ps.reshard(ps.groups[i])")),
                                   ["reuse distance 1,200, MLP checkpointed", "yours 38 calls",
                                    "zerolab's 34 calls", "you release 'embed.weight' when its forward ends",
                                    "never params.reshard"]),
    "releases after the recomputation in backward": (lambda: _mutate((RECOMPUTE, "        if True:")),
                                                     ["MLP checkpointed", "yours 35 calls",
                                                      "in backward before its module's backward",
                                                      "torch.utils.checkpoint"]),
}


# That the solution passes is not run here: nbval runs solutions/08c_gather_hooks.ipynb (its cell
# `check_gather_hooks(MyHooks)`) in each of run_tests.sh's three passes and compares its output with the
# stored one, which has "PASSED", "2 ranks, 3 steps: 38 all-gathers", "peak 1,344 elements", and at reuse distance 1,200 with the MLP checkpointed "34 all-gathers".


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_hooks_fail_with_a_message_naming_the_mistake(name):
    make, words = WRONG[name]
    with pytest.raises(ExerciseCheckFailed) as info:
        check_gather_hooks(_load(make()), worlds=(2,), verbose=False)
    message = info.value.message
    for w in words:
        assert w in message, f"{name}: {w!r} not in the message:\n{message}"


def test_the_exercise_as_shipped_says_what_to_write():
    exercise = ROOT / "exercises" / "08c_gather_hooks.ipynb"
    cells = [c.source for c in nbformat.read(exercise, as_version=4).cells
             if c.cell_type == "code" and c.source.startswith("class MyHooks")]
    assert len(cells) == 1 and cells[0].count("raise NotImplementedError") == 3
    with pytest.raises(NotImplementedError, match="Exercise"):
        check_gather_hooks(_load(IMPORTS + cells[0]), worlds=(2,), verbose=False)


def test_the_seam_swaps_the_class_only_inside_its_block():
    class Mine(ModuleHooks):
        pass
    assert module_hooks_class() is ModuleHooks
    with use_module_hooks(Mine):
        assert module_hooks_class() is Mine
    assert module_hooks_class() is ModuleHooks
    with pytest.raises(TypeError, match="remove"):
        with use_module_hooks(type("Half", (), {"pre_backward": lambda self: None})):
            pass
    assert module_hooks_class() is ModuleHooks
