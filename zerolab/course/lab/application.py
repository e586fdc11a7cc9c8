"""The lab's application mode: which configs fit a cluster and how fast, from the simulator and estimators."""
from __future__ import annotations

import dataclasses
import math

from .common import F, T, _plt, _png, image_layout, _html, _wrap, lab_box, pad


MODELS = {
    "GPT-2 XL (1.5B)": (1.56e9, 48, 1600, 50257),
    "Llama-2 7B": (6.74e9, 32, 4096, 32000),
    "Llama-2 13B": (13.0e9, 40, 5120, 32000),
    "Llama-2 70B": (69.0e9, 80, 8192, 32000),
    "GPT-3 (175B)": (175e9, 96, 12288, 50257),
}

@dataclasses.dataclass
class PlanRow:
    name: str
    stage: int
    offload: str
    gpu_bytes: dict                 # the simulator's per-GPU bytes: params, grads, optimizer_states, ...
    cpu_bytes: float
    fits: bool                      # gpu_bytes["total"] <= the GPU memory asked for
    step_s: float
    bound_by: str
    tokens_per_s: float
    deepspeed_gpu_bytes: float | None   # DeepSpeed's estimator (model states + 4 x largest layer), or None

@dataclasses.dataclass
class Plan:
    model: str
    params: float
    gpus: int
    gpu: str
    gpu_memory: float               # bytes per GPU
    link: str
    seq: int
    micro_batch: int
    rows: list
    host_memory: float = 0.0        # bytes of CPU memory, all nodes together

    def best(self) -> PlanRow | None:
        """The fastest configuration that fits; among equally fast ones (within 1 %), the lowest
        stage, the one that communicates least."""
        fitting = [r for r in self.rows if r.fits]
        if not fitting:
            return None
        fastest = min(r.step_s for r in fitting)
        return next(r for r in fitting if r.step_s <= fastest * 1.01)

    def verdict(self, tr=T) -> str:
        """The fastest configuration that fits, in one line (``tr``: :data:`T` for printed text, ``F``
        for a figure's)."""
        best = self.best()
        if best is None:
            return tr("nothing fits: more GPUs, more memory (GPU or host), or a smaller micro-batch")
        ties = [_row_name(r.name, tr) for r in self.rows if r.fits and r is not best
                and r.step_s <= best.step_s * 1.01]
        return (tr("fastest that fits: {name}, {s:.2f} s per step", name=_row_name(best.name, tr), s=best.step_s)
                + (tr(" ({names} as fast)", names=", ".join(ties)) if ties else ""))

    def describe(self) -> str:
        head = [T("{model} on {gpus} x {gpu} with {gb:.0f} GB each, {link},", model=self.model, gpus=self.gpus,
                  gpu=self.gpu, gb=self.gpu_memory / 1e9, link=self.link),
                T("{host:,.0f} GB of host memory; sequence {seq}, micro-batch {mb}", host=self.host_memory / 1e9,
                  seq=self.seq, mb=self.micro_batch)]
        cols = ((T.mark("GB/GPU"), 8), (T.mark("DS est."), 8), (T.mark("host GB"), 9), (T.mark("fits"), 6),
                (T.mark("step s"), 8), (T.mark("tokens/s"), 10))
        lines = head + [pad(T("configuration"), 30) + "".join(pad(T(c), w, right=True) for c, w in cols)
                        + "  " + T("bound by")]
        for r in self.rows:
            ds = f"{r.deepspeed_gpu_bytes / 1e9:>8.1f}" if r.deepspeed_gpu_bytes is not None else f"{'-':>8}"
            lines.append(f"{pad(_row_name(r.name), 30)}{r.gpu_bytes['total'] / 1e9:>8.1f}{ds}"
                         f"{r.cpu_bytes * self.gpus / 1e9:>9,.0f}{pad(T('yes') if r.fits else T('NO'), 6, True)}"
                         f"{r.step_s:>8.2f}{r.tokens_per_s:>10,.0f}  {T.text(r.bound_by)}")
        lines.append(self.verdict())
        lines.append(T("GB = 1e9 bytes. DS est.: DeepSpeed's model-state estimator (no activations); "
                       "host GB: all nodes"))
        lines.append(T("step s: zerolab.tools.simulate with DeepSpeed's traffic per step: 2Ψ at stage 0, 3Ψ at stages 1-3"))
        return _wrap(lines)


