"""Every stored notebook is what its builder in ``tools/build_notebooks/`` makes.

The builders are the source of the chapters and solutions (``tools/build_notebooks/nbsource.py``
is the one mechanism they share). Here each builder is imported (nothing is executed) and every
notebook it lists is compared cell by cell with the stored one: type, source, id and tags. Edit
the builder, run it with ``--execute``, commit both.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "build_notebooks"))
import nbsource  # noqa: E402

BUILDERS = nbsource.builder_names()


def test_every_notebook_has_a_builder():
    listed = {rel for name in BUILDERS for rel in nbsource.load_builder(name).NOTEBOOKS}
    stored = {str(p.relative_to(ROOT)) for d in ("notebooks", "solutions") for p in (ROOT / d).glob("*.ipynb")}
    assert stored - listed == set(), f"stored notebooks no builder makes: {sorted(stored - listed)}"
    assert listed - stored == set(), f"built notebooks not stored: {sorted(listed - stored)}"


@pytest.mark.parametrize("name", BUILDERS)
def test_stored_notebooks_match_their_builder(name):
    builder = nbsource.load_builder(name)
    for path, nb in nbsource.built(builder.NOTEBOOKS).items():
        stored = nbformat.read(path, as_version=4)
        want, have = nbsource.signature(nb), nbsource.signature(stored)
        rel = path.relative_to(ROOT)
        assert len(have) == len(want), f"{rel}: {len(have)} cells stored, the builder makes {len(want)}"
        for w, h in zip(want, have):
            assert h == w, (f"{rel}: cell {w[2]} differs from tools/build_notebooks/{name}.py; "
                            f"run `python tools/build_notebooks/{name}.py --execute`")


@pytest.mark.parametrize("name", BUILDERS)
def test_stored_notebooks_are_executed(name):
    """A rewritten notebook has no outputs until it is run; nbval would then compare nothing."""
    for path in nbsource.built(nbsource.load_builder(name).NOTEBOOKS):
        assert not nbsource.unexecuted(path), f"{path.relative_to(ROOT)} has code cells that were never run"
