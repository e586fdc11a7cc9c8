"""Chapters 5 and 5b (offload): the runs they send to their ranks, their tables and figures.

Chapter 5 (``notebooks/05_the_warehouse.ipynb``) measures where the bytes live with each offload
switch; chapter 5b (``notebooks/05b_the_corridor.ipynb``) what offload costs in time: the host
step sub-group by sub-group, the NVMe reads and writes, the simulator's GPU step, and steps timed
here. Every function whose name says ``run`` (or is passed to ``crew.run``) executes on each rank.

Bytes and counts are exact; times are only drawn, or printed where nbval masks them.
"""
from __future__ import annotations

import statistics
import textwrap
import time

import torch

__all__ = ["make_model", "config", "PLACES", "where_it_lives", "print_places", "plot_places",
           "print_estimator", "BUDGETED", "peaks", "print_peaks", "plot_peaks", "try_budget",
           "SWITCHED", "switches", "print_switches", "TABLE_70B", "print_capacity", "print_70b_estimator",
           "sub_group_runs", "print_sub_groups", "one_step_timeline", "timeline_counts",
           "plot_step_timeline", "simulate_offload", "print_simulated", "plot_simulated", "COST",
           "step_times", "plot_cost"]

GIANTS = [("params", "parameters (furniture)", "#4c72b0"), ("grads", "gradients (door stickers)", "#dd8452"),
          ("optimizer_states", "optimizer states (heavy notebook)", "#55a868")]


def make_model():
    """The chapters' model: TinyLM, vocabulary 257, width 64, four blocks (150,465 parameters)."""
    from ...models import TinyLM
    return TinyLM(vocab=257, d=64, hidden=256, layers=4)


