# %% [markdown] id="ch01-00"
# # Chapter 1 · The four memory giants (显存四巨头)
#
# *Before anyone lifts a box, the captain opens every backpack.*
#
# The crew is about to move a whole household. Before it sets off, the captain walks down the
# line of workers and empties each backpack onto the floor. In the old-style crew, every worker
# carries four things:
#
# | in the backpack | what it is in training | what it holds |
# |---|---|---|
# | the **furniture** being moved | the **parameters** | the model's weights |
# | a **door sticker** for every piece | the **gradients** | how each weight should change, from backward |
# | a thick **notebook** of experience | the **optimizer states** | Adam's momentum and variance (and, in mixed precision, an fp32 master copy of every weight) |
# | a **folding chair**, unfolded at every pause | the **activations** | what the forward pass keeps for the backward pass |
#
# The captain weighs each pile, and the result surprises everyone: the heaviest thing is not the
# furniture. It is the notebook.
#
# In this chapter we do what the captain did, on real ranks: count the parameters of a real
# model, weigh each giant in **bytes** with the engine's own scale (`engine.memory()`), and set every number beside
# its formula. Units matter here: Ψ counts parameter *elements*; sizes are in *bytes*;
# **GB = 10⁹ bytes** (the ZeRO paper) and **GiB = 2³⁰ bytes** (what allocators report).

# %% [markdown] id="ch01-01"
# ## 1. Counting Ψ
#
# Ψ is the number of parameter elements. `TinyLM` is a small next-token model made for this
# course: an embedding, two MLP blocks, and an output head that **shares** the embedding matrix
# (tied weights). A shared matrix is stored once, so it counts once.

# %% id="ch01-02"
import copy

import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab.memory import count_params, format_bytes, measure_activations, precision_bytes
from zerolab.models import TinyLM, lm_batches, lm_loss

GIANTS = ("params", "grads", "optimizer_states")
tiny = TinyLM()
for name, p in tiny.named_parameters():
    print(f"{name:20} {str(tuple(p.shape)):9} {p.numel():>6,} elements{'   (frozen)' if not p.requires_grad else ''}")
print(f"\nΨ = {count_params(tiny):,} parameters "
      f"({sum(p.numel() for p in tiny.parameters() if p.requires_grad):,} trainable); "
      f"the tied head.weight is embed.weight, counted once")

# %% [markdown] id="ch01-03"
# `TinyLM` is so small that padding and bookkeeping would blur the per-parameter picture, so we
# weigh a bigger sibling from the same class: a vocabulary of 512, width 128, four blocks,
# sequences up to 128 tokens.

# %% id="ch01-04"
MODEL = dict(vocab=512, d=128, hidden=512, layers=4, seq_len=128)
big = TinyLM(**MODEL)
psi = sum(p.numel() for p in big.parameters() if p.requires_grad)   # trainable: these get gradients
print(f"big TinyLM: Ψ = {count_params(big):,} parameters, {psi:,} of them trainable")

# %% [markdown] id="ch01-05"
# ## 2. Opening the backpacks on real ranks
#
# A crew of 2 ranks (two processes in a `torch.distributed` group). Each builds the model and
# hands it to `zerolab.initialize` with a DeepSpeed config at **ZeRO stage 0**: plain data
# parallelism, the old-style crew where every worker carries everything. Each rank trains one
# step on its own slice of the batch, and `engine.memory()` reports the bytes the rank holds,
# measured from its tensors.
#
# We weigh the backpack twice: before the first step and after it.

# %% id="ch01-06"
def weigh_backpack(precision, micro_batch=4):
    """Runs on every rank: one training step at ZeRO stage 0; the engine's measured bytes."""
    config = {"train_micro_batch_size_per_gpu": micro_batch,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 0}}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}      # mixed precision: bf16 weights, fp32 master copy
    engine = zerolab.initialize(TinyLM(**MODEL), config)
    before = engine.memory()

    rank, world = zerolab.rank(), zerolab.world_size()
    tokens, targets = lm_batches(1, micro_batch * world, MODEL["seq_len"], MODEL["vocab"])[0]
    mine = slice(rank * micro_batch, (rank + 1) * micro_batch)    # this rank's part of the batch
    engine.backward(lm_loss(engine(tokens[mine]), targets[mine]))
    engine.step()
    return {"before_step": before, "after_step": engine.memory()}


