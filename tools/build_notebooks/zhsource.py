"""The Chinese edition: the same notebooks, with each markdown cell in Chinese.

The Chinese of a builder's markdown lives beside it, in ``tools/build_notebooks/zh/<builder>.py``::

    ZH = {
        "ch06-00": ("3f2a9c0d41b7", r\"\"\"
    # 第 6 章 · 箱子 ...
    \"\"\"),
        ...
    }

keyed by cell id, each with the first 12 hex digits of the sha1 of the English source it
translates (:func:`source_hash`). A builder with no such file is listed, with the reason, in
``tools/build_notebooks/zh/pending.py``: every builder is one or the other.

What is written: for each English notebook of a translated builder (``notebooks/X.ipynb``,
``solutions/X.ipynb``) and each exercise generated from its solutions (``exercises/X.ipynb``),
``<same folder>/zh/X.ipynb``: the stored English notebook, code cells, ids, tags, metadata and
stored OUTPUTS copied as they are, each markdown cell replaced by its Chinese. Nothing runs: the
outputs nbval checks in English are the Chinese edition's too (``run_tests.sh`` leaves ``zh/``
out of nbval; ``tests/test_zh_edition.py`` proves the code and outputs identical).

When the English of a cell changes, its hash no longer matches: the Chinese notebook is still
written (its code stays in step), the builder prints which cells' Chinese is out of date, and
``tests/test_zh_edition.py`` fails naming them until the Chinese is updated and accepted::

    python tools/build_notebooks/zh_edition.py --status            # every builder: translated, stale, pending
    python tools/build_notebooks/zh_edition.py --english ch06-03   # the English a cell's Chinese must say
    python tools/build_notebooks/zh_edition.py --accept ch06-03    # after updating its Chinese: record the hash
    python tools/build_notebooks/zh_edition.py [ch06 ...]          # (re)write the zh notebooks from the stored English
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import re
from pathlib import Path

import nbformat

import nbsource

ROOT = nbsource.ROOT
ZH_DIR = nbsource.BUILDERS / "zh"
HASH_CHARS = 12


def source_hash(text: str) -> str:
    """The fingerprint of an English markdown cell, as recorded beside its Chinese."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pending() -> dict[str, str]:
    """``{builder: why its Chinese is not there yet}`` (``zh/pending.py``)."""
    return dict(_load(ZH_DIR / "pending.py", "_zerolab_zh_pending").PENDING)


def translation_path(name: str) -> Path:
    return ZH_DIR / f"{name}.py"


def translation(name: str) -> dict[str, tuple[str, str]] | None:
    """``{cell id: (hash of the English, Chinese)}`` of builder ``name``, or None if it has none."""
    path = translation_path(name)
    if not path.exists():
        return None
    table = _load(path, f"_zerolab_zh_{name}").ZH
    return {cid: (h, text.strip("\n")) for cid, (h, text) in table.items()}


def translated_builders() -> list[str]:
    return sorted(p.stem for p in ZH_DIR.glob("ch[0-9][0-9]*.py"))


def builder_of(notebooks: dict) -> str | None:
    """The translated builder that makes exactly these notebooks, or None.

    Found by the notebooks' paths, not by cell ids: two builders may use the same cell id (chapter
    3's exercise 3b and exercise 5 both have ``ex05-00``), and each must be written with its own
    Chinese only."""
    ids = set(markdown_cells(notebooks))
    for name in translated_builders():
        if ids & set(translation(name)) and set(nbsource.load_builder(name).NOTEBOOKS) == set(notebooks):
            return name
    return None


def zh_path(path: Path) -> Path:
    """``notebooks/X.ipynb`` -> ``notebooks/zh/X.ipynb`` (the same for solutions/ and exercises/)."""
    return path.parent / "zh" / path.name


def english_paths(notebooks: dict) -> list[Path]:
    """A builder's English notebooks and the exercises generated from its solutions."""
    out = []
    for rel in notebooks:
        path = ROOT / rel
        out.append(path)
        if path.parent.name == "solutions":
            out.append(ROOT / "exercises" / path.name)
    return out


