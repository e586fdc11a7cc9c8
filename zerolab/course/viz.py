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


# -- chapter 3's pictures ----------------------------------------------------------------------

def traffic_bars(ax, measured: dict, formula: dict, unit: float, names: dict | None = None,
                 title: str | None = None):
    """Stacked bars of bytes per step by stage, in multiples of ``unit`` (e.g. (N-1)/N*Psi*2).

    ``measured``: ``{stage: {"grads": bytes, "params": bytes}}`` (a ledger's ``by_tag()``);
    ``formula``: ``{stage: bytes}``, drawn as a black line across each bar. Returns ``ax``."""
    stages = sorted(measured)
    x = list(range(len(stages)))
    grads = [measured[s].get("grads", 0) / unit for s in stages]
    params = [measured[s].get("params", 0) / unit for s in stages]
    ax.bar(x, grads, color="tab:orange", width=0.6, label="gradients (all-reduce / reduce-scatter)")
    ax.bar(x, params, bottom=grads, color="tab:blue", width=0.6, label="parameters (all-gather)")
    for i, s in enumerate(stages):
        ax.plot([i - 0.38, i + 0.38], [formula[s] / unit] * 2, color="black", linewidth=2,
                label="formula (2Ψ, 2Ψ, 2Ψ, 3Ψ)" if i == 0 else None)
    ax.set_xticks(x, [f"stage {(names or {}).get(s, s)}" for s in stages])
    ax.set_ylabel("bytes per step on one rank's wire, in Ψ units")
    top = max(g + p for g, p in zip(grads, params))
    ax.set_ylim(0, top * 1.45)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


LANES = {"all_gather": "all-gather (parameters)", "reduce_scatter": "reduce-scatter (gradients)",
         "all_reduce": "all-reduce", "broadcast": "broadcast"}


def collective_lanes(records) -> list[tuple[int, str, str, float]]:
    """``(position, lane, tag, wire bytes)`` for each collective in ``records`` (``CommRecord``s
    or ``(op, tag, wire_bytes)`` tuples), in the order they were issued; send/recv skipped."""
    out = []
    for rec in records:
        op, tag, wire = (rec.op, rec.tag, rec.wire_bytes) if hasattr(rec, "op") else rec
        if op in ("send", "recv"):
            continue
        out.append((len(out), LANES.get(op, op), tag, float(wire)))
    return out


def collective_timeline(ax, records, title: str | None = None, label_every: int = 1):
    """One step's collectives in ledger order (an asynchronous one where it was waited for): one lane per kind, bar height = wire bytes (log),
    each labelled with its tag (every ``label_every``-th). Returns the rows drawn."""
    rows = collective_lanes(records)
    lanes = [name for name in LANES.values() if any(r[1] == name for r in rows)]
    lanes += sorted({r[1] for r in rows} - set(lanes))
    colors = {LANES["all_gather"]: "tab:blue", LANES["reduce_scatter"]: "tab:orange",
              LANES["all_reduce"]: "tab:gray", LANES["broadcast"]: "tab:purple"}
    labels = []
    for pos, lane, tag, wire in rows:
        y = lanes.index(lane)
        ax.barh(y, 0.8, left=pos - 0.4, height=0.6, color=colors.get(lane, "tab:green"))
        if pos % label_every == 0:
            labels.append(ax.text(pos, y + 0.35, tag, rotation=90, fontsize=6.5, ha="center", va="bottom"))
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("collective number within the step (ledger order)")
    if title:
        ax.set_title(title)
    _room_for_labels(ax, labels, -0.5, len(lanes) + 1.2)
    return rows


def _room_for_labels(ax, labels, bottom: float, top: float) -> None:
    """Raise the y-axis top so that every vertical label ends inside the axes (a long tag on the
    top lane otherwise runs into the title): a label's height is fixed in points, so the top is
    solved for in display units."""
    ax.set_ylim(bottom, top)
    if not labels:
        return
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    height = ax.get_window_extent(renderer).height
    for text in labels:
        h = text.get_window_extent(renderer).height + 4           # points above the bar, plus a margin
        y = text.get_position()[1]
        if h < 0.9 * height:                                      # (a label taller than the axes: leave it)
            top = max(top, bottom + (y - bottom) * height / (height - h))
    ax.set_ylim(bottom, top)


# -- chapter 0's pictures: the four collectives and the ring ----------------------------------

RANK_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
SUM_COLOUR = "#3b3b3b"


