# %% [markdown] id="ch03a-00"
# # Appendix 3a · Whose rounding is it? Data parallelism, the order of sums, and AdamW
#
# Chapter 3 trained every stage in fp32 on 1 to 4 ranks and compared it with one process that
# takes the whole batch at once. The difference was not zero: above 10⁻⁶ (a few fp32 rounding
# steps) for N ≥ 2, though below 3·10⁻⁴, a tenth of what one AdamW step moves a parameter. This
# appendix finds out whose doing that is. Two suspects: ZeRO (the shards, the reduce-scatter,
# the gathers) or data parallelism itself, which splits the batch and adds the pieces up.
#
# The experiment: make **one process** do the same arithmetic as N ranks, by splitting each
# batch into N micro-batches and adding up their gradients (gradient accumulation,
# `gradient_accumulation_steps = N` on a single rank), and then swap AdamW for plain SGD.
# The runs are chapter 3's (`zerolab/course/chapters/ch03.py`): its TinyLM of 188,900 parameters, its
# three global batches of 12 sequences, 3 fp32 steps.

# %% id="ch03a-01"
import torch

import zerolab
from zerolab.course.chapters.ch03 import AMPLIFIED, SGD, max_diff, reference_fp32, train_fp32, verdict

torch.set_num_threads(1)   # one thread here, as on every rank below: the same arithmetic, run after run
crews = {n: zerolab.Crew(n, threads=1) for n in (1, 2, 3, 4)}
reference = reference_fp32()          # one process, the whole batch at once, AdamW
print("crews of", ", ".join(str(n) for n in crews), "ranks up; the whole-batch reference is trained")

# %% [markdown] id="ch03a-02"
# ## One process, N micro-batches
#
# For N = 2, 3, 4: zerolab's stage 3 on N ranks (the stage that changes the most), and one
# process accumulating N micro-batches of the same batch (`train_fp32(3, accumulate=n)` on the
# crew of 1), each compared with the whole-batch run and with each other. The one process runs
# stage 3 too, so that its step computes the clipping factor the same way: DeepSpeed computes it
# in fp32 at stage 0 and in fp64 at stage 3, and one ulp of it would be a difference of its own.
#
# **Predict, then run.** Is one process that accumulates N micro-batches closer to the
# whole-batch run than the N ranks are, as far, or farther? Does it land on the ranks' result?

# %% id="ch03a-03"
print("3 fp32 AdamW steps; largest |difference| over all 188,900 parameters:")
print(f"{'':8}{'ranks vs the whole batch':>26}{'accumulation vs the whole batch':>33}"
      f"{'ranks vs accumulation':>23}")
for n in (2, 3, 4):
    ranks = crews[n].run(train_fp32, 3)[0]                          # stage 3 on n ranks
    accumulated = crews[1].run(train_fp32, 3, accumulate=n)[0]      # one rank, n micro-batches
    print(f"  N = {n}{verdict(max_diff(ranks, reference)):>26}{verdict(max_diff(accumulated, reference)):>33}"
          f"{verdict(max_diff(ranks, accumulated), (AMPLIFIED,), exact=True):>23}")

# %% [markdown] id="ch03a-04"
# Most expect the single process to be closer: no shards, no collectives. It is just as far from
# the whole-batch run as the N ranks are. At N = 2 it lands exactly where the 2 ranks land, bit for
# bit: halving a gradient is exact in binary, and a + b = b + a. At N = 3 and 4 it lands close to
# them but not on them, because the order of the sums differs (one process adds micro-batch after
# micro-batch, gloo's collectives add the ranks' pieces in their own order, as NCCL's ring does),
# and at N = 3 even the place of a division matters: gradient accumulation divides the loss by 3
# before backward, the ranks divide their gradients by 3 before adding them, and 1/3 is not exact
# in binary. So the difference is not ZeRO's: it is the order of the sums and the place of a
# division, which change each gradient element's last bits.
#
# ## SGD passes the last bits on; AdamW amplifies them
#
# The same comparison with plain SGD (lr 0.1), zerolab's stage 3 against one whole-batch process.
#
# **Predict, then run.** The sums are just as reordered with SGD. Will its difference from one
# process stay as large as AdamW's (below 3·10⁻⁴ but above 10⁻⁶), or shrink to a rounding step
# (below 10⁻⁶)?