BOUND_BY = (T.mark("compute"), T.mark("communication"), T.mark("PCIe transfers"),   # tools.simulate.Estimate.bound_by
            T.mark("CPU optimizer"))


def _row_name(name: str, tr=T) -> str:
    """A configuration's name ("stage 3 + offload opt+params") in the edition's language."""
    stage, plus, what = name.partition(" + offload ")
    return tr("{stage} + offload {what}", stage=stage, what=what) if plus else name

def plan(model: str = "Llama-2 7B", gpus: int = 8, gpu: str = "a100-80gb", gpu_memory_gb: float | None = None,
         link: str = "nvlink-a100", seq: int = 2048, micro_batch: int = 1, gpus_per_node: int = 8,
         host_memory_gb: float = 1024, checkpointing: bool = True) -> Plan:
    """Every configuration of :func:`zerolab.tools.simulate.table` (stages 0-3, stage 3 with optimizer
    offload, and with parameters offloaded too) for ``model`` (a key of :data:`MODELS`) on
    ``gpus`` GPUs of kind ``gpu`` (its FLOP/s; its memory unless ``gpu_memory_gb`` is given),
    ``host_memory_gb`` of CPU memory per node of ``gpus_per_node`` GPUs, beside DeepSpeed's
    estimator of the model states where it has one (stages 2 and 3). A configuration fits when
    the GPU holds what the simulator puts on it and the nodes' hosts hold what it offloads."""
    from ...tools import estimate, simulate
    params, layers, hidden, vocab = MODELS[model]
    memory = simulate.GPUS[gpu][0] if gpu_memory_gb is None else gpu_memory_gb * 1e9
    per_node = min(gpus, gpus_per_node)
    nodes = math.ceil(gpus / per_node)
    largest = max(vocab * hidden, 4 * hidden * hidden)          # the embedding, or one MLP matrix
    host = host_memory_gb * 1e9 * nodes
    rows = []
    for est in simulate.table(params, layers, hidden, seq, micro_batch, gpus, gpu=gpu, link=link,
                              checkpointing=checkpointing, host_bytes=host):
        ds = None
        if est.stage == 2 and not est.offload:
            ds = estimate.estimate_zero2_model_states_mem_needs(params, per_node, nodes, cpu_offload=False)[1]
        elif est.stage == 3:
            ds = estimate.estimate_zero3_model_states_mem_needs(
                params, largest, per_node, nodes, cpu_offload="optimizer" in est.offload,
                cpu_offload_params="params" in est.offload)[1]
        offload = est.offload.replace("optimizer+params", "opt+params")
        name = f"stage {est.stage}" + (f" + offload {offload}" if offload else "")
        rows.append(PlanRow(name, est.stage, est.offload, est.gpu_bytes, est.cpu_bytes,
                            est.gpu_bytes["total"] <= memory and est.cpu_bytes * gpus <= host,
                            est.step_s, est.bound_by,
                            micro_batch * seq * gpus / est.step_s, ds))
    return Plan(model, params, gpus, gpu, memory, link, seq, micro_batch, rows, host)


# ============================================================================= extension: what lives where, and when

