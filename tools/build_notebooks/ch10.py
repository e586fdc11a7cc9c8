#!/usr/bin/env python3
"""Build chapter 10, "Common misconceptions", in two parts, from this one file.

    python tools/build_notebooks/ch10.py            # write the notebooks (only those whose cells changed)
    python tools/build_notebooks/ch10.py --execute  # ... and run them, storing the outputs

Writes ``notebooks/10_misconceptions.ipynb`` (part 1, the numpy demo) and
``notebooks/10b_the_beliefs.ipynb`` (part 2, six beliefs). Built like every chapter (``nbsource.py``): cell
ids are fixed, and an unchanged notebook and its outputs are left alone. Stored executed: nbval
compares its outputs.

Part 1 quotes a short numpy "ZeRO stage 1" demo (as the course's source story gives it, its
comments translated), runs it as written and lets measurements find its faults; then zerolab's
real stage 1 replaces it on real ranks (a crew of 4, then one of 3). Part 2 settles six common beliefs, each with a run on
real ranks; the sixth, "offload is free", adds zerolab's scale simulator for what offload costs on
GPUs (deterministic arithmetic, so its ratios are printed).

Collectives are DeepSpeed 0.19.8's for each config (stages 1-2: each bucket all-reduced, one
all-gather, 3Ψ); where the paper's reduce-scatter (2Ψ) matters it is measured too, through
zerolab's ``ideal_reduce_scatter`` switch, and labelled. zerolab's stage-3 order checks are
counted apart, never as ZeRO's calls.

Outputs must not depend on the CPU: bytes, elements and calls are exact and printed as they are;
floats that are rounding noise are printed as verdicts with their tolerance; times appear only
in figures.
"""
from __future__ import annotations

import sys

import nbsource
from nbsource import code, md


