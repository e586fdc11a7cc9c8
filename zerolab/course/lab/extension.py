"""The lab's extension mode: offload and stage-3 gathers, what lives where and when."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time

from ...config import ZeroConfig
from .common import (F, T, join_and, image_layout, RANK_COLORS, CrewPool, _run, lab_model, lab_config, _batches, _plt, _png, _html, _wrap,
                     _run_controls, lab_box, pad)
from .core import _probed_step


OFFLOAD_DEVICES = ("none", "cpu", "nvme")

PLACES = (T.mark("device"), T.mark("host"), T.mark("nvme"))

PLACE_NAMES = {"device": T.mark("on the device"), "host": T.mark("in host memory"), "nvme": T.mark("on NVMe")}

SUB_GROUP_SIZES = (1_000_000_000, 2_000, 1_000, 500)      # DeepSpeed's default first

def offload_config(stage: int, world_size: int, offload_optimizer: str = "none", offload_param: str = "none",
                   sub_group_size: int = ZeroConfig.sub_group_size, pipeline_read: bool = False, pipeline_write: bool = False,
                   nvme_path: str | None = None, precision: str = "bf16") -> dict:
    """:func:`lab_config` with offload: ``offload_optimizer`` and ``offload_param`` each "none",
    "cpu" or "nvme" (parameters only at stage 3); NVMe files go under ``nvme_path``. Offloaded
    parameters on NVMe use ``max_in_cpu: 0`` (DeepSpeed's default, 10^9 elements kept in host
    memory, would keep all of this small model's shards there and write no file)."""
    for name, value in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
        if value not in OFFLOAD_DEVICES:
            raise ValueError(f"{name} must be one of {', '.join(OFFLOAD_DEVICES)}, not {value!r}")
    if offload_param != "none" and stage != 3:
        raise ValueError(f"offload_param needs stage 3 (parameters are sharded only there), not stage {stage}")
    if offload_optimizer != "none" and stage == 0:
        raise ValueError("offload_optimizer needs stage 1, 2 or 3 (each rank offloads its shard)")
    if "nvme" in (offload_optimizer, offload_param) and not nvme_path:
        raise ValueError("offload to nvme needs nvme_path (a folder)")
    zero: dict = {"sub_group_size": int(sub_group_size)}
    if offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": offload_optimizer}
        if offload_optimizer == "nvme":
            zero["offload_optimizer"].update(nvme_path=nvme_path, pipeline_read=bool(pipeline_read),
                                             pipeline_write=bool(pipeline_write))
    if offload_param != "none":
        zero["offload_param"] = {"device": offload_param}
        if offload_param == "nvme":
            zero["offload_param"].update(nvme_path=nvme_path, max_in_cpu=0)
    return lab_config(stage, world_size, precision, **zero)

@dataclasses.dataclass
class Placement:
    """Where one engine's bytes live, and when they moved during one recorded step.

    ``places[r][where]``: ``engine.memory(where)`` on rank r after the step, for where in
    :data:`PLACES` (params, grads, optimizer_states, buffers, ...). ``sub_groups[r]``: the
    elements of each sub-group the optimizer step was tiled into; ``tiles[r]``: how many tensors
    the optimizer steps (groups, cut at ``sub_group_size`` when offloaded). ``io[r]``: the step's NVMe
    traffic: ``{"optimizer"|"params": {"reads", "writes", "bytes_read", "bytes_written"}}``.
    ``gathers[r]``: ``(tag, numel, start, end)`` of each parameter all-gather (stage 3);
    ``prefetched[r]``: how many of them the stage issued ahead (its ``prefetches`` counter; 0
    where the stage has none).
    ``memory[r]``: ``(t, label, device buffers)`` after every collective and phase boundary.
    ``events[r]``: the step's timeline, ``(kind, name, start, end)`` in seconds since the step
    began (kinds compute, comm, async, wait, host, io). ``seconds[r]``: its
    :meth:`zerolab.comm.timeline.Timeline.summary`. Times are measured: only pictures show them."""
    world_size: int
    stage: int
    precision: str
    offload_optimizer: str
    offload_param: str
    sub_group_size: int
    pipeline_read: bool
    pipeline_write: bool
    psi: int
    switches: dict
    places: list
    sub_groups: list
    tiles: list
    io: list
    gathers: list
    memory: list
    events: list
    seconds: list
    prefetched: list
    nvme_dir: str | None = None      # the temporary folder the NVMe files went to (removed afterwards)

    def bytes(self, rank: int, where: str, giant: str = "model_states") -> int:
        return self.places[rank][where][giant]

    def split(self, rank: int = 0) -> dict[str, float]:
        """Measured seconds of the step on ``rank``: on the training thread ``compute`` (forward,
        backward and the step's device work, waits for parameter reads included), ``comm``
        (exposed communication) and ``host`` (the host optimizer step, sub-group by sub-group,
        waits for its NVMe reads and unpipelined writes included); ``io``: the I/O threads' busy time."""
        s = self.seconds[rank]
        return {"compute": max(s["compute"] - s["host_step"], 0.0), "comm": s["exposed_comm"],
                "host": s["host_step"], "io": s["nvme_io"]}

    def setting(self, tr=T) -> str:
        """The setting in one line (``tr``: :data:`T` for printed text, ``F`` for a figure's)."""
        opt = tr({"none": T.mark("optimizer states on the device"), "cpu": T.mark("optimizer states in host memory"),
                  "nvme": T.mark("optimizer states on NVMe")}[self.offload_optimizer])
        if self.offload_optimizer == "nvme":
            pipes = [k for k, on in ((T.mark("read"), self.pipeline_read), (T.mark("write"), self.pipeline_write))
                     if on]
            opt += (tr(" (pipelined {which})", which=join_and([tr(k) for k in pipes], tr)) if pipes else
                    tr(" (no pipelining)"))
        if self.stage == 3:
            opt += tr({"none": T.mark(", parameter shards on the device"),
                       "cpu": T.mark(", parameter shards in host memory"),
                       "nvme": T.mark(", parameter shards on NVMe")}[self.offload_param])
        return tr("stage {stage}, N = {n}, {precision}: {opt}, sub_group_size {sg:,}", stage=self.stage,
                  n=self.world_size, precision=self.precision, opt=opt, sg=self.sub_group_size)

    def describe(self) -> str:
        lines = [self.setting(), T("the engine's switches (engine.switches()):")]
        lines += [f"  {k}: {v}" for k, v in self.switches.items()]
        lines.append(T("bytes after the step (engine.memory(where); Ψ = {psi:,}):", psi=self.psi))
        lines.append(f"{'rank':>4}  " + pad(T("where"), 7) + "".join(
            pad(T(h), w, True) for h, w in ((T.mark("params"), 10), (T.mark("grads"), 10),
                                            (T.mark("optimizer states"), 18), (T.mark("buffers"), 9))))
        for r in range(self.world_size):
            for where in PLACES:
                m = self.places[r][where]
                lines.append(f"{r if where == 'device' else '':>4}  {pad(T(where), 7)}{m['params']:>10,}"
                             f"{m['grads']:>10,}{m['optimizer_states']:>18,}{m['buffers']:>9,}")
        sizes = ", ".join(f"{n:,}" for n in self.sub_groups[0])
        where = T({"none": T.mark("on the device"), "cpu": T.mark("on the host"),
                   "nvme": T.mark("on the host, streamed from NVMe")}[self.offload_optimizer])
        lines.append(T("the optimizer step {where}: 1 sub-group of {sizes} elements (rank 0)", where=where,
                       sizes=sizes) if len(self.sub_groups[0]) == 1 else
                     T("the optimizer step {where}: {n} sub-groups of {sizes} elements (rank 0)", where=where,
                       n=len(self.sub_groups[0]), sizes=sizes))
        for what, label in (("optimizer", T.mark("optimizer states")), ("params", T.mark("parameter shards"))):
            io = self.io[0].get(what)
            if io:
                lines.append(T("NVMe during the step, {label} (rank 0): {reads} reads ({read:,} B), {writes} writes "
                               "({written:,} B)", label=T(label), reads=io["reads"], read=io["bytes_read"],
                               writes=io["writes"], written=io["bytes_written"]))
        if self.stage == 3:
            g = self.gathers[0]
            peak = self.places[0]["device"]["peak_buffers"]
            ahead = self.prefetched[0]
            lines.append(T("stage 3: {n} parameter all-gathers ({numel:,} elements) in the step on rank 0, ", n=len(g),
                           numel=sum(n for _, n, _, _ in g))
                         + (T("carrying {ahead} module gathers prefetched ahead", ahead=ahead) if ahead else
                            T("each just in time, none prefetched"))
                         + T("; at most {peak:,} B gathered or in flight at once", peak=peak))
        return _wrap(lines)

def _placement_on_rank(cfg: dict) -> dict:
    from ... import initialize, rank_info
    from ...models import lm_loss
    from ...zero.reference import train_engine
    info = rank_info()
    engine = initialize(lab_model(), cfg)
    try:
        batches = _batches(2, info.world_size)
        train_engine(engine, batches[:1], lm_loss)             # warm-up step: Adam's states appear
        st = engine.stage
        stores = {"optimizer": st.home.nvme, "params": getattr(getattr(st.params, "shards", None), "files", None)}
        before = {k: (s.bytes_read, s.bytes_written) for k, s in stores.items() if s is not None}
        prefetches = getattr(st, "prefetches", 0)
        samples: list = []
        t0 = time.perf_counter()

        def sample(label: str, after: int | None = None) -> None:
            samples.append((time.perf_counter() - t0, label, engine.memory()["buffers"]))

        records, events, tl, _ = _probed_step(engine, batches[1], info, sample, t0)
        gathers = [(r.tag, r.numel) for r in records if r.op == "all_gather" and r.tag.startswith("params")]
        gspans = [(s, e) for k, n, s, e in events if k in ("comm", "async") and n.startswith("all_gather params")]
        io = {}
        for what, store in stores.items():
            if store is None:
                continue
            key = ".param." if what == "params" else None
            mine = [n for k, n, _, _ in events if k == "io" and ((key in n) if key else (".param." not in n))]
            io[what] = {"reads": sum(n.startswith("nvme read") for n in mine),
                        "writes": sum(n.startswith("nvme write") for n in mine),
                        "bytes_read": store.bytes_read - before[what][0],
                        "bytes_written": store.bytes_written - before[what][1]}
        home = st.home
        out = {"places": {w: engine.memory(w) for w in PLACES},
               "sub_groups": [sum(home.tiles[j][2] - home.tiles[j][1] for j in sg) for sg in home.sub_groups],
               "tiles": len(home.tensors), "io": io,
               "gathers": [(tag, n, *(gspans[i] if len(gspans) == len(gathers) else (None, None)))
                           for i, (tag, n) in enumerate(gathers)],
               "memory": samples, "events": events, "seconds": tl.summary(),
               "switches": engine.switches(), "psi": sum(g.numel for g in st.groups),
               "prefetched": getattr(st, "prefetches", 0) - prefetches}
    finally:
        engine.close()
    return out

_PLACEMENT_CACHE: dict = {}

def placement(world_size: int = 2, stage: int = 3, offload_optimizer: str = "cpu", offload_param: str = "none",
              sub_group_size: int = ZeroConfig.sub_group_size, pipeline_read: bool = False, pipeline_write: bool = False,
              precision: str = "bf16", *, pool: CrewPool | None = None) -> Placement:
    """Run the lab's model with this offload on ``world_size`` real ranks: a warm-up step, then
    one step recorded (timeline with its host-step and NVMe I/O events, the ledger's parameter
    gathers, ``engine.memory()`` on the device, the host and NVMe afterwards). NVMe files go to
    a temporary folder (``tempfile.mkdtemp``), removed when the run ends. Cached per setting."""
    nvme = "nvme" in (offload_optimizer, offload_param)
    if not nvme:
        pipeline_read = pipeline_write = False            # they only steer NVMe reads and writes
    key = (world_size, stage, offload_optimizer, offload_param, int(sub_group_size), bool(pipeline_read),
           bool(pipeline_write), precision)
    if key in _PLACEMENT_CACHE:
        return _PLACEMENT_CACHE[key]
    offload_config(stage, world_size, offload_optimizer, offload_param, sub_group_size, precision=precision,
                   nvme_path="." if nvme else None)       # refuse a bad setting before starting ranks
    folder = tempfile.mkdtemp(prefix="zerolab-lab-nvme-") if nvme else None
    try:
        cfg = offload_config(stage, world_size, offload_optimizer, offload_param, sub_group_size,
                             pipeline_read, pipeline_write, nvme_path=folder, precision=precision)
        per_rank = _run(world_size, _placement_on_rank, cfg, pool=pool)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    first = per_rank[0]
    result = Placement(world_size, stage, precision, offload_optimizer, offload_param, int(sub_group_size),
                       bool(pipeline_read), bool(pipeline_write), first["psi"], first["switches"],
                       [r["places"] for r in per_rank], [r["sub_groups"] for r in per_rank],
                       [r["tiles"] for r in per_rank], [r["io"] for r in per_rank], [r["gathers"] for r in per_rank],
                       [r["memory"] for r in per_rank], [r["events"] for r in per_rank],
                       [r["seconds"] for r in per_rank], [r["prefetched"] for r in per_rank], folder)
    _PLACEMENT_CACHE[key] = result
    return result


# ============================================================================= pictures

_GIANT_COLOURS = (("params", "#4c72b0", T.mark("parameters")), ("grads", "#dd8452", T.mark("gradients")),
                  ("optimizer_states", "#8172b3", T.mark("optimizer states")),
                  ("buffers", "#937860", T.mark("buffers")))

def draw_placement(p: Placement):
    """Where the bytes live (per rank, per place, stacked by giant), the step's time split as
    measured, rank 0's timeline with its host-step and NVMe rows, and what was gathered on the
    device over the step (stage 3's gather and release)."""
    plt = _plt()
    n = p.world_size
    fig = plt.figure(figsize=(11, 7.6))
    grid = fig.add_gridspec(3, 2, height_ratios=[1.25, 1.35, 0.8], width_ratios=[1.35, 1])
    ax_b, ax_s = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_t = fig.add_subplot(grid[1, :])
    ax_m = fig.add_subplot(grid[2, :], sharex=ax_t)
    # bytes: one group of N bars per place
    width = 0.8 / n
    top = 1
    ticks, tick_labels = [], []
    for pi, where in enumerate(PLACES):
        for r in range(n):
            x = pi + (r - (n - 1) / 2) * width
            bottom = 0
            for giant, colour, label in _GIANT_COLOURS:
                v = p.bytes(r, where, giant)
                ax_b.bar(x, v, width * 0.9, bottom=bottom, color=colour,
                         label=F(label) if (pi, r) == (0, 0) else None)
                bottom += v
            top = max(top, bottom)
            ax_b.text(x, bottom, f" {bottom:,}", ha="center", va="bottom", fontsize=6.5, rotation=90)
            ticks.append(x)
            tick_labels.append(f"r{r}")
        ax_b.text(pi, -0.2, F(PLACE_NAMES[where]), ha="center", va="top", fontsize=8,
                  transform=ax_b.get_xaxis_transform())
    ax_b.set_xticks(ticks, tick_labels, fontsize=7)
    ax_b.set_ylim(0, top * 1.6)
    ax_b.set_ylabel(F("bytes (engine.memory(where))"), fontsize=8)
    ax_b.set_title(F("what each rank holds where, after the step"), fontsize=9)
    ax_b.legend(fontsize=7, loc="upper left", ncol=4, frameon=False)
    # time split, measured
    parts = (("compute", "#4c72b0", T.mark("compute")), ("comm", "#dd8452", T.mark("exposed comm")),
             ("host", "#8172b3", T.mark("host step")))
    for r in range(n):
        split = p.split(r)
        left = 0.0
        for key, colour, label in parts:
            ax_s.barh(2 * r, split[key] * 1e3, left=left, color=colour, label=F(label) if r == 0 else None)
            left += split[key] * 1e3
        ax_s.barh(2 * r + 0.8, split["io"] * 1e3, color="#55a868", label=F("NVMe I/O threads") if r == 0 else None)
    longest = max(max(sum(p.split(r)[k] for k, _, _ in parts), p.split(r)["io"]) for r in range(n)) * 1e3
    ax_s.set_xlim(0, max(longest, 1e-3) * 1.05)          # every bar inside its axis, whatever its length
    ax_s.set_yticks([2 * r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=8)
    ax_s.set_ylim(2 * n + 1.1, -0.6)                     # (inverted) a band below the bars for the legend
    ax_s.set_xlabel(F("ms in the recorded step (measured; machine-dependent)"), fontsize=8)
    ax_s.set_title(F("the step's time: training thread, and I/O threads below"), fontsize=9)
    # inside the axes: a legend below them made every row of the grid leave room for it (a blank gap)
    ax_s.legend(fontsize=7, loc="lower center", ncol=4, frameon=False)
    # rank 0's timeline: what ran when, and where the bytes moved
    rows = ((T.mark("compute spans"), "#4c72b0", lambda k, name: k == "compute"),
            (T.mark("parameter gathers"), "#c44e52", lambda k, name: k in ("comm", "async") and name.startswith("all_gather params")),
            (T.mark("other collectives"), "#dd8452", lambda k, name: k in ("comm", "async", "wait")
             and not name.startswith("all_gather params")),
            (T.mark("host step (sub-groups)"), "#8172b3", lambda k, name: k == "host"),
            (T.mark("NVMe: parameter shards"), None, lambda k, name: k == "io" and ".param." in name),
            (T.mark("NVMe: optimizer states"), None, lambda k, name: k == "io" and ".param." not in name))
    for row, (label, colour, pick) in enumerate(rows):
        for io_kind, io_colour in ((T.mark("read"), "#8fd19e"), (T.mark("write"), "#2f7d4a")):
            spans = [(s * 1e3, max((e - s) * 1e3, 0.01)) for k, name, s, e in p.events[0] if pick(k, name)
                     and (colour is not None or name.startswith(f"nvme {io_kind}"))]
            if spans:
                ax_t.broken_barh(spans, (row - 0.35, 0.7), color=colour or io_colour,
                                 edgecolor="white" if row >= 3 else (colour or io_colour), linewidth=0.3)
            if colour is not None:
                break
    for k, name, s, e in p.events[0]:
        if k == "compute":
            ax_t.text((s + e) / 2 * 1e3, -0.55, name, ha="center", va="bottom", fontsize=7)
    ax_t.set_yticks(range(len(rows)), [F(r[0]) for r in rows], fontsize=8)
    ax_t.set_ylim(len(rows) - 0.4, -0.9)
    ax_t.set_title(F("rank 0's step: when each thing ran, and when the bytes moved (measured; NVMe: light = read, "
                     "dark = write)"), fontsize=9)
    ax_t.set_xlabel(F("ms since the step began"), fontsize=8)          # (the panel below shares it)
    # the device's gathered bytes over the step
    for r in range(n):
        ts = [t * 1e3 for t, _, _ in p.memory[r]]
        ax_m.step(ts, [b for _, _, b in p.memory[r]], where="post", color=RANK_COLORS[r % 8], label=f"rank {r}")
    ax_m.set_xlabel(F("ms since the step began"), fontsize=8)
    ax_m.set_ylabel(F("bytes"), fontsize=8)
    ax_m.set_title(F("buffers on the device over the step: gathered parameters (stage 3) and gradient buckets"),
                   fontsize=9)
    ax_m.legend(fontsize=7, loc="upper right")
    fig.suptitle(p.setting(F), fontsize=10)
    fig.tight_layout()
    return fig


# ============================================================================= widgets

def extension_widget(pool: CrewPool | None = None, world_size: int = 2, stage: int = 3,
                     offload_optimizer: str = "cpu", offload_param: str = "none",
                     sub_group_size: int = ZeroConfig.sub_group_size, max_ranks: int = 4):
    """Controls N, stage, offload_optimizer, offload_param (stage 3 only), sub_group_size and
    the NVMe pipelines (NVMe only) over :func:`placement` (a real engine per choice)."""
    import ipywidgets as W
    n, st = _run_controls(world_size, stage, None, max_ranks, stages=(1, 2, 3))
    opt = W.Dropdown(options=list(OFFLOAD_DEVICES), value=offload_optimizer, description=T("optimizer"))
    par = W.Dropdown(options=list(OFFLOAD_DEVICES), value=offload_param, description=T("params"))
    sub = W.Dropdown(options=[(f"{s:,}", s) for s in SUB_GROUP_SIZES], value=sub_group_size,
                     description="sub_group")
    pr = W.Checkbox(value=False, description="pipeline_read", indent=False)
    pw = W.Checkbox(value=False, description="pipeline_write", indent=False)
    image = W.Image(format="png", layout=image_layout())
    summary = W.HTML()
    status = W.HTML()
    busy = {"on": False}
    first = {}

    def update(*_):
        if busy["on"]:
            return
        busy["on"] = True
        try:
            if st.value != 3 and par.value != "none":
                par.value = "none"                     # parameters are sharded, and offloaded, only at stage 3
            par.disabled = st.value != 3
            pr.disabled = pw.disabled = opt.value != "nvme"
        finally:
            busy["on"] = False
        status.value = "<i>" + T("running the engine on the ranks ...") + "</i>"
        p = placement(n.value, st.value, opt.value, par.value, sub.value, pr.value, pw.value, pool=pool)
        image.value = _png(draw_placement(p))
        summary.value = _html(p.describe())
        first.setdefault("text", p.describe())
        status.value = ""

    for w in (n, st, opt, par, sub, pr, pw):
        w.observe(update, names="value")
    update()
    return lab_box([W.HBox([n, st, opt, par]), W.HBox([sub, pr, pw]), status, image, summary], png=image.value,
                   text=first["text"], css_class="zerolab-lab-extension")
