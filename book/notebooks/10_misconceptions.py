# %% [markdown] id="ch10-00"
# # Chapter 10 · Common misconceptions (1): a demo, measured (常见误区)
#
# *What the crew believed, and what the tally sheet says.*
#
# By now the crew knows the job: the **furniture** (parameters), the **door stickers**
# (gradients), the **heavy notebook** of experience (optimizer states: fp32 master weights,
# Adam's momentum and variance) and the **folding chair** (activations), and the three ways of
# splitting the load. What remains are the things everyone *thinks* they know. Some were written
# down in a hurry, some were true once, some are true on one machine and not on another.
#
# This chapter settles them one at a time with a measurement, not an argument. **This part**
# starts from a short piece of code that circulates as "ZeRO stage 1 in numpy": a class of about
# 40 lines with a comment that says its Adam "matches DeepSpeed". We run it as written, then
# measure it, and find seven faults, from the bytes it counts to what it claims stage 3 does after
# the update. Then we replace it with zerolab's stage 1 on real ranks and check that it trains
# exactly like one process. **Part 2** (`10b_the_beliefs.ipynb`) takes six common beliefs about
# ZeRO and runs each on real ranks.
#
# Before each measurement, write your answer down: most of these faults look harmless until a
# number shows them.

# %% id="ch10-01"
import copy

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.distributed as dist

import zerolab
from zerolab.course.lm_runs import PSI_LM, phases_of_a_step
from zerolab.models import mse_loss
from zerolab.zero.reference import train_engine, train_reference

torch.set_num_threads(1)      # one thread here, as on every rank: the same arithmetic, run after run

# %% [markdown] id="ch10-02"
# ## The demo, as it circulates
#
# Here it is, line for line, with its comments translated and placed on the lines they explain.
# (One line is ours: `np.random.seed(0)`, so that every run of this notebook starts from the same
# numbers.) It simulates four GPUs in one process: each `ZeROStage1` worker keeps Adam's moments
# only for "its" parameters, and the main block gives every worker a gradient, "all-reduces" it
# and takes an optimizer step.

# %% id="ch10-03"
import numpy as np

np.random.seed(0)   # ours: the same numbers on every run


def make_params(sizes):
    params = {}
    for i, size in enumerate(sizes):
        params['w' + str(i)] = np.random.randn(size).astype(np.float32)
    return params


class ZeROStage1:
    def __init__(self, rank_gpu, world_size_gpu, params):
        self.rank_gpu = rank_gpu
        self.world_size_gpu = world_size_gpu
        self.params = params
        self.grads = {name: np.zeros_like(p) for name, p in params.items()}
        # slice by GPU number: decides which parameters' optimizer states this card keeps
        self.local_names = list(params.keys())[rank_gpu::world_size_gpu]
        self.moments = {}
        self.velocities = {}
        for name in self.local_names:
            self.moments[name] = np.zeros_like(params[name])
            self.velocities[name] = np.zeros_like(params[name])
        self.memory = self.estimate_memory()

    def estimate_memory(self):
        total = 0
        for name, p in self.params.items():
            total += p.nbytes * 2       # every card keeps full copies of the FP16 params and FP16 grads
        for name in self.local_names:
            total += self.params[name].nbytes * 4   # only its own params: master weights + Adam states
        return total

    def set_grad(self, name, grad):
        self.grads[name] += grad

    def all_reduce_grad(self):
        for name in self.grads:
            self.grads[name] /= self.world_size_gpu     # simulates the averaged gradient after all-reduce

    def optimizer_step(self, lr=0.01, beta1=0.9, beta2=0.999):
        for name in self.local_names:
            g = self.grads[name]
            # Adam's first moment, "the same as DeepSpeed computes internally"
            self.moments[name] = beta1 * self.moments[name] + (1 - beta1) * g
            # second moment, used to scale the update
            self.velocities[name] = beta2 * self.velocities[name] + (1 - beta2) * g * g
            # update the parameters with the sharded optimizer states
            self.params[name] -= lr * self.moments[name] / (np.sqrt(self.velocities[name]) + 1e-8)


if __name__ == '__main__':
    world_size_gpu = 4
    params = make_params([1024, 2048, 4096])
    workers = [ZeROStage1(rank, world_size_gpu, params) for rank in range(world_size_gpu)]
    for worker in workers:
        for name in params:
            worker.set_grad(name, np.ones_like(params[name]))
        worker.all_reduce_grad()
        worker.optimizer_step()
    print('each GPU keeps only its shard of the optimizer states:', [w.local_names for w in workers])