CHAPTER = [
md(r"""
# Chapter 10 · Common misconceptions (1): a demo, measured (常见误区)

*What the crew believed, and what the tally sheet says.*

By now the crew knows the job: the **furniture** (parameters), the **door stickers**
(gradients), the **heavy notebook** of experience (optimizer states: fp32 master weights,
Adam's momentum and variance) and the **folding chair** (activations), and the three ways of
splitting the load. What remains are the things everyone *thinks* they know. Some were written
down in a hurry, some were true once, some are true on one machine and not on another.

This chapter settles them one at a time with a measurement, not an argument. **This part**
starts from a short piece of code that circulates as "ZeRO stage 1 in numpy": a class of about
40 lines with a comment that says its Adam "matches DeepSpeed". We run it as written, then
measure it, and find seven faults, from the bytes it counts to what it claims stage 3 does after
the update. Then we replace it with zerolab's stage 1 on real ranks and check that it trains
exactly like one process. **Part 2** (`10b_the_beliefs.ipynb`) takes six common beliefs about
ZeRO and runs each on real ranks.

Before each measurement, write your answer down: most of these faults look harmless until a
number shows them.
"""),
code(r"""
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
"""),
md(r"""
## The demo, as it circulates

Here it is, line for line, with its comments translated and placed on the lines they explain.
(One line is ours: `np.random.seed(0)`, so that every run of this notebook starts from the same
numbers.) It simulates four GPUs in one process: each `ZeROStage1` worker keeps Adam's moments
only for "its" parameters, and the main block gives every worker a gradient, "all-reduces" it
and takes an optimizer step.
"""),
code(r"""
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
"""),
md(r"""
It runs, and it prints what it set out to show. Nothing in it checks anything else. So let us
check: first its own numbers, then against real ranks (one crew of 4 ranks, started at (b) and
reused; one of 3 at the end).

## (a) It counts 8 and 16 bytes per parameter where it means 4 and 12

The comments say what `estimate_memory` wants to count: fp16 parameters and fp16 gradients in
full on every card (2 + 2 = **4 bytes** per parameter), plus the fp32 master weights and Adam's
two moments for the card's own parameters (4 + 4 + 4 = **12 bytes**).

**Predict, then run.** Ψ = 7,168 and worker 0 owns `w0` (1,024 elements). What should worker 0's
estimate be, by its comments, and what will `estimate_memory()` report? (`p.nbytes` is the size
of the array in bytes.) Write both numbers down.

Below, for each worker: the demo's estimate, what its comments mean (chapter 1's 2 + 2 + 12),
and what the demo's own arrays actually hold (fp32 everything, no master copy: 4 + 4 per
parameter, 4 + 4 per own parameter), all in bytes.
"""),
code(r"""
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
"""),
md(r"""
`p.nbytes` is the size of a *float32* array: 4 bytes per element. So `nbytes * 2` is 8 bytes
per parameter and `nbytes * 4` is 16. The estimate is 1.6 to 2 times what the comments mean, and it matches neither reading: in
fp32 the demo holds 8 bytes per parameter (the `* 2` happens to be right for *that*), but its
optimizer states are 8 bytes per own parameter (two moments, no master), not 16. A byte count
that is off by a constant factor still "goes down with N", which is why this kind of mistake
survives: only comparing with the arrays themselves shows it. (zerolab's `engine.memory()`
reads the bytes from the tensors, never from a formula.)

## (b) Its "all-reduce" divides without summing

`all_reduce_grad` divides each worker's *own* gradient by 4. An all-reduce first **adds**
every worker's gradient and then (for the average) divides. Give the four workers different
gradients, 1, 2, 3 and 4, and compare with a real all-reduce on 4 real ranks.

**Predict, then run.** What will each worker's gradient be after the demo's
`all_reduce_grad`? And on the real ranks?
"""),
code(r"""
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
"""),
md(r"""
The demo's workers end with four different "averages", none of them the average (2.5). In the
demo's own main block every worker gets the same gradient (ones), so the only visible effect is
a gradient 4 times too small, which Adam hides (it divides by the gradient's own scale); plain
SGD would not.

## (c) All workers share one `params` dict: the all-gather happens by accident

ZeRO stage 1 has each rank update only its shard, then **all-gather** the updated shards so that
every rank holds the full new parameters again. The demo has no all-gather, and yet after its
loop every parameter has been updated. Why?

**Predict, then run.** Give each worker its own copy of the parameters, as separate GPUs
would have, and run the same loop: which parameters will have moved on each worker?
"""),
code(r"""
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
"""),
md(r"""
With one copy per worker, each worker sees only its own update: the ranks now hold four
different models, and the next forward pass would diverge. The missing piece is the all-gather
((N−1)/N·Ψ elements on each rank's wire, in a ring). In the demo, Python's
object sharing did it for free, which is exactly what a real machine will not do.

## (d) Its Adam has no bias correction, yet "matches DeepSpeed"

Adam's moments start at zero, so early on they are biased towards zero: m after one step is
0.1·g, v is 0.001·g². torch's `Adam` and DeepSpeed's (`FusedAdam`, `DeepSpeedCPUAdam`, both with
`bias_correction=True` by default) divide them by (1 − β₁ᵗ) and (1 − β₂ᵗ). The demo does not.
With a constant gradient the demo's step is then (1 − β₁ᵗ)/√(1 − β₂ᵗ) times torch's step.

**Predict, then run.** At the very first step, is the demo's step smaller than torch's, the
same, or larger? By how much?
"""),
code(r"""
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
"""),
code(r"""
fig, ax = plt.subplots(figsize=(8, 3.4))
ax.plot(t, ratio, lw=3, alpha=0.5, label="measured: demo's step / torch.optim.Adam's step")
ax.plot(t, formula, "k--", lw=1, label="(1 − β₁ᵗ) / √(1 − β₂ᵗ)")
ax.axhline(1, color="gray", lw=0.8)
ax.set(xlabel="step t", ylabel="ratio of step sizes", ylim=(0, None),
       title="Without bias correction, the demo's early steps are up to 6.6 times too large")
ax.legend(fontsize=8)
plt.show()
"""),
md(r"""
The ratio climbs to 6.6 at step 12, is still about 2 at step 300, and comes back to 1 only
after a few thousand steps: in that window the demo's learning rate is effectively several times the one it was
given. That is not DeepSpeed's Adam. Adding the two bias corrections (a step counter and two
divisions) makes it torch's:
"""),
code(r"""
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
"""),
md(r"""
## (e) Gradients are never zeroed

`set_grad` adds into `self.grads` (`+=`), and nothing ever sets it back to zero. That is how
gradient *accumulation* works, but a training step must start from zero gradients (DeepSpeed
and zerolab zero them after every optimizer step). Run the demo's loop three more times, with
the same gradient of ones each time, and watch what worker 0 calls its gradient.

**Predict, then run.** Worker 0's gradient was 0.25 after the demo's own step. What will it
be after each of three more steps? Where does it go?
"""),
code(r"""
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
"""),
md(r"""
Together with fault (b), the demo's gradient is the old one plus the new one, divided by 4,
forever: 0.25, 0.3125, 0.328125, ... towards 1/3, while the true average gradient is 1 at
every step.

## (f) Its round-robin split leaves a rank empty

`list(params.keys())[rank::world_size]` deals out *whole parameters*, one by one. With 3
parameters and 4 workers one worker gets nothing; and since parameters differ in size, the
others get very different loads.
"""),
code(r"""
own = [sum(params[n].size for n in w.local_names) for w in workers]
print("parameters per worker:", [w.local_names for w in workers])
print(f"elements of optimizer state per worker: {own}; an even split would be {psi // 4:,} each")
print(f"the busiest worker holds {max(own) / (psi / 4):.2f}x its fair share; worker 3 holds 0")
"""),
md(r"""
The busiest worker's notebook is what must fit, so this split saves far less than 1/N. ZeRO
(DeepSpeed and zerolab alike) flattens the parameters into one buffer, pads it to a multiple
of N and cuts it into N **equal** pieces, regardless of parameter boundaries. We will see
zerolab's engine give every rank exactly 1,792 elements of this same model below.

## (g) "Broadcast after the update" at stage 3

The text that comes with the demo says of stage 3: "the forward pass gathers the sharded
parameters, the backward pass reduce-scatters the gradients, and after the update the
parameters are **broadcast** again." Two things are off. At stage 3 nothing is sent after the
update: each rank updates its own shard and *keeps it sharded*; the next forward gathers the
parameters again, module by module. And the backward pass gathers them a second time (they were
released after the forward), which is why stage 3 moves 3Ψ, not 2Ψ. (One exception: the small
parameters that `stage3_param_persistence_threshold` keeps whole on every rank are refreshed by an
all-gather after the step; the threshold is 0 here, and chapter 3 measures it.) (At stages 1 and 2 the
parameters are sent after the update, but by an **all-gather** of N shards, not a broadcast.)

The ledger records every collective the engine issues; below, one training step of chapter 3's
TinyLM (`zerolab.course.lm_runs.phases_of_a_step` marks the ledger between the phases) is split into
its forward, backward and optimizer step, on the crew's 4 ranks, for stages 1, 2 and 3.

**Predict, then run.** At stage 3, which collectives does the optimizer step send, and how
many bytes? Which phases carry the parameters?
"""),
code(r"""
OPS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")
print(f"TinyLM, Ψ = {PSI_LM:,}, bf16, {crew.world_size} ranks, one step: calls × wire bytes")
print("(DeepSpeed's collectives, and in the step zerolab's own 16-byte overflow + norm all-reduce)")
print(f"{'':17}" + "".join(f"{op:>18}" for op in OPS))
for stage in (1, 2, 3):
    result = crew.run(phases_of_a_step, stage)[0]
    for phase, ops in result.items():
        cells = [f"{ops[op][0]} × {ops[op][1]:,.0f}" if op in ops else "-" for op in OPS]
        print(f"stage {stage} {phase:9}" + "".join(f"{c:>18}" for c in cells))
"""),
md(r"""
At stage 3 the optimizer step sends one small all-reduce and **no parameters**: no broadcast, no
all-gather. That small all-reduce (a 16-byte tensor: 24 wire bytes at N = 4) is zerolab's, not DeepSpeed's: zerolab packs the
overflow flag and the squared gradient norm for clipping into one fp64 pair, at every stage.
DeepSpeed 0.19.8 sends the norm alone, one scalar: fp32 at stages 1-2, 4 bytes
(`runtime/zero/stage_1_and_2.py` line 2693), fp64 at stage 3, 8 bytes (`stage3.py` line 2469,
in `get_norm_dtype()`'s dtype), and 4 bytes at stage 0 too; its overflow check, fp16 only, is a
separate 1-byte all-reduce (`stage_1_and_2.py` line 3242). The parameters travel in the forward (Ψ) and again in the backward
(Ψ, beside the gradients' reduce-scatter, one per bucket of modules). Stages 1 and 2 send the
parameters in the step, as one all-gather of the flat buffer. Their gradients travel the way
DeepSpeed sends them: stage 1 keeps the whole gradient through backward and all-reduces it,
bucket by bucket, at the start of the step (the step's all-reduces include zerolab's 16-byte one);
stage 2 all-reduces bucket by bucket during backward. (This step is the first: stage 3 has no
recorded order yet, so each module is gathered on its own, without prefetch.)

At N = 4, one pass over all Ψ parameters of bf16 puts (3/4)·2Ψ = 283,350 bytes on each rank's
wire. Stage 3's forward and its backward each gather 38,556 bytes more than that. 38,550 are the
embedding matrix (25,700 elements, (3/4)·2·25,700 = 38,550 bytes), which the output head shares:
in forward the embedding and the head each gather it; in backward the head gathers it, DeepSpeed
releases it after the head's backward (`post_sub_module_backward_function`; reuse distance 0
here keeps nothing), and the embedding's own backward gathers it again (chapter 3 measures
this). The last 6 bytes are the frozen `temperature`: 1 element, partitioned like the others as
DeepSpeed's `zero.Init` does, padded to 4 elements, (3/4)·2·4 = 6 bytes.

## The replacement: zerolab's stage 1, on real ranks

Now the real thing, on the demo's own household: three parameter vectors of 1,024, 2,048 and
4,096 elements, made into a model (a linear score, one number per sample, trained with a squared
error). `zerolab.initialize` takes a DeepSpeed config; stage 1, fp32, Adam (with bias correction),
no gradient clipping, a global batch of 12 samples split over the ranks. We train 5 steps on
4 ranks, then on 3 (the crew of 4 makes way for one of 3), and compare every parameter with plain single-process training on the same
12 samples per step.
"""),
code(r"""
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
"""),
md(r"""
Every rank gets an equal piece, 1,792 elements at N = 4 (fault **f**); at N = 3, 7,168 is
padded with 2 zeros to 7,170 and each rank gets 2,390. Now the rest, DeepSpeed's way and the
paper's (each trained separately): what went over the wire in the last step, whether the
gradients were zeroed, and whether the result is the one a single process gets.

**Predict, then run.** How many bytes will one rank's wire carry in the last step at N = 4,
DeepSpeed's way and the paper's? (Ψ = 7,168 fp32 parameters.)
"""),
code(r"""
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
"""),
md(r"""
Every fault of the demo, fixed and measured:

- **(a)** memory is read from the tensors (`engine.memory()`), not from a factor;
- **(b)** DeepSpeed's all-reduce *sums* the ranks' gradients (the engine pre-divides by N, so the
  sum is the average) and each rank keeps its partition's part; the paper's reduce-scatter
  (zerolab's `ideal_reduce_scatter` switch) sums as well and hands each rank only its shard, for
  half the gradient bytes;
- **(c)** the all-gather is a real collective on the ledger, one per step of the whole flat
  buffer, (N−1)/N·Ψ elements of fp32 (a bit more at N = 3: the 2 padding elements);
- **(d)** the optimizer is torch's Adam, bias correction included;
- **(e)** the gradient buffers are zero after every step;
- **(f)** the shards are equal.

And the result is plain single-process Adam on the whole batch, to within float rounding.

## What we measured

**The demo's seven faults**, each found by a measurement:

| | the demo | measured |
|---|---|---|
| a | `nbytes * 2` and `nbytes * 4` on fp32 arrays | 8 and 16 bytes per parameter where its comments mean 4 and 12: 73,728 bytes for worker 0 instead of 40,960 |
| b | "all-reduce" = divide by N | gradients 1, 2, 3, 4 give 0.25, 0.5, 0.75, 1.0; a real all-reduce gives 2.5 on every rank |
| c | one shared `params` dict | with a copy per worker, each worker sees only its own parameter move: no all-gather |
| d | Adam without bias correction | the first step is 3.16x torch's, 6.6x at step 12, still 2x at step 300; with the two corrections it matches `torch.optim.Adam` |
| e | gradients never zeroed | 0.25, 0.3125, 0.328125, ... → 1/3 instead of 1 every step |
| f | round-robin by parameter | 1,024 / 2,048 / 4,096 / 0 elements instead of 1,792 each |
| g | "broadcast after the update" at stage 3 | after stage 3's update no parameter is sent (only the 16-byte overflow-and-norm all-reduce); parameters are gathered in forward and again in backward |

zerolab's stage 1 on 3 and 4 ranks: equal shards; on the ledger DeepSpeed's all-reduce of the
gradients (2(N−1)/N·Ψ) and one all-gather ((N−1)/N·Ψ), or with zerolab's switch the paper's
reduce-scatter ((N−1)/N·Ψ) and the all-gather; gradients zeroed, parameters equal to
single-process Adam to within 10⁻⁵ either way.

## Questions

1. Fix the demo's `estimate_memory` so that it reports what its comments mean. Then write a
   second version that reports what its arrays really hold. Which one should a simulation print?
2. In fault (b), the demo's main block gives every worker the same gradient. Why does Adam then
   hide the missing sum, and what would SGD with the same learning rate do?
3. In (g), run `crew.run(phases_of_a_step, 3, stage3_param_persistence_threshold=100_000)` (start
   a crew of 2 first: the chapter closed its own). Which parameters stop travelling in forward and backward, and what
   does the optimizer step send now?

**Next:** part 2, `10b_the_beliefs.ipynb`: six beliefs about ZeRO, each run on real ranks.
"""),
]


