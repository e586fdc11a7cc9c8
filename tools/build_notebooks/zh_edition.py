#!/usr/bin/env python3
"""The Chinese edition's tool (see ``zhsource.py`` for how the edition is made).

    python tools/build_notebooks/zh_edition.py                  # (re)write every translated chapter's zh notebooks
    python tools/build_notebooks/zh_edition.py ch06 ch07        # only these
    python tools/build_notebooks/zh_edition.py --status         # each builder: translated, out of date, pending
    python tools/build_notebooks/zh_edition.py --english ch06-03  # the English source a cell's Chinese translates
    python tools/build_notebooks/zh_edition.py --accept ch06-03   # record that the Chinese now matches the English

Nothing here executes a notebook: the zh notebooks take their code and outputs from the stored
English ones (run the English builder with ``--execute`` first; it writes the zh notebooks too).
"""
from __future__ import annotations

import argparse
import re
import sys

import nbsource
import zhsource


def _builder_of(cid: str) -> tuple[str, dict]:
    for name in nbsource.builder_names():
        notebooks = nbsource.load_builder(name).NOTEBOOKS
        if cid in zhsource.markdown_cells(notebooks):
            return name, notebooks
    raise SystemExit(f"no builder makes a markdown cell {cid}")


def accept(cid: str) -> int:
    name, notebooks = _builder_of(cid)
    path = zhsource.translation_path(name)
    english = zhsource.markdown_cells(notebooks)[cid][0]
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(r'("' + re.escape(cid) + r'":\s*\(")([0-9a-f]+)(")')
    if not pattern.search(text):
        raise SystemExit(f"{path.name} has no entry for {cid}: add one (\"{cid}\": (\"{zhsource.source_hash(english)}\", "
                         f"r\"\"\"...\"\"\"))")
    path.write_text(pattern.sub(lambda m: m.group(1) + zhsource.source_hash(english) + m.group(3), text, count=1),
                    encoding="utf-8")
    print(f"{cid}: {path.relative_to(nbsource.ROOT)} now records {zhsource.source_hash(english)}")
    return 0


def status() -> int:
    pending = zhsource.pending()
    bad = 0
    for name in nbsource.builder_names():
        if name in pending:
            print(f"{name}: pending ({pending[name]})")
            continue
        lines = zhsource.problems(name, nbsource.load_builder(name).NOTEBOOKS)
        print(f"{name}: " + ("translated, in step with the English" if not lines else f"{len(lines)} problem(s)"))
        for line in lines:
            print(f"  {line}")
        bad += bool(lines)
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("builders", nargs="*", help="builder names, e.g. ch06 (default: every translated one)")
    parser.add_argument("--status", action="store_true")
    parser.add_argument("--english", metavar="CELL_ID")
    parser.add_argument("--accept", metavar="CELL_ID", nargs="+")
    args = parser.parse_args(argv)
    if args.status:
        return status()
    if args.english:
        print(zhsource.markdown_cells(nbsource.load_builder(_builder_of(args.english)[0]).NOTEBOOKS)[args.english][0])
        return 0
    if args.accept:
        for cid in args.accept:
            accept(cid)
        return 0
    for name in args.builders or zhsource.translated_builders():
        zhsource.write_zh(name, nbsource.load_builder(name).NOTEBOOKS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