# %% [markdown] id="ch10-04"
# It runs, and it prints what it set out to show. Nothing in it checks anything else. So let us
# check: first its own numbers, then against real ranks (one crew of 4 ranks, started at (b) and
# reused; one of 3 at the end).
#
# ## (a) It counts 8 and 16 bytes per parameter where it means 4 and 12
#
# The comments say what `estimate_memory` wants to count: fp16 parameters and fp16 gradients in
# full on every card (2 + 2 = **4 bytes** per parameter), plus the fp32 master weights and Adam's
# two moments for the card's own parameters (4 + 4 + 4 = **12 bytes**).
#
# **Predict, then run.** Ψ = 7,168 and worker 0 owns `w0` (1,024 elements). What should worker 0's
# estimate be, by its comments, and what will `estimate_memory()` report? (`p.nbytes` is the size
# of the array in bytes.) Write both numbers down.
#
# Below, for each worker: the demo's estimate, what its comments mean (chapter 1's 2 + 2 + 12),
# and what the demo's own arrays actually hold (fp32 everything, no master copy: 4 + 4 per
# parameter, 4 + 4 per own parameter), all in bytes.

# %% id="ch10-05"
psi = sum(p.size for p in params.values())
print(f"Ψ = {psi:,} parameters; bytes per worker")
print(f"{'worker':>6}{'own elements':>14}{'demo estimate':>15}{'meant: 4Ψ + 12·own':>20}"
      f"{'demo holds':>12}")
for w in workers:
    own = sum(params[n].size for n in w.local_names)
    meant = 2 * psi + 2 * psi + 12 * own
    holds = (sum(p.nbytes for p in w.params.values()) + sum(g.nbytes for g in w.grads.values())
             + sum(m.nbytes for m in w.moments.values()) + sum(v.nbytes for v in w.velocities.values()))
    print(f"{w.rank_gpu:>6}{own:>14,}{w.estimate_memory():>15,}{meant:>20,}{holds:>12,}")
print(f"demo estimate = {workers[0].estimate_memory() - 16 * 1024:,} + 16 × own "
      f"= 8 bytes × Ψ + 16 bytes × own")

# %% [markdown] id="ch10-06"
# `p.nbytes` is the size of a *float32* array: 4 bytes per element. So `nbytes * 2` is 8 bytes
# per parameter and `nbytes * 4` is 16. The estimate is 1.6 to 2 times what the comments mean, and it matches neither reading: in
# fp32 the demo holds 8 bytes per parameter (the `* 2` happens to be right for *that*), but its
# optimizer states are 8 bytes per own parameter (two moments, no master), not 16. A byte count
# that is off by a constant factor still "goes down with N", which is why this kind of mistake
# survives: only comparing with the arrays themselves shows it. (zerolab's `engine.memory()`
# reads the bytes from the tensors, never from a formula.)
#
# ## (b) Its "all-reduce" divides without summing
#
# `all_reduce_grad` divides each worker's *own* gradient by 4. An all-reduce first **adds**
# every worker's gradient and then (for the average) divides. Give the four workers different
# gradients, 1, 2, 3 and 4, and compare with a real all-reduce on 4 real ranks.
#
# **Predict, then run.** What will each worker's gradient be after the demo's
# `all_reduce_grad`? And on the real ranks?

# %% id="ch10-07"
crew = zerolab.Crew(4, threads=1)      # 4 ranks, reused up to the replacement
fresh = [ZeROStage1(r, 4, make_params([1024, 2048, 4096])) for r in range(4)]
for r, w in enumerate(fresh):
    for name in w.params:
        w.set_grad(name, np.full_like(w.params[name], r + 1))
    w.all_reduce_grad()
print("demo, each worker's gradient afterwards:  ", [float(w.grads["w0"][0]) for w in fresh])


def average_of_ranks():
    g = torch.full((1024,), float(zerolab.rank() + 1))
    dist.all_reduce(g)                     # the sum over the ranks ...
    g /= zerolab.world_size()              # ... then the average
    return float(g[0])


print("all-reduce on 4 real ranks, then / 4:     ", crew.run(average_of_ranks))

