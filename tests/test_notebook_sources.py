"""Every stored notebook is what its text source in ``book/`` makes (``book/README.md``).

``book/notebooks/X.py`` makes ``notebooks/X.ipynb``, ``book/solutions/X.py`` makes
``solutions/X.ipynb`` (``tools/build_book.py``). Nothing is executed here: each source is read and
compared cell by cell with its stored notebook (type, source, id, tags). jupytext reads each source
to the same cells. A cell inserted in the middle of a chapter (on a copy) changes no other cell's id
and no Chinese entry, and the copy builds.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402
import nbtext  # noqa: E402

SOURCES = build_book.sources()
IDS = [f"{s.parent.name}/{s.stem}" for s in SOURCES]


def test_every_stored_notebook_has_a_source():
    made = {build_book.notebook_of(s) for s in SOURCES}
    stored = {p for d in build_book.FOLDERS for p in (ROOT / d).glob("*.ipynb")}
    assert not stored - made, f"stored notebooks no source makes: {sorted(map(build_book.rel, stored - made))}"
    assert not made - stored, f"sources whose notebook is not stored: {sorted(map(build_book.rel, made - stored))}"


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_stored_notebook_is_its_source(src):
    lines = build_book.out_of_step(src)
    assert not lines, "\n".join(lines) + f"\nrun `python tools/build_book.py {src.stem} --execute`"


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_stored_notebook_is_executed(src):
    """A rewritten notebook has no outputs until it is run; nbval would then compare nothing."""
    assert not build_book.unexecuted(build_book.notebook_of(src)), f"{src.stem}: code cells that were never run"


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_every_cell_has_an_id_of_its_own_and_the_source_reads_back(src):
    cells = build_book.cells(src)
    ids = [c.id for c in cells]
    assert all(ids) and len(set(ids)) == len(ids), f"{src.stem}: missing or repeated ids"
    assert nbtext.read_source(nbtext.write_source(cells)) == cells


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_each_source_is_python(src):
    """The cells' code is code a linter or an editor reads (no magics, nothing in strings)."""
    compile(src.read_text(encoding="utf-8"), str(src), "exec")


def test_jupytext_reads_each_source_to_the_same_cells():
    jupytext = pytest.importorskip("jupytext")
    for src in SOURCES:
        nb = jupytext.read(src, fmt="py:percent")
        theirs = [(c.cell_type, c.source, c.metadata.get("id"), list(c.metadata.get("tags", []))) for c in nb.cells]
        assert theirs == [c.signature() for c in build_book.cells(src)], f"jupytext reads {src.stem} differently"


def test_a_jupytext_header_is_not_a_cell():
    text = '# ---\n# jupyter:\n#   kernelspec:\n#     name: python3\n# ---\n\n# %% id="a"\nx = 1\n'
    assert [c.signature() for c in nbtext.read_source(text)] == [("code", "x = 1", "a", [])]


def test_the_format_refuses_what_it_cannot_read_back():
    with pytest.raises(nbtext.FormatError, match="before the first cell"):
        nbtext.read_source("import torch\n# %% id=\"a\"\nx = 1\n")
    with pytest.raises(nbtext.FormatError, match="not a comment"):
        nbtext.read_source('# %% [markdown] id="a"\n# text\nnot a comment\n')
    with pytest.raises(nbtext.FormatError, match="unknown cell metadata"):
        nbtext.read_source('# %% id="a" name="x"\n')
    with pytest.raises(nbtext.FormatError, match="not key="):
        nbtext.read_source('# %% id="a" slideshow={"x": 1}\n')


def _copy(tmp_path: Path, src: Path) -> tuple[Path, Path]:
    """A copy of ``src``, its Chinese, its stored notebook (and exercise) and their zh, under ``tmp_path``."""
    book = tmp_path / "book" / src.parent.name
    (book / "zh").mkdir(parents=True)
    copy = book / src.name
    shutil.copy(src, copy)
    shutil.copy(build_book.zh_source_of(src), build_book.zh_source_of(copy))
    for path in build_book.english_paths(src):
        for p in (path, build_book.zh_path(path)):
            target = tmp_path / p.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, target)
    return copy, tmp_path


def test_a_cell_inserted_in_the_middle_touches_no_other_cell(tmp_path):
    """Issue 35's "done when": a chapter edited as text, one cell inserted in the middle, leaves every
    other cell's id and its Chinese entry as they were; the build keeps the stored outputs (a markdown
    cell) and the Chinese edition names only the new cell."""
    src = ROOT / "book" / "notebooks" / "03_three_stages.py"
    copy, root = _copy(tmp_path, src)
    before = build_book.cells(copy)
    table_before = build_book.translation(copy)
    middle = len(before) // 2
    text = copy.read_text(encoding="utf-8")
    anchor = nbtext.write_source([before[middle]]).split("\n")[0]          # the middle cell's header
    assert text.count(anchor) == 1
    copy.write_text(text.replace(anchor, "# %% [markdown]\n# A new paragraph, written as text.\n\n" + anchor),
                    encoding="utf-8")

    nb_path = build_book.notebook_of(copy, root)
    outputs_before = [c.outputs for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code"]
    assert build_book.write([copy], root=root) == [], "a markdown cell inserted: nothing should need to run"
    after = build_book.cells(copy)
    new = after[middle]
    assert new.id and new.id not in {c.id for c in before} and new.source == "A new paragraph, written as text."
    assert [c.signature() for c in after[:middle] + after[middle + 1:]] == [c.signature() for c in before]
    assert copy.read_text(encoding="utf-8").count(f'id="{new.id}"') == 1, "the new id is written into the source"

    stored = nbformat.read(nb_path, as_version=4)
    assert build_book.signature(stored) == build_book.signature(build_book.build(copy))
    assert [c.outputs for c in stored.cells if c.cell_type == "code"] == outputs_before

    assert build_book.translation(copy) == table_before, "no Chinese entry is touched"
    problems = build_book.zh_problems(copy)
    assert len(problems) == 1 and new.id in problems[0] and "no Chinese" in problems[0], problems
    build_book.write_zh(copy, root=root)
    zh = nbformat.read(build_book.zh_path(nb_path), as_version=4)
    assert [c.id for c in zh.cells] == [c.id for c in after]
    assert zh.cells[middle].source == new.source                       # English until translated
    assert zh.cells[middle - 1].source == table_before[before[middle - 1].id][1] or before[middle - 1].kind == "code"


def test_a_code_cell_inserted_rewrites_the_notebook_without_outputs(tmp_path):
    copy, root = _copy(tmp_path, ROOT / "book" / "notebooks" / "03_three_stages.py")
    text = copy.read_text(encoding="utf-8")
    copy.write_text(text + '\n# %% id="ch03-new"\nprint("new")\n', encoding="utf-8")
    assert build_book.write([copy], root=root) == [build_book.notebook_of(copy, root)]
    assert build_book.unexecuted(build_book.notebook_of(copy, root))


def test_the_converter_writes_the_same_sources_again(tmp_path):
    """``tools/convert_to_book.py`` (run again after a script edits the stored notebooks) gives back
    book/'s cells and Chinese from the stored notebooks."""
    import convert_to_book
    convert_to_book.convert(book=tmp_path)
    for src in SOURCES:
        again = tmp_path / src.parent.name / src.name
        assert [c.signature() for c in build_book.cells(again)] == [c.signature() for c in build_book.cells(src)]
        if build_book.zh_source_of(src).exists():
            assert build_book.translation(again) == build_book.translation(src), src.stem
