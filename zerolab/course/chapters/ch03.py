"""Chapter 3 (the three stages) and appendix 3a: the runs they measure and the tables they print.

Every function named ``train_*`` runs on a rank (``crew.run(train_and_measure, 2)``); the rest run
in the notebook. The model, the batches and the DeepSpeed config are the chapter's: a TinyLM of
188,900 parameters, 12 sequences per step split over the ranks, reduce buckets of 50,000 elements.
"""
from __future__ import annotations

import zerolab
from zerolab.memory import comm_volume, model_state_bytes
from zerolab.models import TinyLM, lm_batches, lm_loss
from zerolab.zero.reference import train_engine, train_reference

VOCAB, SEQ, GLOBAL_BATCH = 257, 16, 12
NAME = {0: "0 (DDP)", 1: "1", 2: "2", 3: "3"}
FORMULA = {0: "16Ψ", 1: "4Ψ + 12Ψ/N", 2: "2Ψ + 14Ψ/N", 3: "16Ψ/N"}
ADAMW = {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}}
SGD = {"type": "SGD", "params": {"lr": 0.1}}
ROUNDING, AMPLIFIED = 1e-6, 3e-4   # a few fp32 rounding steps near 1; a tenth of one AdamW step (lr / 10)


def make_model() -> TinyLM:
    """seed=0 every time: every rank, and the single-process reference, start from the same weights."""
    return TinyLM(vocab=VOCAB, d=100, hidden=400, layers=2, seq_len=SEQ, seed=0)


def ds_config(stage: int, world_size: int, precision: str = "bf16", ideal: bool = False,
              accumulate: int = 1, optimizer: dict = ADAMW, **zero) -> dict:
    """The DeepSpeed config of every run in the chapter.

    reduce_bucket_size 50,000: this model then makes several buckets, as a real model makes many.
    stage3_param_persistence_threshold 0: DeepSpeed's default (100,000 elements) would keep every
    parameter of this small model whole. stage3_max_reuse_distance 0 and stage3_prefetch_bucket_size
    0: the paper's stage 3, every module gathered again for backward (DeepSpeed's default reuse
    distance, 10^9, keeps this small model gathered; so does its default prefetch, 5e7, at reuse
    distance 0: the prefetcher marks each backward use it scans as fetched for and DeepSpeed keeps
    those parameters).
    memory_efficient_linear false: torch's F.linear at stage 3 too, so that the parity table shows
    what the partitioning does alone (DeepSpeed's default computes nn.Linear with its own function
    at stage 3, whose last bits differ from torch's on some CPUs; the chapter says so).
    ``ideal``: zerolab's own switch, the paper's reduce-scatter at stages 1-2 (not DeepSpeed's).
    """
    cfg = {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // (world_size * accumulate),
        "gradient_accumulation_steps": accumulate,
        "optimizer": optimizer,
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 50_000,
                              "stage3_param_persistence_threshold": 0,
                              "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                              "memory_efficient_linear": False, **zero},
    }
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    if ideal:
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg


# -- on every rank -----------------------------------------------------------------------------

