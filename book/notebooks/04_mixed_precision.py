# %% [markdown] id="ch04-00"
# # Chapter 4 · Mixed precision (混合精度): folding furniture and the register
#
# *Lighter to carry, and nothing forgotten.*
#
# The backpacks are still too heavy, so the crew trades its solid-wood furniture for **folding
# furniture**: the same pieces at half the weight. Folding has a price. A folded table keeps its
# shape but not its finest marks, and some of the corrections the crew makes each day are so
# faint that folding wipes them out.
#
# So the captain keeps one more thing: a **register**, written in ink at full detail. Every
# correction goes into the register first, and each morning the furniture is refolded to match it.
# The furniture is light; the register is exact.
#
# For the faintest corrections the crew has a trick. Every note is written **magnified**, tens of
# thousands of times larger, so that it survives the folding, and divided back down when it is
# copied into the register. If a magnified note no longer fits on the page, the *whole crew* throws
# that day's notes away, and from then on magnifies less.
#
# | in the story | in training | in zerolab |
# |---|---|---|
# | folding furniture | 16-bit weights, activations and gradients: **fp16** or **bf16**, 2 bytes each | the model's parameters after `zerolab.initialize` |
# | the register | **fp32 master weights** that the optimizer steps (4 bytes, beside Adam's 4 + 4) | `engine.stage.masters` |
# | corrections too faint to survive folding | gradients that **underflow** to 0 in fp16 | `zerolab.precision.underflow_report` |
# | writing notes magnified | **loss scaling**: backward of loss × S; the optimizer divides by S | `engine.loss_scale` |
# | a note too big for the page | **overflow**: an inf or NaN gradient; the step is skipped on every rank, S is lowered | `engine.skipped_steps`, `engine.log` |
#
# The register's fp32 master weights and Adam's two moments, 12 of the 16 bytes per parameter, are
# the "optimizer states" giant of chapter 1, the first thing ZeRO splits among the crew.
#
# ## 1. Three number formats
#
# A floating-point number is a sign, an **exponent** (how large: the range) and a **mantissa**
# (how many significant bits: the precision). fp16 and bf16 both spend 16 bits, differently: fp16
# keeps 10 mantissa bits and 5 exponent bits; bf16 keeps fp32's 8 exponent bits and only 7 mantissa
# bits. Below the smallest *normal* number come *subnormal* numbers, with fewer significant bits;
# below half the smallest subnormal, a value rounds to **0**.

# %% id="ch04-01"
import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab import precision as P
from zerolab.course.chapters import ch04          # this chapter's data, runs and pictures: zerolab/course/chapters/ch04.py
from zerolab.course.chapters.ch04 import ds_config, train, weigh
from zerolab.memory import measure_activations
from zerolab.models import TinyLM
from zerolab.course.viz import print_wrapped, wrapped_output

print(f"{'dtype':<6}{'bits':>5}{'exponent':>10}{'mantissa':>10}{'eps':>11}{'max':>11}"
      f"{'min normal':>12}{'min subnormal':>15}")
for r in P.dtype_range_table():
    print(f"{r['dtype']:<6}{r['bits']:>5}{r['exponent_bits']:>10}{r['mantissa_bits']:>10}{r['eps']:>11.3g}"
          f"{r['max']:>11.3g}{r['min_normal']:>12.3g}{r['min_subnormal']:>15.3g}")
fig, ax = plt.subplots(figsize=(9, 2.6))
ch04.format_ranges(ax)
plt.show()

# %% [markdown] id="ch04-02"
# Range is half the story; the other half is **precision**. `eps` is the gap between 1 and the
# next number.
#
# **Predict, then run.** Add a small update, 0.001, to a weight of 1.0, a hundred times, in fp32,
# fp16 and bf16. Where does each end? Write three numbers down.