def cells(values, owner) -> list[tuple]:
    """One row of a collective grid: every value held, and whose it is (a rank, ``"sum"``,
    or None for a cell the rank does not hold)."""
    return [(v, owner) for v in values]


def only_slice(values, r: int, owner, width: int) -> list[tuple]:
    """A row of ``width`` cells in which the rank holds only slice ``r`` (``values``);
    the other cells are not held."""
    k = len(values)
    return [(None, None)] * (r * k) + cells(values, owner) + [(None, None)] * (width - (r + 1) * k)


def collective_grids(title: str, panels, world_size: int | None = None):
    """Side-by-side grids, one per ``(subtitle, rows)`` in ``panels``; ``rows[r]`` is what rank r
    holds, a list of ``(value, owner)`` cells (see :func:`cells`, :func:`only_slice`). A cell's
    colour says whose data it is: one colour per rank, dark grey for a sum, white for not held.
    Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    n = world_size or max(len(rows) for _, rows in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.42 * n + 1.3), squeeze=False)
    for ax, (subtitle, rows) in zip(axes[0], panels):
        for r, row in enumerate(rows):
            for i, (value, owner) in enumerate(row):
                face = "white" if owner is None else SUM_COLOUR if owner == "sum" else RANK_COLOURS[owner]
                ax.add_patch(Rectangle((i, r), 1, 1, facecolor=face, edgecolor="#999999"))
                if owner is not None:
                    ax.text(i + 0.5, r + 0.5, f"{value:g}", ha="center", va="center", fontsize=9, color="white")
        ax.set_xlim(0, len(rows[0]))
        ax.set_ylim(len(rows), 0)
        ax.set_yticks([r + 0.5 for r in range(len(rows))], [f"rank {r}" for r in range(len(rows))])
        ax.set_xticks([])
        ax.set_title(subtitle, fontsize=10)
        for spine in ax.spines.values():
            spine.set_visible(False)
    legend = [Patch(color=RANK_COLOURS[r], label=f"rank {r}'s data") for r in range(n)]
    legend += [Patch(color=SUM_COLOUR, label=f"a sum over all {n} ranks"),
               Patch(facecolor="white", edgecolor="#999999", label="not held")]
    fig.legend(handles=legend, loc="lower center", ncol=n + 2, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def count_ones(value) -> int:
    """How many ranks are in a sum when rank r contributed 10**r: the digits "1" of ``value``."""
    return str(int(value)).count("1")


def ring_steps(starts, traces, contributors=count_ones):
    """The ring all-reduce as pictures: what each rank (row) holds of each chunk (column) at the
    start and after every step. ``starts[r]`` is rank r's chunk values before the ring;
    ``traces[r]`` its step list from ``ring_all_reduce(..., trace=...)`` (one-element chunks).
    The darker a cell, the more ranks ``contributors(value)`` says are in it; the outlined cell
    of a row is the chunk that rank has just received. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    n = len(starts)
    shades = plt.get_cmap("Purples")
    panels = [("start", [list(s) for s in starts], None)]
    panels += [(f"{step['phase']} step {step['step']}",
                [[float(c[0]) for c in traces[r][s]["chunks"]] for r in range(n)],
                [traces[r][s]["received"] for r in range(n)]) for s, step in enumerate(traces[0])]
    cols = (len(panels) + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(2.6 * cols, 5.6), squeeze=False)
    for ax, (title, grid, received) in zip(axes.flat, panels):
        for r, row in enumerate(grid):
            for c, value in enumerate(row):
                k, new = contributors(value), bool(received) and received[r] == c
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor=shades(0.15 + 0.85 * k / n),
                                       edgecolor="#d62728" if new else "white", linewidth=2.5 if new else 1))
                ax.text(c + 0.5, r + 0.5, f"{value:g}", ha="center", va="center", fontsize=8,
                        color="white" if k > n / 2 else "black")
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_xticks([c + 0.5 for c in range(n)], [f"chunk {c}" for c in range(n)], fontsize=7)
        ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(length=0)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"ring all-reduce on {n} ranks: {n - 1} reduce-scatter steps, then {n - 1} all-gather steps",
                 fontsize=11)
    fig.tight_layout()
    return fig


# -- chapter 3's shard map -----------------------------------------------------------------------

