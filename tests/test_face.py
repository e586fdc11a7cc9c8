"""``import zerolab`` is cheap and lazy, and then hands on what it always did.

(a) The command line's config commands never import torch (``zerolab explain``, ``estimate``,
    ``simulate`` answer in a tenth of a CPU-second instead of two).
(b) Every name of ``zerolab.__all__`` resolves, and the names declared for type checkers (the
    ``TYPE_CHECKING`` block) are exactly the lazy table's: one list cannot drift from the other.
(c) Unknown names still raise AttributeError; a subpackage reached by attribute
    (``zerolab.zero.engine``) resolves as it did when everything was imported at once.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import zerolab

ROOT = Path(__file__).resolve().parent.parent

NO_TORCH = """
import sys
from zerolab.cli import main
for argv in (["explain", "configs/zero2_bf16.json", "--world", "2", "--params", "1e9"],
             ["explain", "configs/zero3_bf16_offload_gpt.json"],
             ["estimate", "--params", "7e9", "--gpus", "8"],
             ["simulate", "--params", "7B", "--gpus", "8"]):
    assert main(argv) in (0, None), argv
import zerolab
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("zerolab.zero"))
print("LOADED", loaded)
"""


def test_the_config_commands_never_import_torch():
    r = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "LOADED []" in r.stdout, r.stdout.splitlines()[-1]


def test_the_lazy_table_and_the_type_checkers_names_are_one_list():
    tree = ast.parse((ROOT / "zerolab" / "__init__.py").read_text())
    block = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and getattr(n.test, "id", "") == "_TYPE_CHECKING")
    declared = {a.asname or a.name for n in block.body for a in n.names}
    assert declared == set(zerolab.__all__)
    for name in zerolab.__all__:
        assert getattr(zerolab, name) is not None
    assert set(zerolab.__all__) <= set(dir(zerolab))


def test_unknown_names_raise_and_subpackages_resolve():
    import pytest
    with pytest.raises(AttributeError, match="no attribute 'initialise'"):
        zerolab.initialise
    with pytest.raises(AttributeError):
        zerolab._private_name
    assert zerolab.zero.engine.initialize is zerolab.initialize
    assert zerolab.course.__name__ == "zerolab.course"
