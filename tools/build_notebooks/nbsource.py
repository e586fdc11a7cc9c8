"""The one mechanism behind every chapter's builder (``tools/build_notebooks/chNN.py``).

A builder is a Python file that lists its notebooks' cells with :func:`md` and :func:`code`
and ends with::

    NOTEBOOKS = {"notebooks/00_meet_the_crew.ipynb": ("ch00", CHAPTER)}
    if __name__ == "__main__":
        sys.exit(nbsource.main(NOTEBOOKS))

Every chapter is built the same way:

* cell ids are fixed (``<prefix>-NN``), so a rebuild of an unchanged chapter changes nothing;
* a notebook whose cells (type, source, id, tags) already match its builder is left alone,
  stored outputs included; one whose code cells are unchanged (only markdown was edited) is
  rewritten with its stored outputs kept; any other is rewritten without outputs (execute it);
* ``--execute`` runs the notebooks this call rewrote (``--force`` rewrites and runs all of
  them), then regenerates the exercise of each rewritten solution;
* ``tests/test_notebook_sources.py`` checks, without executing anything, that every stored
  notebook's cells are what its builder makes;
* a chapter with a Chinese edition (``zh/<builder>.py``) also gets ``<folder>/zh/<name>.ipynb``,
  the stored English notebook with its markdown in Chinese, written after the English (see
  ``zhsource.py``; nothing runs twice).

Run every chapter at once with ``python tools/build_notebooks/build_all.py [--execute]``.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]
BUILDERS = Path(__file__).resolve().parent
KERNEL = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
          "language_info": {"name": "python"}}


def md(text: str, *tags: str, **kw):
    """A markdown cell; ``tags`` as extra arguments or as ``tags=[...]``."""
    return ("markdown", text.strip("\n"), list(tags) + list(kw.get("tags") or []))


def code(text: str, *tags: str, **kw):
    """A code cell; ``tags`` as extra arguments or as ``tags=[...]``."""
    return ("code", text.strip("\n"), list(tags) + list(kw.get("tags") or []))


def build(prefix: str, cells) -> nbformat.NotebookNode:
    """The notebook (no outputs) for a list of :func:`md` / :func:`code` cells."""
    nb = new_notebook(metadata=dict(KERNEL))
    for i, (kind, text, tags) in enumerate(cells):
        meta = {"tags": list(tags)} if tags else {}
        cell = (new_markdown_cell if kind == "markdown" else new_code_cell)(text, metadata=meta)
        cell.id = f"{prefix}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def signature(nb) -> list[tuple]:
    """What a builder decides about each cell: type, source, id and tags (not outputs)."""
    return [(c.cell_type, c.source, c.get("id"), list(c.metadata.get("tags", []))) for c in nb.cells]


def built(notebooks: dict) -> dict[Path, nbformat.NotebookNode]:
    """``{path: notebook}`` for a builder's ``NOTEBOOKS`` (paths relative to the repository)."""
    return {ROOT / rel: build(prefix, cells) for rel, (prefix, cells) in notebooks.items()}


def load_builder(name: str):
    """Import ``tools/build_notebooks/<name>.py`` (e.g. ``"ch03"``) as a module."""
    path = BUILDERS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_zerolab_builder_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("nbsource", sys.modules[__name__])  # builders `import nbsource`
    spec.loader.exec_module(module)
    return module


def builder_names() -> list[str]:
    return sorted(p.stem for p in BUILDERS.glob("ch[0-9][0-9]*.py"))


def _keep_outputs(stored, nb) -> bool:
    """When only markdown changed (the code cells are the same, in the same order), copy the
    stored code cells' outputs into ``nb`` and return True: nothing needs to run again."""
    def code_cells(book):
        return [c for c in book.cells if c.cell_type == "code"]
    old, new = code_cells(stored), code_cells(nb)
    if [signature_of(c) for c in old] != [signature_of(c) for c in new]:
        return False
    if any(c.get("execution_count") is None for c in old):
        return False
    for o, c in zip(old, new):
        c.outputs, c.execution_count = o.outputs, o.execution_count
        c.metadata = o.metadata
    nb.metadata = stored.metadata
    return True


def signature_of(cell) -> tuple:
    return (cell.cell_type, cell.source, cell.get("id"), list(cell.metadata.get("tags", [])))


def write(notebooks: dict, force: bool = False) -> list[Path]:
    """Write each notebook whose cells changed; return the paths written."""
    written = []
    for path, nb in built(notebooks).items():
        rel = path.relative_to(ROOT)
        if not force and path.exists() and signature(nbformat.read(path, as_version=4)) == signature(nb):
            print(f"unchanged {rel}")
            continue
        path.parent.mkdir(exist_ok=True)
        if not force and path.exists() and _keep_outputs(nbformat.read(path, as_version=4), nb):
            nbformat.write(nb, path)
            print(f"wrote {rel} (markdown only: code cells and their outputs kept)")
            continue
        nbformat.write(nb, path)
        written.append(path)
        print(f"wrote {rel} ({len(nb.cells)} cells)")
    return written


def unexecuted(path: Path) -> bool:
    """True when a stored notebook has a code cell that was never run (no outputs stored)."""
    nb = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and c.get("execution_count") is None for c in nb.cells)


def execute(paths: list[Path]) -> None:
    """Run notebooks in place (storing their outputs), then regenerate the exercises of the
    solutions among them."""
    jupyter = Path(sys.executable).with_name("jupyter")
    for path in paths:
        print(f"executing {path.relative_to(ROOT)}", flush=True)
        subprocess.run([str(jupyter), "execute", "--inplace", str(path)], check=True, cwd=path.parent)
    solutions = [str(p) for p in paths if p.parent.name == "solutions"]
    if solutions:
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_exercises.py"), *solutions], check=True)


def main(notebooks: dict, argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write this chapter's notebooks from its builder.")
    parser.add_argument("--execute", action="store_true",
                        help="run the notebooks written now in place (and regenerate their exercises)")
    parser.add_argument("--force", action="store_true", help="rewrite (and with --execute, run) every notebook")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    written = write(notebooks, force=args.force)
    if args.execute:
        execute([p for p in built(notebooks) if p in written or unexecuted(p)])
    elif written:
        print("rewritten notebooks have no outputs: run again with --execute (or jupyter execute --inplace)")
    write_chinese(notebooks)
    return 0


def write_chinese(notebooks: dict) -> None:
    """Write the Chinese edition of these notebooks, if their builder has one (``zhsource.py``)."""
    import zhsource
    name = zhsource.builder_of(notebooks)
    if name is not None:
        zhsource.write_zh(name, notebooks)