def shard_map(ax, layout, title: str | None = None, label_min: float = 0.035):
    """Who owns which shard of each flat buffer: one bar per group in ``layout`` (dicts with
    ``label``, ``names``, ``numels``, ``padded`` and ``shards``, a ``(start, end)`` per rank),
    coloured by owner, padding hatched, black ticks at parameter boundaries; a parameter wider
    than ``label_min`` of its bar is named. Returns ``ax``."""
    for y, g in enumerate(layout):
        for r, (a, b) in enumerate(g["shards"]):
            ax.barh(y, b - a, left=a, color=RANK_COLOURS[r % len(RANK_COLOURS)], height=0.6,
                    label=f"rank {r}" if y == 0 else None)
        real = sum(g["numels"])
        ax.barh(y, g["padded"] - real, left=real, color="lightgray", hatch="////", height=0.6,
                label="padding" if y == 0 else None)
        offset = 0
        for name, numel in zip(g["names"], g["numels"]):
            if offset:
                ax.plot([offset, offset], [y - 0.3, y + 0.3], color="black", linewidth=1)
            if numel > label_min * g["padded"]:
                ax.text(offset + numel / 2, y, name, ha="center", va="center", fontsize=7.5, color="white")
            offset += numel
    ax.set_yticks(range(len(layout)),
                  [f"{g['label']}: {sum(g['numels']):,} + {g['padded'] - sum(g['numels'])} padding" for g in layout])
    ax.set_ylim(len(layout) - 0.5, -0.5)
    ax.set_xlabel("element offset in the bucket's flat buffer")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(layout[0]["shards"]) + 1,
              fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


# -- text in figures, in the edition's language ---------------------------------------------------------
# A figure drawn in the Chinese edition labels itself in Chinese only where matplotlib has a font
# with CJK glyphs; without one, Chinese would show as boxes, so it keeps its English labels and
# says so once. Everything else about the figure is the same.

CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "Noto Sans CJK JP",
                "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Microsoft YaHei", "SimHei", "PingFang SC",
                "Hiragino Sans GB", "Heiti SC", "Arial Unicode MS", "AR PL UMing CN", "Droid Sans Fallback")
_CJK_FONT: list = []            # [family or None], once looked up
_SAID_ENGLISH = False


def cjk_font() -> str | None:
    """A font family matplotlib can draw Chinese with, or None (looked up once per process)."""
    if not _CJK_FONT:
        found = None
        try:
            from matplotlib import font_manager
            names = {f.name for f in font_manager.fontManager.ttflist}
            found = next((f for f in CJK_FAMILIES if f in names), None)
            if found is None:                          # any other font that has the glyphs
                from matplotlib.ft2font import FT2Font
                for f in font_manager.fontManager.ttflist:
                    if f.name.startswith("Last Resort"):   # matplotlib's own: a box for every code point
                        continue
                    try:
                        if FT2Font(f.fname).get_char_index(ord("搬")):
                            found = f.name
                            break
                    except Exception:                  # noqa: BLE001 - an unreadable font file
                        continue
        except Exception:                              # noqa: BLE001 - no matplotlib: nothing to draw anyway
            found = None
        _CJK_FONT.append(found)
    return _CJK_FONT[0]


def figure_text(catalogue, en: str, **fields) -> str:
    """``en`` (a template of ``catalogue``, see :mod:`zerolab.i18n`) for a figure: Chinese in the
    Chinese edition when matplotlib has a CJK font (which is then put first in its sans-serif
    list), else English; the first time a Chinese figure falls back, one line says why."""
    from .. import i18n
    if i18n.lang() == "zh":
        font = cjk_font()
        if font:
            import matplotlib
            families = matplotlib.rcParams["font.sans-serif"]
            if not families or families[0] != font:
                matplotlib.rcParams["font.sans-serif"] = [font] + [f for f in families if f != font]
                matplotlib.rcParams["font.family"] = "sans-serif"
            return catalogue(en, **fields)
        _say_english_once()
    return en.format(**fields) if fields else en


def _say_english_once() -> None:
    global _SAID_ENGLISH
    if not _SAID_ENGLISH:
        _SAID_ENGLISH = True
        print("（本机的 matplotlib 没有中文字体：图中标注保持英文，不会显示成方框。安装中文字体（如 fonts-noto-cjk），"
              "删除 matplotlib 的字体缓存（$MPLCONFIGDIR 或 ~/.cache/matplotlib）并重启内核后即显示中文；"
              "`zerolab report --preflight --lang zh` 会检查字体。）")