def config(stage: int, opt: str = "none", param: str = "none", *, nvme_path: str | None = None,
           sub_group_size: int | None = None, pipeline: bool = False, micro: int = 2,
           world: int | None = None) -> dict:
    """DeepSpeed's keys: fp16 + AdamW, ZeRO ``stage``, ``offload_optimizer`` / ``offload_param``
    devices ("none", "cpu", "nvme"). Stage 3 as chapter 3 measured it: small parameters sharded
    too, every module gathered again for backward (DeepSpeed's defaults would keep this small
    model whole and gathered)."""
    if world is None:
        from ... import world_size
        world = world_size()
    zero = {"stage": stage, "reduce_bucket_size": 20_000, "stage3_param_persistence_threshold": 0,
            "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0}
    if opt != "none":
        zero["offload_optimizer"] = {"device": opt}
        if opt == "nvme":
            zero["offload_optimizer"].update(nvme_path=nvme_path, pipeline_read=pipeline, pipeline_write=pipeline)
    if param != "none":
        zero["offload_param"] = {"device": param}
        if param == "nvme":
            zero["offload_param"].update(nvme_path=nvme_path, max_in_cpu=0)
    if sub_group_size:
        zero["sub_group_size"] = sub_group_size
    return {"train_micro_batch_size_per_gpu": micro, "train_batch_size": micro * world,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "fp16": {"enabled": True, "initial_scale_power": 8}, "zero_optimization": zero}


def _train(engine, cfg: dict, steps: int, seed: int = 0):
    from ...models import lm_batches, lm_loss
    from ...zero.reference import train_engine
    return train_engine(engine, lm_batches(steps, cfg["train_batch_size"], 16, 257, seed=seed), lm_loss)


# ----------------------------------------------------------------------------- chapter 5: bytes

PLACES = {
    "stage 3":                         dict(stage=3),
    "stage 2 + opt cpu":               dict(stage=2, opt="cpu"),
    "stage 3 + opt cpu":               dict(stage=3, opt="cpu"),
    "stage 3 + opt cpu + param cpu":   dict(stage=3, opt="cpu", param="cpu"),
    "stage 3 + opt nvme + param nvme": dict(stage=3, opt="nvme", param="nvme", sub_group_size=20_000),
}


def where_it_lives(nvme_path: str, places: dict = PLACES) -> dict:
    """On a rank: each config of ``places`` trained 2 steps; its bytes on device, host, NVMe."""
    import zerolab
    out = {}
    for name, kw in places.items():
        cfg = config(**kw, nvme_path=nvme_path)
        engine = zerolab.initialize(make_model(), cfg)
        _train(engine, cfg, 2)
        out[name] = {"mem": {w: engine.memory(w) for w in ("device", "host", "nvme")},
                     "n": sum(g.shard_numel for g in engine.stage.groups),
                     "tiles": len(engine.stage.home.tiles), "skipped": engine.skipped_steps}
        engine.close()
    return out


def print_places(places: list[dict]) -> None:
    """Rank 0's bytes per place and per giant, as a table (``places``: every rank's result)."""
    mine = places[0]
    n = next(iter(mine.values()))["n"]
    print(f"rank 0 after 2 steps; its shard n = {n:,} elements; bytes on each place")
    print(f"{'':32}{'':>7}{'params':>9}{'grads':>9}{'optimizer':>11}{'total':>11}")
    for name, r in mine.items():
        for w in ("device", "host", "nvme"):
            m = r["mem"][w]
            if m["model_states"] or w == "device":
                print(f"{name if w == 'device' else '':32}{w:>7}{m['params']:>9,}{m['grads']:>9,}"
                      f"{m['optimizer_states']:>11,}{m['model_states']:>11,}")
    print(f"same on every rank: {all(p == mine for p in places)}; steps skipped by the fp16 scaler: "
          f"{sum(r['skipped'] for r in mine.values())}")


def plot_places(mine: dict):
    """Rank 0's bytes in three panels: device, host memory, NVMe."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), sharey=True)
    names = list(mine)
    for ax, where in zip(axes, ("device", "host", "nvme")):
        left = [0] * len(names)
        for key, label, colour in GIANTS:
            vals = [mine[c]["mem"][where][key] / 1e3 for c in names]
            ax.barh(names, vals, left=left, color=colour, label=label)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_title({"device": "on the device (backpack)", "host": "in host memory (warehouse)",
                      "nvme": "on NVMe (the back shelves)"}[where], fontsize=10)
        ax.set_xlabel("kB on rank 0 (1 kB = 1,000 bytes)")
        ax.set_xlim(0, 1500)
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Offload moves the notebook, then the furniture, off the device; NVMe takes them off "
                 "the host too")
    fig.tight_layout()
    return fig


def _estimate(psi: int, largest: int, world: int, stage: int, param: bool) -> tuple[int, int, int]:
    """DeepSpeed's estimator (zerolab's re-derivation): (per CPU, per GPU, 4L or 0), headroom 1."""
    from ...tools.estimate import estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs
    if stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=world, cpu_offload=True,
                                                         additional_buffer_factor=1.0)
        return cpu, gpu, 0
    return estimate_zero3_model_states_mem_needs(psi, largest, num_gpus_per_node=world, cpu_offload=True,
                                                 cpu_offload_params=param, zero_init=True,
                                                 additional_buffer_factor=1.0)


ESTIMATED = [("stage 2 + opt cpu", 2, False, "2P | 16P"), ("stage 3 + opt cpu", 3, False, "4L + 2P/N | 16P"),
             ("stage 3 + opt cpu + param cpu", 3, True, "4L | 18P")]


def print_estimator(places: list[dict], psi: int, largest: int) -> int:
    """DeepSpeed's estimator beside the ranks' bytes (GPU: rank 0 + one gathered layer's 4L; CPU:
    the node, every rank). Returns the largest |difference| in host bytes."""
    world, mine = len(places), places[0]
    print(f"{'config':<30}{'':>5}{'DeepSpeed':>11}{'zerolab':>11}{'difference':>12}")
    worst = 0
    for name, stage, param, formula in ESTIMATED:
        cpu, gpu, four_l = _estimate(psi, largest, world, stage, param)
        host = sum(p[name]["mem"]["host"]["model_states"] for p in places)
        dev = mine[name]["mem"]["device"]["model_states"] + four_l
        worst = max(worst, abs(host - cpu))
        print(f"{name:<30}{'GPU':>5}{gpu:>11,}{dev:>11,}{dev - gpu:>12,}")
        print(f"{'  ' + formula:<30}{'CPU':>5}{cpu:>11,}{host:>11,}{host - cpu:>12,}")
    t3, t2 = mine["stage 3 + opt cpu"]["tiles"], mine["stage 2 + opt cpu"]["tiles"]
    print(f"Adam's step counters: 4 bytes x {t3} tiles x {world} ranks = {4 * t3 * world} bytes at stage 3; "
          f"4 x {t2} x {world} = {4 * t2 * world} at stage 2")
    return worst


BUDGETED = {"stage 0 (DDP)": dict(stage=0), "stage 1": dict(stage=1), "stage 2": dict(stage=2),
            "stage 3": dict(stage=3), "stage 1 + opt cpu": dict(stage=1, opt="cpu"),
            "stage 2 + opt cpu": dict(stage=2, opt="cpu"), "stage 3 + opt cpu": dict(stage=3, opt="cpu"),
            "stage 3 + opt cpu + param cpu": dict(stage=3, opt="cpu", param="cpu")}


def peaks(budgeted: dict = BUDGETED) -> dict:
    """On a rank: each config trained 2 steps under a generous budget; its peak device bytes."""
    import zerolab
    out = {}
    for name, kw in budgeted.items():
        cfg = config(**kw)
        engine = zerolab.initialize(make_model(), cfg, device_budget="1GB")
        _train(engine, cfg, 2)
        m = engine.memory()
        out[name] = {"peak": engine.budget.peak_bytes, "states": m["model_states"],
                     "buffers": m["peak_buffers"], "activations": engine.budget.peak_activation_bytes}
        engine.close()
    return out


def print_peaks(peak: dict, budget: int) -> None:
    print("bytes per rank; the peak adds the buffers (gradient buckets, stage 3's gathered layers)")
    print(f"{'config':<32}{'model states':>13}{'activations':>13}  peak fits {budget / 2**20:g} MiB")
    for name, p in peak.items():
        print(f"{name:<32}{p['states']:>13,}{p['activations']:>13,}  {p['peak'] <= budget}")


def plot_peaks(peak: dict, budget: int):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.barh(list(peak), [p["peak"] / 2**20 for p in peak.values()],
            color=["#c44e52" if p["peak"] > budget else "#55a868" for p in peak.values()])
    ax.axvline(budget / 2**20, color="black", ls="--", label=f"device_budget = {budget / 2**20:g} MiB")
    ax.invert_yaxis()
    ax.set_xlabel("peak device memory per rank (MiB), counted by the engine")
    ax.set_title("Not even ZeRO-3 fits the 1 MiB backpack; every config with the warehouse does")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def try_budget(kw: dict, budget: str, steps: int = 3) -> dict:
    """On a rank: train ``config(**kw)`` under ``device_budget=budget``; the error, or the run."""
    import zerolab
    from ...memory.budget import DeviceOutOfMemoryError
    cfg = config(**kw)
    try:
        engine = zerolab.initialize(make_model(), cfg, device_budget=budget)
        losses = _train(engine, cfg, steps)
    except DeviceOutOfMemoryError as e:
        return {"error": str(e), "is_torch_oom": isinstance(e, torch.OutOfMemoryError)}
    out = {"error": None, "peak": engine.budget.peak_bytes, "steps": engine.global_steps,
           "loss_fell": losses[-1] < losses[0]}
    engine.close()
    return out


SWITCHED = {"stage 0": dict(stage=0), "stage 1": dict(stage=1), "stage 2": dict(stage=2),
            "stage 3": dict(stage=3), "stage 2 + opt cpu": dict(stage=2, opt="cpu"),
            "stage 3 + opt nvme + param cpu": dict(stage=3, opt="nvme", param="cpu")}


def switches(nvme_path: str, switched: dict = SWITCHED) -> dict:
    """On a rank: ``engine.switches()`` for each config (no step taken)."""
    import zerolab
    out = {}
    for name, kw in switched.items():
        engine = zerolab.initialize(make_model(), config(**kw, nvme_path=nvme_path))
        out[name] = engine.switches()
        engine.close()
    return out


def print_switches(sw_by_config: dict) -> None:
    for name, sw in sw_by_config.items():
        print(name)
        for key, value in sw.items():
            print(textwrap.fill(value, 98, initial_indent=f"  {key:<18}", subsequent_indent=" " * 20))


# (row, GPUs, bytes per GPU, host bytes), as the published table gives them
TABLE_70B = [("ZeRO-3 (8 GPUs)", 8, 40e9, 64e9), ("ZeRO-3 + Offload (4 GPUs)", 4, 40e9, 512e9),
             ("ZeRO-3 + Offload (2 GPUs)", 2, 80e9, 512e9)]


def print_capacity(psi: float, rows=TABLE_70B) -> None:
    from ...tools.simulate import capacity_check
    print(f"{psi / 1e9:.0f}B parameters x 16 bytes = {16 * psi / 1e9:,.0f} GB of model states "
          f"(GB = 1e9 bytes)")
    print(f"{'row':<28}{'GPUs':>11}{'CPU':>8}{'together':>10}{'need':>8}  fits  largest model")
    for name, gpus, each, cpu in rows:
        c = capacity_check(psi, gpus, each, cpu)
        print(f"{name:<28}{gpus * each / 1e9:>8,.0f} GB{cpu / 1e9:>5,.0f} GB{c['have'] / 1e9:>7,.0f} GB"
              f"{c['need'] / 1e9:>6,.0f} GB  {str(c['feasible']):<5} {c['have'] / 16 / 1e9:>5.0f}B")


def print_70b_estimator(psi: float, largest: int, gpus_list=(4, 2)) -> None:
    from ...tools.estimate import zero3_rows
    for gpus in gpus_list:
        print(f"estimate_zero3_model_states_mem_needs, {psi / 1e9:.0f}B, 1 node x {gpus} GPUs "
              f"(GB = 1e9 bytes; per CPU = the node)")
        print(f"  {'offload_param':<14}{'offload_optimizer':<18}{'per GPU':>9}{'per CPU':>10}"
              f"{'per CPU, f = 1':>16}")
        for r1, r15 in zip(zero3_rows(psi, largest, gpus, additional_buffer_factor=1.0),
                           zero3_rows(psi, largest, gpus)):
            if r1["zero_init"]:
                print(f"  {r1['offload_param']:<14}{r1['offload_optimizer']:<18}{r15['gpu_bytes'] / 1e9:>9,.1f}"
                      f"{r15['cpu_bytes'] / 1e9:>10,.0f}{r1['cpu_bytes'] / 1e9:>16,.0f}")


# ----------------------------------------------------------------------------- chapter 5b: time

def sub_group_runs(nvme_path: str, sizes) -> dict:
    """On a rank: stage 3 with both offloads to NVMe (not pipelined), 2 steps at each
    ``sub_group_size``; its tiles, sub-groups, and the host memory the swap buffers took."""
    import zerolab
    out = {}
    for size in sizes:
        cfg = config(stage=3, opt="nvme", param="nvme", nvme_path=nvme_path, sub_group_size=size)
        engine = zerolab.initialize(make_model(), cfg)
        _train(engine, cfg, 2)
        home = engine.stage.home
        host = engine.memory("host")
        out[size] = {"tiles": len(home.tiles), "sub_groups": len(home.sub_groups),
                     "largest": max(sum(home.tiles[j][2] - home.tiles[j][1] for j in sg) for sg in home.sub_groups),
                     "n": sum(g.shard_numel for g in engine.stage.groups),
                     "peak_buffers": host["peak_buffers"], "buffers": host["buffers"],
                     "in_files": engine.memory("nvme")["optimizer_states"]}
        engine.close()
    return out


def print_sub_groups(runs: dict) -> None:
    print(f"{'sub_group_size':>14}{'tiles':>7}{'sub-groups':>12}{'largest':>9}{'peak host buffers':>19}"
          f"{'12 x largest':>14}")
    for size, r in runs.items():
        print(f"{size:>14,}{r['tiles']:>7}{r['sub_groups']:>12}{r['largest']:>9,}{r['peak_buffers']:>19,}"
              f"{12 * r['largest']:>14,}")


def one_step_timeline(nvme_path: str, steps: int = 3) -> dict:
    """On a rank: stage 3, both offloads to NVMe, sub_group_size 20,000, pipelined; the timeline
    of the last step (the first steps warm up: Adam's moments exist after them)."""
    import zerolab
    cfg = config(stage=3, opt="nvme", param="nvme", nvme_path=nvme_path, sub_group_size=20_000, pipeline=True)
    engine = zerolab.initialize(make_model(), cfg)
    from ...models import lm_batches, lm_loss
    from ...zero.reference import train_engine
    batches = lm_batches(steps, cfg["train_batch_size"], 16, 257, seed=0)
    train_engine(engine, batches[:-1], lm_loss)
    mark = engine.timeline.mark()
    train_engine(engine, batches[-1:], lm_loss)
    out = {"tl": engine.timeline.since(mark), "sub_groups": len(engine.stage.home.sub_groups),
           "tiles": len(engine.stage.home.tiles)}
    engine.close()
    return out


def timeline_counts(step: dict) -> dict:
    """The events of one step, sorted: host-step bars, NVMe reads and writes of optimizer states
    and of parameter shards."""
    ev = step["tl"].events
    io = [e for e in ev if e.kind == "io"]
    back_end = max(e.end for e in ev if e.name == "backward")
    host = [e for e in ev if e.kind == "host"]
    return {"host": host,
            "opt_reads": [e for e in io if "read" in e.name and ".param." not in e.name],
            "opt_writes": [e for e in io if "write" in e.name and ".param." not in e.name],
            "param_reads": [e for e in io if "read" in e.name and ".param." in e.name],
            "param_writes": [e for e in io if "write" in e.name and ".param." in e.name],
            "host_after_backward": all(e.start >= back_end for e in host)}


def plot_step_timeline(step: dict):
    """The step (top) and its optimizer step zoomed (bottom), a numbered host bar per sub-group."""
    import matplotlib.pyplot as plt
    tl = step["tl"]
    ev = tl.events
    host = [e for e in ev if e.kind == "host"]
    t0 = min(e.start for e in ev)
    opt_span = next(e for e in ev if e.name == "step")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.6))
    tl.plot(ax=ax1, title="one step, stage 3 + opt nvme + param nvme, pipelined (rank 0)")
    tl.plot(ax=ax2, t0=t0, title="the same step, zoomed into the optimizer step: a host bar per sub-group, "
                                 "NVMe beside it")
    ax2.set_xlim((opt_span.start - t0) * 1e3, (opt_span.end - t0) * 1e3)
    row = [t.get_text() for t in ax2.get_yticklabels()].index("host step")
    for k, e in enumerate(host):                   # outline and number each sub-group's bar
        ax2.broken_barh([((e.start - t0) * 1e3, e.seconds * 1e3)], (row - 0.35, 0.7), facecolor="#8172b3",
                        edgecolor="white", linewidth=1.5)
        ax2.text(((e.start + e.end) / 2 - t0) * 1e3, row, str(k), ha="center", va="center", color="white",
                 fontsize=8)
    fig.tight_layout()
    return fig