def train_and_measure(stage: int, precision: str = "bf16", ideal: bool = False, accumulate: int = 1,
                      **zero) -> dict:
    """Build the engine as a DeepSpeed user would, train two steps, measure the second.

    The first step is there because torch's AdamW creates its momentum and variance lazily.
    Returns what this rank holds (``engine.memory()``, read from the tensors) and what it sent
    (``engine.ledger``: ZeRO's collectives; zerolab's own order checks apart, in ``checks``).
    """
    world = zerolab.world_size()
    engine = zerolab.initialize(make_model(), ds_config(stage, world, precision, ideal, accumulate, **zero))
    batches = lm_batches(2, GLOBAL_BATCH, SEQ, VOCAB)
    train_engine(engine, batches[:1], lm_loss)            # step 1: Adam's states appear
    mark = engine.ledger.mark()
    before = engine.stage3_stats()
    train_engine(engine, batches[1:], lm_loss)            # step 2: the one we measure
    step = engine.ledger.since(mark)
    groups = engine.stage.groups
    stats = engine.stage3_stats()
    persistent = [keep for _, _, keep in stats.partitions]
    return {
        "memory": engine.memory(),                        # bytes this rank holds
        "groups": len(groups),     # flat buffers: 1 at stages 0-2, 1 per bucket (ideal), per module (3)
        "padding": sum(g.padding for g in groups),        # zero elements added for equal shards
        "wire": step.by_tag(),                            # bytes on this rank's wire, by purpose
        "records": [(r.op, r.tag, r.wire_bytes) for r in step.records],
        "grad_calls": sum(1 for r in step.records if r.tag.startswith("grads")),
        "param_gathers": sum(1 for r in step.records if r.tag.startswith("params")),
        "groups_gathered": stats.fetches - before.fetches,
        "prefetched": stats.prefetches - before.prefetches,
        "headers": len(step.checks),                      # stage 3: zerolab's own 16-byte order checks
        "header_bytes": sum(r.wire_bytes for r in step.checks),
        "peak_gathered": stats.peak_gathered_numel,
        "persistent_numel": sum(g.numel for g, keep in zip(groups, persistent) if keep),
        "layout": [{"label": g.label, "names": g.names, "numels": g.numels, "padded": g.padded_numel,
                    "shards": [g.shard_range(r) for r in range(world)]} for g in groups],
        "bucket_starts": [b.parts[0].start for b in engine.stage.grads.buckets],
        "master_numel": sum(m.numel() for m in engine.stage.masters),   # what this rank's optimizer steps
    }


def train_fp32(stage: int, optimizer: dict = ADAMW, accumulate: int = 1, steps: int = 3, clip: float = 1.0):
    """Train ``steps`` fp32 steps on chapter 3's batches (seed 1); rank 0 returns the full parameters.
    ``clip``: gradient_clipping (DeepSpeed's default 1.0; the parity table runs unclipped)."""
    cfg = ds_config(stage, zerolab.world_size(), "fp32", accumulate=accumulate, optimizer=optimizer)
    engine = zerolab.initialize(make_model(), {**cfg, "gradient_clipping": clip})
    train_engine(engine, lm_batches(steps, GLOBAL_BATCH, SEQ, VOCAB, seed=1), lm_loss)
    full = engine.full_params()                           # the same on every rank
    return full if zerolab.rank() == 0 else None


def reference_fp32(optimizer: dict = ADAMW, steps: int = 3, clip: float = 1.0) -> dict:
    """The same training in one process, the whole batch at once (torch's clip_grad_norm_)."""
    return train_reference(make_model(), {**ds_config(0, 1, "fp32", optimizer=optimizer), "gradient_clipping": clip},
                           lm_batches(steps, GLOBAL_BATCH, SEQ, VOCAB, seed=1), lm_loss)


# -- in the notebook ---------------------------------------------------------------------------

def measure_all(crews: dict) -> tuple[dict, dict]:
    """Every stage on every crew (rank 0's measurements), DeepSpeed's collectives; and stages 1-2
    again with the paper's reduce-scatter (zerolab's switch) for N >= 2."""
    runs, ideal = {}, {}
    for n, crew in crews.items():
        for stage in range(4):
            per_rank = crew.run(train_and_measure, stage)
            if any(r["memory"] != per_rank[0]["memory"] for r in per_rank):
                raise AssertionError(f"stage {stage} on {n} ranks: the ranks hold different amounts")
            runs[n, stage] = per_rank[0]
            if stage in (1, 2) and n > 1:
                ideal[n, stage] = crew.run(train_and_measure, stage, ideal=True)[0]
    return runs, ideal


def print_memory_table(runs: dict, psi: int) -> None:
    ns = sorted({n for n, _ in runs})
    print(f"model-state bytes per rank, bf16 + AdamW, Ψ = {psi:,}")
    print(f"{'N':>2}  {'stage':9}{'params':>9}{'grads':>9}{'optimizer':>11}{'measured':>11}"
          f"{'of DDP':>8}  {'formula':12}{'bytes':>11}{'left':>6}")
    for n in ns:
        ddp = runs[n, 0]["memory"]["model_states"]
        for stage in range(4):
            m = runs[n, stage]["memory"]
            f = model_state_bytes(psi, stage, n)["total"]
            print(f"{n:>2}  {NAME[stage]:9}{m['params']:>9,}{m['grads']:>9,}{m['optimizer_states']:>11,}"
                  f"{m['model_states']:>11,}{m['model_states'] / ddp:>8.3f}  {FORMULA[stage]:12}{f:>11,.0f}"
                  f"{m['model_states'] - f:>6,.0f}")
    print("left = measured − formula, in bytes")