# %% id="ch04-03"
for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
    w, update = torch.tensor(1.0, dtype=dtype), torch.tensor(0.001, dtype=dtype)
    for _ in range(100):
        w = w + update
    print(f"{name}: 1.0 + 100 x 0.001 = {float(w):.6f}    (eps = {torch.finfo(dtype).eps:.3g})")

# %% [markdown] id="ch04-04"
# Most guess 1.1 everywhere, or that bf16 lands near 1.1. bf16 loses **every one** of the hundred
# updates: 0.001 is less than half of bf16's gap near 1.0 (2⁻⁷ ≈ 0.0078), so each sum rounds back
# to 1.0. fp16 keeps them, each rounded to its gap near 1.0 (2⁻¹⁰ ≈ 0.00098): 1.0977. That is why
# the **register** exists even with bf16: the optimizer adds small updates to weights, and only
# fp32 (eps ≈ 1.2e-7) keeps them. The 16-bit copy is only for carrying.
#
# ## 2. Real gradients, and what fp16 does to them
#
# Gradients are often small. An honest setting where many are *very* small: a deep MLP
# (`zerolab.models.MLP`: 25 `Linear` layers of width 64, tanh, PyTorch's default initialisation)
# with a mean-squared error over 256 samples, at initialisation. (Large language models meet small
# gradients for other reasons, a loss averaged over many tokens and spread over billions of
# weights, but fp16 treats them the same way.) One backward **in full precision**, in fp64 so that
# no printed digit depends on the CPU's fp32 kernels:

# %% id="ch04-05"
deep, x_deep, y_deep, g = ch04.deep_mlp_gradients()   # |g| of every gradient entry
print(f"{len(deep.layers)} Linear layers, {g.numel():,} gradient entries (= Ψ, one per parameter)")
print(f"|g|: median {g.median():.2e}, largest {g.max():.2e}, smallest non-zero about {g[g > 0].min():.0e}")

# %% [markdown] id="ch04-06"
# `underflow_report(values, scale, dtype)` casts `values × scale` to `dtype` and sorts every
# non-zero entry: it became **0** (the gradient is lost), **subnormal** (kept, with fewer
# significant bits), **normal**, or **inf**.
#
# **Predict, then run.** fp16's smallest subnormal is 2⁻²⁴ ≈ 6·10⁻⁸, and the median |g| above is
# about 4·10⁻⁷. What percentage of the 97,031 gradients become exactly 0 in fp16 at scale 1? At
# the loss scale S = 2¹⁶? In bf16?

# %% id="ch04-07"
cases = [("fp16, scale 1", 1.0, torch.float16),
         ("fp16, scale 2^16", 2.0 ** 16, torch.float16),
         ("bf16, scale 1", 1.0, torch.bfloat16)]
reports = {name: P.underflow_report(g, scale, dtype) for name, scale, dtype in cases}
print(f"{'':<18}{'-> 0':>9}{'(count)':>9}{'subnormal':>11}{'normal':>9}{'-> inf':>8}"
      f"   (% of {g.numel():,} entries)")
for name, r in reports.items():
    print(f"{name:<18}{100 * r['zero_fraction']:>8.1f}%{r['zero']:>9,}{100 * r['subnormal_fraction']:>10.1f}%"
          f"{100 * r['normal_fraction']:>8.1f}%{r['overflow']:>8}")
per_layer = ch04.gradient_figure(plt.figure(figsize=(12, 3.8)), deep, g)
plt.show()
print(f"the median |g| shrinks about {per_layer:.2f}x per layer on its way back")

# %% [markdown] id="ch04-08"
# About a third vanish at scale 1, and most of the rest are subnormal, with only a few significant
# bits: a median of 4·10⁻⁷ hides a long tail, because each layer back multiplies the gradient by
# a factor below one (the right panel). Multiplied by 2¹⁶ (the orange bars, 4.8 decades to the
# right) almost all are normal and none vanish: the smallest |g|, about 10⁻¹², times 2¹⁶ lands just
# above fp16's smallest subnormal, a narrow escape rather than a guarantee. bf16 loses none: its
# range reaches 1e-38.
#
# Casting is a stand-in: in real fp16 training the backward itself runs in fp16. So we run that
# backward, on a 16-bit copy of the same network with the loss multiplied by S, and count the
# gradients that came out exactly 0 although their full-precision value is not:

# %% id="ch04-09"
# A 16-bit backward rounds differently on different CPUs, so its exact count is not printed:
# only whether it agrees with the cast's prediction, within 2 percentage points.
for name, scale, dtype in cases:
    lost = ch04.lost_in_16bit_backward(deep, x_deep, y_deep, g, dtype, scale)
    cast = reports[name]["zero_fraction"]
    agrees = "agrees" if abs(lost - cast) < 0.02 else "DISAGREES"
    print(f"{name:<18} lost in a real backward: {agrees} with the cast's {100 * cast:4.1f}% (within 2 points)")

# %% [markdown] id="ch04-10"
# ## 3. The dynamic loss scaler, inside the engine, on 2 ranks
#
# Too small an S and gradients vanish; too large and they overflow to inf. The right S changes as
# training goes, so DeepSpeed **adapts** it (`deepspeed/runtime/fp16/loss_scaler.py`). The `fp16`
# config keys, with DeepSpeed's defaults:
#
# - start at S = 2^`initial_scale_power` (16);
# - after an overflow (any inf or NaN in any rank's gradients) **skip the step** on every rank,
#   leaving the parameters and the optimizer untouched. `hysteresis` (2) is how many overflows it
#   takes to **halve** S (once halved, every further overflow halves it again until S next grows);
#   never below `min_loss_scale` (1);
# - after `loss_scale_window` (1000) clean steps in a row, **double** S (in DeepSpeed 0.19.8 the
#   doubling comes with the next clean step, the 1001st).
#
# A crew of 2 ranks trains a `TinyLM` (7,204 parameters) in fp16 at ZeRO stage 2 (`ch04.train`).
# Its text follows a fixed rule (the next token is (7·t + 3) mod 37), so the loss can fall close to
# 0 and the gradients shrink as it does. `loss_scale_window` is 10, so that the doublings show
# within 60 steps. At steps 30 and 31, **rank 1 alone** gets a bad batch: its loss times inf.

# %% id="ch04-11"
print_wrapped(zerolab.load_config(ds_config("fp16"), world_size=2).describe())
crew = zerolab.Crew(2, threads=1)        # one thread per rank: the same numbers on any machine

# %% [markdown] id="ch04-12"
# **Predict, then run.** Only rank 1 sees the inf, at steps 30 and 31. How many steps in all will
# rank 0 skip in the 60? What happens to the loss scale at step 30, and at step 31? Write it down
# (the rules are above), then run the cell: the engine's log lines come back from rank 0.

# %% id="ch04-13"
with wrapped_output():                   # the engine's log lines, wrapped to fit the page
    fp16_run = crew.run(train, "fp16", 60, bad_steps=(30, 31))
for rank, r in enumerate(fp16_run):
    print(f"rank {rank}: global_steps {r['global_steps']}, skipped_steps {r['skipped']};"
          f" register unchanged by the bad steps: {r['register_kept']}")
print("both ranks used the same loss scale at every step:", fp16_run[0]["scales"] == fp16_run[1]["scales"])

# %% [markdown] id="ch04-14"
# Most answer 2. It is 4: steps 0 and 1 overflowed on their own, because a fresh model's gradients
# times 2¹⁶ exceed 65504. The first was tolerated (hysteresis 2 → 1), the second halved S. At steps
# 30 and 31 the same happened again, and although only rank 1 saw the inf, both ranks skipped both
# steps: before each step every rank checks its own gradients for inf and NaN, and the ranks
# all-reduce that flag (MAX), so every rank makes the same decision and the registers stay equal.