# %% [markdown] id="ch10-08"
# The demo's workers end with four different "averages", none of them the average (2.5). In the
# demo's own main block every worker gets the same gradient (ones), so the only visible effect is
# a gradient 4 times too small, which Adam hides (it divides by the gradient's own scale); plain
# SGD would not.
#
# ## (c) All workers share one `params` dict: the all-gather happens by accident
#
# ZeRO stage 1 has each rank update only its shard, then **all-gather** the updated shards so that
# every rank holds the full new parameters again. The demo has no all-gather, and yet after its
# loop every parameter has been updated. Why?
#
# **Predict, then run.** Give each worker its own copy of the parameters, as separate GPUs
# would have, and run the same loop: which parameters will have moved on each worker?

# %% id="ch10-09"
print("every worker holds the very same dict object:", all(w.params is params for w in workers))
print("worker 3 owns no parameter, yet sees w0 updated by worker 0:",
      workers[3].params["w0"] is workers[0].params["w0"])

# Give each worker its own copy, as separate GPUs would have, and run the same loop
np.random.seed(0)
start = make_params([1024, 2048, 4096])
apart = [ZeROStage1(r, 4, copy.deepcopy(start)) for r in range(4)]
for w in apart:
    for name in w.params:
        w.set_grad(name, np.ones_like(w.params[name]))
    w.all_reduce_grad()
    w.optimizer_step()
for w in apart:
    changed = [n for n in w.params if not np.array_equal(w.params[n], start[n])]
    print(f"worker {w.rank_gpu} with its own copy: parameters that moved {changed}")

# %% [markdown] id="ch10-10"
# With one copy per worker, each worker sees only its own update: the ranks now hold four
# different models, and the next forward pass would diverge. The missing piece is the all-gather
# ((N−1)/N·Ψ elements on each rank's wire, in a ring). In the demo, Python's
# object sharing did it for free, which is exactly what a real machine will not do.
#
# ## (d) Its Adam has no bias correction, yet "matches DeepSpeed"
#
# Adam's moments start at zero, so early on they are biased towards zero: m after one step is
# 0.1·g, v is 0.001·g². torch's `Adam` and DeepSpeed's (`FusedAdam`, `DeepSpeedCPUAdam`, both with
# `bias_correction=True` by default) divide them by (1 − β₁ᵗ) and (1 − β₂ᵗ). The demo does not.
# With a constant gradient the demo's step is then (1 − β₁ᵗ)/√(1 − β₂ᵗ) times torch's step.
#
# **Predict, then run.** At the very first step, is the demo's step smaller than torch's, the
# same, or larger? By how much?

# %% id="ch10-11"
STEPS, LR = 300, 0.01
g = np.random.default_rng(1).standard_normal(1024).astype(np.float32)   # one fixed gradient


def demo_moves(worker_class):
    w = worker_class(0, 1, {"w0": np.zeros(1024, np.float32)})
    moves = []
    for _ in range(STEPS):
        before = w.params["w0"].copy()
        w.grads["w0"][:] = g                   # a fresh gradient each step
        w.optimizer_step(lr=LR)
        moves.append(np.abs(w.params["w0"] - before).mean())
    return np.array(moves), w.params["w0"]


def torch_moves():
    p = torch.zeros(1024, requires_grad=True)
    opt = torch.optim.Adam([p], lr=LR, betas=(0.9, 0.999), eps=1e-8)
    moves = []
    for _ in range(STEPS):
        before = p.detach().clone()
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        moves.append(float((p.detach() - before).abs().mean()))
    return np.array(moves), p.detach().numpy()


demo, demo_final = demo_moves(ZeROStage1)
ref, ref_final = torch_moves()
t = np.arange(1, STEPS + 1)
formula = (1 - 0.9 ** t) / np.sqrt(1 - 0.999 ** t)
ratio = demo / ref
print(f"step 1: the demo moves {ratio[0]:.2f}x as far as torch.optim.Adam "
      f"(formula 0.1 / √0.001 = {formula[0]:.2f})")
print(f"largest ratio {formula.max():.2f}, at step {t[formula.argmax()]}; "
      f"after {STEPS} steps still {formula[-1]:.2f}")
print("measured ratio = (1 − β₁ᵗ)/√(1 − β₂ᵗ) within 1e-3 at every step:",
      bool(np.abs(ratio / formula - 1).max() < 1e-3))