def known_extra_bytes(n: int, stage: int, run: dict) -> float:
    """Padding (2 + 2 + 12 bytes per element, each divided by N once split), the frozen 2-byte
    parameter, and AdamW's 4-byte step counter per flat group the engine steps."""
    per_pad_element = sum(b / (n if stage >= s else 1) for b, s in ((2, 3), (2, 2), (12, 1)))
    return run["padding"] * per_pad_element + 2 + 4 * run["groups"]


def unexplained_bytes(runs: dict, psi: int) -> float:
    return max(abs(run["memory"]["model_states"] - model_state_bytes(psi, stage, n)["total"]
                   - known_extra_bytes(n, stage, run)) for (n, stage), run in runs.items())


def memory_figure(ax, runs: dict, psi: int) -> None:
    ns = sorted({n for n, _ in runs})
    grid = [1 + k * 0.05 for k in range(int((ns[-1] - 1) / 0.05) + 1)]
    colors = {0: "tab:gray", 1: "tab:blue", 2: "tab:orange", 3: "tab:green"}
    for stage in range(4):
        ax.plot(grid, [model_state_bytes(psi, stage, n)["total"] / 1e6 for n in grid],
                color=colors[stage], label=f"{NAME[stage]}: {FORMULA[stage]}")
        ax.plot(ns, [runs[n, stage]["memory"]["model_states"] / 1e6 for n in ns], "o",
                color=colors[stage], markersize=8)
    ax.plot([], [], "o", color="black", label="measured: engine.memory() on rank 0")
    ax.set(xlabel="N, ranks", ylabel="model states per rank (MB, 1 MB = 10⁶ bytes)", xticks=ns,
           ylim=(0, None), title=f"Each stage takes one more giant out of the backpack (Ψ = {psi:,}, bf16)")
    ax.legend()


def traffic_rows(runs: dict, ideal: dict, reuse: dict) -> list:
    """(label, {N: measurement}, formula in units of (N-1)/N·Ψ·2 bytes)."""
    pick = lambda table, stage=None: {n: table[n, stage] if stage is not None else table[n]  # noqa: E731
                                      for n in (2, 3, 4)}
    return [("0 (DDP)", pick(runs, 0), 2),
            ("1 DeepSpeed: all-reduce", pick(runs, 1), 3),     # all-reduce (2) + all-gather (1)
            ("1 paper: reduce-scatter", pick(ideal, 1), 2),    # reduce-scatter (1) + all-gather (1)
            ("2 DeepSpeed: all-reduce", pick(runs, 2), 3),
            ("2 paper: reduce-scatter", pick(ideal, 2), 2),
            ("3 reuse distance 0", pick(runs, 3), 3),          # gather, gather again, reduce-scatter
            ("3 DeepSpeed's reuse 1e9", pick(reuse), 2)]       # gather once, reduce-scatter


def wire_total(run: dict) -> float:
    return run["wire"].get("grads", 0) + run["wire"].get("params", 0)


def print_traffic_table(rows: list, psi: int, ns=(2, 3, 4)) -> None:
    print(f"bytes on one rank's wire in one step (ring convention, bf16), Ψ = {psi:,}")
    print(f"{'N':>2}  {'stage':25}{'gradients':>10}{'parameters':>11}{'total':>9}{'formula':>9}"
          f"  in Ψ units (formula)")
    for n in ns:
        unit = (n - 1) / n * psi * 2
        for label, by_n, k in rows:
            w = by_n[n]["wire"]
            print(f"{n:>2}  {label:25}{w.get('grads', 0):>10,.0f}{w.get('params', 0):>11,.0f}"
                  f"{wire_total(by_n[n]):>9,.0f}{k * unit:>9,.0f}  {wire_total(by_n[n]) / unit:.3f} ({k}Ψ)")


ACCUMULATION_ROWS = (("0 (DDP)", 0, False), ("1 DeepSpeed: all-reduce", 1, False),
                     ("1 paper: reduce-scatter", 1, True), ("2 DeepSpeed: all-reduce", 2, False),
                     ("2 paper: reduce-scatter", 2, True), ("3 reuse distance 0", 3, False))


