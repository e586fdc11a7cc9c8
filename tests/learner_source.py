"""Reading an exercise's answer out of its stored solution notebook, and making wrong answers of it.

The exercise checks are tested both ways from the same source: the solution's own cell (the notebook
is the source; the exercise is generated from it), and that cell with a few lines replaced, so that
each wrong answer differs from the solution by exactly its mistake (a replaced line that is not in the
source fails the test: the edit would be a no-op).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat


def solution_cell(path: Path, defines: str, imports: str = "", *, at_start: bool = False) -> str:
    """``imports`` + the one code cell of ``path`` that defines ``defines`` (e.g. "class MyHooks")."""
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"
             and (c.source.startswith(defines) if at_start else defines in c.source)]
    assert len(cells) == 1, f"the solution notebook has one cell defining {defines.split()[-1]}"
    return imports + cells[0]


def load(text: str, name: str, module: str):
    """Run ``text`` as the learner's cell and return its ``name``. The module name is not importable,
    so cloudpickle sends what it defines to the ranks by value."""
    ns = {"__name__": module}
    exec(compile(text, "<learner>", "exec"), ns)
    return ns[name]


def mutate(text: str, *edits: tuple[str, str]) -> str:
    """``text`` with each ``old`` replaced by ``new``; an ``old`` not in it fails the test."""
    for old, new in edits:
        assert old in text, f"the solution no longer contains {old!r}"
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class LearnerCell:
    """One exercise's answer as a test sees it: the solution's cell that defines ``defines`` (e.g.
    "class MyHooks"), with ``imports`` in front, run as the module ``module``."""
    path: Path
    defines: str
    imports: str = ""
    module: str = "learner_under_test"
    at_start: bool = False

    def source(self) -> str:
        return solution_cell(self.path, self.defines, self.imports, at_start=self.at_start)

    def load(self, text: str):
        """What ``text`` (the solution, or a wrong answer made of it) defines under the answer's name."""
        return load(text, self.defines.split()[-1], self.module)

    def mutate(self, *edits: tuple[str, str]) -> str:
        """The solution with each ``old`` replaced by ``new`` (see :func:`mutate`)."""
        return mutate(self.source(), *edits)