SHAPE_13B = dict(params=13e9, layers=40, hidden=5120, seq=2048, micro_batch=1, gpus=4, gpu="a100-40gb")


def simulate_offload(micro_batches, shape: dict = SHAPE_13B, **kw) -> tuple[list, list]:
    """``zerolab.tools.simulate``'s step at each number of micro-batches: stage 3 on the device, and
    stage 3 with both offloads to the host."""
    from ...tools.simulate import simulate
    plain = [simulate(stage=3, grad_accum=g, **shape, **kw) for g in micro_batches]
    off = [simulate(stage=3, grad_accum=g, offload_optimizer=True, offload_param=True, **shape, **kw)
           for g in micro_batches]
    return plain, off


def print_simulated(micro_batches, plain, off) -> None:
    print(f"13B, 4 x A100-40GB, stage 3: fits {plain[0].fits} ({plain[0].gpu_bytes['total'] / 1e9:.1f} GB a GPU);"
          f" + offload: fits {off[0].fits} ({off[0].gpu_bytes['total'] / 1e9:.1f} GB)")
    print(f"{'micro-batches':>13}{'compute s':>10}{'comm s':>8}{'PCIe s':>8}{'host s':>8}"
          f"{'step s':>8}{'stage 3 s':>10}{'ratio':>7}  bound by")
    for g, a, b in zip(micro_batches, plain, off):
        print(f"{g:>13}{b.compute_s:>10.2f}{b.comm_s:>8.2f}{b.transfer_s:>8.2f}{b.cpu_step_s:>8.2f}"
              f"{b.step_s:>8.2f}{a.step_s:>10.2f}{b.step_s / a.step_s:>7.2f}  {b.bound_by}")


