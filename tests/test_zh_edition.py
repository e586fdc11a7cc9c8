"""The Chinese edition (``notebooks/zh``, ``solutions/zh``, ``exercises/zh``) is held in step with the English.

How it is made: ``book/README.md`` and ``tools/build_book.py``. Here, without executing anything:

* every source in ``book/`` either has its Chinese (``book/<folder>/zh/<name>.md``) or is listed, with
  the reason, in ``book/zh-pending.txt`` (printed by :func:`test_pending_is_explicit`);
* a translated source's every markdown cell has its Chinese, keyed by cell id and recorded against the
  English it translates: an English cell edited since fails here, naming the cell and the notebook;
* each stored zh notebook has the English notebook's cells (ids, types, tags), identical code and
  identical stored outputs, so that nbval's run of the English covers both (``run_tests.sh`` leaves
  ``zh/`` out of nbval), and its markdown is exactly the recorded Chinese;
* no Chinese markdown cell keeps an English paragraph (code, names, formulas and the English term in
  parentheses beside its Chinese are fine), and its relative links resolve from the zh folder;
* the code of a translated notebook does not read files relative to the notebook's folder (the
  kernel of a zh notebook runs one folder deeper).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402
import nbtext  # noqa: E402

SOURCES = build_book.sources()
TRANSLATED = [s for s in SOURCES if build_book.zh_source_of(s).exists()]
IDS = [f"{s.parent.name}/{s.stem}" for s in TRANSLATED]
PENDING = build_book.pending()


def _name(src: Path) -> str:
    return f"{src.parent.name}/{src.stem}.ipynb"


def test_pending_is_explicit():
    """Every source is translated or pending, never both, never neither; the pending list is shown."""
    translated = {_name(s) for s in TRANSLATED}
    both = sorted(translated & set(PENDING))
    neither = sorted({_name(s) for s in SOURCES} - translated - set(PENDING))
    assert not both, f"translated and listed as pending at once: {both}; take them off book/zh-pending.txt"
    assert not neither, (f"no Chinese and not listed as pending: {neither}; add book/<folder>/zh/<name>.md "
                         f"or list it in book/zh-pending.txt with the reason")
    stray = sorted(str(p.relative_to(ROOT)) for f in build_book.FOLDERS for p in (ROOT / "book" / f / "zh").glob("*.md")
                   if not (p.parent.parent / f"{p.stem}.py").exists())
    assert not stray, f"Chinese for no source: {stray}"
    print(f"\nChinese edition: {len(TRANSLATED)} of {len(SOURCES)} sources translated; pending:")
    for name, why in sorted(PENDING.items()):
        print(f"  {name}: {why}")


@pytest.mark.parametrize("src", TRANSLATED, ids=IDS)
def test_every_markdown_cell_is_translated_from_the_current_english(src):
    lines = build_book.zh_problems(src)
    assert not lines, "the Chinese edition is out of step with the English:\n" + "\n".join(lines)


@pytest.mark.parametrize("src", TRANSLATED, ids=IDS)
def test_zh_notebooks_have_the_english_cells_code_and_outputs(src):
    table = build_book.translation(src)
    for en_path in build_book.english_paths(src):
        zh_path = build_book.zh_path(en_path)
        rel = zh_path.relative_to(ROOT)
        assert zh_path.exists(), f"{rel} is missing: run `python tools/build_book.py zh`"
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
                assert z.source == table[e.id][1], (f"{where}: not the Chinese of "
                                                    f"{build_book.rel(build_book.zh_source_of(src))}; run "
                                                    f"`python tools/build_book.py zh`")


@pytest.mark.parametrize("src", TRANSLATED, ids=IDS)
def test_no_english_paragraph_is_left_in_chinese_markdown(src):
    bad = [f"{cid}: {run[:90]!r}" for cid, (_, text) in build_book.translation(src).items()
           for run in nbtext.english_runs(text)]
    assert not bad, f"{build_book.rel(build_book.zh_source_of(src))}: English left in Chinese cells:\n" + "\n".join(bad)


@pytest.mark.parametrize("src", TRANSLATED, ids=IDS)
def test_links_in_chinese_markdown_resolve_from_the_zh_folder(src):
    folder = build_book.zh_path(build_book.notebook_of(src)).parent
    bad = [f"{cid}: {target} (from {folder.relative_to(ROOT)}/)" for cid, (_, text) in build_book.translation(src).items()
           for target in nbtext.relative_links(text) if not (folder / target).exists()]
    assert not bad, f"{src.stem}: links that lead nowhere from the Chinese notebooks:\n" + "\n".join(bad)


@pytest.mark.parametrize("src", TRANSLATED, ids=IDS)
def test_translated_code_reads_no_file_relative_to_the_notebook(src):
    """A zh notebook's kernel runs in notebooks/zh/: a '../x' path that works from notebooks/ breaks there."""
    bad = [c.id for c in build_book.cells(src) if c.kind == "code" and re.search(r"""["']\.\./""", c.source)]
    assert not bad, ("code reading files relative to the notebook's folder (breaks in zh/; use a path from "
                     f"zerolab's repository, Path(zerolab.__file__).parents[1]): {src.stem}: " + ", ".join(bad))


