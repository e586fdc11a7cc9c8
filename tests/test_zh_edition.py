"""The Chinese edition (``notebooks/zh``, ``solutions/zh``, ``exercises/zh``) is held in step with the English.

How it is made: ``tools/build_notebooks/zhsource.py``. Here, without executing anything:

* every builder either has its Chinese (``tools/build_notebooks/zh/<builder>.py``) or is listed, with
  the reason, in ``tools/build_notebooks/zh/pending.py`` (printed by :func:`test_pending_is_explicit`);
* a translated builder's every markdown cell has its Chinese, recorded against the English it
  translates: an English cell edited since fails here, naming the cell and the chapter;
* each stored zh notebook has the English notebook's cells (ids, types, tags), identical code and
  identical stored outputs, so that nbval's run of the English covers both (``run_tests.sh`` leaves
  ``zh/`` out of nbval), and its markdown is exactly the recorded Chinese;
* no Chinese markdown cell keeps an English paragraph (code, names, formulas and the English term in
  parentheses beside its Chinese are fine), and its relative links resolve from the zh folder;
* the code of a translated chapter does not read files relative to the notebook's folder (the
  kernel of a zh notebook runs one folder deeper).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "build_notebooks"))
import nbsource  # noqa: E402
import zhsource  # noqa: E402

BUILDERS = nbsource.builder_names()
TRANSLATED = zhsource.translated_builders()
PENDING = zhsource.pending()


def test_pending_is_explicit():
    """Every builder is translated or pending, never both, never neither; the pending list is shown."""
    both = sorted(set(TRANSLATED) & set(PENDING))
    neither = sorted(set(BUILDERS) - set(TRANSLATED) - set(PENDING))
    assert not both, f"translated and listed as pending at once: {both}; take them off zh/pending.py"
    assert not neither, (f"no Chinese and not listed as pending: {neither}; add tools/build_notebooks/zh/<builder>.py "
                         f"or list it in zh/pending.py with the reason")
    # a chapter listed before its builder exists (ch13 in the third pass) is fine; a translation is not
    assert not (set(TRANSLATED) - set(BUILDERS)), f"Chinese for no builder: {sorted(set(TRANSLATED) - set(BUILDERS))}"
    print(f"\nChinese edition: translated {', '.join(TRANSLATED)}; pending:")
    for name, why in sorted(PENDING.items()):
        print(f"  {name}: {why}")


@pytest.mark.parametrize("name", TRANSLATED)
def test_every_markdown_cell_is_translated_from_the_current_english(name):
    lines = zhsource.problems(name, nbsource.load_builder(name).NOTEBOOKS)
    assert not lines, "the Chinese edition is out of step with the English:\n" + "\n".join(lines)


def _pairs(name):
    for path in zhsource.english_paths(nbsource.load_builder(name).NOTEBOOKS):
        yield path, zhsource.zh_path(path)


@pytest.mark.parametrize("name", TRANSLATED)
def test_zh_notebooks_have_the_english_cells_code_and_outputs(name):
    table = zhsource.translation(name)
    for en_path, zh_path in _pairs(name):
        rel = zh_path.relative_to(ROOT)
        assert zh_path.exists(), f"{rel} is missing: run `python tools/build_notebooks/zh_edition.py {name}`"
        en, zh = nbformat.read(en_path, as_version=4), nbformat.read(zh_path, as_version=4)
        assert len(zh.cells) == len(en.cells), f"{rel}: {len(zh.cells)} cells, the English has {len(en.cells)}"
        assert zh.metadata == en.metadata, f"{rel}: notebook metadata differs from {en_path.relative_to(ROOT)}"
        for e, z in zip(en.cells, zh.cells):
            where = f"{rel}: cell {e.get('id')}"
            assert (z.cell_type, z.get("id")) == (e.cell_type, e.get("id")), f"{where}: type or id differs"
            assert z.metadata.get("tags", []) == e.metadata.get("tags", []), f"{where}: tags differ"
            if e.cell_type == "code":
                assert z.source == e.source, f"{where}: the code differs from the English"
                assert z.outputs == e.outputs, f"{where}: the stored outputs differ from the English"
                assert z.execution_count == e.execution_count and z.metadata == e.metadata, f"{where}: run data differs"
            else:
                assert z.source == table[e.id][1], (f"{where}: not the Chinese of zh/{name}.py; run "
                                                    f"`python tools/build_notebooks/zh_edition.py {name}`")


@pytest.mark.parametrize("name", TRANSLATED)
def test_no_english_paragraph_is_left_in_chinese_markdown(name):
    bad = []
    for cid, (_, text) in zhsource.translation(name).items():
        for run in zhsource.english_runs(text):
            bad.append(f"{cid}: {run[:90]!r}")
    assert not bad, f"zh/{name}.py: English left in Chinese cells:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", TRANSLATED)
def test_links_in_chinese_markdown_resolve_from_the_zh_folder(name):
    notebooks = nbsource.load_builder(name).NOTEBOOKS
    english = zhsource.markdown_cells(notebooks)
    table = zhsource.translation(name)
    bad = []
    for cid, (_, rel) in english.items():
        folder = zhsource.zh_path(ROOT / rel).parent
        for target in zhsource.relative_links(table[cid][1]):
            if not (folder / target).exists():
                bad.append(f"{cid}: {target} (from {folder.relative_to(ROOT)}/)")
    assert not bad, f"zh/{name}.py: links that lead nowhere from the Chinese notebooks:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", TRANSLATED)
def test_translated_code_reads_no_file_relative_to_the_notebook(name):
    """A zh notebook's kernel runs in notebooks/zh/: a '../x' path that works from notebooks/ breaks there."""
    bad = []
    for rel, (prefix, cells) in nbsource.load_builder(name).NOTEBOOKS.items():
        for cell in nbsource.build(prefix, cells).cells:
            if cell.cell_type == "code" and re.search(r"""["']\.\./""", cell.source):
                bad.append(f"{cell.id} ({rel})")
    assert not bad, ("code reading files relative to the notebook's folder (breaks in zh/; use a path from "
                     "zerolab's repository, Path(zerolab.__file__).parents[1]): " + ", ".join(bad))


