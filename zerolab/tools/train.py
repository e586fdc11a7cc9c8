"""``zerolab train``: train a small model on N ranks from a DeepSpeed config, and say what it cost.

    zerolab train --config configs/zero2_bf16.json --nproc 2 --steps 20
    torchrun --nproc_per_node 2 -m zerolab.cli train --config configs/zero2_bf16.json --steps 20

The model is :class:`zerolab.models.TinyLM` on generated token data (nothing is downloaded); each
step takes one global batch of ``train_batch_size`` sequences, each rank its micro-batches out of
it. A progress bar (rank 0's loss and lr) runs while it trains; at the end a summary: the loss
first and last, the memory each rank holds per giant (``engine.memory()``: parameters, gradients,
optimizer states, buffers), the traffic (``engine.ledger``: calls and bytes per collective), the
time, and a picture (loss and lr per step, bytes on the wire per step by collective, memory per
rank) saved as a PNG. Under torchrun the ranks already exist and the same code runs in each
(``zerolab.launch`` joins torchrun's process group); otherwise ``--nproc`` ranks are started here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..i18n import add_lang_argument, catalogue

__all__ = ["train", "main", "add_arguments"]

T = catalogue("around")   # the summary and errors in the edition's language (zerolab/i18n/messages_zh.py)

GIANTS = ("params", "grads", "optimizer_states", "buffers")


def _rank_main(config, steps: int, seed: int, progress_file: str | None) -> dict:
    """Runs on every rank: train, and return what the summary needs."""
    import torch
    import torch.distributed as dist

    from ..crew import crew
    from .. import initialize
    from ..models import TinyLM, lm_batches, lm_loss
    from ..zero.reference import micro_batches

    engine = initialize(TinyLM(seed=seed), config)
    rank, world = engine.comm.rank, engine.comm.world_size
    gas = engine.gradient_accumulation_steps
    batches = lm_batches(steps, engine.train_batch_size(), seed=seed)
    bar = None
    if rank == 0 and progress_file is None:          # under torchrun: our stderr is the terminal's
        from tqdm import tqdm
        bar = tqdm(total=steps, desc="zerolab train", unit="step", file=sys.stderr)
    losses, lrs, traffic, step_seconds = [], [], [], []
    start = time.perf_counter()
    for step, batch in enumerate(batches):
        t0, mark, tmark = time.perf_counter(), engine.ledger.mark(), engine.timeline.mark()
        lrs.append(engine.get_lr()[0])
        total = torch.zeros(1, dtype=torch.float64)
        for x, y in micro_batches(batch, rank, world, gas):
            loss = lm_loss(engine(x.to(engine.device)), y.to(engine.device))
            engine.backward(loss)
            engine.step()
            total += float(loss.detach())
        if world > 1:                                    # the mean loss over ranks (not in the ledger)
            dist.all_reduce(total)
        losses.append(float(total) / (gas * world))
        step_seconds.append(time.perf_counter() - t0)
        per_op = {}
        for op, t in engine.ledger.since(mark).totals().items():
            per_op[op] = t["wire_bytes"]
        traffic.append(per_op)
        if rank == 0:
            if bar is not None:
                bar.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{lrs[-1]:.2e}")
                bar.update(1)
            elif progress_file:
                tmp = progress_file + ".tmp"
                Path(tmp).write_text(json.dumps({"step": step + 1, "loss": losses[-1], "lr": lrs[-1]}))
                os.replace(tmp, progress_file)
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - start
    last_step = engine.timeline.since(tmark)                # compute, collectives and waits of the last step
    split = engine.timeline.summary()
    memory = engine.memory()
    totals = engine.ledger.totals()
    out = {"rank": rank, "world": world, "stage": engine.zero_optimization_stage(),
           "dtype": str(engine.dtype).replace("torch.", ""), "gas": int(gas),
           "micro": engine.train_micro_batch_size_per_gpu(), "global_batch": engine.train_batch_size(),
           "losses": losses, "lrs": lrs, "traffic": traffic, "step_seconds": step_seconds, "seconds": seconds,
           "memory": memory, "ledger": totals, "skipped": engine.skipped_steps,
           "timeline": last_step, "split": split,
           "params": sum(p.numel() for p in engine.full_params().values()),
           "device": str(crew.rank_info().device)}
    engine.close()
    return out


def _watch(progress_file: str, steps: int, stop: threading.Event) -> None:
    """The driver's progress bar while the ranks train (their output is captured)."""
    from tqdm import tqdm
    done = 0
    with tqdm(total=steps, desc="zerolab train", unit="step", file=sys.stderr) as bar:
        while done < steps:
            finished = stop.wait(0.1)
            try:
                p = json.loads(Path(progress_file).read_text())
            except (OSError, ValueError):
                p = None
            if p and p["step"] > done:
                bar.set_postfix(loss=f"{p['loss']:.4f}", lr=f"{p['lr']:.2e}")
                bar.update(p["step"] - done)
                done = p["step"]
            if finished:
                break


