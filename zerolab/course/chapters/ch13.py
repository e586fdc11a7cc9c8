"""Chapter 13 (beyond the three stages: ZeRO++ on a crew in two buildings): its model, its runs on
the ranks and its pictures.

``one_step`` and ``curves`` run on every rank of ``zerolab.Crew(4, nodes=2)``
(``crew.run(one_step, {"zero_quantized_weights": True})``); the rest run in the notebook. Bytes,
calls and links are exact; errors and loss gaps are returned as numbers that the chapter prints
only as claims against their bounds and tolerances.
"""
from __future__ import annotations

import statistics
import warnings

import torch

import zerolab
from zerolab.zeropp import quant
from zerolab.models import GPT, CharTokenizer, lm_loss, public_domain_text, text_batches
from zerolab.zero.reference import train_engine

TEXT = public_domain_text("alice")
TOKENIZER = CharTokenizer(TEXT)
IDS = TOKENIZER.encode(TEXT)
VOCAB = -(-TOKENIZER.vocab // 8) * 8      # 75 characters -> 80 tokens: every shard a multiple of 8
D, SEQ, MICRO = 32, 32, 4                 # width, sequence length, sequences per rank


def config(world: int = 4, **zeropp) -> dict:
    """Stage 3 in bf16; biases and LayerNorms persistent; reuse distance 0 and prefetch off (the
    paper's 3 Psi: every weight gathered in forward and again in backward; with DeepSpeed's default
    prefetch its prefetcher's marks would keep them for backward, chapter 8); ``zeropp``: DeepSpeed's
    ZeRO++ keys."""
    return {"train_micro_batch_size_per_gpu": MICRO, "train_batch_size": MICRO * world, "gradient_clipping": 1.0,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.1}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 200,
                                  "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                                  "reduce_bucket_size": 20000, **zeropp}}


def new_engine(**zeropp):
    """On a rank: the chapter's GPT (2 blocks, width 32) in a fresh engine."""
    model = GPT(vocab=VOCAB, d=D, heads=2, layers=2, seq_len=SEQ)
    return zerolab.initialize(model, config(zerolab.world_size(), **zeropp))


def one_step(zeropp: dict) -> dict:
    """On a rank: a fresh engine. Step 1 (it records the fetch order) keeps this rank's gradient
    shards, the reported gradient norm and every block qwZ quantized (through zerolab's hook
    ``quant.use_qwz_codec``, with zerolab's own quantizer); step 2's collectives are returned."""
    blocks = []

    def recording(x, groups, bits=8):
        q, s = quant.quantize(x, groups, bits)
        blocks.append((x.float().view(groups, -1), quant.dequantize(q, s).view(groups, -1), s))
        return q, s

    world, r = zerolab.world_size(), zerolab.rank()
    batches = text_batches(IDS, 2, MICRO * world, SEQ, seed=1)
    with warnings.catch_warnings(record=True) as caught, quant.use_qwz_codec(recording, quant.dequantize):
        warnings.simplefilter("always")
        eng = new_engine(**zeropp)
        x, y = (t[r * MICRO:(r + 1) * MICRO] for t in batches[0])
        eng.backward(lm_loss(eng(x), y))
        grads = [g.float().clone() for g in eng.stage.grads.grad_shards]
        secondary = eng.memory().get("params_secondary", 0)      # hpZ's shards, alive until the step
        eng.step()
        first_norm = eng.last_grad_norm
        mark = eng.ledger.mark()
        train_engine(eng, batches[1:], lm_loss)
    led = eng.ledger.since(mark)
    qgz = eng.stage.grads.qgz
    out = dict(records=[(c.op, c.dtype, c.numel, c.wire_bytes, c.link, c.tag) for c in led.records],
               table=led.table(), links=led.by_link(), grads=grads, norm=first_norm, blocks=blocks,
               groups=eng.stage3_stats().partitions,
               qgz_blocks=[qgz.per_partition_groups(g) for g in eng.stage.groups] if qgz else None,
               warnings=sorted({str(w.message) for w in caught}), secondary=secondary,
               secondary_after_step=eng.memory().get("params_secondary", 0))
    eng.close()
    return out


def curves(variants: dict, steps: int) -> dict:
    """On a rank: each variant (name -> ZeRO++ keys) trained ``steps`` steps on the same batches;
    this rank's losses and the trained weights (fp32 masters)."""
    batches = text_batches(IDS, steps, MICRO * zerolab.world_size(), SEQ, seed=2)
    out = {}
    for name, zeropp in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # qgZ's warning: the chapter shows it once
            eng = new_engine(**zeropp)
        out[name] = dict(losses=train_engine(eng, batches, lm_loss), params=eng.full_params())
        eng.close()
    return out


# -- reading a run ------------------------------------------------------------------------------

def fetch_bytes(run: dict, dtype: str) -> float:
    """Wire bytes of the parameter all-gathers of ``dtype`` (the persistent refresh apart)."""
    return sum(b for op, dt, _, b, _, tag in run["records"]
               if op == "all_gather" and dt == dtype and "persistent" not in tag)


def param_gather_bytes(run: dict, link: str) -> float:
    """Wire bytes of the parameter all-gathers (values and scales; the persistent refresh apart)
    on ``link`` ("intra" or "inter")."""
    return sum(b for op, _, _, b, lk, tag in run["records"]
               if op == "all_gather" and lk == link and "persistent" not in tag)


def grad_bytes(run: dict, link: str, op: str | None = None) -> float:
    """Wire bytes of the gradient reduction on ``link`` ("intra" or "inter"), of ``op`` if given."""
    return sum(b for o, _, _, b, lk, tag in run["records"]
               if tag.startswith("grads") and lk == link and (op is None or o == op))


def block_errors(blocks) -> tuple[torch.Tensor, torch.Tensor]:
    """|x' - x| / scale of every quantized weight: (all but each block's positive maximum, those maxima)."""
    rest, tops = [], []
    for x, back, s in blocks:
        err = (back - x).abs() / s.view(-1, 1)
        m = x.abs().amax(1, keepdim=True)
        top = (x == m) & (m > 0)                    # the block's largest value, when it is positive
        rest.append(err[~top])
        tops.append(err[top])
    return torch.cat(rest), torch.cat(tops)


def gradient_fits(exact: list, qgz: list, ranks_per_node: int) -> list[tuple[bool, float, float]]:
    """Per gradient group: (reduced by qgZ's all-to-alls?, least-squares slope of qgZ's gradient on
    the exact one, |qgZ / L - exact| / |exact|), from every rank's shards of step 1."""
    fits = []
    for i, k in enumerate(qgz[0]["qgz_blocks"]):
        a = torch.cat([r["grads"][i] for r in exact])
        b = torch.cat([r["grads"][i] for r in qgz])
        fits.append((k is not None, float((a * b).sum() / (a * a).sum()),
                     float((b / ranks_per_node - a).norm() / a.norm())))
    return fits


def mean_losses(runs: list, name: str) -> list[float]:
    """The loss per step, averaged over the ranks."""
    return [statistics.fmean(r[name]["losses"][i] for r in runs) for i in range(len(runs[0][name]["losses"]))]


# -- pictures -------------------------------------------------------------------------------------

def plot_qwz_error(blocks, rest, tops):
    """Left: one block's error against its weights (a saw-tooth within half a step); right: all of them."""
    import matplotlib.pyplot as plt
    x, back, s = blocks[0]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4))
    a1.plot(x[0].numpy(), ((back[0] - x[0]) / s[0]).numpy(), ".", ms=3)
    for h in (0.5, -0.5):
        a1.axhline(h, color="grey", lw=0.8, ls="--")
    a1.set(xlabel="weight x (one block of the first gather)", ylabel="(x' - x) / scale  [steps]",
           title="each weight lands on the nearest of 256 levels")
    a2.hist(torch.cat([rest, tops]).numpy(), bins=60, range=(0, 1.05), log=True)
    a2.axvline(0.5, color="grey", lw=0.8, ls="--")
    a2.set(xlabel="|x' - x| / scale  [steps]", ylabel="weights (log)",
           title="within half a step, but the clamped maxima: one step")
    plt.tight_layout()
    return fig


