"""zerolab.viz: what the chapters show is re-wrapped to fit JupyterLab's width."""
from __future__ import annotations

from zerolab.viz import print_wrapped, wrap_lines, wrapped_output

LONG = ("[rank 0] overflow: skipping step, loss scale stays 65536 (hysteresis 2 -> 1: the next "
        "overflow lowers it)")


def test_long_lines_break_at_spaces_and_short_ones_stay():
    text = wrap_lines(f"short line\n\n{LONG}", width=60)
    lines = text.splitlines()
    assert lines[:2] == ["short line", ""]
    assert all(len(line) <= 60 for line in lines)
    assert lines[3].startswith("    ")                                   # continuation indented
    assert " ".join(line.strip() for line in lines[2:]) == LONG           # no word lost or cut


def test_wrapped_output_collects_and_wraps(capsys):
    with wrapped_output(width=50):
        print(LONG)
        print("ok")
    out = capsys.readouterr().out
    assert all(len(line) <= 50 for line in out.splitlines())
    assert out.endswith("ok\n")
    print_wrapped("a " * 80, width=30)
    assert all(len(line) <= 30 for line in capsys.readouterr().out.splitlines())
