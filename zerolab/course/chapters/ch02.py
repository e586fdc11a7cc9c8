"""Chapter 2 (the pain of data parallelism): its runs on the ranks, its tables and its pictures.

``train_ddp_and_single``, ``ring_bytes`` and ``one_step`` run on every rank
(``crew.run(ring_bytes, PSI)``); the rest run in the notebook.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import zerolab
from zerolab.comm import Ledger, ring_all_gather, ring_reduce_scatter
from zerolab.models import TinyLM, lm_loss
from zerolab.zero.reference import train_engine, train_reference

GLOBAL_BATCH = 12            # sequences per step, for every crew size (12 = 1x12 = 2x6 = 3x4 = 4x3)
GB, GIB = 10**9, 2**30
TOLERANCE = 1e-6             # a few float32 rounding steps near 1


def ds_config(world_size: int, precision: str = "fp32", **zero) -> dict:
    """A DeepSpeed config for stage 0 (DDP): the global batch split evenly over the ranks."""
    config = {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "zero_optimization": {"stage": 0, **zero},
    }
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    return config


# -- on every rank ------------------------------------------------------------------------------

def train_ddp_and_single(batches) -> tuple[dict, dict]:
    """Train stage 0 (DDP) on this rank's 1/N of every global batch, and, for comparison, one
    process on the whole batch. fp32, so that "the same" can be checked to rounding."""
    engine = zerolab.initialize(TinyLM(), ds_config(zerolab.world_size()))
    train_engine(engine, batches, lm_loss)
    single = train_reference(TinyLM(), ds_config(1), batches, lm_loss)
    return engine.full_params(), single


def ring_bytes(psi: int) -> dict:
    """All-reduce a bf16 gradient of ``psi`` elements with chapter 0's ring, in two halves, each
    with its own ledger; check the sum against ``dist.all_reduce``; what this rank sent."""
    r = zerolab.rank()
    # small integers: their sums are exact in bf16, so both all-reduces must agree bit for bit
    grad = ((torch.arange(psi) % 5) + r).to(torch.bfloat16).to(zerolab.device())
    halves = {"reduce_scatter": Ledger(), "all_gather": Ledger()}
    chunks = ring_reduce_scatter(grad, ledger=halves["reduce_scatter"])   # chunk r is now the sum
    ours = ring_all_gather(chunks, ledger=halves["all_gather"])           # every chunk, everywhere
    theirs = grad.clone()
    dist.all_reduce(theirs)
    sent = {half: ledger.totals().get("send", {"calls": 0, "bytes": 0}) for half, ledger in halves.items()}
    return {"equal": torch.equal(ours, theirs), "sends": sum(s["calls"] for s in sent.values()),
            **{f"{half}_bytes": s["bytes"] for half, s in sent.items()},
            "sent_bytes": sum(s["bytes"] for s in sent.values())}


def one_step(batches, **zero) -> dict:
    """One bf16 training step of stage 0: the step's ledger, the flat buffers, the memory held."""
    engine = zerolab.initialize(TinyLM(), ds_config(zerolab.world_size(), "bf16", **zero))
    mark = engine.ledger.mark()
    train_engine(engine, batches[:1], lm_loss)          # one global batch: one optimizer step
    step = engine.ledger.since(mark)
    return {"records": [(rec.tag, rec.op, rec.numel, rec.dtype, rec.bytes, rec.wire_bytes)
                        for rec in step.records],
            "buffers": [(g.label, len(g.params), g.numel, g.padded_numel) for g in engine.stage.groups],
            "memory": engine.memory()}


# -- in the notebook ----------------------------------------------------------------------------

def ring_formula(n: float, psi: int, b: int = 2) -> float:
    """Bytes each rank sends in a ring all-reduce of psi elements of b bytes: 2(N-1)/N·Ψ·b."""
    return 2 * (n - 1) / n * psi * b


def _span(values) -> str:
    """One number if every rank sent the same, else the smallest and the largest."""
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def print_parity(parity: dict) -> None:
    # The exact difference is float32 rounding noise: its digits change with the CPU's kernels,
    # so the bound it is under is printed (print the difference itself to see it on your machine).
    print(" N  seq/rank  max |DDP - one process|             ranks' copies bit-identical")
    for n, results in parity.items():
        diff = max(float((ddp[k] - single[k]).abs().max()) for ddp, single in results for k in single)
        shown = f"< {TOLERANCE:g}: equal up to fp32 rounding" if diff < TOLERANCE else f"{diff:.1e}: NOT equal"
        first = results[0][0]
        same = all(torch.equal(ddp[k], first[k]) for ddp, _ in results for k in first)
        print(f"{n:>2}  {GLOBAL_BATCH // n:>8}  {shown:<36} {same}")


