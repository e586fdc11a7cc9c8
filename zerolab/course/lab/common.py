"""What every mode of the visual lab shares: the lab model and config, a pool of crews, figure helpers."""
from __future__ import annotations

import base64
import io
import textwrap

from ...i18n import catalogue, join_and

T = catalogue("lab")          # the lab's controls and figures in the edition's language (zerolab/i18n/messages_zh.py)


def F(en: str, **fields) -> str:
    """Text in a figure: Chinese in the Chinese edition where matplotlib has a CJK font, else English
    (``zerolab.course.viz.figure_text``: never boxes)."""
    from ..viz import figure_text
    return figure_text(T, en, **fields)


GIANTS = ("params", "grads", "optimizer_states")

GIANT_NAMES = {"params": "parameters (the furniture)", "grads": "gradients (the door stickers)",
               "optimizer_states": "optimizer states (the heavy notebook)"}

PRECISIONS = ("fp32", "bf16", "fp16")

RANK_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:olive")

# The lab's model: zerolab's TinyLM (tied embedding, a frozen parameter, sizes that do not
# divide by N), small enough that a step takes milliseconds on two ranks of a laptop.

LAB_MODEL = {"vocab": 37, "d": 26, "hidden": 53, "layers": 2, "seq_len": 16}

MICRO_BATCH = 2                # sequences per rank per step

BUCKET = 2_000                 # reduce_bucket_size (elements): a few buckets for stages 0-2


# ============================================================================= the ranks

class CrewPool:
    """One crew of ranks per world size and node layout, started on first use and kept (starting
    ranks costs about a second; running on ranks that are up costs milliseconds). ``nodes``: the
    crew's virtual nodes (``zerolab.Crew(n, nodes=...)``: n // nodes consecutive ranks each)."""

    def __init__(self, threads: int = 1, timeout: float = 120.0):
        self.threads, self.timeout = threads, timeout
        self._crews: dict = {}

    def get(self, n: int, nodes: int = 1):
        import zerolab
        crew = self._crews.get((n, nodes))
        if crew is None:
            crew = self._crews[(n, nodes)] = zerolab.Crew(n, threads=self.threads, timeout=self.timeout,
                                                          echo=False, nodes=nodes)
        return crew

    def run(self, n: int, fn, *args, nodes: int = 1, **kwargs) -> list:
        return self.get(n, nodes).run(fn, *args, **kwargs)

    def close(self) -> None:
        while self._crews:
            self._crews.popitem()[1].close()

    def __enter__(self) -> "CrewPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

def _run(n: int, fn, *args, pool: CrewPool | None = None, nodes: int = 1):
    if pool is not None:
        return pool.run(n, fn, *args, nodes=nodes)
    import zerolab
    return zerolab.launch(fn, n, *args, threads=1, echo=False, nodes=nodes)

def lab_model():
    """The lab's model, the same weights on every rank (seed 0)."""
    from ...models import TinyLM
    return TinyLM(**LAB_MODEL, seed=0)

def lab_config(stage: int, world_size: int, precision: str = "bf16", ideal: bool = False, **zero) -> dict:
    """The DeepSpeed config of every lab run: AdamW, ``MICRO_BATCH`` sequences per rank,
    buckets of ``BUCKET`` elements, and at stage 3 every parameter sharded (persistence
    threshold 0: DeepSpeed's default, 100,000 elements, would keep this small model whole) and
    gathered again for backward (reuse distance 0: DeepSpeed's default, 10^9 elements, would keep
    the whole model gathered from its forward to its backward).

    The collectives are DeepSpeed's for that config. ``ideal`` (stages 1-2 only) adds zerolab's
    own switch ``"zerolab": {"ideal_reduce_scatter": true}``: the ZeRO paper's reduce-scatter of
    each bucket (2Ψ per step) instead of DeepSpeed's all-reduce of each bucket (3Ψ with the
    all-gather)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if ideal and stage not in (1, 2):
        raise ValueError(f"ideal (the paper's reduce-scatter) is a switch of stages 1 and 2, not of stage {stage}")
    cfg = {"train_batch_size": MICRO_BATCH * world_size, "train_micro_batch_size_per_gpu": MICRO_BATCH,
           "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": BUCKET,
                                 "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                                 "stage3_prefetch_bucket_size": 0, **zero}}
    if precision == "fp16":       # a small first loss scale: no skipped first step, so Adam's states exist
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    elif precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    if ideal:
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg


def pattern(stage: int, ideal: bool = False) -> str:
    """Whose collectives a lab run shows, in one line: DeepSpeed's for the config, or the paper's
    ideal through zerolab's switch."""
    if stage == 0:
        return T("DeepSpeed's stage 0 (DDP's reduction): the gradients all-reduced at the boundary, "
                 "in buckets of 5e8 elements")
    if stage in (1, 2) and ideal:
        return T("the ZeRO paper's ideal, zerolab's own switch ideal_reduce_scatter (not DeepSpeed's): "
                 "each gradient bucket reduce-scattered, the parameters all-gathered after the step: 2Ψ")
    if stage in (1, 2):
        return T("DeepSpeed's default: each gradient bucket all-reduced (each rank keeps its "
                 "partition's slices), one all-gather of the flat parameter buffer after the step: 3Ψ")
    return T("DeepSpeed's stage 3 at reuse distance 0, prefetch off: each module's parameters all-gathered "
             "for forward and again for backward, gradients reduce-scattered per bucket of parameters: 3Ψ")