def _summary(results: list[dict], picture: str | None, config_name: str, picture_chosen: bool = True) -> str:
    from ..memory import format_bytes
    r0 = results[0]
    losses = r0["losses"]
    lines = [T("zerolab train: TinyLM ({params:,} parameters) on generated tokens, {config}", params=r0["params"],
               config=config_name),
             T("  ZeRO stage {stage}, {world} rank(s) on {device}, {dtype}, global batch {batch} = {micro} x {gas} "
               "(accumulation) x {world}", stage=r0["stage"], world=r0["world"], device=r0["device"].split(":")[0],
               dtype=r0["dtype"], batch=r0["global_batch"], micro=r0["micro"], gas=r0["gas"]),
             T("  loss: {first:.4f} at step 1 -> {last:.4f} at step {steps}", first=losses[0], last=losses[-1],
               steps=len(losses))
             + (T(" ({n} step(s) skipped: fp16 overflow)", n=r0["skipped"]) if r0["skipped"] else ""),
             *_why_the_first_loss(losses[0]),
             T("  lr: {first:.3g} at step 1 -> {last:.3g} at step {steps}", first=r0["lrs"][0], last=r0["lrs"][-1],
               steps=len(losses)),
             T("  memory per rank (engine.memory(), at the end):"),
             "    " + f"{'rank':<6}" + "".join(f"{g:>18}" for g in GIANTS) + f"{'model states':>16}"]
    for r in results:
        m = r["memory"]
        lines.append("    " + f"{r['rank']:<6}" + "".join(f"{format_bytes(m.get(g, 0)):>18}" for g in GIANTS)
                     + f"{format_bytes(m['model_states']):>16}")
    lines.append(T("  traffic of rank 0 (engine.ledger; wire bytes by the ring convention):"))
    tot = r0["ledger"]
    if not tot:
        lines.append(T("    none (one rank)"))
    for op in sorted(tot):
        t = tot[op]
        lines.append(T("    {op:<15}{calls:>7} calls {bytes:>12} {wire:>12} on the wire", op=op, calls=int(t["calls"]),
                       bytes=format_bytes(t["bytes"]), wire=format_bytes(t["wire_bytes"])))
    steps = len(losses)
    lines.append(T("  time: {seconds:.2f} s for {steps} steps ({ms:.1f} ms per step)", seconds=r0["seconds"],
                   steps=steps, ms=r0["seconds"] / steps * 1e3))
    sp = r0.get("split")
    if sp and sp["wall"] > 0:
        lines.append(T("  where it went (engine.timeline, rank 0, per step): compute {compute:.1f} ms, exposed "
                       "communication {exposed:.1f} ms, hidden {hidden:.1f} ms", compute=sp["compute"] / steps * 1e3,
                       exposed=sp["exposed_comm"] / steps * 1e3, hidden=sp["hidden_comm"] / steps * 1e3))
    if picture and picture_chosen:
        lines.append(T("  picture: {path}", path=picture))
    elif picture:
        lines.append(T("  picture: {path}\n  (the current folder; --picture PATH puts it elsewhere, --picture '' "
                       "draws none)", path=os.path.abspath(picture)))
    return "\n".join(lines)


def _why_the_first_loss(first: float) -> list[str]:
    """A line on why TinyLM's first loss is far above a uniform guess's ln V, when it is."""
    import inspect
    import math

    from ..models import TinyLM
    defaults = inspect.signature(TinyLM).parameters
    vocab, d = defaults["vocab"].default, defaults["d"].default
    if not first > 2 * math.log(vocab):
        return []
    return [T("  (a uniform guess among {v} tokens scores ln {v} = {ln:.2f}; TinyLM starts far above it: its output\n"
              "  head is tied to the embedding, N(0, 1) at init as nn.Embedding makes it, so at each position\n"
              "  its own token gets a logit near |e|^2 = d = {d}, while the target is the next token)",
              v=vocab, ln=math.log(vocab), d=d)]