def print_ring_table(ring: dict, psi: int) -> None:
    print("bytes each rank sent (a range where ranks differ); equal: the ring's sum == dist.all_reduce's")
    print(f"{'N':>2}{'equal':>7}{'sends':>7}{'reduce-scatter':>16}{'+ all-gather':>14}{'(N-1)/N·Ψ·b':>13}"
          f"{'= all-reduce':>15}{'2(N-1)/N·Ψ·b':>14}")
    for n, results in ring.items():
        equal = all(res["equal"] for res in results)
        rs, ag, total = (_span([res[key] for res in results])
                         for key in ("reduce_scatter_bytes", "all_gather_bytes", "sent_bytes"))
        print(f"{n:>2}{str(equal):>7}{results[0]['sends']:>7}{rs:>16}{ag:>14}{ring_formula(n, psi) / 2:>13,.1f}"
              f"{total:>15}{ring_formula(n, psi):>14,.1f}")


def ring_figure(ring: dict, psi: int):
    import matplotlib.pyplot as plt

    ns = [1 + i / 10 for i in range(71)]                   # N from 1 to 8, for the formula's curve
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(ns, [ring_formula(n, psi) for n in ns], label="formula 2(N−1)/N·Ψ·b")
    left.axhline(2 * psi * 2, ls="--", c="gray", lw=1, label="limit 2Ψ·b")
    for n, results in ring.items():
        left.scatter([n] * n, [res["sent_bytes"] for res in results], c="C1", zorder=3,
                     label="measured (each rank)" if n == 1 else None)
    left.set(xlabel="ranks N", ylabel="bytes sent per rank (B)", title="Per rank: bounded by 2Ψ·b")
    left.legend(loc="lower right")
    right.plot(ns, [n * ring_formula(n, psi) for n in ns], label="formula N·2(N−1)/N·Ψ·b")
    right.scatter(list(ring), [sum(res["sent_bytes"] for res in results) for results in ring.values()],
                  c="C1", zorder=3, label="measured (sum over ranks)")
    right.set(xlabel="ranks N", ylabel="bytes sent by the whole crew (B)", title="The whole crew: grows with N")
    right.legend(loc="upper left")
    fig.suptitle(f"One ring all-reduce of Ψ = {psi:,} bf16 elements")
    fig.tight_layout()
    plt.show()


def print_ledger(records) -> None:
    print(f"{'tag':<30}{'op':<12}{'elements':>9}  {'dtype':<9}{'bytes':>7}{'wire bytes':>12}")
    for tag, op, numel, dtype, nbytes, wire in records:
        print(f"{tag:<30}{op:<12}{numel:>9,}  {dtype:<9}{nbytes:>7,}{wire:>12,.0f}")


def print_gradient_calls(step: dict) -> None:
    print(f"{'N':>2}  {'all-reduces':>11}  {'elements':>8}  {'measured B/rank':>15}  {'2(N-1)/N·elements·2 B':>21}")
    for n, results in step.items():
        grads = [rec for rec in results[0]["records"] if rec[0].startswith("grads")]
        numel = sum(rec[2] for rec in grads)
        wire = sum(rec[5] for rec in grads)
        print(f"{n:>2}  {len(grads):>11}  {numel:>8,}  {wire:>15,.1f}  {2 * (n - 1) / n * numel * 2:>21,.1f}")