crew = zerolab.Crew(2)        # two ranks, kept for the whole chapter
measured = {precision: crew.run(weigh_backpack, precision) for precision in ("fp32", "bf16")}

# %% [markdown] id="ch01-07"
# First, **fp32** training with Adam. Each giant, on each rank, beside Ψ × (bytes per parameter):
# 4 for the weights, 4 for the gradients, 4 + 4 for Adam's momentum and variance.

# %% id="ch01-08"
def backpack_table(precision):
    ranks = [r["after_step"] for r in measured[precision]]
    per_param = dict(zip(GIANTS, precision_bytes(precision)))
    print(f"{precision}, ZeRO stage 0, 2 ranks, Ψ = {psi:,}: bytes per rank after one step")
    print(f"{'giant':17} {'rank 0':>11} {'rank 1':>11} {'Ψ × b':>11} {'b (bytes/param)':>16}")
    for g in GIANTS:
        print(f"{g:17} {ranks[0][g]:>11,} {ranks[1][g]:>11,} {psi * per_param[g]:>11,} {per_param[g]:>16}")
    total = sum(per_param.values())
    print(f"{'model states':17} {ranks[0]['model_states']:>11,} {ranks[1]['model_states']:>11,} "
          f"{psi * total:>11,} {total:>16}")

backpack_table("fp32")

# %% [markdown] id="ch01-09"
# Both ranks carry exactly the same load: at stage 0 nobody shares anything. The few extra bytes
# beside Ψ × b are the frozen one-element `temperature` parameter (stored, but it gets no
# gradient and no optimizer state) and Adam's step counter (a 4-byte tensor).
#
# Now **mixed precision** (bf16 here; fp16 carries the same bytes, chapter 4 shows why it also
# needs a loss scale). The furniture folds to half its size, 2 bytes, and so do the stickers.
#
# **Predict, then run.** In mixed precision, how many bytes per parameter will the model states
# take in all: 8 (half of fp32's 16), 12, or 16? Which giant is the heaviest?

# %% id="ch01-10"
backpack_table("bf16")

# %% [markdown] id="ch01-11"
# Most guess 8. The notebook grows instead: besides momentum and variance, the optimizer must keep
# an **fp32 master copy** of every weight, because tiny updates vanish when added to a bf16 number
# (chapter 4 shows it): 4 + 4 + 4 = 12 bytes. The two totals are the same, **16 bytes per parameter**: 4 + 4 + 8 in fp32, 2 + 2 + 12 in mixed
# precision. Mixed precision makes the arithmetic faster on GPUs and the activations smaller, but it
# does not shrink the model states. In both cases the notebook is the heaviest giant:
# half of the load in fp32, three quarters of it in mixed precision.
#
# One more thing the scale shows: the notebook is written lazily. Adam creates its momentum and
# variance at the first step, not before.
#
# **Predict, then run.** How many bytes per parameter does the notebook hold *before* the first
# step, in fp32? And in mixed precision, where the fp32 master copy of the weights is made when
# the engine starts? Write both numbers down; the next cell weighs the notebook before and after.

# %% id="ch01-12"
for precision in ("fp32", "bf16"):
    before = measured[precision][0]["before_step"]["optimizer_states"]
    after = measured[precision][0]["after_step"]["optimizer_states"]
    print(f"{precision}: optimizer states on rank 0")
    print(f"    before the first step {before:>9,} bytes ({before / psi:.0f} per param)")
    print(f"    after it              {after:>9,} bytes ({after / psi:.0f} per param)")

