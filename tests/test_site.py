"""The static site (``python tools/build_site.py``): both editions build from the stored notebooks, with
their stored outputs and nothing executed, and no internal link of the built HTML is broken.

Needs Sphinx and myst-nb (the ``docs`` extra; the ``test`` extra has them too). About 15 s on 2 cores.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_site  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "html"
    warnings = build_site.build(out)
    assert not warnings, "Sphinx warned:\n" + "\n".join(warnings[:30])
    return out


def test_both_editions_have_an_index_listing_every_notebook(site):
    assert (site / "index.html").exists()
    for edition, zh in (("en", ""), ("zh", "zh/")):
        index = (site / edition / "index.html").read_text(encoding="utf-8")
        for folder in build_site.FOLDERS:
            for nb in sorted((ROOT / folder / zh).glob("*.ipynb")):
                page = f"{folder}/{zh}{nb.stem}.html"
                assert (site / edition / page).exists(), f"{edition}: no page for {folder}/{zh}{nb.name}"
                assert f'href="{page}"' in index, f"{edition}/index.html does not list {page}"


def test_pages_carry_the_stored_outputs(site):
    """Chapter 3's printed table and its figure, as stored (nothing re-ran)."""
    page = (site / "en" / "notebooks" / "03_three_stages.html").read_text(encoding="utf-8")
    assert "trainable parameters (the tied embedding counted once)" in page and "<img" in page
    zh = (site / "zh" / "notebooks" / "zh" / "03_three_stages.html").read_text(encoding="utf-8")
    assert "第 3 章" in zh and "trainable parameters (the tied embedding counted once)" in zh


def test_no_internal_link_is_broken(site):
    bad = build_site.broken_links(site)
    assert not bad, f"{len(bad)} broken internal links:\n" + "\n".join(bad[:40])


def test_the_link_checker_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text('<a id="here" href="b.html#there">b</a><a href="#here">a</a>'
                                     '<a href="c.html">c</a><a href="https://example.org/x">x</a>')
    (tmp_path / "b.html").write_text('<p id="elsewhere">b</p>')
    bad = build_site.broken_links(tmp_path)
    assert len(bad) == 2 and any("#there" in b for b in bad) and any("c.html" in b for b in bad), bad