def _batches(steps: int, world_size: int):
    from ...models import lm_batches
    return lm_batches(steps, MICRO_BATCH * world_size, LAB_MODEL["seq_len"], LAB_MODEL["vocab"])

def _plt():
    import matplotlib.pyplot as plt
    return plt

# 100, not 72: at 72 dpi a 7-point legend is 7 pixels high. The widget's image is drawn no wider
# than its cell (image_layout), so the larger picture is scaled down, never cut.
PNG_DPI = 100


def image_layout():
    """The layout of a widget's picture: as wide as the output area at most, its height to scale."""
    import ipywidgets as W
    return W.Layout(max_width="100%", height="auto")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI)
    _plt().close(fig)
    return buf.getvalue()

_STATIC_BOX = None


def lab_box(children, *, png: bytes = b"", text: str = "", html: str = "", css_class: str = ""):
    """A widget's box that also renders without a kernel. Where nothing draws widgets (GitHub,
    nbviewer, a printed handout), a plain VBox shows as the line ``VBox(...)``; this one also
    offers the state it was made in: its picture (``png``), its text, or an HTML table. JupyterLab
    with a kernel draws the live widget, as before (the widget view outranks the other types)."""
    global _STATIC_BOX
    if _STATIC_BOX is None:
        import ipywidgets as W

        class StaticFallbackBox(W.VBox):
            static: dict = {}

            def _repr_mimebundle_(self, **kwargs):
                data = super()._repr_mimebundle_(**kwargs)
                if isinstance(data, tuple):              # (data, metadata)
                    data = data[0]
                return {**data, **self.static}

        _STATIC_BOX = StaticFallbackBox
    box = _STATIC_BOX(children)
    box.static = {k: v for k, v in (("image/png", base64.b64encode(png).decode("ascii") if png else ""),
                                    ("text/plain", text), ("text/html", html)) if v}
    if css_class:
        box.add_class(css_class)
    return box


def _html(text: str) -> str:
    import html
    return f"<pre style='font-size:12px; line-height:1.25'>{html.escape(text)}</pre>"


def pad(text: str, n: int, right: bool = False) -> str:
    """``text`` padded to ``n`` columns (a Chinese character takes two), on the left if ``right``."""
    from ...i18n import width
    fill = " " * max(0, n - width(text))
    return fill + text if right else text + fill


def _wrap(lines: list[str], width: int = 98) -> str:
    """Printed lines of at most ``width`` characters (JupyterLab wraps longer ones mid-word),
    continuations indented under their line."""
    from ... import i18n
    out = []
    for line in lines:
        for part in line.split("\n"):
            lead = len(part) - len(part.lstrip(" "))
            cols = i18n.width(part)
            if cols > width and cols != len(part):          # Chinese: broken by the columns it takes
                out.append(i18n.fill(part, width, subsequent_indent=" " * (lead + 4)))
            else:
                out.append(textwrap.fill(part, width, subsequent_indent=" " * (lead + 4),
                                         break_long_words=False) if len(part) > width else part)
    return "\n".join(out)


def _run_controls(world_size: int, stage: int, precision: str | None, max_ranks: int,
                  stages=(0, 1, 2, 3)):
    """The controls every mode starts with: N ranks, the stage and (if given) the precision."""
    import ipywidgets as W
    n = W.IntSlider(value=world_size, min=1, max=max_ranks, description=T("N ranks"), continuous_update=False)
    st = W.Dropdown(options=list(stages), value=stage, description=T("stage"))
    if precision is None:
        return n, st
    return n, st, W.Dropdown(options=list(PRECISIONS), value=precision, description=T("precision"))