# %% id="ch04-15"
bad = ch04.scaler_figure(fp16_run)
used = fp16_run[0]["scales"]
print(f"overflows at steps {bad}")
print("S at steps 0, 10, ..., 50:", [int(used[s]) for s in range(0, 60, 10)], "final:", int(fp16_run[0]["trace"][1][-1]))

# %% [markdown] id="ch04-16"
# S climbs while the loss falls: the better the model, the smaller its gradients, and the scaler
# lifts them back into fp16's range. (With DeepSpeed's default window of 1000, each doubling takes
# 1000 clean steps instead of 10.)
#
# ## 4. The register: fp32 master weights, and their cost
#
# After `zerolab.initialize` the model itself is 16-bit. The optimizer never sees it: it steps
# `engine.stage.masters`, fp32 copies of the part of the weights this rank owns, and after each
# step the 16-bit parameters are refolded from them. `ch04.weigh` takes one real step and returns
# `engine.memory()` (bytes measured from the tensors), at ZeRO stage 0 and at stage 3 on N = 2,
# with fp32 training beside it.
#
# **Predict, then run.** Mixed-precision Adam costs 2 + 2 + 12 = 16 bytes per parameter of model
# states. How many does plain fp32 training with Adam cost: 32, 16, or 8?

# %% id="ch04-17"
weighed = {(p, s): crew.run(weigh, p, s)[0] for p, s in (("fp16", 0), ("fp16", 3), ("bf16", 0), ("fp32", 0))}
psi = sum(p.numel() for p in TinyLM().parameters() if p.requires_grad)
formulas = {("fp16", 0): "2 + 2 + 12 = 16", ("fp16", 3): "(2 + 2 + 12) / N = 8",
            ("bf16", 0): "2 + 2 + 12 = 16", ("fp32", 0): "4 + 4 + 8 = 16"}
print(f"bytes per parameter on rank 0 (Ψ = {psi:,}; a frozen element and padding add a few bytes)")
print(f"{'':<14}{'model':>8}{'masters':>9}{'params':>8}{'grads':>7}{'optimizer':>10}{'total':>7}    formula")
for key, r in weighed.items():
    m = r["memory"]
    print(f"{key[0] + ' stage ' + str(key[1]):<14}{r['param_dtype']:>8}{r['master_dtype']:>9}"
          f"{m['params'] / psi:>8.2f}{m['grads'] / psi:>7.2f}{m['optimizer_states'] / psi:>10.2f}"
          f"{m['model_states'] / psi:>7.2f}    {formulas[key]}")

# %% [markdown] id="ch04-18"
# Most guess 32, twice the 16-bit figure. It is **16** as well: with Adam, mixed precision does not
# make the model states smaller; it moves 4 bytes from the weights and gradients into the register
# (the fp32 master, 4 bytes, beside Adam's 4 + 4). What it does halve is what is computed and moved
# in 16 bits: the activations kept for backward and the gradients on the wire.

# %% id="ch04-19"
tokens = ch04.rule_batches(1, 8)[0][0]
act = {name: measure_activations(TinyLM().to(dtype), tokens)["activation_bytes"]
       for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16))}
wire = {p: weighed[(p, 0)]["grad_wire_bytes"] for p in ("fp32", "fp16")}
print(f"activations kept for backward (batch 8 x 16 tokens): fp32 {act['fp32']:,} B, "
      f"fp16 {act['fp16']:,} B ({act['fp16'] / act['fp32']:.2f}x)")
print(f"gradient all-reduce per step at stage 0, bytes per rank: fp32 {wire['fp32']:,.0f} B, "
      f"fp16 {wire['fp16']:,.0f} B ({wire['fp16'] / wire['fp32']:.2f}x)")
print(f"    formula 2(N-1)/N x Ψ x 2 B = {psi * 2:,} B")

