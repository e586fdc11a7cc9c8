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
    """One step's collectives in issue order: one lane per kind, bar height = wire bytes (log),
    each labelled with its tag (every ``label_every``-th). Returns the rows drawn."""
    rows = collective_lanes(records)
    lanes = [name for name in LANES.values() if any(r[1] == name for r in rows)]
    lanes += sorted({r[1] for r in rows} - set(lanes))
    colors = {LANES["all_gather"]: "tab:blue", LANES["reduce_scatter"]: "tab:orange",
              LANES["all_reduce"]: "tab:gray", LANES["broadcast"]: "tab:purple"}
    for pos, lane, tag, wire in rows:
        y = lanes.index(lane)
        ax.barh(y, 0.8, left=pos - 0.4, height=0.6, color=colors.get(lane, "tab:green"))
        if pos % label_every == 0:
            ax.text(pos, y + 0.35, tag, rotation=90, fontsize=6.5, ha="center", va="bottom")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.5, len(lanes) + 1.2)
    ax.set_xlabel("collective number within the step (issue order)")
    if title:
        ax.set_title(title)
    return rows
