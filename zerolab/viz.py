"""Display helpers for the chapters: what a notebook shows, kept out of its narrative.

Printed lines in JupyterLab wrap mid-word past about 100 characters, so text that the
package writes in long lines (``Config.describe()``, the engine's log lines that a crew
brings back) is re-wrapped at word boundaries here before it is shown.
"""
from __future__ import annotations

import contextlib
import io
import sys
import textwrap
from typing import Iterator

WIDTH = 96


def wrap_lines(text: str, width: int = WIDTH, indent: str = "    ") -> str:
    """``text`` with every line longer than ``width`` broken at spaces; continuation lines
    start with ``indent``. Short lines, and blank lines, are kept as they are."""
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
        else:
            out.append(textwrap.fill(line, width, subsequent_indent=indent,
                                     break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


def print_wrapped(text: str, width: int = WIDTH) -> None:
    """Print ``text`` with its long lines wrapped at word boundaries."""
    print(wrap_lines(text, width))


@contextlib.contextmanager
def wrapped_output(width: int = WIDTH) -> Iterator[None]:
    """Collect what the block prints (the driver's stdout, where a crew writes its ranks'
    log lines) and print it again with long lines wrapped, when the block ends."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        text = buf.getvalue()
        if text:
            sys.stdout.write(wrap_lines(text.rstrip("\n"), width) + "\n")
