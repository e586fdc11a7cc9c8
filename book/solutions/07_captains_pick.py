# %% [markdown] id="ex07-00"
# # Exercise 7 · The captain's pick: the config that fits and is fastest
#
# *The lightest backpack is not the goal; the shortest move is.*
#
# Given a model, its ranks and a device budget, the captain picks a ZeRO config. Picking the config
# that saves the most memory (stage 3 with everything offloaded) always fits and is usually the
# slowest. So: **the first config of the captain's rule that fits.** The rule, cheapest first:
#
# 1. `stage` 0, 1, 2, 3 without offload;
# 2. then `offload_optimizer` (cpu) at stage 1, 2, 3;
# 3. then stage 3 with `offload_optimizer` and `offload_param`.
#
# Why this order, from what chapters 3, 6 and 7 measured (bytes and calls, not timings): at one
# micro-batch per step, stage 0 puts 2Ψ on the wire in one all-reduce; stages 1 and 2 put 3Ψ
# (DeepSpeed all-reduces their gradient buckets, then all-gathers the updated parameters), in more
# calls; stage 3 moves 3Ψ too, in several calls per layer (chapter 7, 5d). Every offload carries each step's gradients down and parameters
# up over the PCIe link and runs Adam on the CPU, whatever the stage; offloading the parameters too
# brings every gathered layer up from the host, twice a step. So no offload comes before any
# offload, and within the same offload the lowest stage comes first.
#
# You write two functions.
#
#     device_bytes(facts, stage, offload_optimizer, offload_param) -> bytes
#
# the peak one rank's device holds: **model states + buffers + activations** (chapter 7, section 1).
# With p = `facts.param_bytes` (2 in fp16/bf16, 4 in fp32), k = `facts.optimizer_bytes` (12 in mixed
# precision: fp32 master + two moments; 8 in fp32: two moments), Ψ = `facts.psi`, n = Ψ/N:
#
# - parameters: pΨ at stages 0-2, pn at stage 3, none on the device with `offload_param`;
# - gradients: pΨ at stages 0-1, pn at stages 2-3; with `offload_optimizer` stages 2-3 send their
#   gradient shard to the host as it is produced, but **stage 1 still keeps the full gradient** on
#   the device (it reduces at the end of backward);
# - optimizer states: kΨ at stage 0, kn from stage 1 on, none on the device with `offload_optimizer`;
# - buffers: `facts.buffer_bytes[stage]` (measured: stage 2's bucket, stage 3's gathered layers);
# - activations: `facts.activation_bytes` (measured).
#
#     choose_config(facts, budget) -> a DeepSpeed zero_optimization block, or None
#
# the first config of the rule whose `device_bytes` is at most `budget`, as a dict such as
# `{"stage": 2}` or `{"stage": 3, "offload_optimizer": {"device": "cpu"}}`; `None` if none fits.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full traceback as well, run
# `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the check cell again.

# %% id="ex07-01"
from zerolab.course.checks.ch07 import Facts, check_choose_config, measure_facts

# %% id="ex07-02"
def device_bytes(facts, stage, offload_optimizer, offload_param):
    """Peak bytes on one rank's device: model states + buffers + activations."""
    # BEGIN SOLUTION: parameters + gradients + optimizer states (by stage and offload) + buffers + activations
    psi, n = facts.psi, facts.psi / facts.world_size
    p, k = facts.param_bytes, facts.optimizer_bytes
    params = 0 if offload_param else (p * n if stage == 3 else p * psi)
    grads = 0 if (offload_optimizer and stage >= 2) else (p * n if stage >= 2 else p * psi)
    states = 0 if offload_optimizer else (k * n if stage >= 1 else k * psi)
    return params + grads + states + facts.buffer_bytes[stage] + facts.activation_bytes
    # END SOLUTION


def choose_config(facts, budget):
    """The first config of the captain's rule that fits, as a zero_optimization block (or None)."""
    # BEGIN SOLUTION: no offload (stages 0-3), then offload_optimizer (1-3), then both (3); the first that fits
    rule = [(0, False, False), (1, False, False), (2, False, False), (3, False, False),
            (1, True, False), (2, True, False), (3, True, False), (3, True, True)]
    for stage, opt, par in rule:
        if device_bytes(facts, stage, opt, par) <= budget:
            block = {"stage": stage}
            if opt:
                block["offload_optimizer"] = {"device": "cpu"}
            if par:
                block["offload_param"] = {"device": "cpu"}
            return block
    return None
    # END SOLUTION

# %% [markdown] id="ex07-03"
# Try it on the chapter's model. `measure_facts` trains the exercise's TinyLM (fp16, micro-batch 2)
# on 2 ranks under every config and returns the facts, and each config's measured peak per rank.
# **Predict** your pick at each budget before you run the cell, then compare your `device_bytes` with
# the engine's peak.

# %% id="ex07-04"
import textwrap

facts, peaks = measure_facts(2, "fp16", 2)
print(textwrap.fill(repr(facts), 98, subsequent_indent="      "))
for rung, ranks in peaks.items():
    print(f"  {str(rung):<22} yours {device_bytes(facts, *rung):>11,.0f}   the engine's peak {max(ranks):>11,}")
for budget in (3_000_000, 1_540_000, 1_000_000, 350_000):
    print(textwrap.fill(f"budget {budget:>9,}: {choose_config(facts, budget)}", 98, subsequent_indent="      "))

# %% [markdown] id="ex07-05"
# **The check.** First `device_bytes` on every config at four settings (Ψ up to 7·10⁹, N = 2, 3, 4,
# 8, fp16, bf16 and fp32) against the formula; then `choose_config` at a budget just above each
# config's need and one below all of them, against the rule. Then in the engine: the facts are
# measured for a TinyLM on 2 ranks in fp16 and on 3 ranks in fp32; at each of eleven budgets your
# choice trains two steps under `device_budget` and must not run out of memory, and every config
# the rule puts before it must need more than the budget (its peak measured by the engine).

# %% id="ex07-06" tags=["check"]
check_choose_config(device_bytes, choose_config)

# %% [markdown] id="ex07-07"
# ## Where this lives in zerolab
#
# `zerolab.memory.budget.Budget` counts the same three parts while the engine trains (its
# `configs_that_fit`, in the out-of-memory message, is your `device_bytes` with the activations
# measured so far); `engine.memory()` gives the model states and the buffers; and `zerolab.tools.simulate`
# does the same arithmetic for a cluster, with the activations of a transformer by formula.
#
# Questions:
#
# 1. At N = 2, stage 1 with `offload_optimizer` (4Ψ) needs less than stage 3 without it (8Ψ). At
#    what N does stage 3 need less? Does the rule still put stage 3 first there, and why?
# 2. The rule tries stage 0 before stage 1, although stage 1 needs less memory. What does stage 1
#    send per step that stage 0 does not (look at the ledger's calls)? When would you pick stage 1 anyway?
# 3. Where would activation recomputation sit in the rule? What would `device_bytes` need to know
#    to place it?
