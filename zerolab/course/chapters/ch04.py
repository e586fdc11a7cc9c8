"""Chapter 4 (mixed precision): its data, its runs on the ranks and its pictures.

``train`` and ``weigh`` run on every rank (``crew.run(train, "fp16", 60, bad_steps=(30, 31))``);
the rest run in the notebook. Every number they return is exact (bytes, steps, scales) or is
printed by the chapter as a claim with its tolerance.
"""
from __future__ import annotations

import copy
import math

import torch

import zerolab
from zerolab import precision as P
from zerolab.models import MLP, TinyLM, lm_loss, mse_loss


def rule_batches(steps: int, batch: int, vocab: int = 37, seq_len: int = 16, seed: int = 0) -> list:
    """Token sequences in which the next token is (7 * t + 3) % vocab: (inputs, targets) per step."""
    gen = torch.Generator().manual_seed(seed)
    nxt = (7 * torch.arange(vocab) + 3) % vocab
    out = []
    for _ in range(steps):
        seq = [torch.randint(0, vocab, (batch, 1), generator=gen)]
        for _ in range(seq_len):
            seq.append(nxt[seq[-1]])
        seq = torch.cat(seq, dim=1)
        out.append((seq[:, :-1], seq[:, 1:]))
    return out


def ds_config(precision: str, stage: int = 2, window: int = 10, scale_power: int = 16,
              hysteresis: int = 2) -> dict:
    """The chapter's DeepSpeed config: 8 sequences per rank, AdamW, the fp16 scaler's keys spelled out."""
    config = {"train_micro_batch_size_per_gpu": 8,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": scale_power,
                          "loss_scale_window": window, "hysteresis": hysteresis, "min_loss_scale": 1}
    elif precision == "bf16":
        config["bf16"] = {"enabled": True}
    return config


# -- the deep MLP of section 2 ------------------------------------------------------------------

def deep_mlp_gradients():
    """A 25-layer tanh MLP at initialisation, one fp64 backward of an MSE over 256 samples.

    fp64, not fp32: fp32's last digits differ from CPU to CPU (SIMD width), fp64's rounding stays
    far below every digit the chapter prints. Returns (model, inputs, targets, |g| of every entry)."""
    deep = MLP(sizes=(13,) + (64,) * 24 + (7,), seed=0).double()
    data = torch.Generator().manual_seed(0)
    x = torch.randn(256, 13, generator=data, dtype=torch.float64)
    y = torch.randn(256, 7, generator=data, dtype=torch.float64)
    torch.nn.functional.mse_loss(deep(x), y).backward()
    return deep, x, y, P.grad_magnitudes(deep)


def lost_in_16bit_backward(deep, x, y, g, dtype, scale: float) -> float:
    """Fraction of non-zero full-precision gradients that are exactly 0 after a real 16-bit backward."""
    net = copy.deepcopy(deep).to(dtype)
    net.zero_grad(set_to_none=True)
    (mse_loss(net(x.to(dtype)), y.float()) * scale).backward()
    g16 = P.grad_magnitudes(net)
    return float(((g > 0) & (g16 == 0)).sum() / (g > 0).sum())


def format_ranges(ax) -> None:
    """The magnitudes each format holds, on a log axis (light: subnormal; dark: normal)."""
    table = list(reversed(P.dtype_range_table()))
    for y, r in enumerate(table):
        lo, mid, hi = (math.log10(r[k]) for k in ("min_subnormal", "min_normal", "max"))
        ax.barh(y, mid - lo, left=lo, color="tab:blue", alpha=0.3, height=0.5)
        ax.barh(y, hi - mid, left=mid, color="tab:blue", height=0.5)
        ax.text(hi + 0.8, y, f"eps {r['eps']:.1g}", va="center", fontsize=9)
    ax.set_yticks(range(len(table)), [r["dtype"] for r in table])
    ax.set_xlim(-47, 48)
    ax.set_xlabel("log10 |x|   (light: subnormal numbers, fewer significant bits; dark: normal numbers)")
    ax.set_title("fp16's window is about 12 decades; bf16's normal range is fp32's")