# %% id="ch10-12"
fig, ax = plt.subplots(figsize=(8, 3.4))
ax.plot(t, ratio, lw=3, alpha=0.5, label="measured: demo's step / torch.optim.Adam's step")
ax.plot(t, formula, "k--", lw=1, label="(1 − β₁ᵗ) / √(1 − β₂ᵗ)")
ax.axhline(1, color="gray", lw=0.8)
ax.set(xlabel="step t", ylabel="ratio of step sizes", ylim=(0, None),
       title="Without bias correction, the demo's early steps are up to 6.6 times too large")
ax.legend(fontsize=8)
plt.show()

# %% [markdown] id="ch10-13"
# The ratio climbs to 6.6 at step 12, is still about 2 at step 300, and comes back to 1 only
# after a few thousand steps: in that window the demo's learning rate is effectively several times the one it was
# given. That is not DeepSpeed's Adam. Adding the two bias corrections (a step counter and two
# divisions) makes it torch's:

# %% id="ch10-14"
class BiasCorrected(ZeROStage1):
    def optimizer_step(self, lr=0.01, beta1=0.9, beta2=0.999):
        self.t = getattr(self, "t", 0) + 1
        for name in self.local_names:
            g = self.grads[name]
            self.moments[name] = beta1 * self.moments[name] + (1 - beta1) * g
            self.velocities[name] = beta2 * self.velocities[name] + (1 - beta2) * g * g
            m_hat = self.moments[name] / (1 - beta1 ** self.t)
            v_hat = self.velocities[name] / (1 - beta2 ** self.t)
            self.params[name] -= lr * m_hat / (np.sqrt(v_hat) + 1e-8)


_, fixed_final = demo_moves(BiasCorrected)
print(f"after {STEPS} steps, max |bias-corrected demo − torch.optim.Adam| < 1e-5:",
      bool(np.abs(fixed_final - ref_final).max() < 1e-5))
print(f"after {STEPS} steps, max |demo as written − torch.optim.Adam| > 0.1:  ",
      bool(np.abs(demo_final - ref_final).max() > 0.1))

# %% [markdown] id="ch10-15"
# ## (e) Gradients are never zeroed
#
# `set_grad` adds into `self.grads` (`+=`), and nothing ever sets it back to zero. That is how
# gradient *accumulation* works, but a training step must start from zero gradients (DeepSpeed
# and zerolab zero them after every optimizer step). Run the demo's loop three more times, with
# the same gradient of ones each time, and watch what worker 0 calls its gradient.
#
# **Predict, then run.** Worker 0's gradient was 0.25 after the demo's own step. What will it
# be after each of three more steps? Where does it go?

# %% id="ch10-16"
seen = [float(workers[0].grads["w0"][0])]          # after the demo's own step
for _ in range(3):
    for worker in workers:
        for name in params:
            worker.set_grad(name, np.ones_like(params[name]))
        worker.all_reduce_grad()
        worker.optimizer_step()
    seen.append(float(workers[0].grads["w0"][0]))
print("worker 0's gradient at steps 1-4:", seen)
print("the true average gradient at every step: 1.0")
print("each step: g ← (g + 1) / 4, which tends to 1/3; stale gradients leak into every step")

# %% [markdown] id="ch10-17"
# Together with fault (b), the demo's gradient is the old one plus the new one, divided by 4,
# forever: 0.25, 0.3125, 0.328125, ... towards 1/3, while the true average gradient is 1 at
# every step.
#
# ## (f) Its round-robin split leaves a rank empty
#
# `list(params.keys())[rank::world_size]` deals out *whole parameters*, one by one. With 3
# parameters and 4 workers one worker gets nothing; and since parameters differ in size, the
# others get very different loads.

# %% id="ch10-18"
own = [sum(params[n].size for n in w.local_names) for w in workers]
print("parameters per worker:", [w.local_names for w in workers])
print(f"elements of optimizer state per worker: {own}; an even split would be {psi // 4:,} each")
print(f"the busiest worker holds {max(own) / (psi / 4):.2f}x its fair share; worker 3 holds 0")

