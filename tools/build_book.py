#!/usr/bin/env python3
"""Write the stored notebooks from their text sources in ``book/`` (see ``book/README.md``).

    python tools/build_book.py                     # write every notebook whose cells changed, and the zh edition
    python tools/build_book.py 03_three 05 --execute   # only these (a part of the name); run what was written
    python tools/build_book.py --force --execute   # rewrite and run every one
    python tools/build_book.py --check             # write nothing; exit 1 if a stored notebook is not its source
    python tools/build_book.py zh --status         # each source's Chinese: translated, out of date, pending
    python tools/build_book.py zh --english ch06-02            # the English a cell's Chinese translates
    python tools/build_book.py zh --accept ch06-02             # after updating its Chinese: record the hash
    python tools/build_book.py zh --accept 05_host_step:ex05-00  # <notebook>:<cell> where two share an id

``book/notebooks/X.py`` makes ``notebooks/X.ipynb`` and ``book/solutions/X.py`` makes
``solutions/X.ipynb`` (whose exercise, ``exercises/X.ipynb``, ``tools/make_exercises.py`` writes).
A stored notebook whose cells (type, source, id, tags) match its source is left alone, outputs
included; one whose code cells are unchanged (only markdown was edited) is rewritten with its stored
outputs kept; any other is rewritten without outputs (``--execute`` runs it, then regenerates the
exercise of a solution). A cell with no id gets one, written into its source (``<prefix>-<6 hex>``).

The Chinese edition: ``book/<folder>/zh/X.md`` holds the Chinese of ``book/<folder>/X.py``'s markdown
cells, each keyed by cell id with the hash of the English it translates. ``<folder>/zh/X.ipynb`` is
the stored English notebook (code, ids, tags, metadata, outputs) with each markdown cell in Chinese;
nothing runs twice. An English cell edited since its Chinese was written is named until its Chinese
is updated and accepted. A source with no Chinese yet is listed in ``book/zh-pending.txt``.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import nbtext

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
FOLDERS = ("notebooks", "solutions")
PENDING = BOOK / "zh-pending.txt"
KERNEL = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
          "language_info": {"name": "python"}}


# -- where things are -------------------------------------------------------------------------------

def sources(book: Path = BOOK) -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (book / folder).glob("*.py"))


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def notebook_of(src: Path, root: Path = ROOT) -> Path:
    """``book/notebooks/X.py`` -> ``notebooks/X.ipynb``."""
    return root / src.parent.name / f"{src.stem}.ipynb"


def zh_source_of(src: Path) -> Path:
    return src.parent / "zh" / f"{src.stem}.md"


def zh_path(path: Path) -> Path:
    """``notebooks/X.ipynb`` -> ``notebooks/zh/X.ipynb`` (the same for solutions/ and exercises/)."""
    return path.parent / "zh" / path.name


def english_paths(src: Path, root: Path = ROOT) -> list[Path]:
    """A source's stored notebook and, for a solution, the exercise generated from it."""
    path = notebook_of(src, root)
    return [path, root / "exercises" / path.name] if path.parent.name == "solutions" else [path]