# %% [markdown] id="ch01-13"
# In bf16 the 4 bytes per parameter before the first step are the fp32 master weights: they are
# made when the engine starts. The 8 bytes of Adam's moments appear at the first `engine.step()`.
# A memory check done before the first step misses two thirds of the notebook.
#
# ## 3. The folding chair: activations
#
# The forward pass keeps intermediate results (the inputs of every matrix multiply, the
# LayerNorm statistics, the GELU inputs, the logits) so that backward can use them. That is the
# folding chair. Unlike the other three giants, its size does not depend on Ψ alone: it depends
# on how much data goes through at once.
#
# `measure_activations` runs one forward (and the loss) and counts every tensor autograd saves for
# backward, through `torch.autograd.graph.saved_tensors_hooks`, leaving out the parameters (they
# are in the backpack anyway). We measure it for growing batch sizes and sequence lengths.
#
# **Predict, then run.** One sequence of 128 tokens saves about 3 MB (3,020,812 bytes). How much
# will a batch of 16 save? And a batch of 8 sequences of 16 tokens instead of 128?

# %% id="ch01-14"
def activation_bytes(model, batch, seq_len):
    tokens, targets = lm_batches(1, batch, seq_len, MODEL["vocab"])[0]
    saved = measure_activations(model, tokens, loss_fn=lambda logits: lm_loss(logits, targets))
    return saved["activation_bytes"]

batch_sizes, seq_lens = [1, 2, 4, 8, 16], [16, 32, 64, 128]
by_batch = {b: activation_bytes(big, b, 128) for b in batch_sizes}    # sequence length 128
by_seq = {s: activation_bytes(big, 8, s) for s in seq_lens}          # batch 8

print("fp32 activations, sequence length 128        fp32 activations, batch 8")
for i in range(max(len(batch_sizes), len(seq_lens))):
    left = (f"batch {batch_sizes[i]:>2}: {by_batch[batch_sizes[i]]:>11,} B "
            f"= {by_batch[batch_sizes[i]] / (batch_sizes[i] * 128):,.0f} B/token") if i < len(batch_sizes) else ""
    right = (f"seq {seq_lens[i]:>3}: {by_seq[seq_lens[i]]:>11,} B "
             f"= {by_seq[seq_lens[i]] / (8 * seq_lens[i]):,.0f} B/token") if i < len(seq_lens) else ""
    print(f"{left:45}{right}")

# %% [markdown] id="ch01-15"
# About 48 MB, and about 3 MB: the bytes per token stay the same, so the chair grows **linearly**
# with batch × sequence length (the tokens in a micro-batch), whichever of the two grows.
# (`TinyLM` has no attention. A transformer's attention adds scores that grow with the *square*
# of the sequence length, unless a fused kernel such as FlashAttention avoids storing them.)

# %% id="ch01-16"
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
ax1.plot(batch_sizes, [by_batch[b] / 2**20 for b in batch_sizes], "o-")
ax1.set(xlabel="batch size (sequence length 128)", ylabel="activations (MiB)", title="grows with batch")
ax2.plot(seq_lens, [by_seq[s] / 2**20 for s in seq_lens], "o-", color="C1")
ax2.set(xlabel="sequence length (batch 8)", ylabel="activations (MiB)", title="grows with sequence length")
for ax in (ax1, ax2):
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
fig.suptitle("The folding chair: bytes autograd saves for backward, measured")
fig.tight_layout()
plt.show()

# %% [markdown] id="ch01-17"
# ZeRO does not touch the chair: each rank's activations are set by its own micro-batch. (The
# tools for the chair are activation checkpointing, which recomputes instead of storing, and
# smaller micro-batches.) Mixed precision, on the other hand, does fold it: most saved tensors
# are bf16.
#
# **Predict, then run.** The same model in bf16, the same 4 × 128 tokens: what fraction of the
# fp32 chair will it save, exactly a half, less, or more?

# %% id="ch01-18"
big_bf16 = copy.deepcopy(big).to(torch.bfloat16)
chair = {"fp32": activation_bytes(big, 4, 128), "bf16": activation_bytes(big_bf16, 4, 128)}
for precision, nbytes in chair.items():
    print(f"{precision}: activations for a micro-batch of 4 × 128 tokens: {nbytes:>10,} bytes")