def print_memory_table(step: dict, formula: float, frozen: int) -> dict:
    """Model states per rank and for the whole crew, against 16Ψ; every extra byte accounted for.
    Returns the whole crew's bytes by N."""
    print("extra = measured - 16Ψ = 16·padding + 4·buffers + 2·frozen (bytes)")
    print(f"{'N':>2}{'params':>9}{'grads':>8}{'optimizer':>11}{'per rank':>10}  {'extra':<24}"
          f"{'whole crew':>11}{'N·16Ψ':>9}")
    crew_total = {}
    for n, results in step.items():
        m = results[0]["memory"]
        if any(res["memory"]["model_states"] != m["model_states"] for res in results):
            raise AssertionError(f"N = {n}: the ranks hold different amounts")
        padding = sum(padded - numel for *_, numel, padded in results[0]["buffers"])
        buffers = len(results[0]["buffers"])
        extra = m["model_states"] - formula
        if extra != 16 * padding + 4 * buffers + 2 * frozen:
            raise AssertionError(f"N = {n}: {extra} bytes not accounted for")
        crew_total[n] = sum(res["memory"]["model_states"] for res in results)
        why = f"{extra:,.0f} = 16·{padding} + 4·{buffers} + 2·{frozen}"
        print(f"{n:>2}{m['params']:>9,}{m['grads']:>8,}{m['optimizer_states']:>11,}{m['model_states']:>10,}"
              f"  {why:<24}{crew_total[n]:>11,}{n * formula:>9,.0f}")
    return crew_total


def memory_bars(ax, step: dict, crew_total: dict, formula: float) -> None:
    xs = list(step)
    ax.bar([n - 0.2 for n in xs], [step[n][0]["memory"]["model_states"] / 1e3 for n in xs], width=0.4,
           label="one rank (measured)")
    ax.bar([n + 0.2 for n in xs], [crew_total[n] / 1e3 for n in xs], width=0.4, label="whole crew (measured)")
    ax.plot(xs, [formula / 1e3] * len(xs), "k_", ms=30, mew=2, label="16Ψ")
    ax.plot(xs, [n * formula / 1e3 for n in xs], "k:", label="N·16Ψ")
    ax.set(xticks=xs, xlabel="ranks N", ylabel="model states (kB = 10³ B)",
           title="DDP: adding ranks does not lighten any backpack")
    ax.legend()


CARDS = [("A100 40GB", 40 * GB, "40 GB"), ("A100 40GB", 40 * GIB, "40 GiB"),
         ("A100-SXM4-40GB", 42_300_000_000, "≈ as CUDA reports"),
         ("A100 80GB", 80 * GB, "80 GB"), ("A100 80GB", 80 * GIB, "80 GiB")]


def print_wall(bytes_per_param: float) -> None:
    print(f"{'GPU':<16}{'capacity':<19}{'bytes':>16}  {'= GB':>6}  {'= GiB':>6}  largest Ψ at 16 B/param")
    for name, capacity, reading in CARDS:
        print(f"{name:<16}{reading:<19}{capacity:>16,}  {capacity / GB:>6.1f}  {capacity / GIB:>6.1f}  "
              f"{capacity / bytes_per_param / 1e9:.2f} billion")


def wall_figure(ax, bytes_per_param: float) -> None:
    psis = [10 ** (8 + i / 20) for i in range(61)]          # 10^8 .. 10^11 parameters
    ax.loglog(psis, [bytes_per_param * p / GB for p in psis], lw=2, label="DDP: 16Ψ per GPU, for any N")
    ax.loglog(psis, [bytes_per_param * p / 64 / GB for p in psis], ":", c="gray",
              label="ZeRO-3 on 64 GPUs: 16Ψ/64 (chapter 3)")
    for capacity, style, above in ((40 * GB, "--", False), (80 * GB, "-.", True)):
        largest = capacity / bytes_per_param
        ax.axhline(capacity / GB, ls=style, c="C3", lw=1)
        ax.plot([largest], [capacity / GB], "o", c="C3")
        # each GPU's label sits at the left end of its own line: 80 GB just above it, 40 GB just below
        ax.annotate(f"{capacity / GB:.0f} GB GPU: Ψ ≤ {largest / 1e9:.2f} billion", (psis[0], capacity / GB),
                    textcoords="offset points", xytext=(4, 3 if above else -3),
                    va="bottom" if above else "top", fontsize=9, color="C3")
    for size, offset in ((1.3e9, (6, -12)), (7e9, (-112, 6)), (70e9, (-118, 4))):
        need = bytes_per_param * size / GB
        ax.plot([size], [need], "s", c="k", ms=4)
        ax.annotate(f"{size / 1e9:g}B model: {need:,.0f} GB", (size, need),
                    textcoords="offset points", xytext=offset, fontsize=9)
    ax.set(xlabel="parameters Ψ", ylabel="model states per GPU (GB = 10⁹ B)",
           title="The memory wall: DDP's per-GPU bytes do not depend on N")
    ax.legend(loc="lower right", fontsize=9)