def pending(path: Path = PENDING) -> dict[str, str]:
    """``{notebooks/X.ipynb: why its Chinese is not there yet}``."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(":")
            out[name.strip()] = why.strip()
    return out


# -- the English ----------------------------------------------------------------------------------

def cells(src: Path) -> list[nbtext.Cell]:
    return nbtext.read_source(src.read_text(encoding="utf-8"), where=rel(src))


def fill_ids(src: Path) -> list[str]:
    """Give each cell of ``src`` without an id one (written into the source); return the new ids."""
    found = cells(src)
    if all(c.id for c in found):
        return []
    taken = {c.id for c in found}
    prefix = next((c.id.rpartition("-")[0] for c in found if c.id and "-" in c.id), src.stem.split("_")[0])
    new = []
    for k, c in enumerate(found):
        if not c.id:
            salt = 0
            while c.id is None or c.id in taken:
                digest = hashlib.sha1(f"{src.stem}\n{k}\n{salt}\n{c.source}".encode()).hexdigest()[:6]
                c.id, salt = f"{prefix}-{digest}", salt + 1
            taken.add(c.id)
            new.append(c.id)
    src.write_text(nbtext.write_source(found), encoding="utf-8")
    return new


def build(src: Path) -> nbformat.NotebookNode:
    """The notebook (no outputs) that a source makes."""
    nb = new_notebook(metadata=copy.deepcopy(KERNEL))
    seen = set()
    for c in cells(src):
        if not c.id:
            raise nbtext.FormatError(f"{rel(src)}: a cell has no id (run tools/build_book.py, which gives it one)")
        if c.id in seen:
            raise nbtext.FormatError(f"{rel(src)}: two cells with the id {c.id}")
        seen.add(c.id)
        cell = (new_markdown_cell if c.kind == "markdown" else new_code_cell)(c.source,
                                                                               metadata={"tags": c.tags} if c.tags else {})
        cell.id = c.id
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def signature(nb, kind: str | None = None) -> list[tuple]:
    """What a source decides about each cell (of one ``kind``, or all): type, source, id and tags (not outputs)."""
    return [(c.cell_type, c.source, c.get("id"), list(c.metadata.get("tags", [])))
            for c in nb.cells if kind in (None, c.cell_type)]


def out_of_step(src: Path, root: Path = ROOT) -> list[str]:
    """How the stored notebook differs from its source (empty when in step)."""
    path = notebook_of(src, root)
    if not path.exists():
        return [f"{rel(path)} is not stored"]
    want, have = signature(build(src)), signature(nbformat.read(path, as_version=4))
    out = [f"{rel(path)}: {len(have)} cells stored, {rel(src)} makes {len(want)}"] if len(want) != len(have) else []
    for w, h in zip(want, have):
        if w != h:
            what = [name for name, a, b in zip(("type", "source", "id", "tags"), w, h) if a != b]
            out.append(f"{rel(path)}: cell {w[2]} ({', '.join(what)}) differs from {rel(src)}")
    return out


def _keep_outputs(stored, nb) -> bool:
    """When only markdown changed (the same code cells, in the same order), copy the stored code cells'
    outputs into ``nb`` and return True: nothing needs to run again."""
    if signature(stored, "code") != signature(nb, "code"):
        return False
    old = [c for c in stored.cells if c.cell_type == "code"]
    new = [c for c in nb.cells if c.cell_type == "code"]
    if any(c.get("execution_count") is None for c in old):
        return False
    for o, c in zip(old, new):
        c.outputs, c.execution_count, c.metadata = o.outputs, o.execution_count, o.metadata
    nb.metadata = stored.metadata
    return True


def write(srcs: list[Path], force: bool = False, root: Path = ROOT) -> list[Path]:
    """Write each notebook whose cells changed; return those written without outputs (to be run)."""
    to_run = []
    for src in srcs:
        for cid in fill_ids(src):
            print(f"{rel(src)}: new cell id {cid}")
        path, nb = notebook_of(src, root), build(src)
        stored = nbformat.read(path, as_version=4) if path.exists() else None
        if not force and stored is not None and signature(stored) == signature(nb):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if not force and stored is not None and _keep_outputs(stored, nb):
            nbformat.write(nb, path)
            print(f"wrote {rel(path)} (markdown only: code cells and their outputs kept)")
            continue
        nbformat.write(nb, path)
        to_run.append(path)
        print(f"wrote {rel(path)} ({len(nb.cells)} cells, no outputs)")
    return to_run


def unexecuted(path: Path) -> bool:
    """True when a stored notebook has a code cell that was never run (no outputs stored)."""
    nb = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and c.get("execution_count") is None for c in nb.cells)


def execute(paths: list[Path]) -> None:
    """Run notebooks in place (storing their outputs), then regenerate the exercises of the solutions."""
    jupyter = Path(sys.executable).with_name("jupyter")
    for path in paths:
        print(f"executing {rel(path)}", flush=True)
        subprocess.run([str(jupyter), "execute", "--inplace", str(path)], check=True, cwd=path.parent)
    solutions = [str(p) for p in paths if p.parent.name == "solutions"]
    if solutions:
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_exercises.py"), *solutions], check=True)


# -- the Chinese ----------------------------------------------------------------------------------

def translation(src: Path) -> dict[str, tuple[str, str]] | None:
    """``{cell id: (hash of the English, Chinese)}`` of a source, or None if it has none."""
    path = zh_source_of(src)
    return nbtext.read_zh(path.read_text(encoding="utf-8"), where=rel(path)) if path.exists() else None


def markdown_cells(src: Path) -> dict[str, str]:
    return {c.id: c.source for c in cells(src) if c.kind == "markdown"}


def zh_problems(src: Path, table: dict | None = None) -> list[str]:
    """What keeps a source's Chinese from matching its English, one line per cell."""
    table = translation(src) if table is None else table
    zh = rel(zh_source_of(src))
    if table is None:
        return [f"{rel(src)}: no {zh}"]
    out = []
    english = markdown_cells(src)
    for cid, text in english.items():
        if cid not in table:
            out.append(f"{rel(src)}: cell {cid} has no Chinese in {zh}")
        elif table[cid][0] != nbtext.source_hash(text):
            out.append(f"{rel(src)}: cell {cid}: its English changed since it was translated ({zh} records "
                       f"{table[cid][0]}, the English is now {nbtext.source_hash(text)}); update its Chinese, then "
                       f"`python tools/build_book.py zh --accept {src.stem}:{cid}`")
    for cid in [c for c in table if c not in english]:
        out.append(f"{zh} has Chinese for {cid}, which is no markdown cell of {rel(src)}")
    return out