def plot_simulated(micro_batches, plain, off):
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.8))
    x = range(len(micro_batches))
    w = 0.2
    for k, (attr, label, colour) in enumerate([("compute_s", "compute", "#4c72b0"),
                                               ("comm_s", "communication", "#dd8452"),
                                               ("transfer_s", "PCIe transfers", "#937860"),
                                               ("cpu_step_s", "host (CPU) Adam", "#8172b3")]):
        ax1.bar([i + (k - 1.5) * w for i in x], [getattr(b, attr) for b in off], w, label=label, color=colour)
    ax1.set_xticks(list(x), [str(g) for g in micro_batches])
    ax1.set_xlabel("micro-batches per optimizer step")
    ax1.set_ylabel("seconds per step (simulated)")
    ax1.set_title("13B + offload on 4 A100-40GB: the parts of a step")
    ax1.legend(fontsize=8)
    ax2.plot(micro_batches, [b.step_s / a.step_s for a, b in zip(plain, off)], "o-")
    ax2.axhspan(3, 5, color="#c44e52", alpha=0.15, label="'about 3-5x slower'")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(micro_batches, [str(g) for g in micro_batches])
    ax2.set_ylim(0, 5.5)
    ax2.set_xlabel("micro-batches per optimizer step")
    ax2.set_ylabel("step time, offload / stage 3")
    ax2.set_title("Offload costs the most when a step has little compute")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