def test_a_shared_cell_id_is_translated_by_each_notebook_on_its_own():
    """Two solutions share ids (exercise 3b's cells are ex05-NN, like exercise 5's): each has its own Chinese."""
    a, b = (ROOT / "book" / "solutions" / f"{n}.py" for n in ("03b_stage2_buckets", "05_host_step"))
    shared = set(build_book.markdown_cells(a)) & set(build_book.markdown_cells(b))
    assert shared, "the two solutions no longer share an id: drop this test"
    ta, tb = build_book.translation(a), build_book.translation(b)
    assert any(ta[cid][1] != tb[cid][1] for cid in shared)
    with pytest.raises(SystemExit, match="several sources"):
        build_book.find_cell(sorted(shared)[0])
    assert build_book.find_cell(f"05_host_step:{sorted(shared)[0]}") == [(b, sorted(shared)[0])]


def test_every_zh_notebook_is_made_by_a_translated_source():
    made = {build_book.zh_path(p) for s in TRANSLATED for p in build_book.english_paths(s)}
    stored = {p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d / "zh").glob("*.ipynb")}
    stray = sorted(str(p.relative_to(ROOT)) for p in stored - made)
    assert not stray, f"zh notebooks no translated source makes (delete them): {stray}"


# -- the test's own detectors can fail --------------------------------------------------------------

def test_the_english_detector_finds_a_paragraph_and_spares_terms_code_and_formulas():
    english = "The crew is mid-move, and the workers keep borrowing from one another across the house."
    assert nbtext.english_runs(english)
    assert nbtext.english_runs("搬家搬到一半。" + english)
    fine = ("反向传播（backward）为每个参数张量产生一个梯度；`timeline.summary()` 把一步拆成计算与通信，"
            "$T = n\\alpha + S/\\beta$，见 [`exercises/zh/06_bucket_params.ipynb`](../../exercises/zh/x.ipynb)。"
            "（DeepSpeed's default: each gradient bucket all-reduced）")
    assert nbtext.english_runs(fine) == []


def test_a_stale_translation_is_named_with_its_cell_and_notebook():
    """What the lead sees after editing an English cell without its Chinese (simulated on a copy)."""
    src = TRANSLATED[0]
    table = {cid: (nbtext.source_hash(text), "中文") for cid, text in build_book.markdown_cells(src).items()}
    assert build_book.zh_problems(src, table) == []
    cid = next(iter(table))
    table[cid] = ("0" * nbtext.HASH_CHARS, table[cid][1])
    lines = build_book.zh_problems(src, table)
    assert len(lines) == 1 and cid in lines[0] and src.stem in lines[0] and "--accept" in lines[0], lines
    del table[cid]
    assert any(cid in line and "no Chinese" in line for line in build_book.zh_problems(src, table))


def test_accept_records_the_current_english_hash_in_the_entry_only():
    text = nbtext.write_zh({"a-00": ("0" * 12, "甲"), "a-01": ("1" * 12, "乙")}, "<!-- 注释 -->")
    assert nbtext.read_zh(text) == {"a-00": ("0" * 12, "甲"), "a-01": ("1" * 12, "乙")}
    accepted = nbtext.read_zh(nbtext.accept_zh(text, "a-01", "f" * 12))
    assert accepted == {"a-00": ("0" * 12, "甲"), "a-01": ("f" * 12, "乙")}
    with pytest.raises(KeyError):
        nbtext.accept_zh(text, "a-02", "f" * 12)


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
    bad = [t for t in nbtext.relative_links(zh.read_text(encoding="utf-8")) if not (ROOT / t).exists()]
    assert not bad, f"README.zh-CN.md links to missing files: {bad}"