# %% [markdown] id="ch04-20"
# ## 5. fp16, bf16 and fp32, side by side
#
# The same 60 steps, the same data and the same initial weights, in the three precisions (fp16
# without injected overflows this time: it skips only its first two steps).
#
# **Predict, then run.** At step 59, will fp16's loss be where fp32's is at step 59? If not, where
# fp32's was at which step? And bf16, with its 7 mantissa bits, will it trail fp32 too?

# %% id="ch04-21"
with wrapped_output():
    runs = {p: crew.run(train, p, 60) for p in ("fp32", "bf16", "fp16")}
crew.close()
curves = {p: ch04.mean_loss(r) for p, r in runs.items()}
fig, ax = plt.subplots(figsize=(9, 3.4))
for p, style in (("fp32", "-"), ("bf16", "--"), ("fp16", ":")):
    ax.semilogy(curves[p], style, lw=2, label=f"{p} ({runs[p][0]['skipped']} steps skipped)")
ax.set(xlabel="step", ylabel="loss (nats)", title="With an fp32 register, 16 bits cost this model almost nothing")
ax.legend()
plt.show()


def within(a, b, tol):      # the losses' last digits differ from CPU to CPU: claims with tolerances
    return abs(a / b - 1) < tol


print(f"loss at step 59 below 0.01: {', '.join(f'{p} {c[-1] < 0.01}' for p, c in curves.items())}")
bf16_gap = max(abs(b / a - 1) for a, b in zip(curves["fp32"], curves["bf16"]))
print(f"bf16 within 10% of fp32 at every one of the 60 steps: {bf16_gap < 0.10}")
print(f"fp16 at step 59 within 5% of fp32 at step 57: {within(curves['fp16'][59], curves['fp32'][57], 0.05)};"
      f" of fp32 at step 59: {within(curves['fp16'][59], curves['fp32'][59], 0.05)}")

# %% [markdown] id="ch04-22"
# bf16 follows fp32 step for step: the register keeps every small update that bf16 itself would
# lose. fp16 skipped its first two steps while the scaler found its footing, so it trails by two
# updates: its loss at step 59 is where fp32's was at step 57. A skipped step is a lost step, not
# a wrong one.
#
# ## What we measured
#
# - **fp16** has precision but little range: in a 25-layer MLP, 30.8% of the 97,031 gradients
#   become 0 at scale 1, none at 2¹⁶. The **dynamic scaler** finds the scale by trial (skip, halve
#   after `hysteresis` overflows, double after a clean window); one overflow on one rank skips the
#   step on all (4 skipped in 60 steps: 2 natural at S = 2¹⁶, 2 injected on rank 1).
# - **bf16** has fp32's range, so it needs no scale, but only 7 mantissa bits: 100 updates of 0.001
#   to a weight of 1.0 vanish in it.
# - The **fp32 register** keeps those updates. With Adam, model states are 16 bytes per parameter in
#   mixed precision and in fp32 alike (8 per rank at stage 3 on 2 ranks); the register and Adam's
#   moments are 12 of them, the optimizer states that ZeRO stage 1 splits first. Activations and
#   gradient traffic are halved (0.50x).
# - **Training**: bf16 within 10% of fp32 at every step; fp16 two updates behind.
#
# ## Questions
#
# 1. Run section 3 again with `crew.run(train, "fp16", 60, bad_steps=(30, 31), scale_power=8)`
#    (S starts at 2⁸; restart the crew first). Are there still natural overflows at the start?
# 2. Why must every rank skip the step when only one rank overflowed? What would go wrong if
#    rank 0 stepped and rank 1 did not?
# 3. The register costs 4 of the 16 bytes per parameter. Why can't bf16 training, which needs no
#    loss scale, drop it?
# 4. With `hysteresis=1`, how would the scale trace of section 3 change at steps 30 and 31? Predict,
#    then run it.
#
# **Your turn:** in `exercises/04_loss_scaler.ipynb` you write the dynamic loss scaler's update
# rule, DeepSpeed's hysteresis, window and floor, and the check runs it inside this engine on 2
# ranks, with injected overflows, step by step against zerolab's own scaler.