# %% id="ch03a-05"
reference_sgd = reference_fp32(SGD)
print("SGD, zerolab stage 3 vs one process:",
      ", ".join(f"N = {n} {verdict(max_diff(crew.run(train_fp32, 3, SGD)[0], reference_sgd))}"
                for n, crew in crews.items()))
for crew in crews.values():
    crew.close()

# %% [markdown] id="ch03a-06"
# SGD passes those last bits on as they are: a rounding step or two, at every N. So the optimizer
# is what makes them grow. AdamW divides each element's momentum by the root of its own variance,
# so an element whose gradient nearly cancels (contributions of both signs summing to almost zero)
# still moves by about lr, and the last bits of that small sum decide part of the move.
#
# The smallest case shows it with three numbers. Three ranks contribute 1, 10⁻⁸ and −1 to one
# gradient element; the true sum is 10⁻⁸. fp32 carries about 7 significant digits.
#
# **Predict, then run.** In fp32, what is (1 + 10⁻⁸) − 1? And (1 − 1) + 10⁻⁸?

# %% id="ch03a-07"
one, tiny = torch.tensor(1.0), torch.tensor(1e-8)
orders = {"(1 + 1e-8) - 1": (one + tiny) - one,      # 1e-8 is below half an fp32 step of 1: lost
          "(1 - 1) + 1e-8": (one - one) + tiny}      # the ones cancel first: 1e-8 survives
for order, total in orders.items():
    print(f"{order} = {float(total):.0e}")

# %% [markdown] id="ch03a-08"
# 0 and 10⁻⁸: the same three numbers, two orders, two sums. 10⁻⁸ is below half the gap between 1
# and the next fp32 number (about 6·10⁻⁸), so added to 1 first it is lost.
#
# **Predict, then run.** Take one AdamW step and one SGD step (lr 3·10⁻³, torch's default eps of
# 10⁻⁸) from a parameter at 0, once with each of those gradients. How far does each step move the
# parameter, in units of lr? Does the 10⁻⁸ difference in the gradient matter?

# %% id="ch03a-09"
def first_step_move(grad, optimizer):
    p = torch.zeros(1, requires_grad=True)          # starts at 0: weight decay has nothing to decay
    opt = optimizer([p], lr=3e-3)
    p.grad = grad.reshape(1).clone()
    opt.step()
    return abs(float(p.detach()))


print("how far one step moves the parameter, in units of lr:")
print(f"{'order of the sum':<18}{'gradient':>10}{'AdamW':>14}{'SGD':>14}")
for order, grad in orders.items():
    adamw, sgd = first_step_move(grad, torch.optim.AdamW), first_step_move(grad, torch.optim.SGD)
    print(f"{order:<18}{float(grad):>10.0e}{adamw / 3e-3:>9.2f} x lr{sgd / 3e-3:>9.0e} x lr")

# %% [markdown] id="ch03a-10"
# SGD's step differs by 10⁻⁸ of lr, AdamW's by **half of lr**. At its first step AdamW moves each
# element by lr · g / (|g| + eps), whatever the size of g: with g = 10⁻⁸ = eps that is lr / 2, with
# g = 0 nothing. So a gradient that is only rounding noise around zero still moves its parameter by
# a sizeable fraction of lr. Over the following steps the momentum and variance average such
# elements out, which is why chapter 3's differences stay below a tenth of lr.
#
# Any data-parallel training has this, ZeRO or not: the order of the sums is the only thing that
# changed, and no stage adds to it (in chapter 3's table the four stages' rows are alike).
# Deterministic training across world sizes would need the same summation order everywhere, which
# no ring or tree all-reduce promises.
#
# **Questions.** (1) Set eps to 10⁻⁶ in `first_step_move` (`optimizer([p], lr=3e-3, eps=1e-6)`):
# how far does AdamW move now, and what does that say about eps's role? (2) Why is N = 2 the one
# world size where accumulation and ranks agree bit for bit?
#
# Back to **[chapter 3](03_three_stages.ipynb)**.
