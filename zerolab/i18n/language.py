"""The language zerolab speaks to a learner: English (the default) or Chinese (``zh``).

Two places ask, and they answer differently on purpose:

* **Inside a notebook** (exercise checks, figures, the lab's widgets): both editions run the
  same code cells, so the language comes from where the kernel runs, never from the machine's
  locale (an English chapter's outputs must not change on a machine set to ``zh_CN``):
  ``$ZEROLAB_LANG`` if set, else ``zh`` when the notebook lives in a Chinese edition's folder
  (``notebooks/zh``, ``exercises/zh``, ``solutions/zh``: Jupyter tells the kernel its notebook in
  ``$JPY_SESSION_NAME`` and starts it in the notebook's folder), else English.
* **On the command line** (``zerolab progress``, ``zerolab report --preflight``): ``--lang``, else
  ``$ZEROLAB_LANG``, else the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``, in POSIX's order):
  ``zh_CN.UTF-8`` and the like answer in Chinese.

Messages are written in English in the code, where they are read; their Chinese lives in one
file, ``zerolab/i18n/messages_zh.py``, one section per module, keyed by the English template itself.
``T = catalogue("progress")`` gives a module its section, and ``T("{n} of {m} done", n=1, m=5)``
formats the template in the current language; ``T.plural(n, one, other)`` picks English's form
(Chinese has one, keyed by ``other``), ``T.join_and(items)`` lists in a sentence, and ``T.mark(en)``
marks a template that a table holds for later. A template missing from the catalogue is shown in
English (``tests/test_i18n.py`` checks that every Chinese template has its English's fields and that
the modules' templates are in the catalogue).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

__all__ = ["LANGS", "LANG_ENV", "EDITION_DIRS", "normalize", "kernel_lang", "cli_lang", "lang", "set_lang",
           "using", "is_zh", "Catalogue", "catalogue", "edition_of", "join_and",
           "LANG_HELP", "add_lang_argument"]

LANGS = ("en", "zh")
LANG_ENV = "ZEROLAB_LANG"
EDITION_DIRS = ("notebooks", "exercises", "solutions")   # each may hold a zh/ edition

_OVERRIDE: str | None = None        # set by the CLI (--lang / locale) and by tests


def normalize(value: str | None) -> str | None:
    """``"zh"``, ``"zh_CN.UTF-8"``, ``"zh-Hans"``, ``"chinese"`` -> ``"zh"``; ``"en_US"``, ``"C"``,
    ``"POSIX"`` -> ``"en"``; empty or unknown -> None."""
    if not value:
        return None
    v = value.strip().lower().replace("-", "_")
    if v.startswith("zh") or v.startswith("chinese"):
        return "zh"
    if v.startswith("en") or v in ("c", "posix") or v.startswith("c."):
        return "en"
    return None


def edition_of(path: str | os.PathLike) -> str:
    """``zh`` for a folder (or a notebook in one) of a Chinese edition, else ``en``."""
    p = Path(path)
    for folder in (p, p.parent):
        if folder.name == "zh" and folder.parent.name in EDITION_DIRS:
            return "zh"
    return "en"


def kernel_lang() -> str:
    """The language of code that runs in a notebook's kernel (see the module's docstring)."""
    if _OVERRIDE:
        return _OVERRIDE
    env = normalize(os.environ.get(LANG_ENV))
    if env:
        return env
    notebook = os.environ.get("JPY_SESSION_NAME")
    if notebook:
        return edition_of(notebook)
    try:
        return edition_of(Path.cwd())
    except OSError:                      # the folder was removed under the kernel
        return "en"


def cli_lang(flag: str | None = None) -> str:
    """The language of a command: ``--lang``, ``$ZEROLAB_LANG``, then the locale; English otherwise."""
    for value in (flag, os.environ.get(LANG_ENV), os.environ.get("LC_ALL"), os.environ.get("LC_MESSAGES"),
                  os.environ.get("LANG")):
        lang_ = normalize(value)
        if lang_:
            return lang_
    return "en"


def lang() -> str:
    """The language now: what :func:`set_lang` chose, else :func:`kernel_lang`."""
    return _OVERRIDE or kernel_lang()


def is_zh() -> bool:
    return lang() == "zh"


def set_lang(value: str | None) -> None:
    """Speak ``value`` ("en" or "zh") from now on in this process; None: decide again each time."""
    global _OVERRIDE
    if value is not None and value not in LANGS:
        raise ValueError(f"language {value!r}: zerolab speaks {', '.join(LANGS)}")
    _OVERRIDE = value


@contextlib.contextmanager
def using(value: str | None) -> Iterator[None]:
    """``with using("zh"): ...``: the language inside the block."""
    global _OVERRIDE
    saved = _OVERRIDE
    set_lang(value)
    try:
        yield
    finally:
        _OVERRIDE = saved


class Catalogue:
    """The Chinese of a module's messages, keyed by their English templates::

        T = Catalogue({"{n} ranks started": "已启动 {n} 个 rank"})
        T("{n} ranks started", n=4)          # English, or Chinese in a zh kernel

    A template is formatted with ``str.format`` only when keyword arguments are given (so a
    message with literal braces and no fields needs no escaping)."""

    def __init__(self, zh: dict[str, str] | None = None, section: str | None = None):
        self._zh, self.section = (dict(zh) if zh is not None else None), section

    @property
    def zh(self) -> dict[str, str]:
        if self._zh is None:                 # the catalogue file is read on first use
            from .messages_zh import ZH
            self._zh = dict(ZH.get(self.section, {}))
        return self._zh

    def text(self, en: str, language: str | None = None) -> str:
        return self.zh.get(en, en) if (language or lang()) == "zh" else en

    def __call__(self, en: str, /, **fields) -> str:
        text = self.text(en)
        return text.format(**fields) if fields else text

    @staticmethod
    def mark(en: str) -> str:
        """``en`` itself: marks a template that a table holds and that is shown later through
        ``T.text`` or ``T`` (gettext's ``N_``), so that ``tests/test_i18n.py`` finds it in the code
        as it finds ``T("...")``, and no list of such templates is kept by hand."""
        return en

    def plural(self, n: int, one: str, other: str, /, **fields) -> str:
        """``one`` or ``other`` by English's rule for ``n`` (``{n}`` is filled in); Chinese has one
        form, keyed by ``other``: ``T.plural(k, "{n} run", "{n} runs")``."""
        en = one if n == 1 else other
        text = self.zh.get(other, en) if lang() == "zh" else en
        return text.format(n=n, **fields)

    def join_and(self, items) -> str:
        """``a``, ``a and b``, ``a, b and c``: a list in a sentence of this catalogue's language
        (Chinese: ``a 和 b``, ``a、b 和 c``), the two joints being templates of its section."""
        return join_and(items, self)


def join_and(items, tr) -> str:
    """``a``, ``a and b``, ``a, b and c``, with the joints ``", "`` and ``" and "`` through ``tr`` (a
    catalogue's ``T``, or a figure's text function, whose section holds both)."""
    items = [str(i) for i in items]
    if len(items) <= 2:
        return tr(" and ").join(items)
    return tr(", ").join(items[:-1]) + tr(" and ") + items[-1]


LANG_HELP = "answer in English or Chinese (default: $ZEROLAB_LANG, else the locale, e.g. LANG=zh_CN.UTF-8)"


def add_lang_argument(parser, help: str = LANG_HELP) -> None:
    """A command's ``--lang en|zh`` (read back with :func:`cli_lang`), declared here once for every command."""
    parser.add_argument("--lang", choices=LANGS, default=None, help=help)


def catalogue(section: str) -> Catalogue:
    """The Chinese of one module's messages: section ``section`` of ``zerolab/i18n/messages_zh.py``."""
    return Catalogue(section=section)


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal or a notebook's output (a CJK character takes two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


_NO_LINE_START = set("，。；：、）》！？”’,.;:)!?")
_NO_LINE_END = set("（《“‘")


def fill(text: str, columns: int = 96, initial_indent: str = "", subsequent_indent: str = "",
         **textwrap_options) -> str:
    """``textwrap.fill`` that also breaks Chinese (which has no spaces) by the columns it takes;
    ASCII words are never split, a line never starts with a closing mark nor ends with an opening one.
    Text without wide characters is ``textwrap.fill``'s, ``textwrap_options`` included
    (``drop_whitespace=False`` ...); Chinese text is broken by the rules above."""
    import re
    import textwrap
    if width(text) == len(text):
        return textwrap.fill(text, columns, initial_indent=initial_indent, subsequent_indent=subsequent_indent,
                             **textwrap_options)
    tokens = re.findall(r"[!-~]+| |[^ -~]", text)   # ASCII words, spaces, one CJK character
    lines, line = [], initial_indent
    for tok in tokens:
        if width(line) + width(tok) > columns and line.strip() and tok not in _NO_LINE_START:
            carried = ""
            while line.strip() and line[-1] in _NO_LINE_END:     # an opening mark goes with what it opens
                line, carried = line[:-1], line[-1] + carried
            lines.append(line.rstrip())
            line = subsequent_indent + carried
            if tok == " ":
                continue
        line += tok
    lines.append(line.rstrip())
    return "\n".join(lines)