COST = {"stage 3": dict(stage=3), "+ opt cpu": dict(stage=3, opt="cpu"),
        "+ opt cpu + param cpu": dict(stage=3, opt="cpu", param="cpu"),
        "+ opt nvme + param nvme": dict(stage=3, opt="nvme", param="nvme", sub_group_size=20_000, pipeline=True)}


def step_times(nvme_path: str, steps: int = 5, micro: int = 4, cost: dict = COST) -> dict:
    """On a rank: the median time of ``steps`` steps (after one warm-up step) for each config."""
    import zerolab
    from ...models import lm_batches, lm_loss
    from ...zero.reference import train_engine
    out = {}
    for name, kw in cost.items():
        cfg = config(micro=micro, nvme_path=nvme_path, **kw)
        engine = zerolab.initialize(make_model(), cfg)
        batches = lm_batches(steps + 1, cfg["train_batch_size"], 16, 257, seed=0)
        train_engine(engine, batches[:1], lm_loss)
        times = []
        for b in batches[1:]:
            t0 = time.perf_counter()
            train_engine(engine, [b], lm_loss)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
        engine.close()
    return out


def plot_cost(cost: dict):
    import matplotlib.pyplot as plt
    base = cost["stage 3"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.barh(list(cost), [t / base for t in cost.values()], color=["#4c72b0", "#55a868", "#55a868", "#937860"])
    ax.axvline(1, color="black", lw=0.8)
    ax.axvspan(3, 5, color="#c44e52", alpha=0.15, label="'about 3-5x slower' on GPUs")
    ax.invert_yaxis()
    ax.set_xlim(0, 5.5)
    ax.set_xlabel("step time / stage 3's (median of 5 steps)")
    ax.set_title("On one CPU the warehouse is next door: no PCIe link, the same cores for Adam")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