def translate(nb: nbformat.NotebookNode, table: dict) -> nbformat.NotebookNode:
    """A stored English notebook with each markdown cell's source replaced by its Chinese."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown" and cell.get("id") in table:
            cell.source = table[cell.id][1]
    return out


def write_zh(src: Path, root: Path = ROOT) -> list[Path]:
    """Write the Chinese edition of a source's stored notebooks (those that changed); say which cells'
    Chinese is missing or out of date."""
    table = translation(src)
    if table is None:
        return []
    written = []
    for path in english_paths(src, root):
        if not path.exists():
            continue
        target = zh_path(path)
        text = nbformat.writes(translate(nbformat.read(path, as_version=4), table), version=nbformat.NO_CONVERT)
        text = text if text.endswith("\n") else text + "\n"
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
        print(f"wrote {rel(target)} (the Chinese edition)")
    for line in zh_problems(src, table):
        print(f"zh: {line}")
    return written


def find_cell(name: str) -> list[tuple[Path, str]]:
    """The sources with a markdown cell ``[<notebook>:]<cell id>``."""
    only, _, cid = name.rpartition(":")
    found = [(src, cid) for src in sources() if (not only or only in src.stem) and cid in markdown_cells(src)]
    if not found:
        raise SystemExit(f"no source {only + ' ' if only else ''}has a markdown cell {cid}")
    if len(found) > 1:
        raise SystemExit(f"{cid} is a cell of several sources; name one: "
                         + ", ".join(f"{src.stem}:{cid}" for src, _ in found))
    return found


def zh_main(args) -> int:
    if args.english:
        src, cid = find_cell(args.english)[0]
        print(markdown_cells(src)[cid])
        return 0
    if args.accept:
        for name in args.accept:
            src, cid = find_cell(name)[0]
            path, digest = zh_source_of(src), nbtext.source_hash(markdown_cells(src)[cid])
            try:
                path.write_text(nbtext.accept_zh(path.read_text(encoding="utf-8"), cid, digest), encoding="utf-8")
            except (KeyError, FileNotFoundError):
                raise SystemExit(f"{rel(path)} has no entry for {cid}: add one, headed "
                                 f'+++ {{"id": "{cid}", "en": "{digest}"}}') from None
            print(f"{cid}: {rel(path)} now records {digest}")
        return 0
    waiting, bad = pending(), 0
    for src in sources():
        if f"{src.parent.name}/{src.stem}.ipynb" in waiting:
            print(f"{rel(src)}: pending ({waiting[f'{src.parent.name}/{src.stem}.ipynb']})")
            continue
        lines = zh_problems(src)
        if args.status:
            print(f"{rel(src)}: " + ("translated, in step with the English" if not lines else f"{len(lines)} problem(s)"))
            print("".join(f"  {line}\n" for line in lines), end="")
        else:
            write_zh(src)
        bad += bool(lines)
    return 1 if bad and args.status else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["zh"]:
        parser = argparse.ArgumentParser(prog="build_book.py zh", description="the Chinese edition")
        parser.add_argument("--status", action="store_true")
        parser.add_argument("--english", metavar="CELL")
        parser.add_argument("--accept", metavar="CELL", nargs="+")
        return zh_main(parser.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="parts of notebook names, e.g. 03_three (default: all)")
    parser.add_argument("--execute", action="store_true", help="run what was written (and regenerate exercises)")
    parser.add_argument("--force", action="store_true", help="rewrite (and with --execute, run) every notebook")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook is out of step")
    args = parser.parse_args(argv)
    srcs = [s for s in sources() if not args.names or any(n in s.stem for n in args.names)]
    if args.check:
        lines = [line for src in srcs for line in out_of_step(src)]
        print("\n".join(lines) if lines else f"{len(srcs)} notebooks in step with book/")
        return 1 if lines else 0
    to_run = write(srcs, force=args.force)
    if args.execute:
        execute([notebook_of(s) for s in srcs if notebook_of(s) in to_run or unexecuted(notebook_of(s))])
    elif to_run:
        print("rewritten notebooks have no outputs: run again with --execute")
    for src in srcs:
        write_zh(src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