def print_accumulation_table(crew, psi: int) -> None:
    n = crew.world_size
    unit = (n - 1) / n * psi * 2
    print(f"N = {n}: bytes per optimizer step on one rank's wire, in (N−1)/N·2Ψ units")
    print(f"{'stage':26}{'accumulation 1':>15}{'accumulation 4':>16}   gradient calls")
    for label, stage, paper in ACCUMULATION_ROWS:
        got = [crew.run(train_and_measure, stage, ideal=paper, accumulate=a)[0] for a in (1, 4)]
        units = [f"{wire_total(r) / unit:.3f} Ψ" for r in got]
        print(f"{label:26}{units[0]:>15}{units[1]:>16}   {got[0]['grad_calls']} -> {got[1]['grad_calls']}")


def print_persistence_table(crew, psi: int, thresholds=(0, 30_000, 100_000)) -> None:
    n = crew.world_size
    print(f"stage 3, N = {n}, Ψ = {psi:,}; bytes")
    print(f"{'threshold':>10}{'persistent P':>13}{'groups gathered':>17}{'all-gathers':>12}"
          f"{'measured':>10}{'formula':>10}{'params/rank':>12}")
    for threshold in thresholds:
        r = crew.run(train_and_measure, 3, stage3_param_persistence_threshold=threshold)[0]
        p = r["persistent_numel"]
        print(f"{threshold:>10,}{p:>13,}{r['groups_gathered']:>17}{r['param_gathers']:>12}"
              f"{wire_total(r):>10,.0f}{comm_volume(psi, 3, n, persistent_numel=p):>10,.0f}"
              f"{r['memory']['params']:>12,}")


def print_cut_parameters(layout: list) -> None:
    """The parameters that two ranks' partitions share, with the range each rank owns."""
    for g in layout:
        offset = 0
        for name, numel in zip(g["names"], g["numels"]):
            owners = [(r, max(a, offset) - offset, min(b, offset + numel) - offset)
                      for r, (a, b) in enumerate(g["shards"]) if max(a, offset) < min(b, offset + numel)]
            if len(owners) > 1:
                print(f"  {name} ({numel:,} elements): "
                      + ", ".join(f"rank {r} [{s:,}, {e:,})" for r, s, e in owners))
            offset += numel


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def verdict(diff: float, bounds=(ROUNDING, AMPLIFIED), exact: bool = False) -> str:
    """The bound a difference is under. The difference itself is rounding noise that changes
    with the CPU's SIMD kernels; which bound holds does not. A difference above every bound is a bug."""
    if exact and diff == 0:
        return "0 (bit-identical)"
    for bound in bounds:
        if diff < bound:
            return f"< {bound:.0e}"
    return f"{diff:.1e} (!)"


def print_parity_table(crews: dict, reference: dict) -> None:
    """Every stage on every crew against ``reference`` (``reference_fp32(clip=0.0)``), unclipped:
    DeepSpeed computes the clipping factor in fp32 at stages 0-2 and fp64 at stage 3, torch's
    clip_grad_norm_ its own way, and one ulp of it, which AdamW amplifies past 1e-6 on some CPUs
    and not on others, would be a difference of its own."""
    print("largest |zerolab − one process| over all 188,900 parameters after 3 fp32 AdamW steps")
    print(f"{'':14}" + "".join(f"{f'N = {n}':>10}" for n in crews))
    for stage in range(4):
        print(f"{NAME[stage]:14}" + "".join(
            f"{verdict(max_diff(crew.run(train_fp32, stage, clip=0.0)[0], reference)):>10}"
            for crew in crews.values()))
    print(f"bounds: < {ROUNDING:.0e} a few fp32 rounding steps;"
          f" < {AMPLIFIED:.0e} a tenth of one AdamW step (lr 3e-3)")


def print_config(cfg: dict) -> None:
    """A config one key a line (nested blocks as ``block.key``)."""
    for key, value in cfg.items():
        if isinstance(value, dict) and key != "optimizer":
            for k, v in value.items():
                print(f"  {key}.{k}: {v}")
        else:
            print(f"  {key}: {value}")