def draw_plan(p: Plan):
    """Memory per GPU of each configuration (stacked: model states, activations, working
    buffers) against the GPU's memory, and the step time of those that fit."""
    plt = _plt()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(11, 3.8))
    names = [r.name.replace("stage 3 + offload ", "3 + offload\n") for r in p.rows]
    x = range(len(p.rows))
    bottoms = [0.0] * len(p.rows)
    for key, colour, label in (("params", "#4c72b0", T.mark("parameters")), ("grads", "#dd8452", T.mark("gradients")),
                               ("optimizer_states", "#8172b3", T.mark("optimizer states")),
                               ("activations", "#55a868", T.mark("activations")),
                               ("working", "#937860", T.mark("working buffers"))):
        vals = [r.gpu_bytes[key] / 1e9 for r in p.rows]
        ax_m.bar(x, vals, bottom=bottoms, color=colour, label=F(label))
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    cap = p.gpu_memory / 1e9
    ax_m.axhline(cap, color="black", linestyle="--", label=F("{cap:.0f} GB per GPU", cap=cap))
    top = 2 * cap
    for i, r in enumerate(p.rows):
        total = r.gpu_bytes["total"] / 1e9
        ax_m.text(i, min(total, top), f"{total:,.0f} GB" + (" ↑" if total > top else ""), ha="center",
                  va="top" if total > top else "bottom", fontsize=7)
    ax_m.set_ylim(0, top)
    ax_m.set_xticks(list(x), names, fontsize=7)
    ax_m.set_ylabel(F("GB per GPU"))
    ax_m.legend(fontsize=7, loc="upper right")
    ax_m.set_title(F("{model} on {gpus} GPUs: what each GPU must hold", model=p.model, gpus=p.gpus), fontsize=10)
    times = [r.step_s if r.fits else 0.0 for r in p.rows]
    ax_t.bar(x, times, color=["tab:green" if r.fits else "lightgrey" for r in p.rows])
    for i, r in enumerate(p.rows):
        ax_t.text(i, r.step_s if r.fits else 0.0, f"{r.step_s:.2f} s" if r.fits else F("does\nnot fit"),
                  ha="center", va="bottom", fontsize=7)
    ax_t.set_xticks(list(x), names, fontsize=7)
    ax_t.set_ylabel(F("seconds per step (simulated)"))
    ax_t.set_title(p.verdict(F).split(" (")[0].split("（")[0], fontsize=10)
    ax_t.set_ylim(0, max([r.step_s for r in p.rows if r.fits] or [1.0]) * 1.3)
    fig.tight_layout()
    return fig

def application_widget(model: str = "Llama-2 7B", gpus: int = 8, gpu: str = "a100-80gb", gpu_memory_gb: int = 80,
                       link: str = "nvlink-a100"):
    """Controls model, GPU count, GPU, GPU memory and interconnect over :func:`plan`."""
    import ipywidgets as W
    from ...tools.simulate import GPUS, LINKS
    md = W.Dropdown(options=list(MODELS), value=model, description=T("model"))
    ng = W.Dropdown(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=gpus, description=T("GPUs"))
    kind = W.Dropdown(options=list(GPUS), value=gpu, description="GPU")
    mem = W.Dropdown(options=[16, 24, 32, 40, 48, 80, 94, 141], value=gpu_memory_gb, description=T("GB each"))
    ln = W.Dropdown(options=list(LINKS), value=link, description=T("link"))
    mb = W.Dropdown(options=[1, 2, 4, 8], value=1, description=T("micro-batch"))
    host = W.Dropdown(options=[256, 512, 1024, 2048], value=1024, description=T("host GB/node"))
    for w in (md, ng, kind, mem, ln, mb, host):     # labels at their own width: "host GB/node" was cut off
        w.style.description_width = "initial"
    image = W.Image(format="png", layout=image_layout())
    summary = W.HTML()
    first = {}

    def update(*_):
        p = plan(md.value, ng.value, kind.value, mem.value, ln.value, micro_batch=mb.value,
                 host_memory_gb=host.value)
        image.value = _png(draw_plan(p))
        summary.value = _html(p.describe())
        first.setdefault("text", p.describe())

    for w in (md, ng, kind, mem, ln, mb, host):
        w.observe(update, names="value")
    update()
    return lab_box([W.HBox([md, ng, kind, mem]), W.HBox([ln, mb, host]), image, summary], png=image.value,
                   text=first["text"], css_class="zerolab-lab-application")