BELIEFS = [
md(r"""
# Chapter 10b · Common misconceptions (2): six beliefs, measured (常见误区)

*What the crew believed, and what the tally sheet says.*

Part 1 (`10_misconceptions.ipynb`) found the faults of a numpy demo by measuring it. Here the
crew's folklore: six beliefs about ZeRO that are repeated in talks and forums, each settled by a
run on real ranks.

1. "ZeRO-3 is always better than ZeRO-2."
2. "Stages 1 and 2 cost no more traffic than DDP."
3. "More GPUs is always faster."
4. "bf16 needs loss scaling."
5. "ZeRO shards the activations."
6. "Offload is free."

Each section is short: the claim, your prediction, a cell that measures it, what the numbers say.
The measurements use chapter 3's TinyLM (Ψ = 188,900 trainable parameters), bf16 with AdamW, a
global batch of 12 sequences. Each run trains one step (Adam's states appear at the first step)
and measures the second, on every rank; we print rank 0's numbers. One crew of 4 ranks serves
beliefs 1 to 3; it then makes way for a crew of 2 for the rest.
"""),
code(r"""
import matplotlib.pyplot as plt
import torch

import zerolab
from zerolab import precision as P
from zerolab.course.lm_runs import PSI_LM, SEQ, activations_per_stage, in_psi, measure, offload_run, train_20
from zerolab.models import MLP
from zerolab.tools.simulate import simulate

torch.set_num_threads(1)      # one thread here, as on every rank: the same arithmetic, run after run
crew = zerolab.Crew(4, threads=1)           # beliefs 1 to 3; then a crew of 2
print(f"Ψ = {PSI_LM:,}; {crew.world_size} ranks started")
"""),
md(r"""
## Belief 1 · "ZeRO-3 is always better than ZeRO-2"

Stage 3 splits one more giant, the furniture itself, so each backpack is lighter. What does the
crew pay for it?

**Predict, then run.** On 4 ranks: how much less model-state memory does stage 3 hold than stage
2, and how many more bytes does it move per step? How many more collective calls?
"""),
code(r"""
n = crew.world_size
lm4 = {stage: crew.run(measure, stage)[0] for stage in (2, 3)}      # DeepSpeed's collectives
paper2 = crew.run(measure, 2, ideal=True)[0]                          # zerolab's switch
print(f"N = {n}, one step, rank 0{'':13}{'stage 2':>11}{'stage 2':>11}{'stage 3':>11}{'3 / 2':>8}")
print(f"{'':38}{'DeepSpeed':>11}{'paper':>11}{'':>11}{'(DS)':>8}")
rows = [("model states, bytes", lambda r: r["memory"]["model_states"]),
        ("+ peak buffers, bytes", lambda r: r["memory"]["model_states"] + r["memory"]["peak_buffers"]),
        ("wire bytes per step", lambda r: r["wire"]),
        ("collective calls per step", lambda r: r["calls"])]
for label, get in rows:
    a, p, b = get(lm4[2]), get(paper2), get(lm4[3])
    print(f"  {label:36}{a:>11,.0f}{p:>11,.0f}{b:>11,.0f}{b / a:>8.2f}")
print(f"  traffic in Ψ units: stage 2 {in_psi(lm4[2]['wire'], n):.3f} (DeepSpeed), {in_psi(paper2['wire'], n):.3f}"
      f" (paper), stage 3 {in_psi(lm4[3]['wire'], n):.3f}")
print("    (formulas 3, 2; stage 3: 2 with DeepSpeed's prefetch)")
print(f"  stage 3's calls: {', '.join(f'{op} {c}' for op, (c, _) in sorted(lm4[3]['by_op'].items()))};")
print(f"    not among them: {lm4[3]['checks']} order checks of 16 bytes, zerolab's own (DeepSpeed sends none)")
no_prefetch = crew.run(measure, 3, stage3_prefetch_bucket_size=0)[0]
a, b = (r["memory"]["model_states"] + r["memory"]["peak_buffers"] for r in (lm4[2], no_prefetch))
print(f"  stage 3, stage3_prefetch_bucket_size 0: + peak buffers {b:,} ({b / a:.2f} of stage 2),\n"
      f"    {no_prefetch['calls']} calls, wire bytes {no_prefetch['wire']:,.0f}"
      f" = {in_psi(no_prefetch['wire'], n):.3f} Ψ (formula 3)")
"""),
md(r"""
Stage 3 holds about three quarters of stage 2's model states here (16Ψ/N = 4Ψ against
2Ψ + 14Ψ/N = 5.5Ψ at N = 4). But count the parameters it gathers (the peak buffers) and it
holds **more** than stage 2 on this small model. From the third step on, stage 3
**prefetches**, by DeepSpeed's rule: the second step records the order in which the modules asked
for their parameters, and at every later module's fetch the engine starts one asynchronous
all-gather of the next modules in that order, taking modules while fewer than
min(`stage3_max_live_parameters` − available, `stage3_prefetch_bucket_size`) elements are taken
(10⁹ and 5·10⁷ by default). Nothing else bounds what is in flight: on this 189k-parameter model
the first fetch takes every module, the whole model is gathered at the peak, and the modules
gathered ahead travel in one all-gather whose buffer is copied out module by module, which adds
to the peak. With `stage3_prefetch_bucket_size` 0 (no prefetch) only the modules at work are
gathered, and stage 3 holds about a tenth less than stage 2 (0.89 of it, printed above; the tied
embedding is let go after the head's backward, as DeepSpeed does, until the embedding's own
backward gathers it again).
On a billion-parameter model the same budget holds a few layers: that is what it is sized for.

What stage 3 pays depends on the stage 2 you compare it with, and on prefetch. DeepSpeed's stage 2
already moves 3Ψ (each gradient bucket all-reduced, then the parameters all-gathered). Stage 3 at
reuse distance 0 **without** prefetch moves 3Ψ too (plus the tied embedding gathered twice more:
for the head in forward and again for the embedding's own backward). **With** DeepSpeed's default
prefetch it moves about 2Ψ, fewer bytes than DeepSpeed's stage 2: by the end of forward its
prefetcher has scanned every backward use and marked it fetched for, and DeepSpeed keeps those
parameters gathered for backward (`__most_recent_step_id_param_fetched_for`): bytes saved,
memory paid. Against the paper's stage 2 (2Ψ, zerolab's `ideal_reduce_scatter`) it moves as much
with prefetch, half again as much without. It makes more calls than DeepSpeed's stage 2: without
prefetch one all-gather per module in forward and one in backward (the embedding's two uses among
them) and a reduce-scatter per `reduce_bucket_size` bucket of parameters (50,000 elements here).
Each call costs a latency α whatever its size (chapter 6); prefetch takes the gathers' time off
the critical path where compute can hide it, and here their backward bytes too, at the price of
memory. (The calls count DeepSpeed's small all-reduces too, the overflow flag at stage 2 in bf16
and the gradient norm, and leave out zerolab's own order checks, which DeepSpeed does not send.)

So stage 3 is the right choice when stage 2 **does not fit**: the model states of a very large
model, or when the memory it frees buys a bigger micro-batch. When stage 2 fits, stage 3 is more
calls (and, against the paper's stage 2, more bytes) for memory you did not need.

## Belief 2 · "Stages 1 and 2 cost no more traffic than DDP"

The ZeRO paper says so, and it is true **if** stages 1 and 2 reduce-scatter their gradients: an
all-reduce (2Ψ) is a reduce-scatter (Ψ) followed by an all-gather (Ψ), and ZeRO only moves the
optimizer step in between. DeepSpeed 0.19.8's stages 1 and 2 do not (chapter 3): `reduce_scatter`
is true by default, but with `use_multi_rank_bucket_allreduce` (also true by default) they issue
no reduce-scatter; they all-reduce each gradient bucket (2Ψ), each rank keeps its part, and then
the parameters are all-gathered (Ψ more). zerolab issues DeepSpeed's collectives, and the paper's
reduce-scatter is its own switch (`"zerolab": {"ideal_reduce_scatter": true}`), so we can measure
both, and stage 2 with gradient accumulation too.

**Predict, then run.** In Ψ units: DDP moves 2. Stage 1 and stage 2, DeepSpeed's way and the
paper's? Stage 2 with 4 micro-batches per step, each way?
"""),
code(r"""
n = crew.world_size
DS, PAPER = "DeepSpeed's default", "paper (zerolab switch)"
cases = [("stage 0 (DDP)", 0, False, 1), (f"stage 1, {DS}", 1, False, 1), (f"stage 1, {PAPER}", 1, True, 1),
         (f"stage 2, {DS}", 2, False, 1), (f"stage 2, {PAPER}", 2, True, 1),
         ("stage 2, 4 micro-batches, DeepSpeed's", 2, False, 4), ("stage 2, 4 micro-batches, paper", 2, True, 4)]
print(f"N = {n}, bf16, Ψ = {PSI_LM:,}: one optimizer step, one rank's wire")
COLUMNS = ("all_gather", "all_reduce", "reduce_scatter")        # each: calls × wire bytes
print(f"{'':38}" + "".join(f"{op:>17}" for op in COLUMNS) + f"{'in Ψ':>7}")
traffic3 = {}
for label, stage, ideal, accumulate in cases:
    r = crew.run(measure, stage, accumulate=accumulate, global_batch=48, ideal=ideal)[0]
    ops = r["by_op"]
    wire = sum(w for _, w in ops.values())
    traffic3[label] = in_psi(wire, n)
    cols = "".join(f"{f'{ops[op][0]} × {ops[op][1]:,.0f}' if op in ops else '-':>17}" for op in COLUMNS)
    print(f"{label:38}{cols}{in_psi(wire, n):>7.3f}")
"""),
md(r"""
(The all_reduce column holds the 4-byte gradient-norm all-reduce too: 6 bytes on the wire at N = 4.) Stages 1 and 2 with the
paper's reduce-scatter move exactly DDP's 2Ψ. DeepSpeed's default moves **3Ψ**, as much as stage
3. And stage 2 with gradient accumulation pays the gradients in every micro-batch (it cannot keep
the full gradient between them; that is the memory it saves): 4 × 2 + 1 = **9Ψ** DeepSpeed's way,
4 + 1 = 5Ψ the paper's. So the belief is true as the paper states it, false for DeepSpeed's
default config, and false for stage 2 with accumulation. Check your config before quoting the
paper; `benchmarks/results/side_by_side.txt` sets zerolab's calls and bytes beside DeepSpeed
0.19.8's own, config by config.

## Belief 3 · "More GPUs is always faster"

Doubling the crew halves each worker's share of the *carrying* (compute, with a fixed global
batch). It does not halve the *shouting*: in a ring, each rank of DeepSpeed's stage 2 sends
3(N−1)/N·Ψ elements (the all-reduce's 2, the all-gather's 1), which grows towards 3Ψ and then
stays there, however many ranks join (towards 2Ψ with the paper's reduce-scatter). Measured,
stage 2 at N = 4, then at N = 2 (the crew of 4 makes way for the crew of 2).

**Predict, then run.** How many bytes does each rank put on the wire per step at N = 2, and at
N = 4? And which is faster here, on this machine's few cores?
"""),
code(r"""
scaling, step_ms = {}, {}
for n in (4, 2):
    if crew.world_size != n:
        crew.close()
        crew = zerolab.Crew(n, threads=1)    # the crew of 2 serves the rest of the chapter
    scaling[n] = crew.run(measure, 2)
    # for the time figure below: the fastest of three more runs (each: the slowest rank's step)
    step_ms[n] = 1e3 * min(max(r["seconds"] for r in crew.run(measure, 2)) for _ in range(3))
print(f"stage 2 (DeepSpeed's collectives), bf16, Ψ = {PSI_LM:,}; bytes each rank puts on the wire per step")
print(f"{'N':>2}{'measured':>12}{'3(N−1)/N · 2Ψ':>16}{'share of the limit 6Ψ':>24}")
for n, per_rank in sorted(scaling.items()):
    wire = per_rank[0]["wire"]
    print(f"{n:>2}{wire:>12,.0f}{3 * (n - 1) / n * 2 * PSI_LM:>16,.0f}{(n - 1) / n:>24.2f}")
"""),
md(r"""
The traffic per rank approaches a constant; the compute per rank keeps
shrinking as 1/N. So past some N every step is as long as its communication, and more GPUs buy nothing.

Time depends on the machine, so it is only drawn, never printed. Left: step time measured here,
stage 2, the same global batch of 12 sequences. What you see depends on your machine: on a
laptop the ranks share a few CPU cores and the model is tiny, so a step is mostly fixed overhead
(Python, the collectives) and extra ranks rarely make it faster; past the number of cores
they slow each other down. That is a fact about *this* machine, not about ZeRO. Right: zerolab's
scale simulator (`zerolab.tools.simulate`, the same formulas, published link and GPU figures) for a
1.3-billion-parameter model on A100s over 100 Gb/s Ethernet, global batch 64 sequences of 2,048
tokens, stage 2 with DeepSpeed's traffic, communication overlapped with compute.
"""),
code(r"""
gpus = [1, 2, 4, 8, 16, 32, 64]      # 64 sequences per step in all: 64 / N on each GPU
sim = [simulate(1.3e9, 24, 2048, 2048, 64 // g, g, 2, link="ethernet-100g") for g in gpus]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
ns = sorted(scaling)
ax1.plot(ns, [step_ms[n] for n in ns], "o-", label="step time (slowest rank, best of 3)")
ax1.set(xlabel="N, ranks (on this machine)", ylabel="ms per step", xticks=ns, ylim=(0, None),
        title="Here: a few CPU cores shared by N ranks")
ax1.legend(fontsize=8)
ax2.loglog(gpus, [s.compute_s for s in sim], "s--", label="compute per GPU")
ax2.loglog(gpus[1:], [s.comm_s for s in sim[1:]], "^--", label="communication per GPU")
ax2.loglog(gpus, [s.step_s for s in sim], "o-", lw=2, label="step (the slower)")
ax2.set(xlabel="N, GPUs", ylabel="seconds per step", xticks=gpus, xticklabels=[str(g) for g in gpus],
        title="Simulated: 1.3B params, 100 Gb/s Ethernet")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()
floor = next(g for s, g in zip(sim, gpus) if s.comm_s >= s.compute_s)
print(f"simulated: from N = {floor} GPUs on, each step waits for communication")
print("simulated step time at 16 / 32 / 64 GPUs: "
      + " / ".join(f"{s.step_s:.2f} s" for s, g in zip(sim, gpus) if g in (16, 32, 64)))
"""),
md(r"""
In the simulation, compute falls as 1/N but communication levels off near DeepSpeed's 3Ψ of
bf16 per GPU per step; from the crossing point on, the step time stops falling: twice the GPUs, the same time
per step, half the work per GPU. Whether a machine reaches that point at 8 GPUs or at 500
depends on its links (NVLink, InfiniBand, Ethernet) and on the batch; that it reaches one does
not. Change `link="ethernet-100g"` to `"nvlink-a100"` and see where the crossing moves.

## Belief 4 · "bf16 needs loss scaling"

Loss scaling exists because fp16's **range** is narrow: gradients below about 6·10⁻⁸ become 0,
values above 65,504 become inf. bf16 keeps fp32's 8 exponent bits and so fp32's range; what it
gives up is **precision** (7 mantissa bits instead of 10). Cast a few values.

**Predict, then run.** Which of 10⁻¹⁰, 10⁻⁸, 10⁻⁶, 1, 7·10⁴ and 10¹⁰ survive a cast to fp16, and
which a cast to bf16?
"""),
code(r"""
values = torch.tensor([1e-10, 1e-8, 1e-6, 1.0, 7e4, 1e10], dtype=torch.float64)
print(f"{'value':>10}{'fp16':>12}{'bf16':>12}")
for v in values:
    print(f"{float(v):>10.0e}{float(v.half()):>12.4g}{float(v.bfloat16()):>12.4g}")
"""),
md(r"""
fp16 flushes the small ones to 0 and turns the large ones into inf; bf16 keeps every one, to 2
or 3 significant digits. Now real gradients: the deep MLP of chapter 4 (25 layers, where the
gradients of the first layers are tiny), one backward in fp64, and what each format does to
every gradient entry (a multiplication by S = 2¹⁶ is what a loss scaler would do).

**Predict, then run.** What share of the gradient entries becomes exactly 0 in fp16 without a
scale? With S = 2¹⁶? In bf16?
"""),
code(r"""
deep = MLP(sizes=(13,) + (64,) * 24 + (7,), seed=0).double()
data = torch.Generator().manual_seed(0)
x_deep = torch.randn(256, 13, generator=data, dtype=torch.float64)
y_deep = torch.randn(256, 7, generator=data, dtype=torch.float64)
torch.nn.functional.mse_loss(deep(x_deep), y_deep).backward()
grads = P.grad_magnitudes(deep)
print(f"{grads.numel():,} gradient entries; how many become exactly 0:")
for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
    for scale in (1, 2 ** 16):
        rep = P.underflow_report(grads, scale=scale, dtype=dtype)
        print(f"  {name}, scale {scale:>6}: {rep['zero']:>6,} lost ({100 * rep['zero_fraction']:5.1f} %), "
              f"{rep['overflow']} overflow")
x = torch.randn(100_000, dtype=torch.float64)
scaled = (x * 2 ** 16).bfloat16().double() / 2 ** 16
print("bf16(x · 2¹⁶) / 2¹⁶ == bf16(x) for all 100,000 values:", bool((scaled == x.bfloat16().double()).all()))
"""),
md(r"""
fp16 loses a large share of these gradients unless they are scaled; bf16 loses none, with or
without a scale. A scale would not help bf16's real weakness either: multiplying by a power of
two shifts the exponent and leaves the mantissa, and so the precision, exactly as it was.

So zerolab, like DeepSpeed, trains bf16 with no loss scaler: the scale is 1, and a step is
skipped only if a gradient really is inf or NaN (`bf16.check_grad_overflow`). Twenty steps of
TinyLM on 2 ranks, bf16 beside fp32:
"""),
code(r"""
runs4 = {p: crew.run(train_20, p)[0] for p in ("bf16", "fp32")}
b, f = runs4["bf16"], runs4["fp32"]
print(f"bf16: loss scale {b['scale']:g}, skipped steps {b['skipped']}, scaler messages {len(b['log'])}")
print("bf16 loss fell by more than 20 % over the 20 steps:", b["losses"][-1] < 0.8 * b["losses"][0])
gap = max(abs(x - y) / y for x, y in zip(b["losses"], f["losses"]))
print("bf16's loss within 2 % of fp32's at every step:", gap < 0.02)
"""),
md(r"""
## Belief 5 · "ZeRO shards the activations"

The folding chair is not a model state. ZeRO splits the parameters, gradients and optimizer
states; the activations that each rank's forward saves for its backward depend on that rank's
**micro-batch** and the model's shape, and on nothing else. Below, on 2 ranks, for each stage:
the model states (`engine.memory()`) and the activations saved during one training step's
forward, at micro-batches of 2, 4 and 6 sequences per rank.

**Predict, then run.** At a micro-batch of 4, how will stage 3's activations compare with
stage 0's: a quarter, a half, the same? And when the micro-batch doubles?

How we count the activations (`zerolab.course.lm_runs.activations_per_stage`): every tensor autograd saves passes through
`torch.autograd.graph.saved_tensors_hooks`, and we add up their storages, leaving out the
parameters themselves. (`zerolab.memory.measure_activations` does the same for a plain model.
It recognises parameters by their storage *before* the forward; at stage 3 the parameters are
gathered into new storage during the forward, so it would count them as activations. Here each
saved tensor is checked against the parameters at the moment it is saved.)
"""),
code(r"""
print(f"2 ranks, bf16, TinyLM (Ψ = {PSI_LM:,}), sequences of {SEQ} tokens; bytes on rank 0")
print(f"{'stage':>5}{'model states':>14}   {'activations at a micro-batch of 2, 4, 6 sequences':<50}")
chair = {}
for stage in range(4):
    per_micro = [crew.run(activations_per_stage, stage, m)[0] for m in (2, 4, 6)]
    chair[stage] = per_micro
    print(f"{stage:>5}{per_micro[0]['model_states']:>14,}   "
          + "".join(f"{r['activations']:>12,}" for r in per_micro))
"""),
code(r"""
fig, ax = plt.subplots(figsize=(8, 3.6))
stages = list(chair)
ax.bar([s - 0.2 for s in stages], [chair[s][1]["model_states"] / 1e6 for s in stages], width=0.4,
       label="model states (furniture, stickers, notebook)")
ax.bar([s + 0.2 for s in stages], [chair[s][1]["activations"] / 1e6 for s in stages], width=0.4,
       label="activations (folding chair), micro-batch 4")
ax.set(xticks=stages, xticklabels=[f"stage {s}" for s in stages], ylabel="MB per rank (10⁶ bytes)",
       title="ZeRO shrinks the model states; the activations stay the same")
ax.legend(fontsize=8)
plt.show()
"""),
md(r"""
Each column of activations is the same for all four stages, and grows in step with the
micro-batch. What does shrink the chair: a smaller micro-batch per rank (more ranks at a fixed
global batch, or gradient accumulation), activation checkpointing (recompute instead of store:
DeepSpeed's `activation_checkpointing` block, which zerolab does not implement), and, across
GPUs, sequence or tensor parallelism: other tools than ZeRO. (DeepSpeed's
`partition_activations` splits the *checkpointed* activations of tensor-parallel models; it is
part of activation checkpointing, not of the ZeRO stages.)

## Belief 6 · "Offload is free"

ZeRO-Offload (chapter 5) takes the heavy notebook off the device: with
`"offload_optimizer": {"device": "cpu"}` the fp32 master weights, Adam's two moments and the fp32
gradients they are stepped with live in host memory, and the optimizer step runs on the CPU. The
device keeps the 16-bit parameters and a gradient bucket in flight. The belief: this memory costs
nothing, because the CPU and its memory sit idle anyway.

On this machine the test is rigged in offload's favour: the "device" *is* the CPU, and host
memory is the same RAM. A copy "down" to the host or "up" to the device is a memory copy, and Adam
runs on the same cores either way. Stage 2 on 2 ranks, TinyLM in bf16, with and without
`offload_optimizer` on the CPU: where the bytes are after 6 steps (`engine.memory()` and
`engine.memory("host")`), and the step time (median of 5 steps after a warm-up step, the slower
rank, the better of 2 runs of each).

**Predict, then run.** How many of a rank's device bytes does offload remove? Does host memory
receive exactly those bytes, more, or fewer? How much slower is a step here?
"""),
code(r"""
OFFLOAD = {"stage 2": None, "stage 2 + offload cpu": "cpu"}
runs6 = {label: [] for label in OFFLOAD}
for _ in range(2):                                   # alternate the two, twice
    for label, device in OFFLOAD.items():
        runs6[label].append(crew.run(offload_run, device))
r6 = {label: per_run[0][0] for label, per_run in runs6.items()}       # rank 0, first run: bytes
KEYS = ("params", "grads", "optimizer_states", "model_states")
print(f"stage 2, bf16, 2 ranks, Ψ = {PSI_LM:,}: bytes on rank 0 after 6 steps")
print(f"{'':31}" + "".join(f"{k:>17}" for k in KEYS))
for label, r in r6.items():
    for where in ("device", "host"):
        print(f"{label + ', ' + where:31}" + "".join(f"{r[where][k]:>17,}" for k in KEYS))
plain, off = r6["stage 2"], r6["stage 2 + offload cpu"]
freed = plain["device"]["model_states"] - off["device"]["model_states"]
taken = off["host"]["model_states"] - plain["host"]["model_states"]
print(f"device bytes freed by offload: {freed:,} of {plain['device']['model_states']:,}"
      f" ({freed / plain['device']['model_states']:.1%})")
print(f"host bytes taken by offload:   {taken:,} ({taken - freed:+,} against the device's)")
print("the 6 losses with and without offload agree within 1e-5 (relative):",
      all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(off["losses"], plain["losses"])))
"""),
code(r"""
best = {label: min(max(r["seconds"] for r in per_rank) for per_rank in per_run)
        for label, per_run in runs6.items()}
host_step = max(r["host_step"] for r in runs6["stage 2 + offload cpu"][0])
base = best["stage 2"]
fig, ax = plt.subplots(figsize=(8, 2.8))
labels = list(best)
ax.barh(labels, [best[k] / base for k in labels], color=["#4c72b0", "#55a868"], label="step")
ax.barh(labels[1:], [host_step / base], color="#8172b3", label="of which the host optimizer step")
ax.axvline(1, color="black", lw=0.8)
ax.invert_yaxis()
ax.set_xlim(0, max(2.0, 1.15 * max(best[k] / base for k in labels)))
ax.set_xlabel("step time / stage 2's (median of 5 steps, slower rank, better of 2 runs)")
ax.set_title("Here the device is the host: no PCIe to cross, Adam on the same CPU")
ax.legend(fontsize=8, loc="upper right")          # beside stage 2's bar, which ends at 1
fig.tight_layout()
plt.show()
crew.close()                       # done with the ranks: the rest is the simulator
"""),
md(r"""
Offload takes the whole notebook off the device: the fp32 masters and Adam's moments (12 bytes
per owned parameter) and stage 2's gradient shard; what stays is the bf16 parameters, which stage
2 keeps whole on every rank. Host memory takes more than the device gave up: the gradient shard
it steps with is fp32 there (4 bytes per owned element, not bf16's 2). On a GPU that is a good
trade, host memory is larger and cheaper; on this machine the two are the same RAM, so offload
here *adds* bytes. The arithmetic does not change: the same losses.

And the time (the bars move from run to run): a step with offload takes somewhat longer than one
without, by the share the figure shows, not by a multiple. There is no link to cross, and the
optimizer runs on the same CPU either way; the host step in the figure is the same Adam that
stage 2 runs on its "device"; what offload adds here is bookkeeping and the fp32 gradient copy.

## The same switch on a GPU cluster

On GPUs neither shortcut holds. Each step, every rank copies its reduced gradients down over
PCIe and its updated 16-bit parameters back up. DeepSpeed converts the gradients to fp32 on the
GPU before the copy (`runtime/zero/stage_1_and_2.py` line 1909 copies with `non_blocking=True`,
which converts on the GPU; `stage3.py` line 1457 converts explicitly), so that is **4 + 2 bytes
per owned parameter**, not the ZeRO-Offload paper's 2 + 2, over a link of about 25 GB/s a
direction, against some 2,000 GB/s of GPU memory; and Adam runs on the
CPU, which steps far fewer elements per second than the GPU would. `zerolab.tools.simulate` (chapter 5)
models both from published figures: PCIe 4.0 at 25 GB/s, a CPU Adam of 10⁹ elements per second per
GPU's share. A 13-billion-parameter model (40 layers, width 5,120, sequences of 2,048 tokens) on 8
A100-80GB, stage 2, with and without `offload_optimizer`, one micro-batch per step of 1 to 16
sequences:
"""),
code(r"""
MICRO = [1, 2, 4, 8, 16]
big = dict(params=13e9, layers=40, hidden=5120, seq=2048, gpus=8, gpu="a100-80gb", stage=2)
gpu_runs = {mb: (simulate(micro_batch=mb, **big), simulate(micro_batch=mb, offload_optimizer=True, **big))
            for mb in MICRO}
slow_cpu = {mb: simulate(micro_batch=mb, offload_optimizer=True, cpu_adam_elems_per_s=0.5e9, **big)
            for mb in MICRO}
print("13B, 8 x A100-80GB, stage 2 (simulated)")
print(f"PCIe per GPU per step with offload: 4 + 2 bytes × {13e9 / 8:,.0f} owned parameters"
      f" = {6 * 13e9 / 8 / 1e9:.2f} GB")
print("    (DeepSpeed: fp32 gradients down, 16-bit parameters up)")
print(f"{'micro-batch':>11}{'GB per GPU':>12}{'+ offload':>11}{'compute s':>11}{'PCIe s':>8}"
      f"{'host Adam s':>13}{'offload / stage 2':>19}")
for mb in (1, 8):
    a, b = gpu_runs[mb]
    print(f"{mb:>11}{a.gpu_bytes['total'] / 1e9:>12.1f}{b.gpu_bytes['total'] / 1e9:>11.1f}{b.compute_s:>11.2f}"
          f"{b.transfer_s:>8.2f}{b.cpu_step_s:>13.2f}{f'{b.step_s / a.step_s:.1f}x':>19}")
mb1 = gpu_runs[1][0].step_s
print(f"micro-batch 1 with a CPU Adam half as fast: {slow_cpu[1].step_s / mb1:.1f}x")
fig, ax = plt.subplots(figsize=(8, 3.4))
ax.plot(MICRO, [b.step_s / a.step_s for a, b in gpu_runs.values()], "o-",
        label="simulated: CPU Adam 10⁹ elements/s per GPU")
ax.plot(MICRO, [slow_cpu[mb].step_s / gpu_runs[mb][0].step_s for mb in MICRO], "s--",
        label="simulated: CPU Adam half as fast")
ax.axhline(best["stage 2 + offload cpu"] / base, color="#55a868", lw=1.5, label="measured here: TinyLM, 2 CPU ranks")
ax.set_xscale("log", base=2)
ax.set_xticks(MICRO, [str(mb) for mb in MICRO])
ax.set(xlabel="sequences per micro-batch", ylabel="step time, offload / stage 2", ylim=(0, 3.5),
       title="13B on 8 A100-80GB: offload costs most when a step has little compute")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
"""),
md(r"""
These ratios are the simulator's estimates, not measurements: at one sequence per micro-batch, a
step with offload is about twice as long as stage 2's on the GPUs, and with a CPU Adam half as fast
(eight GPUs sharing one host's cores and memory bandwidth) about three times. A "3 to 5 times
slower" circulates for CPU offload; we found no measurement behind it, and the simulator says there
is no fixed factor: it depends on the compute per step. Both PCIe copies hide behind the compute
here (9.75 GB per GPU takes 0.39 s); the CPU optimizer step does not hide: it comes after
the backward and before the next forward. It does not grow with the micro-batch while the compute
does, so a bigger micro-batch (or gradient accumulation) makes offload cheaper per sample; that is
why offload comes with the advice to use large batches. What offload buys: the 13B model drops from
51.8 to 29.0 GB per GPU, room for a larger micro-batch or a model that did not fit.

So the belief is false as stated. Offload trades device memory for host traffic and CPU time; it is
free only when the device **is** the host, as on this machine. On a GPU cluster, use it when the
model states do not fit, not by default.

## What we measured

**The six beliefs**, each false as stated:

1. Stage 3 against stage 2 (N = 4): less model-state memory (on this small model more at the
   peak, with DeepSpeed's default prefetch budget), about the bytes of DeepSpeed's stage 2 (3Ψ
   each; the paper's stage 2 moves 2Ψ) but more calls (about four times as many without prefetch).
   Worth it when stage 2 does not fit.
2. Stages 1 and 2 move DDP's 2Ψ only with the paper's reduce-scatter (zerolab's switch);
   DeepSpeed's default (an all-reduce per bucket) moves 3Ψ, and stage 2 with 4 micro-batches 9Ψ
   (5Ψ the paper's way).
3. Traffic per rank of DeepSpeed's stage 2 grows as 3(N−1)/N·Ψ towards a constant while compute
   shrinks as 1/N: past the crossing, more GPUs do not shorten a step.
4. bf16 has fp32's range: no gradient of the deep MLP underflows, zerolab trains it with a
   loss scale of 1 and no skipped step, and a loss scale could not improve its precision anyway.
5. Activations per rank are identical at stages 0 to 3 and grow with the micro-batch.
6. Offload to the CPU frees 1,322,304 of a rank's 1,700,106 device bytes here (stage 2, bf16)
   and puts 1,511,204 in host memory (the gradient shard is fp32 there), at a somewhat longer
   step, because here the device is the host. On 8 A100-80GB the simulator puts a 13B model's step
   at 2.0x with offload at micro-batch 1 (4 + 2 bytes per owned parameter over PCIe, Adam on the
   CPU), 1.1x at 8. Offload trades device memory for host traffic and CPU time.

## Questions

1. Run belief 1 at N = 2 (the crew of 2). Does stage 3's memory advantage over stage 2 grow or
   shrink, and its traffic penalty?
2. In belief 3's simulation, change the link to `"nvlink-a100"` and the global batch to 512. At
   what N does communication now take over?
3. With `gradient_accumulation_steps` 4, DeepSpeed's stage 1 moves 3Ψ and its stage 2 9Ψ. If
   stage 2 fits but stage 1 does not, what does that cost per step, and when would you rather use
   a bigger micro-batch instead of accumulation?
4. In belief 6's simulation, offload the 13B model at stage 3 instead (`stage=3`, then also
   `offload_param=True`). How many GB per GPU does each save, and what does each cost per step at
   one sequence per micro-batch?
"""),
]


NOTEBOOKS = {"notebooks/10_misconceptions.ipynb": ("ch10", CHAPTER),
             "notebooks/10b_the_beliefs.ipynb": ("ch10b", BELIEFS)}

if __name__ == "__main__":
    sys.exit(nbsource.main(NOTEBOOKS))