def markdown_cells(notebooks: dict) -> dict[str, tuple[str, str]]:
    """``{cell id: (English source, notebook)}`` for every markdown cell a builder makes."""
    out = {}
    for rel, (prefix, cells) in notebooks.items():
        for cell in nbsource.build(prefix, cells).cells:
            if cell.cell_type == "markdown":
                out[cell.id] = (cell.source, rel)
    return out


def problems(name: str, notebooks: dict, table: dict | None = None) -> list[str]:
    """What keeps builder ``name``'s Chinese from matching its English, one line per cell."""
    table = translation(name) if table is None else table
    if table is None:
        return [f"{name}: no tools/build_notebooks/zh/{name}.py"]
    out = []
    english = markdown_cells(notebooks)
    for cid, (text, rel) in english.items():
        if cid not in table:
            out.append(f"{name}: cell {cid} of {rel} has no Chinese in zh/{name}.py")
        elif table[cid][0] != source_hash(text):
            out.append(f"{name}: cell {cid} of {rel}: its English changed since it was translated "
                       f"(zh/{name}.py records {table[cid][0]}, the English is now {source_hash(text)}); "
                       f"update its Chinese, then `python tools/build_notebooks/zh_edition.py --accept {cid}`")
    for cid in sorted(set(table) - set(english)):
        out.append(f"{name}: zh/{name}.py has Chinese for {cid}, which is no markdown cell of {name}")
    return out


def translate(nb: nbformat.NotebookNode, table: dict) -> nbformat.NotebookNode:
    """The Chinese edition of a stored English notebook: a copy with each markdown cell's source
    replaced by its Chinese (a cell with none keeps its English; :func:`problems` names it)."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown" and cell.get("id") in table:
            cell.source = table[cell.id][1]
    return out


def write_zh(name: str, notebooks: dict) -> list[Path]:
    """Write the Chinese edition of builder ``name``'s stored notebooks (those that changed); say
    which cells' Chinese is missing or out of date. Returns the paths written."""
    table = translation(name)
    if table is None:
        return []
    written = []
    for path in english_paths(notebooks):
        if not path.exists():
            continue
        target = zh_path(path)
        text = nbformat.writes(translate(nbformat.read(path, as_version=4), table), version=nbformat.NO_CONVERT)
        text = text if text.endswith("\n") else text + "\n"
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
        print(f"wrote {target.relative_to(ROOT)} (the Chinese edition)")
    for line in problems(name, notebooks, table):
        print(f"zh: {line}")
    return written


# -- what a Chinese markdown cell may keep in English -------------------------------------------

_FENCE = re.compile(r"```.*?```", re.S)
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\([^)\s]*\)")                # a link's target (its text stays)
_HTML = re.compile(r"<[^>\n]+>")
_PARENS = re.compile(r"\([^()\n]*\)|（[^（）\n]*）")
_WORDS = re.compile(r"[A-Za-z][A-Za-z'’-]*(?:[ \t]+[A-Za-z][A-Za-z'’-]*)*")
ENGLISH_RUN = 5        # this many English words in a row, outside code, formulas and parentheses


def english_runs(markdown: str, words: int = ENGLISH_RUN) -> list[str]:
    """Stretches of ``words`` or more English words in a row left in a Chinese markdown cell,
    not counting code (fenced or inline), formulas, link targets, HTML tags and what stands
    in parentheses (the English term beside its Chinese, a name)."""
    text = _FENCE.sub(" ", markdown)
    text = _MATH.sub(" ", text)
    text = _CODE.sub(" ", text)
    text = _LINK.sub("]", text)
    text = _HTML.sub(" ", text)
    for _ in range(3):                              # nested parentheses, innermost first
        text = _PARENS.sub(" ", text)
    return [m.group(0) for m in _WORDS.finditer(text) if len(m.group(0).split()) >= words]


def relative_links(markdown: str) -> list[str]:
    """The relative link targets of a markdown cell (files, not web addresses or anchors)."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", markdown):
        if not re.match(r"[a-z]+:|#|/", target):
            out.append(target.split("#")[0])
    return out
