"""zerolab's layers, as import-linter checks them (``[tool.importlinter]`` in pyproject.toml; the
tables in docs/ARCHITECTURE.md): the contracts are kept today, it fails on an upward import, no
imports go round in a circle (what the layers' ``a : b`` siblings leave to this file), and the
table says what the contract says.

import-linter runs in a subprocess, in the folder that holds the package it checks, so that the
package it reads is that folder's (this checkout's, or a broken copy of it) and not another
installed zerolab; ``--no-cache`` keeps it from writing a cache folder there.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]

# the pyproject.toml in the working folder is import-linter's config; the package is found on
# PYTHONPATH, checked first to be the folder's own
_LINT = (
    "import importlib.util, sys\n"
    "origin = importlib.util.find_spec('zerolab').origin\n"
    "assert origin.startswith(sys.argv[1]), f'import-linter would read {origin}'\n"
    "from importlinter.cli import lint_imports_command\n"
    "lint_imports_command(sys.argv[2:])\n"
)


def lint_imports(folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(folder))
    return subprocess.run([sys.executable, "-c", _LINT, str(folder), "--no-cache"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=240)


def test_the_layers_contract_is_kept():
    run = lint_imports(ROOT)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "3 kept, 0 broken" in out, out


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "zerolab", tmp_path / "zerolab", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    language = tmp_path / "zerolab" / "i18n" / "language.py"
    text = language.read_text(encoding="utf-8")
    head = "from __future__ import annotations\n"
    assert head in text
    # the bottom layer importing the engine, five layers up
    language.write_text(text.replace(head, head + "from ..zero import engine  # upward, on purpose\n", 1),
                        encoding="utf-8")
    run = lint_imports(tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "zerolab's layers (docs/ARCHITECTURE.md) BROKEN" in out, out
    assert "zerolab.i18n is not allowed to import zerolab.zero" in out, out
    assert "- zerolab.i18n.language -> zerolab.zero.engine" in out, out


def test_no_imports_go_round_in_a_circle():
    """The layers allow ``a : b`` siblings to import each other; none may close a circle
    (issue 27 left none), counting imports inside functions, as import-linter does. Checked on
    every floor of folders: inside each package, each of its modules and subpackages is one node
    (``zerolab.zero.stage3`` is one node among ``zerolab.zero``'s modules), the package's own
    ``__init__`` another."""
    grimp = pytest.importorskip("grimp")
    assert importlib.util.find_spec("zerolab").origin.startswith(str(ROOT))
    graph = grimp.build_graph("zerolab", cache_dir=None)
    packages = {".".join(m.split(".")[:k]) for m in graph.modules for k in range(1, m.count(".") + 1)}

    def circles_in(package: str) -> list[list[str]]:
        depth = package.count(".") + 2

        def node(module: str) -> str:
            return ".".join(module.split(".")[:depth])

        edges: dict[str, set[str]] = {}
        for m in graph.modules:
            if not m.startswith(package + "."):
                continue
            for imported in graph.find_modules_directly_imported_by(m):
                if imported.startswith(package + ".") and node(imported) != node(m):
                    edges.setdefault(node(m), set()).add(node(imported))
        circles, state = [], {}            # state: 1 on the current path, 2 done

        def visit(n: str, path: list[str]) -> None:
            state[n] = 1
            for m in sorted(edges.get(n, ())):
                if state.get(m) == 1:
                    circles.append(path[path.index(m):] + [m])
                elif m not in state:
                    visit(m, path + [m])
            state[n] = 2

        for n in sorted(edges):
            if n not in state:
                visit(n, [n])
        return circles

    assert {"zerolab", "zerolab.zero", "zerolab.course"} <= packages
    circles = [c for p in sorted(packages) for c in circles_in(p)]
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_the_architecture_tables_are_the_contracts():
    """docs/ARCHITECTURE.md's layer tables, row for row, are the contracts' lists of layers: the
    packages (section "The layers"), the engine's floors ("Inside zero"), the config chain
    ("Inside config")."""
    tomllib = pytest.importorskip("tomllib")          # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for heading, cid in (("## The layers", "layers"), ("### Inside zero", "zero"), ("### Inside config", "config-chain")):
        assert heading in doc, heading
        section = doc.split(heading, 1)[1].split("\n#", 1)[0]
        rows = [line.split(" | ")[1] for line in section.splitlines()
                if line.startswith("| ") and not line.startswith("| layer |")]
        table = [row.strip().strip("`").replace("\\|", "|") for row in rows]
        assert table == contracts[cid]["layers"], heading
        assert contracts[cid].get("exhaustive"), cid