# %% [markdown] id="ch10-19"
# The busiest worker's notebook is what must fit, so this split saves far less than 1/N. ZeRO
# (DeepSpeed and zerolab alike) flattens the parameters into one buffer, pads it to a multiple
# of N and cuts it into N **equal** pieces, regardless of parameter boundaries. We will see
# zerolab's engine give every rank exactly 1,792 elements of this same model below.
#
# ## (g) "Broadcast after the update" at stage 3
#
# The text that comes with the demo says of stage 3: "the forward pass gathers the sharded
# parameters, the backward pass reduce-scatters the gradients, and after the update the
# parameters are **broadcast** again." Two things are off. At stage 3 nothing is sent after the
# update: each rank updates its own shard and *keeps it sharded*; the next forward gathers the
# parameters again, module by module. And the backward pass gathers them a second time (they were
# released after the forward), which is why stage 3 moves 3Ψ, not 2Ψ. (One exception: the small
# parameters that `stage3_param_persistence_threshold` keeps whole on every rank are refreshed by an
# all-gather after the step; the threshold is 0 here, and chapter 3 measures it.) (At stages 1 and 2 the
# parameters are sent after the update, but by an **all-gather** of N shards, not a broadcast.)
#
# The ledger records every collective the engine issues; below, one training step of chapter 3's
# TinyLM (`zerolab.course.lm_runs.phases_of_a_step` marks the ledger between the phases) is split into
# its forward, backward and optimizer step, on the crew's 4 ranks, for stages 1, 2 and 3.
#
# **Predict, then run.** At stage 3, which collectives does the optimizer step send, and how
# many bytes? Which phases carry the parameters?

# %% id="ch10-20"
OPS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")
print(f"TinyLM, Ψ = {PSI_LM:,}, bf16, {crew.world_size} ranks, one step: calls × wire bytes")
print("(DeepSpeed's collectives as 0.19.8 sends them, its overflow flag and gradient norm included)")
print(f"{'':17}" + "".join(f"{op:>18}" for op in OPS))
for stage in (1, 2, 3):
    result = crew.run(phases_of_a_step, stage)[0]
    for phase, ops in result.items():
        cells = [f"{ops[op][0]} × {ops[op][1]:,.0f}" if op in ops else "-" for op in OPS]
        print(f"stage {stage} {phase:9}" + "".join(f"{c:>18}" for c in cells))

# %% [markdown] id="ch10-21"
# At stage 3 the optimizer step sends one small all-reduce and **no parameters**: no broadcast, no
# all-gather. That all-reduce is DeepSpeed 0.19.8's gradient norm, which zerolab sends as it does
# (`zerolab/zero/norms.py`): the squared norm of the rank's shard, one fp64 scalar of 8 bytes
# (`stage3.py` line 2469, in `get_norm_dtype()`'s dtype), (2·3/4)·8 = 12 wire bytes at N = 4.
# Stage 3 checks for overflow with a collective only in fp16, so in bf16 the norm is all it sends.
# Stages 1 and 2 send two small all-reduces: a 1-byte overflow flag, the MAX of "this rank saw an
# inf or NaN" (`stage_1_and_2.py` line 3242; sent in bf16 too, as `bf16.check_grad_overflow` is on
# by default), then the squared norm as one fp32 scalar of 4 bytes (`runtime/zero/stage_1_and_2.py`
# line 2693): 1.5 + 6 = 7.5 wire bytes, which the table rounds to stage 2's `2 × 8`. The parameters
# travel in the forward (Ψ) and again in the backward (Ψ, beside the gradients' reduce-scatter,
# one per bucket of parameters). Stages 1 and 2 send the parameters in the step, as one all-gather
# of the flat buffer. Their gradients travel the way DeepSpeed sends them: stage 1 keeps the whole
# gradient through backward and all-reduces it, bucket by bucket, at the start of the step (the
# step's 7 all-reduces, 566,708 bytes, are its 5 buckets, 566,700, then the flag and the norm);
# stage 2 all-reduces bucket by bucket during backward. (This step is the first: stage 3 has no
# recorded order yet, so each module is gathered on its own, without prefetch.)
#
# At N = 4, one pass over all Ψ parameters of bf16 puts (3/4)·2Ψ = 283,350 bytes on each rank's
# wire. Stage 3's forward and its backward each gather 38,556 bytes more than that. 38,550 are the
# embedding matrix (25,700 elements, (3/4)·2·25,700 = 38,550 bytes), which the output head shares:
# in forward the embedding and the head each gather it; in backward the head gathers it, DeepSpeed
# releases it after the head's backward (`post_sub_module_backward_function`; reuse distance 0
# here keeps nothing), and the embedding's own backward gathers it again (chapter 3 measures
# this). The last 6 bytes are the frozen `temperature`: 1 element, partitioned like the others as
# DeepSpeed's `zero.Init` does, padded to 4 elements, (3/4)·2·4 = 6 bytes.
#
# ## The replacement: zerolab's stage 1, on real ranks
#
# Now the real thing, on the demo's own household: three parameter vectors of 1,024, 2,048 and
# 4,096 elements, made into a model (a linear score, one number per sample, trained with a squared
# error). `zerolab.initialize` takes a DeepSpeed config; stage 1, fp32, Adam (with bias correction),
# no gradient clipping, a global batch of 12 samples split over the ranks. We train 5 steps on
# 4 ranks, then on 3 (the crew of 4 makes way for one of 3), and compare every parameter with plain single-process training on the same
# 12 samples per step.

