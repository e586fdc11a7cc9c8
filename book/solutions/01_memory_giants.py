# %% [markdown] id="ex01-00"
# # Exercise 1 · Weigh the backpack
#
# In chapter 1 the captain weighed every worker's backpack, and the engine measured it:
# parameters, gradients and optimizer states, in bytes. Now you write the captain's arithmetic,
# and a check compares it with what a real engine holds on real ranks.
#
# **The task.** Write `model_state_bytes_per_rank(psi, precision, stage=0, world_size=1)`. It
# returns the bytes **one rank** holds for each model-state giant, training with **Adam**:
#
# ```python
# {"params": ..., "grads": ..., "optimizer_states": ...}     # bytes, not elements, not GB
# ```
#
# - `psi`: the number of trainable parameters (elements).
# - `precision`: `"fp32"`, or `"fp16"` / `"bf16"` for mixed precision (fp16/bf16 weights and
#   gradients; where does the fp32 master copy of the weights live?).
# - `stage`, `world_size`: a look ahead to chapter 3. With N = `world_size` workers, the captain's
#   plan splits the giants, heaviest first: **stage 1** splits the optimizer states among the N
#   ranks (each keeps 1/N), **stage 2** also the gradients, **stage 3** also the parameters.
#   Stage 0 splits nothing.
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full Python traceback as well (through zerolab's own code,
# and any rank's traceback), run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run
# the check cell again (`zerolab.course.checks.full_tracebacks(False)` makes failures short again), or
# start Jupyter with the environment variable `ZEROLAB_FULL_TRACEBACK=1`.

# %% id="ex01-01"
import zerolab
from zerolab.course.checks.ch01 import check_model_state_bytes

# %% id="ex01-02"
def model_state_bytes_per_rank(psi, precision, stage=0, world_size=1):
    """Bytes one rank holds for the parameters, gradients and Adam's optimizer states."""
    # BEGIN SOLUTION: return {"params": ..., "grads": ..., "optimizer_states": ...} in bytes per rank
    if precision == "fp32":
        p, g, o = 4, 4, 4 + 4          # Adam: momentum + variance; the weights are their own master
    elif precision in ("fp16", "bf16"):
        p, g, o = 2, 2, 4 + 4 + 4      # the fp32 master copy lives with momentum and variance
    else:
        raise ValueError(f"precision must be 'fp32', 'fp16' or 'bf16', not {precision!r}")
    n = world_size
    return {"params": psi * p / (n if stage >= 3 else 1),
            "grads": psi * g / (n if stage >= 2 else 1),
            "optimizer_states": psi * o / (n if stage >= 1 else 1)}
    # END SOLUTION

# %% [markdown] id="ex01-03"
# Try it on a size you know: a 7B model in mixed precision at stage 0 (GB = 10⁹ bytes).

# %% id="ex01-04"
states = model_state_bytes_per_rank(7_000_000_000, "bf16")
print({giant: f"{nbytes / 1e9:.0f} GB" for giant, nbytes in states.items()})

# %% [markdown] id="ex01-05"
# **The check.** It trains a real `TinyLM` for one step with `zerolab.initialize` on a crew of
# 2 ranks, in fp32, bf16 and fp16, at stages 0 to 3, reads `engine.memory()` on every rank, and
# compares each giant with your numbers (within 1%, plus a few bytes of padding). It also asks
# your function for the ZeRO paper's Figure 1 (Ψ = 7.5 B, N = 64). If a giant is off, it says
# which one, by how much, and gives a hint.

# %% id="ex01-06" tags=["check"]
check_model_state_bytes(model_state_bytes_per_rank)