def plot_qgz_gradients(exact: list, qgz: list, ranks_per_node: int):
    """qgZ's gradient against the exact one, each module scaled by its largest exact gradient."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    labelled = set()
    for i, k in enumerate(qgz[0]["qgz_blocks"]):
        a = torch.cat([r["grads"][i] for r in exact])
        b = torch.cat([r["grads"][i] for r in qgz])
        kind = "int4 all-to-alls (2-D)" if k else "reduce-scatter (1-D)"
        top = float(a.abs().max())
        ax.plot((a / top).numpy(), (b / top).numpy(), ".", ms=2, color="C1" if k else "C0",
                label=None if kind in labelled else kind)
        labelled.add(kind)
    ax.plot([-1, 1], [-1, 1], color="grey", lw=0.8, label="slope 1: the mean")
    ax.plot([-1, 1], [-ranks_per_node, ranks_per_node], color="black", lw=0.8, ls="--",
            label=f"slope {ranks_per_node}: ranks per node")
    ax.set(xlabel="exact gradient / its module's largest", ylabel="qgZ's gradient / the same",
           title="qgZ's gradients come out (ranks per node) x the mean")
    ax.legend(fontsize=8, markerscale=4)
    return fig


def plot_curves(loss: dict, tol: dict):
    """Left: the loss curves; right: each variant's gap to the exact run, with its tolerance band."""
    import matplotlib.pyplot as plt
    color = {"exact": "C0", "qwZ": "C1", "qgZ": "C2"}
    steps = range(1, len(loss["exact"]) + 1)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for k in ("exact", "qwZ", "qgZ"):
        a1.plot(steps, loss[k], label=k, lw=1.2, color=color[k])
        if k != "exact":
            a2.plot(steps, [a - b for a, b in zip(loss[k], loss["exact"])], label=k, lw=1.2, color=color[k])
            a2.axhspan(-tol[k], tol[k], alpha=0.08, color=color[k])
    a1.set(xlabel="step", ylabel="loss (mean over 4 ranks)", title="Alice, 2 nodes of 2: three curves as one")
    a2.set(xlabel="step", ylabel="loss - exact loss", title="the gaps, inside the tolerances (bands)")
    a1.legend(fontsize=8)
    a2.legend(fontsize=8)
    plt.tight_layout()
    return fig
