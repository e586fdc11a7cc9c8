#!/usr/bin/env python3
"""Generate ``exercises/*.ipynb`` from ``solutions/*.ipynb`` (the solutions are the source).

In a solution notebook, the learner's part of a code cell sits between two marker lines::

    def model_state_bytes_per_rank(psi, precision):
        # BEGIN SOLUTION: count 2 + 2 + 12 bytes per parameter in mixed precision
        ...the reference answer...
        # END SOLUTION

In the generated exercise the whole region, markers included, becomes one line at the
indentation of the ``# BEGIN SOLUTION`` marker::

        raise NotImplementedError("Exercise: count 2 + 2 + 12 bytes per parameter in mixed precision")

The text after ``# BEGIN SOLUTION:`` is optional (default: ``write this part``).
Everything else is kept: markdown, other code, cell ids, cell metadata (tags such as
``check``), notebook metadata. Outputs, execution counts, the per-cell ``execution``
timing metadata and the saved widget state that ``jupyter execute`` records are cleared, so that re-executing a
solution notebook does not change its exercise.

Usage::

    python tools/make_exercises.py                 # (re)write exercises/ for every solution
    python tools/make_exercises.py solutions/01_memory_giants.ipynb   # only these
    python tools/make_exercises.py --check         # exit 1 and show a diff if exercises/ is stale

The output is deterministic: nbformat's writer (JSON, indent 1, sorted keys).
"""
from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"

BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION(?:\s*:\s*(?P<hint>.*?))?\s*$")
END_RE = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")
DEFAULT_HINT = "write this part"
# Cell metadata that only records how a run went, never what the cell is.
RUN_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")


class MarkerError(ValueError):
    """A solution notebook's markers do not pair up."""


def _literal(text: str) -> str:
    """A Python string literal for ``text``: double quotes, or single quotes when that avoids
    escaping the double quotes in a hint such as ``return {"params": ...}``."""
    if '"' in text and "'" not in text and "\\" not in text and "\n" not in text:
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False)


def strip_solutions(source: str, where: str = "cell") -> tuple[str, int]:
    """Replace every solution region in ``source``; return (new source, regions replaced)."""
    out: list[str] = []
    open_at: int | None = None
    regions = 0
    for lineno, line in enumerate(source.splitlines(keepends=True), start=1):
        bare = line.rstrip("\r\n")
        begin = BEGIN_RE.match(bare)
        if begin:
            if open_at is not None:
                raise MarkerError(f"{where}: line {lineno}: '# BEGIN SOLUTION' inside the region opened at line {open_at}")
            open_at = lineno
            hint = begin.group("hint") or DEFAULT_HINT
            message = _literal(f"Exercise: {hint}")
            newline = line[len(bare):] or ""
            out.append(f"{begin.group('indent')}raise NotImplementedError({message}){newline}")
            regions += 1
            continue
        if END_RE.match(bare):
            if open_at is None:
                raise MarkerError(f"{where}: line {lineno}: '# END SOLUTION' without a '# BEGIN SOLUTION'")
            open_at = None
            continue
        if open_at is None:
            out.append(line)
    if open_at is not None:
        raise MarkerError(f"{where}: the region opened at line {open_at} has no '# END SOLUTION'")
    text = "".join(out)
    # A region that ended the cell leaves the raise line with its newline; keep the
    # cell's own ending (Jupyter stores sources without a final newline).
    if not source.endswith("\n") and text.endswith("\n"):
        text = text[:-1]
    return text, regions


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook for one solution notebook (a new object; the input is untouched)."""
    nb = copy.deepcopy(solution)
    nb.metadata.pop("widgets", None)   # saved widget state: run output (random model ids), not content
    regions = 0
    for index, cell in enumerate(nb.cells):
        for key in RUN_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            continue
        cell.source, n = strip_solutions(cell.source, where=f"{name}: cell {index}")
        regions += n
        cell.outputs = []
        cell.execution_count = None
    if regions == 0:
        raise MarkerError(f"{name}: no '# BEGIN SOLUTION' region: nothing for the learner to write")
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    """Exactly the text ``nbformat.write`` puts in a file."""
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def expected_exercises(solution_paths: list[Path]) -> dict[Path, str]:
    result = {}
    for path in solution_paths:
        solution = nbformat.read(path, as_version=4)
        result[EXERCISES / path.name] = render(make_exercise(solution, name=str(path.relative_to(ROOT))))
    return result


def summarize_diff(path: Path, want: str, have: str, max_lines: int = 40) -> str:
    """A short, cell-aware summary of how the file on disk differs from the generated one."""
    rel = path.relative_to(ROOT)
    try:
        want_nb, have_nb = json.loads(want), json.loads(have)
    except json.JSONDecodeError:
        return f"{rel}: not valid JSON on disk"
    lines = [f"{rel}: out of date"]
    want_cells, have_cells = want_nb.get("cells", []), have_nb.get("cells", [])
    if len(want_cells) != len(have_cells):
        lines.append(f"  {len(have_cells)} cells on disk, {len(want_cells)} generated")
    for i, (w, h) in enumerate(zip(want_cells, have_cells)):
        if w == h:
            continue
        w_src, h_src = "".join(w.get("source", "")), "".join(h.get("source", ""))
        if w_src != h_src:
            diff = difflib.unified_diff(h_src.splitlines(), w_src.splitlines(),
                                        f"cell {i} on disk", f"cell {i} generated", lineterm="", n=1)
            lines += ["  " + d for d in diff]
        else:
            keys = sorted(k for k in set(w) | set(h) if w.get(k) != h.get(k))
            lines.append(f"  cell {i}: {', '.join(keys)} differ")
    if want_nb.get("metadata") != have_nb.get("metadata"):
        lines.append("  notebook metadata differs")
    if len(lines) == 1:
        lines.append("  formatting differs (not written by this script)")
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"  ... ({len(lines) - max_lines} more lines)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solutions", nargs="*", type=Path,
                        help="solution notebooks (default: every solutions/*.ipynb)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if exercises/ differs from what would be generated")
    args = parser.parse_args(argv)

    paths = [p.resolve() for p in args.solutions] or sorted(SOLUTIONS.glob("*.ipynb"))
    try:
        wanted = expected_exercises(paths)
    except MarkerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.check:
        problems = []
        for path, text in wanted.items():
            if not path.exists():
                problems.append(f"{path.relative_to(ROOT)}: missing")
            elif path.read_text(encoding="utf-8") != text:
                problems.append(summarize_diff(path, text, path.read_text(encoding="utf-8")))
        if not args.solutions:
            for path in sorted(EXERCISES.glob("*.ipynb")):
                if path not in wanted:
                    problems.append(f"{path.relative_to(ROOT)}: no solutions/{path.name} to generate it from")
        if problems:
            print("\n".join(problems))
            print("\nexercises/ is out of date: run `python tools/make_exercises.py` and commit the result.")
            return 1
        print(f"exercises/ is up to date ({len(wanted)} notebooks).")
        return 0

    EXERCISES.mkdir(exist_ok=True)
    for path, text in wanted.items():
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
        else:
            print(f"unchanged {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
