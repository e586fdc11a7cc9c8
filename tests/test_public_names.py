"""Every ``zerolab.<...>`` name that a learner or a reader meets resolves: in the notebooks
(``notebooks/``, ``solutions/``, ``exercises/``, the Chinese edition's ``zh/`` folders included), the
READMEs and ``docs/``. Read from the notebooks' code cells and the markdown's code (fenced blocks
and inline code spans): ``from zerolab.x import a, b``, ``import zerolab.x [as y]`` and dotted chains
``zerolab.x.y.z``, each imported or looked up as Python would. A name that no longer resolves (a
module moved without its face handing the name on, say) fails, naming the files that use it.
"""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("notebooks", "solutions", "exercises")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
FROM = re.compile(r"^\s*from\s+(zerolab(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)
IMPORT = re.compile(r"^\s*import\s+([^\n#;]+)", re.M)
CHAIN = re.compile(r"(?<![\w./\\-])zerolab(?:\.[A-Za-z_]\w*)+")


def _code_of_markdown(text: str) -> list[str]:
    fenced = FENCE.findall(text)
    rest = FENCE.sub("", text)
    return fenced + INLINE.findall(rest)


def sources() -> dict[str, list[str]]:
    """file (relative to the repository) -> its pieces of code."""
    out: dict[str, list[str]] = {}
    for folder in NOTEBOOK_DIRS:
        for path in sorted((ROOT / folder).rglob("*.ipynb")):
            nb = json.loads(path.read_text(encoding="utf-8"))
            pieces = []
            for cell in nb["cells"]:
                src = "".join(cell["source"])
                pieces += [src] if cell["cell_type"] == "code" else _code_of_markdown(src)
            out[path.relative_to(ROOT).as_posix()] = pieces
    for path in sorted(ROOT.glob("README*.md")) + sorted((ROOT / "docs").rglob("*.md")):
        out[path.relative_to(ROOT).as_posix()] = _code_of_markdown(path.read_text(encoding="utf-8"))
    return out


def names_in(code: str) -> set[str]:
    """The dotted names a piece of code uses: ``zerolab.x`` for an import, ``zerolab.x:a`` for a
    name taken from it, ``zerolab.x.y`` for an attribute chain."""
    names = set()
    for module, body in FROM.findall(code):
        for item in body.strip("()").replace("\\\n", " ").split(","):
            name = item.split("#")[0].strip().split(" as ")[0].strip()
            if name and name != "*":
                names.add(f"{module}:{name}")
    for body in IMPORT.findall(code):
        for item in body.split(","):
            name = item.strip().split(" as ")[0].strip()
            if name.startswith("zerolab"):
                names.add(name)
    code = FROM.sub("", code)
    names |= set(CHAIN.findall(code))
    return names


def resolve(name: str) -> None:
    """Import or look up ``name`` as Python would; raise what Python raises."""
    module, _, taken = name.partition(":")
    parts = module.split(".")
    obj = importlib.import_module(parts[0])
    for k, part in enumerate(parts[1:], start=1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module(".".join(parts[:k + 1]))
    if taken and not hasattr(obj, taken):
        importlib.import_module(f"{module}.{taken}")     # `from pkg import submodule`


def used_names() -> dict[str, set[str]]:
    """name -> the files that use it."""
    where: dict[str, set[str]] = {}
    for path, pieces in sources().items():
        for piece in pieces:
            for name in names_in(piece):
                where.setdefault(name, set()).add(path)
    return where


def unresolved(where: dict[str, set[str]]) -> list[str]:
    problems = []
    for name in sorted(where):
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            files = ", ".join(sorted(where[name])[:4]) + (" ..." if len(where[name]) > 4 else "")
            problems.append(f"{name.replace(':', ' import ')}: {type(exc).__name__}: {exc} (used in {files})")
    return problems


def test_the_names_are_found():
    """The reader finds the names it should (so an empty list cannot pass by accident)."""
    where = used_names()
    for name in ("zerolab.deepspeed", "zerolab.models:TinyLM", "zerolab.comm.ring_all_reduce",
                 "zerolab.course.checks.full_tracebacks", "zerolab.initialize"):
        assert name in where, name
    assert len(where) > 100


def test_every_public_name_resolves():
    problems = unresolved(used_names())
    assert not problems, "names the notebooks, READMEs or docs use that do not resolve:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", ["zerolab.checks.ch05", "zerolab.no_such_module:x", "zerolab.comm.no_such_name"])
def test_a_missing_name_fails(name):
    [problem] = unresolved({name: {"notebooks/xx.ipynb"}})
    assert "notebooks/xx.ipynb" in problem and name.split(":")[0] in problem
