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


def test_traffic_bars_and_collective_timeline_draw_what_they_are_given():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zerolab.comm import CommRecord
    from zerolab.viz import collective_lanes, collective_timeline, traffic_bars

    fig, ax = plt.subplots()
    measured = {0: {"grads": 200.0}, 2: {"grads": 100.0, "params": 100.0}, 3: {"grads": 100.0, "params": 200.0}}
    traffic_bars(ax, measured, {0: 200.0, 2: 200.0, 3: 300.0}, unit=100.0, title="t")
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [0.0, 1.0, 1.0, 1.0, 2.0, 2.0]          # gradients 2, 1, 1; parameters 0, 1, 2 (Ψ)
    assert ax.get_title() == "t"
    plt.close(fig)

    records = [CommRecord("all_gather", 10, 20, "bfloat16", 2, 0.0, "params embed fwd"),
               CommRecord("send", 5, 10, "float32", 2, 0.0, "ring"),
               CommRecord("reduce_scatter", 10, 20, "bfloat16", 2, 0.0, "grads embed"),
               ("all_reduce", "overflow", 24.0)]
    rows = collective_lanes(records)
    assert [r[0] for r in rows] == [0, 1, 2]
    assert rows[0][1].startswith("all-gather") and rows[1][1].startswith("reduce-scatter")
    assert rows[0][3] == 10.0                                   # ring convention: (N-1)/N of 20 bytes
    fig, ax = plt.subplots()
    assert collective_timeline(ax, records) == rows
    assert len(ax.patches) == 3 and len(ax.get_yticklabels()) == 3
    plt.close(fig)
