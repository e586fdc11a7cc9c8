"""zerolab.course.viz: what the chapters show is re-wrapped to fit JupyterLab's width."""
from __future__ import annotations

from zerolab.course.viz import print_wrapped, wrap_lines, wrapped_output

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
    from zerolab.course.viz import collective_lanes, collective_timeline, traffic_bars

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


def test_collective_grids_colour_each_cell_by_owner():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from zerolab.course.viz import RANK_COLOURS, SUM_COLOUR, cells, collective_grids, only_slice

    assert only_slice([5, 6], 1, "sum", 6) == [(None, None)] * 2 + [(5, "sum"), (6, "sum")] + [(None, None)] * 2
    before = [cells([10 * r + i for i in range(4)], r) for r in range(2)]
    after = [only_slice([20 + 2 * r, 21 + 2 * r], r, "sum", 4) for r in range(2)]
    fig = collective_grids("reduce-scatter", [("before", before), ("after", after)], world_size=2)
    left, right = fig.axes
    assert [to_hex(p.get_facecolor()) for p in left.patches] == [RANK_COLOURS[0].lower()] * 4 + [RANK_COLOURS[1].lower()] * 4
    faces = [to_hex(p.get_facecolor()) for p in right.patches]
    assert faces.count(SUM_COLOUR) == 4 and faces.count("#ffffff") == 4
    assert [t.get_text() for t in left.texts] == ["0", "1", "2", "3", "10", "11", "12", "13"]
    assert len(right.texts) == 4                                   # cells not held carry no number
    assert fig._suptitle.get_text() == "reduce-scatter"
    assert len(fig.legends[0].get_texts()) == 2 + 2                # one per rank, the sum, not held
    plt.close(fig)


def test_ring_steps_draws_every_step_and_marks_what_arrived():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from zerolab.course.viz import count_ones, ring_steps

    assert count_ones(1011.0) == 3 and count_ones(100) == 1
    # a 2-rank ring, by hand: rank r starts with 10**r in both chunks
    starts = [[1.0, 1.0], [10.0, 10.0]]
    def step(phase, chunks, received):
        return {"phase": phase, "step": 0, "received": received, "chunks": [torch.tensor([v]) for v in chunks]}
    traces = [[step("reduce-scatter", [11, 1], 0), step("all-gather", [11, 11], 1)],
              [step("reduce-scatter", [10, 11], 1), step("all-gather", [11, 11], 0)]]
    fig = ring_steps(starts, traces)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in drawn] == ["start", "reduce-scatter step 0", "all-gather step 0"]
    assert [t.get_text() for t in drawn[1].texts] == ["11", "1", "10", "11"]
    outlined = [p.get_linewidth() for p in drawn[1].patches]
    assert outlined == [2.5, 1, 1, 2.5]                            # rank 0 got chunk 0, rank 1 chunk 1
    assert "2 ranks" in fig._suptitle.get_text()
    plt.close(fig)


def test_shard_map_draws_one_bar_per_rank_and_the_padding():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zerolab.course.viz import shard_map

    layout = [{"label": "bucket 0", "names": ["w", "b"], "numels": [10, 1], "padded": 12,
               "shards": [(0, 4), (4, 8), (8, 12)]},
              {"label": "bucket 1", "names": ["v"], "numels": [6], "padded": 6,
               "shards": [(0, 2), (2, 4), (4, 6)]}]
    fig, ax = plt.subplots()
    shard_map(ax, layout, title="who owns what")
    widths = [round(p.get_width(), 6) for p in ax.patches]
    assert widths == [4, 4, 4, 1, 2, 2, 2, 0]                      # 3 shards + padding, per bucket
    assert [t.get_text() for t in ax.texts] == ["w", "b", "v"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bucket 0: 11 + 1 padding", "bucket 1: 6 + 0 padding"]
    assert len(ax.lines) == 1                                      # one boundary inside bucket 0
    assert ax.get_title() == "who owns what"
    plt.close(fig)