# %% id="ch10-22"
SIZES = [1024, 2048, 4096]


class Household(torch.nn.Module):
    # the demo's three parameter vectors as a model: score = Σ_i x_i · w_i
    def __init__(self, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        for i, n in enumerate(SIZES):
            setattr(self, f"w{i}", torch.nn.Parameter(torch.randn(n, generator=gen)))

    def forward(self, x):
        return sum((part * getattr(self, f"w{i}")).sum(-1) for i, part in enumerate(x.split(SIZES, -1)))


gen = torch.Generator().manual_seed(2)
w_true = torch.randn(sum(SIZES), generator=gen) / 30
household_batches = []
for _ in range(5):
    x = torch.randn(12, sum(SIZES), generator=gen)
    household_batches.append((x, x @ w_true + 0.1 * torch.randn(12, generator=gen)))


def household_config(world, ideal=False):
    cfg = {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 12 // world,
           "optimizer": {"type": "Adam", "params": {"lr": 0.01, "adam_w_mode": False}},
           "gradient_clipping": 0, "zero_optimization": {"stage": 1}}
    if ideal:                 # zerolab's own switch: the paper's reduce-scatter, not DeepSpeed's all-reduce
        cfg["zerolab"] = {"ideal_reduce_scatter": True}
    return cfg


def train_household(ideal=False):
    engine = zerolab.initialize(Household(), household_config(zerolab.world_size(), ideal))
    train_engine(engine, household_batches[:-1], mse_loss)
    mark = engine.ledger.mark()
    train_engine(engine, household_batches[-1:], mse_loss)     # the last step: measured
    last = engine.ledger.since(mark)
    last.records = [r for r in last.records if r.tag.startswith(("grads", "params"))]  # not the norm's
    last = last.totals()
    return {"params": engine.full_params(),
            "stepped_numel": sum(m.numel() for m in engine.stage.masters),   # this rank's notebook
            "grads_zero_after_step": all(bool((g == 0).all()) for g in engine.stage.grad_flats),
            "wire": {op: (int(v["calls"]), v["wire_bytes"]) for op, v in last.items()},
            "memory": engine.memory()}


reference = train_reference(Household(), household_config(1), household_batches, mse_loss)
household, household_ideal = {}, {}
for n in (4, 3):
    if crew.world_size != n:
        crew.close()
        crew = zerolab.Crew(n, threads=1)      # the crew of 4 makes way for one of 3
    household[n] = crew.run(train_household)                  # DeepSpeed's way
    household_ideal[n] = crew.run(train_household, True)      # the paper's
crew.close()                                   # done with the ranks
print(f"Ψ = {sum(SIZES):,}; elements each rank's optimizer steps (padded to a multiple of N):")
for n, per_rank in sorted(household.items()):
    print(f"  N = {n}: {[r['stepped_numel'] for r in per_rank]}")

# %% [markdown] id="ch10-23"
# Every rank gets an equal piece, 1,792 elements at N = 4 (fault **f**); at N = 3, 7,168 is
# padded with 2 zeros to 7,170 and each rank gets 2,390. Now the rest, DeepSpeed's way and the
# paper's (each trained separately): what went over the wire in the last step, whether the
# gradients were zeroed, and whether the result is the one a single process gets.
#
# **Predict, then run.** How many bytes will one rank's wire carry in the last step at N = 4,
# DeepSpeed's way and the paper's? (Ψ = 7,168 fp32 parameters.)

# %% id="ch10-24"
def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in b)


print("bytes on one rank's wire in the last step, fp32. DeepSpeed's default: all-reduce 2(N−1)/N·Ψ·4,")
print("then all-gather (N−1)/N·Ψ·4; the paper's (zerolab's switch): reduce-scatter (N−1)/N·Ψ·4, then")
print("the all-gather. Last column: every parameter within 1e-5 of one process on the whole batch.")
print(f"{'N':>2}  {'pattern':<13}{'gradients':>26}{'all-gather':>15}{'total':>9}{'formula':>9}{'zeroed':>8}"
      f"{'= 1 proc':>10}")
