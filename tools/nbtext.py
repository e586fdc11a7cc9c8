"""The text formats of the course's sources (``book/``): nothing here knows the repository.

**English: a jupytext percent script** (``book/notebooks/03_three_stages.py``). Each cell starts with
a header line that carries its id and tags; a markdown cell's lines are comments::

    # %% [markdown] id="ch03-00"
    # # Chapter 3 · The three stages
    #
    # At the end of chapter 2 ...

    # %% id="ch03-01" tags=["nbval-ignore-output"]
    import torch

A cell's source is the lines after its header up to the next header, without the blank lines that
separate cells (``# `` taken off each line of a markdown cell). jupytext (and JupyterLab with it)
reads the same file to the same cells (``tests/test_notebook_sources.py`` checks it); the YAML header
jupytext may write at the top (``# ---`` ... ``# ---``) is skipped.

**Chinese: MyST markdown cells** (``book/notebooks/zh/03_three_stages.md``). Each entry is the
Chinese of one English markdown cell, headed by MyST's markdown-cell break with its metadata: the
cell's id and the first 12 hex digits of the sha1 of the English it translates (:func:`source_hash`)::

    +++ {"id": "ch03-00", "en": "c2ea443017df"}

    # 第 3 章 · ZeRO 三阶段
    ...

Anything before the first entry is a comment for the reader.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

HASH_CHARS = 12
_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?P<meta>(?: \w+=\S.*)?)$")
_META = re.compile(r'\s*(\w+)=("(?:[^"\\]|\\.)*"|\[[^\]]*\])')
_ZH_HEADER = re.compile(r"^\+\+\+ (\{.*\})\s*$")


@dataclass
class Cell:
    kind: str                      # "markdown" or "code"
    source: str
    id: str | None = None
    tags: list[str] = field(default_factory=list)

    def signature(self) -> tuple:
        return (self.kind, self.source, self.id, list(self.tags))


class FormatError(ValueError):
    """A source that is not in the format above (said with its line)."""


def source_hash(text: str) -> str:
    """The fingerprint of an English markdown cell, as recorded beside its Chinese."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def _header(cell: Cell) -> str:
    out = "# %%" + (" [markdown]" if cell.kind == "markdown" else "")
    if cell.id is not None:
        out += f" id={json.dumps(cell.id)}"
    if cell.tags:
        out += f" tags={json.dumps(list(cell.tags), ensure_ascii=False)}"
    return out


def write_source(cells: list[Cell]) -> str:
    """The percent script of ``cells`` (what :func:`read_source` reads back to the same cells)."""
    parts = []
    for cell in cells:
        body = cell.source
        if cell.kind == "markdown":
            body = "\n".join("# " + line if line else "#" for line in body.split("\n"))
        parts.append(_header(cell) + ("\n" + body if body else ""))
    return "\n\n".join(parts) + "\n"


def read_source(text: str, where: str = "source") -> list[Cell]:
    """The cells of a percent script; :class:`FormatError` where it is not one."""
    cells: list[Cell] = []
    body: list[str] = []
    lines = text.split("\n")
    if lines[0] == "# ---" and "# ---" in lines[1:]:      # the YAML header jupytext may write: not a cell
        lines = [""] * (lines.index("# ---", 1) + 1) + lines[lines.index("# ---", 1) + 1:]

    def close():
        if cells:
            while body and not body[-1].strip():
                body.pop()
            while body and not body[0].strip():
                body.pop(0)
            cell = cells[-1]
            if cell.kind == "markdown":
                for k, line in enumerate(body):
                    if line != "#" and not line.startswith("# "):
                        raise FormatError(f"{where}: markdown cell {cell.id}: a line that is not a comment: {line!r}")
                    body[k] = line[2:]
            cell.source = "\n".join(body)
        body.clear()

    for n, line in enumerate(lines, 1):
        m = _HEADER.match(line)
        if line.startswith("# %%") and not m:
            raise FormatError(f"{where}:{n}: not a cell header: {line!r}")
        if not m:
            if not cells and line.strip():
                raise FormatError(f"{where}:{n}: text before the first cell header ('# %%')")
            body.append(line)
            continue
        close()
        meta, rest = {}, m.group("meta")
        while rest.strip():
            pair = _META.match(rest)
            if not pair:
                raise FormatError(f"{where}:{n}: cell metadata that is not key=\"...\" or key=[...]: {rest.strip()!r}")
            meta[pair.group(1)] = json.loads(pair.group(2))
            rest = rest[pair.end():]
        unknown = set(meta) - {"id", "tags"}
        if unknown:
            raise FormatError(f"{where}:{n}: unknown cell metadata {sorted(unknown)} (only id and tags)")
        cells.append(Cell("markdown" if m.group("md") else "code", "", meta.get("id"), list(meta.get("tags", []))))
    close()
    return cells


# -- the Chinese ----------------------------------------------------------------------------------

def read_zh(text: str, where: str = "zh") -> dict[str, tuple[str, str]]:
    """``{cell id: (hash of the English it translates, Chinese)}``."""
    table: dict[str, tuple[str, str]] = {}
    current: tuple[str, str] | None = None
    lines: list[str] = []

    def close():
        if current is not None:
            table[current[0]] = (current[1], "\n".join(lines).strip("\n"))
        lines.clear()

    for n, line in enumerate(text.split("\n"), 1):
        m = _ZH_HEADER.match(line)
        if not m:
            lines.append(line)
            continue
        close()
        meta = json.loads(m.group(1))
        if set(meta) != {"id", "en"}:
            raise FormatError(f"{where}:{n}: an entry's header has id and en (the English's hash), not {sorted(meta)}")
        if meta["id"] in table:
            raise FormatError(f"{where}:{n}: a second entry for {meta['id']}")
        current = (meta["id"], meta["en"])
    close()
    return table


def write_zh(table: dict[str, tuple[str, str]], preamble: str = "") -> str:
    parts = [preamble.strip("\n")] if preamble.strip() else []
    for cid, (digest, text) in table.items():
        parts.append(f"+++ {json.dumps({'id': cid, 'en': digest})}\n\n{text}")
    return "\n\n".join(parts) + "\n"


def accept_zh(text: str, cid: str, digest: str) -> str:
    """``text`` with the entry ``cid`` recording ``digest`` as the English it translates."""
    out, found = [], False
    for line in text.split("\n"):
        m = _ZH_HEADER.match(line)
        if m and json.loads(m.group(1)).get("id") == cid:
            line, found = f"+++ {json.dumps({'id': cid, 'en': digest})}", True
        out.append(line)
    if not found:
        raise KeyError(cid)
    return "\n".join(out)


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