def gradient_figure(fig, deep, g) -> float:
    """Left: log10|g| against fp16's limits, as is and x 2^16. Right: each layer's median |g|.
    Returns the median's factor per layer."""
    hist, line = fig.subplots(1, 2, width_ratios=[3, 2])
    log_g = g[g > 0].log10()
    bins = torch.linspace(-11, 5.5, 166).numpy()
    hist.hist(log_g.numpy(), bins=bins, alpha=0.6, label="|g|")
    hist.hist((log_g + math.log10(2 ** 16)).numpy(), bins=bins, alpha=0.6, label="|g| x 2^16")
    zero = math.log10(P.FP16_MIN_SUBNORMAL / 2)
    hist.axvspan(-11, zero, color="tab:red", alpha=0.08)
    hist.axvline(zero, color="tab:red", lw=1, label="2^-25: below, fp16 gives 0")
    hist.axvline(math.log10(P.FP16_MIN_NORMAL), color="tab:green", ls="--", lw=1, label="2^-14: smallest normal")
    hist.axvline(math.log10(P.FP16_MAX), color="black", ls=":", lw=1, label="65504: largest fp16")
    hist.set(xlabel="log10 |gradient entry|", ylabel="entries",
             title=f"{g.numel():,} gradients against fp16's range")
    hist.set_ylim(0, hist.get_ylim()[1] * 1.5)        # room above the bars for the legend
    hist.legend(fontsize=7, loc="upper right")
    median = [float(layer.weight.grad.abs().median()) for layer in deep.layers]
    line.semilogy(median, "o-", ms=4, label="median |g| of the layer's weight")
    line.axhline(P.FP16_MIN_SUBNORMAL, color="tab:red", ls="--", lw=1, label="2^-24")
    line.axhline(P.FP16_MIN_NORMAL, color="tab:green", ls="--", lw=1, label="2^-14")
    line.set(xlabel="layer (0 = input side; backward runs right to left)", ylabel="median |g|",
             title="Each layer back shrinks the gradient")
    line.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return (median[-1] / median[0]) ** (1 / (len(median) - 1))


# -- on every rank ------------------------------------------------------------------------------

def train(precision: str, steps: int = 60, bad_steps=(), micro: int = 8, **config) -> dict:
    """Train a TinyLM on this rank's half of each batch; on ``bad_steps`` rank 1 alone multiplies
    its loss by inf. Returns the losses, the loss scale each step used, the scaler's trace, the
    skipped steps and whether the fp32 register was left alone by each bad step. ``config``: keyword
    arguments of :func:`ds_config` (``scale_power=8``, ``hysteresis=1``)."""
    rank = zerolab.rank()
    engine = zerolab.initialize(TinyLM(), ds_config(precision, **config))
    losses, scales, register_kept = [], [], {}
    for step, (x, y) in enumerate(rule_batches(steps, 2 * micro)):
        x, y = x[rank * micro:(rank + 1) * micro], y[rank * micro:(rank + 1) * micro]
        scales.append(engine.loss_scale)                 # the S this step's backward uses
        loss = lm_loss(engine(x), y)
        losses.append(loss.item())
        if step in bad_steps and rank == 1:
            loss = loss * float("inf")                   # a bad batch, on rank 1 only
        register = [m.clone() for m in engine.stage.masters]
        engine.backward(loss)
        engine.step()
        if step in bad_steps:
            register_kept[step] = all(torch.equal(a, b) for a, b in zip(register, engine.stage.masters))
    return {"losses": losses, "scales": scales, "trace": P.scaler_trace(engine.scaler),
            "skipped": engine.skipped_steps, "global_steps": engine.global_steps,
            "register_kept": register_kept}


def weigh(precision: str, stage: int) -> dict:
    """One clean step (S = 2^8: no overflow at step 0), then the engine's measured bytes and dtypes."""
    rank = zerolab.rank()
    engine = zerolab.initialize(TinyLM(), ds_config(precision, stage=stage, scale_power=8))
    x, y = rule_batches(1, 16)[0]
    x, y = x[8 * rank: 8 * rank + 8], y[8 * rank: 8 * rank + 8]
    mark = engine.ledger.mark()
    engine.backward(lm_loss(engine(x), y))
    engine.step()
    assert engine.skipped_steps == 0
    grad_wire = sum(r.wire_bytes for r in engine.ledger.since(mark).records if r.tag.startswith("grads"))
    return {"param_dtype": str(next(engine.module.parameters()).dtype).replace("torch.", ""),
            "master_dtype": str(engine.stage.masters[0].dtype).replace("torch.", ""),
            "memory": engine.memory(), "grad_wire_bytes": grad_wire}


# -- in the notebook ----------------------------------------------------------------------------

def mean_loss(run: list) -> list:
    """The mean of the two ranks' losses, step by step."""
    return [(a + b) / 2 for a, b in zip(run[0]["losses"], run[1]["losses"])]


def scaler_figure(run: list, injected=(30, 31)):
    """The loss above, the loss scale below, red crosses where a step overflowed. Returns the
    overflowed steps."""
    import matplotlib.pyplot as plt

    steps, _, overflow = run[0]["trace"]
    used = run[0]["scales"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    ax1.semilogy(steps, mean_loss(run), lw=1.5)
    ax1.set_ylabel("loss (nats)")
    ax1.set_title("The scale climbs while the loss falls; two overflows in a row halve it")
    ax2.step(steps, used, where="post", lw=1.5, label="loss scale S used by the step")
    bad = [s for s, o in zip(steps, overflow) if o]
    ax2.plot(bad, [used[s] for s in bad], "x", color="tab:red", ms=9, mew=2,
             label=f"overflow: step skipped (injected: {', '.join(map(str, injected))})")
    ax2.set_yscale("log", base=2)
    ax2.set(xlabel="step", ylabel="S")
    ax2.legend(fontsize=8, loc="upper left")
    plt.show()
    return bad