def _picture(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r0 = results[0]
    steps = list(range(1, len(r0["losses"]) + 1))
    fig = plt.figure(figsize=(15, 7))
    grid = fig.add_gridspec(2, 3, height_ratios=[3, 2])
    ax = [fig.add_subplot(grid[0, k]) for k in range(3)]
    if r0.get("timeline") is not None and r0["timeline"].events:
        r0["timeline"].plot(ax=fig.add_subplot(grid[1, :]),
                            title="the last step on rank 0 (engine.timeline): " + r0["timeline"].describe())
    ax[0].plot(steps, r0["losses"], marker=".", label="loss")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("loss (mean over ranks)")
    lr_ax = ax[0].twinx()
    lr_ax.plot(steps, r0["lrs"], color="tab:orange", linestyle="--", label="lr")
    lr_ax.set_ylabel("lr")
    ax[0].set_title("loss and learning rate")
    ops = sorted({op for t in r0["traffic"] for op in t})
    bottom = [0.0] * len(steps)
    for op in ops:
        vals = [t.get(op, 0.0) for t in r0["traffic"]]
        ax[1].bar(steps, vals, bottom=bottom, label=op)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("bytes on the wire (rank 0)")
    ax[1].set_title("traffic per step")
    if ops:   # outside the bars: under the axis
        ax[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(ops), fontsize="small", frameon=False)
    ranks = [r["rank"] for r in results]
    bottom = [0.0] * len(ranks)
    for g in GIANTS:
        vals = [r["memory"].get(g, 0) for r in results]
        ax[2].bar([str(x) for x in ranks], vals, bottom=bottom, label=g)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax[2].set_xlabel("rank")
    ax[2].set_ylabel("bytes held")
    ax[2].set_title("memory per rank, by giant")
    ax[2].legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize="small", frameon=False)
    fig.suptitle(f"zerolab train: ZeRO stage {r0['stage']}, {r0['world']} rank(s), {r0['dtype']}")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


DEFAULT_PICTURE = "zerolab_train.png"      # in the current folder, said with its full path


def train(config, nproc: int = 2, steps: int = 20, seed: int = 0, picture: str | None = DEFAULT_PICTURE,
          progress: bool = True, quiet: bool = False, picture_chosen: bool = True) -> list[dict]:
    """Train TinyLM from the DeepSpeed ``config`` (a dict or a JSON path) on ``nproc`` ranks (the
    torchrun world under torchrun) for ``steps`` global batches; print the summary (rank 0) and
    save the picture. Returns each rank's record."""
    from ..config import load_config
    from ..crew import launch, under_torchrun
    if not under_torchrun():
        load_config(config, nproc)          # a config error is said here, before any rank starts
    name = os.fspath(config) if isinstance(config, (str, os.PathLike)) else T("a config dict")
    if under_torchrun():
        results = launch(_rank_main, int(os.environ["WORLD_SIZE"]), config, steps, seed, None)
        is_rank0 = int(os.environ["RANK"]) == 0
    else:
        with tempfile.TemporaryDirectory(prefix="zerolab-train-") as tmp:
            pfile = os.path.join(tmp, "progress.json") if progress else None
            stop = threading.Event()
            watcher = threading.Thread(target=_watch, args=(pfile, steps, stop), daemon=True) if pfile else None
            if watcher:
                watcher.start()
            try:
                results = launch(_rank_main, nproc, config, steps, seed, pfile or "", echo=not quiet,
                                 timeout=max(120.0, 10.0 * steps))
            finally:
                stop.set()
                if watcher:
                    watcher.join(timeout=5)
        is_rank0 = True
    if is_rank0:
        if picture:
            _picture(results, picture)
        if not quiet:
            print(_summary(results, picture, name, picture_chosen))
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="a DeepSpeed JSON config (batch, precision, ZeRO stage, ...)")
    p.add_argument("--nproc", type=int, default=2, help="ranks to start (under torchrun: torchrun's world)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps (global batches)")
    p.add_argument("--seed", type=int, default=0, help="model and data seed")
    p.add_argument("--picture", default=None, help="where to save the picture (PNG; default: zerolab_train.png in "
                   "the current folder, its full path printed); '' for none")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_lang_argument(p)


def run_from_args(a) -> int:
    from ..config import ConfigError
    from ..crew import RankError, under_torchrun
    from .. import i18n
    i18n.set_lang(i18n.cli_lang(getattr(a, "lang", None)))       # --lang, $ZEROLAB_LANG, the locale
    torchrun = under_torchrun()
    rc = 0
    try:
        picture = DEFAULT_PICTURE if a.picture is None else a.picture or None
        train(a.config, a.nproc, a.steps, a.seed, picture, progress=not a.no_progress,
              picture_chosen=a.picture is not None)
    except ConfigError as e:
        print(T("{command}: {error}", command="zerolab train", error=e), file=sys.stderr)
        rc = 2
    except RankError as e:
        print(T("{command}: {error}", command="zerolab train", error=e), file=sys.stderr)
        rc = 1
    if torchrun:
        _leave_torchrun(rc)
    return rc


def _leave_torchrun(rc: int) -> None:
    """End a torchrun rank of this command: close the process group in step with the other
    ranks, then leave without the interpreter's teardown, where torch's C++ destructors can
    still race with gloo's threads ("terminate called without an active exception", SIGABRT,
    now and then, after a run that succeeded)."""
    from ..crew.crew import _destroy_at_exit
    _destroy_at_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zerolab train", description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run_from_args(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