print(f"bf16 / fp32 = {chair['bf16'] / chair['fp32']:.2f}; per token: fp32 {chair['fp32'] / 512:,.0f} B,"
      f" bf16 {chair['bf16'] / 512:,.0f} B")

# %% [markdown] id="ch01-19"
# More than half: 0.54. The model's own tensors are halved, but the loss is not: `lm_loss` computes
# the cross-entropy in fp32 (`logits.float()`, as most training code does, for a stable softmax),
# so the softmax it saves stays 4 bytes per vocabulary entry per token (512 × 4 = 2,048 bytes), and
# the token ids and targets are int64 (16 bytes). Those 2,064 bytes per token are the difference.
#
# ## 4. The four giants in one picture
#
# Each rank's backpack after one step, as measured above, with the chair for a micro-batch of
# 4 sequences of 128 tokens.

# %% id="ch01-20"
fig, ax = plt.subplots(figsize=(7.5, 3.6))
labels = {"params": "parameters (furniture)", "grads": "gradients (stickers)",
          "optimizer_states": "optimizer states (notebook)", "activations": "activations (chair)"}
bottom = [0.0, 0.0]
for giant, label in labels.items():
    values = [(chair[p] if giant == "activations" else measured[p][0]["after_step"][giant]) / 2**20
              for p in ("fp32", "bf16")]
    ax.bar(["fp32", "bf16 mixed precision"], values, bottom=bottom, label=label, width=0.5)
    bottom = [b + v for b, v in zip(bottom, values)]
ax.set(ylabel="memory per rank (MiB)", title=f"One rank's backpack, ZeRO stage 0 (Ψ = {psi:,})")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
fig.tight_layout()
plt.show()

# %% [markdown] id="ch01-21"
# Among the model states the notebook is the heaviest, as the text said. The chair, though, is
# the biggest item here, and that is this model's size, not a rule: TinyLM has only
# 610,048 trainable parameters, and a micro-batch of 512 tokens saves more than its model states weigh. The two
# kinds of giant grow with different things: the model states with Ψ, the chair with the tokens
# in a micro-batch (times the width and depth of the model). At billions of parameters the model
# states alone overflow a GPU, as the next section shows.
#
# ## 5. From TinyLM to 7B and 70B
#
# The model states are Ψ × 16 bytes, whatever the model. That makes them easy to predict before
# buying a GPU.
#
# **Predict, then run.** How many GB of model states does a 7-billion-parameter model need on each
# GPU at stage 0, in mixed precision with Adam? Does it fit on an 80 GB GPU?

# %% id="ch01-22"
per_param = dict(zip(GIANTS, precision_bytes("bf16")))   # (2, 2, 12): the same for fp16
print("Model states per GPU, ZeRO stage 0, mixed precision + Adam (2 + 2 + 12 bytes per parameter)")
print(f"{'':18}" + "".join(f"{name:>24}" for name in ("7B", "70B")))
for giant in (*GIANTS, "total"):
    cells = []
    for n_params in (7e9, 70e9):
        nbytes = n_params * (16 if giant == "total" else per_param[giant])
        cells.append(f"{format_bytes(nbytes, 'GB', 1)} = {format_bytes(nbytes, 'GiB', 1)}")
    print(f"{giant:18}" + "".join(f"{c:>24}" for c in cells))
print(f"\nAn 80 GB GPU holds the model states of at most {80e9 / 16 / 1e9:.1f}e9 parameters, before any activation.")

# %% [markdown] id="ch01-23"
# A 7B model needs 7 × 10⁹ × 16 bytes = **112 GB** for its model states alone: it does not fit on
# an 80 GB GPU, and at stage 0 adding GPUs does not help, because every GPU carries the whole backpack. That is the
# pain of the next chapter, and the reason for ZeRO.
#
# Try other sizes (the calculator runs in the notebook's kernel; pick a preset or type Ψ):

# %% id="ch01-24" tags=["nbval-ignore-output"]
import ipywidgets as widgets