@pytest.mark.parametrize("name", TRANSLATED)
def test_a_builder_writes_its_zh_notebooks_from_its_own_chinese_only(name):
    """Builders may share a cell id (exercise 3b's cells are ex05-NN, like exercise 5's): building one
    must not write the other's Chinese into its notebooks."""
    notebooks = nbsource.load_builder(name).NOTEBOOKS
    sharing = [other for other in TRANSLATED if other != name
               and set(zhsource.translation(other)) & set(zhsource.markdown_cells(notebooks))]
    assert zhsource.builder_of(notebooks) == name, (f"{name}'s notebooks would be written from zh/"
                                                    f"{zhsource.builder_of(notebooks)}.py (ids shared with {sharing})")


def test_every_zh_notebook_is_made_by_a_translated_builder():
    made = {zh for name in TRANSLATED for _, zh in _pairs(name)}
    stored = {p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d / "zh").glob("*.ipynb")}
    stray = sorted(str(p.relative_to(ROOT)) for p in stored - made)
    assert not stray, f"zh notebooks no translated builder makes (delete them): {stray}"


# -- the test's own detectors can fail --------------------------------------------------------------

def test_the_english_detector_finds_a_paragraph_and_spares_terms_code_and_formulas():
    english = "The crew is mid-move, and the workers keep borrowing from one another across the house."
    assert zhsource.english_runs(english)
    assert zhsource.english_runs("搬家搬到一半。" + english)
    fine = ("反向传播（backward）为每个参数张量产生一个梯度；`timeline.summary()` 把一步拆成计算与通信，"
            "$T = n\\alpha + S/\\beta$，见 [`exercises/zh/06_bucket_params.ipynb`](../../exercises/zh/x.ipynb)。"
            "（DeepSpeed's default: each gradient bucket all-reduced）")
    assert zhsource.english_runs(fine) == []


def test_a_stale_translation_is_named_with_its_cell_and_chapter():
    """What the lead sees after editing an English cell without its Chinese (simulated on a copy)."""
    name = TRANSLATED[0]
    notebooks = nbsource.load_builder(name).NOTEBOOKS
    table = {cid: (zhsource.source_hash(text), "中文") for cid, (text, _) in zhsource.markdown_cells(notebooks).items()}
    assert zhsource.problems(name, notebooks, table) == []
    cid = next(iter(table))
    table[cid] = ("0" * zhsource.HASH_CHARS, table[cid][1])
    lines = zhsource.problems(name, notebooks, table)
    assert len(lines) == 1 and cid in lines[0] and name in lines[0] and "--accept" in lines[0], lines
    del table[cid]
    assert any(cid in line and "no Chinese" in line for line in zhsource.problems(name, notebooks, table))


# -- the Chinese README ----------------------------------------------------------------------------------

def _bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_the_chinese_readme_has_the_same_two_commands_and_the_readmes_link_each_other():
    en, zh = ROOT / "README.md", ROOT / "README.zh-CN.md"
    en_blocks = [b.strip() for b in _bash_blocks(en)]
    zh_blocks = [b.strip() for b in _bash_blocks(zh)]
    setup = next(b for b in en_blocks if b.startswith("python3 -m venv .venv && ("))
    assert setup.endswith(" .venv/bin/zerolab course"), setup
    zh_setup = setup + " --lang zh"                                  # it opens the Chinese chapter 0
    assert zh_setup in zh_blocks, "README.zh-CN.md's set-up command is not README.md's (with --lang zh)"
    assert "./run_tests.sh" in zh_blocks, "README.zh-CN.md lacks the test command ./run_tests.sh"
    assert "](README.zh-CN.md)" in en.read_text(encoding="utf-8").split("\n## ")[0], "README.md's top lacks the link"
    assert "](README.md)" in zh.read_text(encoding="utf-8").split("\n## ")[0], "README.zh-CN.md's top lacks the link"
    bad = [t for t in zhsource.relative_links(zh.read_text(encoding="utf-8")) if not (ROOT / t).exists()]
    assert not bad, f"README.zh-CN.md links to missing files: {bad}"
