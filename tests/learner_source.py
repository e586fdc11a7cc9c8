"""Reading an exercise's answer out of its stored solution notebook, and making wrong answers of it.

The exercise checks are tested both ways from the same source: the solution's own cell (the notebook
is the source; the exercise is generated from it), and that cell with a few lines replaced, so that
each wrong answer differs from the solution by exactly its mistake (a replaced line that is not in the
source fails the test: the edit would be a no-op).
"""
from __future__ import annotations

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