preset = widgets.Dropdown(options=[("1.3B", 1.3e9), ("7B", 7e9), ("70B", 70e9), ("big TinyLM", float(psi))],
                          value=7e9, description="preset")
psi_box = widgets.FloatText(value=7e9, description="Ψ")
precision = widgets.ToggleButtons(options=["bf16", "fp16", "fp32"], description="precision")
result = widgets.HTML()

def update(*_):
    sizes = dict(zip(GIANTS, precision_bytes(precision.value)))
    rows = "".join(f"<tr><td>{g}</td><td>{b}</td><td>{format_bytes(psi_box.value * b, 'GB')}</td>"
                   f"<td>{format_bytes(psi_box.value * b, 'GiB')}</td></tr>" for g, b in sizes.items())
    total = psi_box.value * sum(sizes.values())
    result.value = (f"<table><tr><th>giant</th><th>bytes/param</th><th>GB (10⁹)</th><th>GiB (2³⁰)</th></tr>{rows}"
                    f"<tr><th>total per GPU</th><th>{sum(sizes.values())}</th><th>{format_bytes(total, 'GB')}</th>"
                    f"<th>{format_bytes(total, 'GiB')}</th></tr></table>")

preset.observe(lambda change: setattr(psi_box, "value", change["new"]), names="value")
psi_box.observe(update, names="value")
precision.observe(update, names="value")
update()
# the live calculator; read without a kernel (GitHub, nbviewer) it shows the table for 7B in bf16
import zerolab.course.lab
zerolab.course.lab.lab_box([preset, psi_box, precision, result], html=result.value)

# %% [markdown] id="ch01-25"
# ## What we measured
#
# - Ψ of a real model, tied weights counted once.
# - On 2 real ranks at ZeRO stage 0, each rank holds **the same** model states: parameters,
#   gradients and optimizer states measured at 4 + 4 + 8 bytes per parameter in fp32 and
#   2 + 2 + 12 in mixed precision: **16 bytes per parameter** either way, and the optimizer's
#   notebook is the heaviest giant (half in fp32, three quarters in mixed precision).
# - Adam's moments appear at the first step; the fp32 master copy at start-up.
# - Activations, counted tensor by tensor as autograd saves them, grow linearly with batch and
#   sequence length, and are roughly halved by bf16.
# - 7B parameters need 112 GB = 104.3 GiB of model states per GPU at stage 0.

# %% id="ch01-26"
for precision in ("fp32", "bf16"):
    after = measured[precision][0]["after_step"]
    got = " + ".join(f"{after[g] / psi:.2f}" for g in GIANTS)
    formula = " + ".join(str(b) for b in precision_bytes(precision))
    print(f"{precision}: measured {got} = {after['model_states'] / psi:.2f} bytes/param; "
          f"formula {formula} = {sum(precision_bytes(precision))}")
print(f"activations, 4 × 128 tokens: fp32 {chair['fp32'] / 512:,.0f} B/token, bf16 {chair['bf16'] / 512:,.0f} B/token")
crew.close()

# %% [markdown] id="ch01-27"
# ## Questions
#
# 1. Change the micro-batch in the chair's cell from 4 to 1 and re-run it and the picture. Is
#    the chair still the biggest item? At what batch does the notebook win?
# 2. Why does mixed precision not shrink the model states, although the weights the GPU
#    computes with are half the size? Which giant grows to pay for it?
# 3. A memory check before the first step reports 4 bytes per parameter of optimizer state in
#    mixed precision. What will it report after the first step, and why?
# 4. How many 80 GB GPUs must a crew have before a 70B model's model states fit at stage 0?
#    (Hint: at stage 0 every GPU holds all of them.) What would have to change?
#
# **Your turn:** in [`exercises/01_memory_giants.ipynb`](../exercises/01_memory_giants.ipynb) you
# write the byte count yourself, for every ZeRO stage, and a check runs the real engine on
# 2 ranks to compare your numbers with the measured backpacks.
#
# Next: chapter 2, *the pain of data parallelism*: what happens to these 16 bytes per parameter
# when the crew grows.