for n in sorted(household):
    for who, runs_n, factor in (("DeepSpeed's", household[n], 3), ("paper's", household_ideal[n], 2)):
        wire = runs_n[0]["wire"]
        op = "all_reduce" if "all_reduce" in wire else "reduce_scatter"
        g, ag = wire[op], wire["all_gather"]
        same = all(max_diff(r["params"], reference) < 1e-5 for r in runs_n)
        zeroed = all(r["grads_zero_after_step"] for r in runs_n)
        print(f"{n:>2}  {who:<13}{f'{op} {g[0]} × {g[1]:,.0f}':>26}{f'{ag[0]} × {ag[1]:,.0f}':>15}"
              f"{g[1] + ag[1]:>9,.0f}{factor * (n - 1) / n * sum(SIZES) * 4:>9,.0f}{str(zeroed):>8}"
              f"{str(same):>10}")

# %% [markdown] id="ch10-25"
# Every fault of the demo, fixed and measured:
#
# - **(a)** memory is read from the tensors (`engine.memory()`), not from a factor;
# - **(b)** DeepSpeed's all-reduce *sums* the ranks' gradients (the engine pre-divides by N, so the
#   sum is the average) and each rank keeps its partition's part; the paper's reduce-scatter
#   (zerolab's `ideal_reduce_scatter` switch) sums as well and hands each rank only its shard, for
#   half the gradient bytes;
# - **(c)** the all-gather is a real collective on the ledger, one per step of the whole flat
#   buffer, (N−1)/N·Ψ elements of fp32 (a bit more at N = 3: the 2 padding elements);
# - **(d)** the optimizer is torch's Adam, bias correction included;
# - **(e)** the gradient buffers are zero after every step;
# - **(f)** the shards are equal.
#
# And the result is plain single-process Adam on the whole batch, to within float rounding.
#
# ## What we measured
#
# **The demo's seven faults**, each found by a measurement:
#
# | | the demo | measured |
# |---|---|---|
# | a | `nbytes * 2` and `nbytes * 4` on fp32 arrays | 8 and 16 bytes per parameter where its comments mean 4 and 12: 73,728 bytes for worker 0 instead of 40,960 |
# | b | "all-reduce" = divide by N | gradients 1, 2, 3, 4 give 0.25, 0.5, 0.75, 1.0; a real all-reduce gives 2.5 on every rank |
# | c | one shared `params` dict | with a copy per worker, each worker sees only its own parameter move: no all-gather |
# | d | Adam without bias correction | the first step is 3.16x torch's, 6.6x at step 12, still 2x at step 300; with the two corrections it matches `torch.optim.Adam` |
# | e | gradients never zeroed | 0.25, 0.3125, 0.328125, ... → 1/3 instead of 1 every step |
# | f | round-robin by parameter | 1,024 / 2,048 / 4,096 / 0 elements instead of 1,792 each |
# | g | "broadcast after the update" at stage 3 | after stage 3's update no parameter is sent (only the gradient norm's 8-byte all-reduce); parameters are gathered in forward and again in backward |
#
# zerolab's stage 1 on 3 and 4 ranks: equal shards; on the ledger DeepSpeed's all-reduce of the
# gradients (2(N−1)/N·Ψ) and one all-gather ((N−1)/N·Ψ), or with zerolab's switch the paper's
# reduce-scatter ((N−1)/N·Ψ) and the all-gather; gradients zeroed, parameters equal to
# single-process Adam to within 10⁻⁵ either way.
#
# ## Questions
#
# 1. Fix the demo's `estimate_memory` so that it reports what its comments mean. Then write a
#    second version that reports what its arrays really hold. Which one should a simulation print?
# 2. In fault (b), the demo's main block gives every worker the same gradient. Why does Adam then
#    hide the missing sum, and what would SGD with the same learning rate do?
# 3. In (g), run `crew.run(phases_of_a_step, 3, stage3_param_persistence_threshold=100_000)` (start
#    a crew of 2 first: the chapter closed its own). Which parameters stop travelling in forward and backward, and what
#    does the optimizer step send now?
#
# **Next:** part 2, `10b_the_beliefs.ipynb`: six beliefs about ZeRO, each run on real ranks.
