#!/usr/bin/env python3
"""The Chinese edition's tool (see ``zhsource.py`` for how the edition is made).

    python tools/build_notebooks/zh_edition.py                  # (re)write every translated chapter's zh notebooks
    python tools/build_notebooks/zh_edition.py ch06 ch07        # only these
    python tools/build_notebooks/zh_edition.py --status         # each builder: translated, out of date, pending
    python tools/build_notebooks/zh_edition.py --english ch06-03  # the English source a cell's Chinese translates
    python tools/build_notebooks/zh_edition.py --accept ch06-03   # record that the Chinese now matches the English
    python tools/build_notebooks/zh_edition.py --english ch05:ex05-00  # <builder>:<cell> where two builders share an id

Nothing here executes a notebook: the zh notebooks take their code and outputs from the stored
English ones (run the English builder with ``--execute`` first; it writes the zh notebooks too).
"""
from __future__ import annotations

import argparse
import re
import sys

import nbsource
import zhsource


def _builders_of(cid: str) -> list[tuple[str, dict]]:
    """The builders that make a markdown cell ``cid`` (``<builder>:<cell id>`` names one of them:
    two builders may use the same cell id, e.g. ex05-00 in ch03 and ch05)."""
    only, _, cid = cid.rpartition(":")
    out = []
    for name in ([only] if only else nbsource.builder_names()):
        notebooks = nbsource.load_builder(name).NOTEBOOKS
        if cid in zhsource.markdown_cells(notebooks):
            out.append((name, notebooks))
    if not out:
        raise SystemExit(f"no builder {only + ' ' if only else ''}makes a markdown cell {cid}")
    return out


def _stale(name: str, notebooks: dict, cid: str) -> bool:
    table = zhsource.translation(name) or {}
    return cid not in table or table[cid][0] != zhsource.source_hash(zhsource.markdown_cells(notebooks)[cid][0])


def _one(cid: str, found: list[tuple[str, dict]]) -> tuple[str, dict]:
    if len(found) > 1:
        names = ", ".join(f"{name}:{cid.rpartition(':')[2]}" for name, _ in found)
        raise SystemExit(f"{cid} is a cell of several builders; name one: {names}")
    return found[0]


def accept(cid: str) -> int:
    found = _builders_of(cid)
    if len(found) > 1:                       # a shared id: the builder whose Chinese is out of date
        found = [(name, nbs) for name, nbs in found if _stale(name, nbs, cid)] or found
    name, notebooks = _one(cid, found)
    cid = cid.rpartition(":")[2]
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
        _, notebooks = _one(args.english, _builders_of(args.english))
        print(zhsource.markdown_cells(notebooks)[args.english.rpartition(":")[2]][0])
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
