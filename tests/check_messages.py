"""What the exercise checks' tests ask of a failing check's message (tests/test_chNN_check.py)."""
from __future__ import annotations


def assert_hint(text: str, words, *, across_lines: bool = False) -> None:
    """Each of ``words`` is in the message ``text`` (``across_lines``: whatever its line wrapping),
    and no line is wider than 100 characters (Jupyter wraps longer ones mid-word)."""
    seen = " ".join(text.split()) if across_lines else text
    for w in words:
        assert w in seen, text
    assert all(len(line) <= 100 for line in text.splitlines()), text
