#!/usr/bin/env python3
"""Write ``book/`` (the text sources) from the stored notebooks: the one-time conversion from the
old Python builders (``tools/build_notebooks/``), kept so that it can be run again.

    python tools/convert_to_book.py            # (re)write book/<folder>/X.py and book/<folder>/zh/X.md

Each stored notebook (``notebooks/X.ipynb``, ``solutions/X.ipynb``) becomes a percent script with
its cells' ids and tags in their headers; each stored Chinese notebook (``<folder>/zh/X.ipynb``)
gives the Chinese of its markdown cells. An entry already in ``book/<folder>/zh/X.md`` keeps the hash
it records (a stale translation stays stale); a new one is recorded as translating the English now
stored (so convert from old builders only where their zh test passed). A markdown cell whose "Chinese" is still its English gets no entry (it shows as missing).
Run it again after a change made to the stored notebooks by a script (an import path rewritten in
every code cell, say); then ``tools/build_book.py --check``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

import nbtext
from build_book import BOOK, FOLDERS, ROOT

CJK = re.compile(r"[\u4e00-\u9fff]")
ZH_PREAMBLE = ("<!-- {src} 的文字（markdown）单元格的中文。每项以 MyST 的单元格分隔行开头："
               "单元格 id，以及所译英文原文的 sha1 前 12 位（en）。英文改动后，更新中文，再运行 "
               "`python tools/build_book.py zh --accept {stem}:<单元格 id>`。 -->")


def english(nb) -> list[nbtext.Cell]:
    return [nbtext.Cell(c.cell_type, c.source, c.get("id"), list(c.metadata.get("tags", []))) for c in nb.cells]


def convert(book: Path = BOOK, root: Path = ROOT) -> list[Path]:
    written = []
    for folder in FOLDERS:
        for path in sorted((root / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            src = book / folder / f"{path.stem}.py"
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(nbtext.write_source(english(nb)), encoding="utf-8")
            written.append(src)
            zh_nb = root / folder / "zh" / path.name
            if not zh_nb.exists():
                continue
            zh = {c.id: c.source for c in nbformat.read(zh_nb, as_version=4).cells if c.cell_type == "markdown"}
            target = book / folder / "zh" / f"{path.stem}.md"
            recorded = nbtext.read_zh(target.read_text(encoding="utf-8")) if target.exists() else {}
            table = {c.id: (recorded.get(c.id, (nbtext.source_hash(c.source),))[0], zh[c.id]) for c in nb.cells
                     if c.cell_type == "markdown" and c.id in zh and (zh[c.id] != c.source or CJK.search(c.source))}
            target.parent.mkdir(parents=True, exist_ok=True)
            preamble = ZH_PREAMBLE.format(src=f"book/{folder}/{src.name}", stem=path.stem)
            target.write_text(nbtext.write_zh(table, preamble), encoding="utf-8")
            written.append(target)
    return written


if __name__ == "__main__":
    for p in convert():
        print(f"wrote {p.relative_to(ROOT)}")
    sys.exit(0)
