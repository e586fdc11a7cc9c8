# %% [markdown] id="ex04-00"
# # Exercise 4 · The dynamic loss scaler's rule
#
# *When a magnified note no longer fits on the page, the crew magnifies less; after a stretch of
# clean days, it dares to magnify more.*
#
# In chapter 4 the loss scale S kept fp16 gradients in range: halved after overflows, doubled
# after a window of clean steps. Here **you write that rule**, exactly as DeepSpeed 0.19.8 has it,
# and the check plugs it into zerolab's engine, on 2 ranks, in place of the engine's own scaler.
#
# The rule is one function, called once per optimizer step with whether any rank's gradients
# overflowed (inf or NaN). It changes the scaler's `state` in place and returns nothing:
#
# | key in `state` | changes? | meaning (DeepSpeed's name) |
# |---|---|---|
# | `cur_scale` | yes | the loss scale S |
# | `cur_hysteresis` | yes | overflows still tolerated before the next cut |
# | `last_overflow_iter` | yes | the iteration of the last overflow (-1: none yet) |
# | `cur_iter` | yes | how many calls came before this one |
# | `scale_factor` | no | 2: halve and double by this |
# | `scale_window` | no | config `loss_scale_window` |
# | `min_scale` | no | config `min_loss_scale`: the floor |
# | `delayed_shift` | no | config `hysteresis` |
# | `consecutive_hysteresis` | no | config `consecutive_hysteresis` |
#
# **The rule:**
#
# 1. **Overflow.**
#    - If the hysteresis is used up (`delayed_shift == 1` or `cur_hysteresis == 1`): if S is already
#      `min_scale`, the run cannot go on: raise `LossScaleAtMinimum(cur_scale, cur_iter)`. Otherwise
#      S becomes `max(S / scale_factor, min_scale)`.
#    - Otherwise the overflow is tolerated: `cur_hysteresis` goes down by one and S stays.
#    - Either way, `last_overflow_iter = cur_iter`.
# 2. **No overflow.**
#    - With `consecutive_hysteresis`, refill: `cur_hysteresis = delayed_shift`.
#    - Let `stable = cur_iter - last_overflow_iter - 1`, the clean steps since the last overflow
#      before this one. If `stable > 0` and `stable % scale_window == 0`: without
#      `consecutive_hysteresis` refill the hysteresis; then S is multiplied by `scale_factor`.
# 3. `cur_iter` goes up by one, every call.
#
# Two details are easy to miss: a cut does **not** refill the hysteresis (so after the first cut,
# every overflow cuts until S grows again), and the `- 1` in `stable` (0.19.8 doubles on the
# (window + 1)-th clean step in a row).
#
# **When a check fails** it says in a few lines what is wrong, what it expected, and a hint that
# names the likely mistake. To see the full Python traceback as well (through zerolab's own code,
# and any rank's traceback), run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run
# the check cell again (`zerolab.course.checks.full_tracebacks(False)` makes failures short again), or
# start Jupyter with the environment variable `ZEROLAB_FULL_TRACEBACK=1`.

# %% id="ex04-01"
from zerolab.course.checks.ch04 import check_update_scale, new_state
from zerolab.precision.loss_scaler import LossScaleAtMinimum

# %% id="ex04-02"
def update_scale(state: dict, overflow: bool) -> None:
    """One step of DeepSpeed 0.19.8's dynamic loss scaler: change `state` in place."""
    # BEGIN SOLUTION: DeepSpeed's rule: hysteresis, floor and raise on overflow; the window on a clean step; count the call
    if overflow:
        if state["delayed_shift"] == 1 or state["cur_hysteresis"] == 1:
            if state["cur_scale"] == state["min_scale"]:
                raise LossScaleAtMinimum(state["cur_scale"], state["cur_iter"])
            state["cur_scale"] = max(state["cur_scale"] / state["scale_factor"], state["min_scale"])
        else:
            state["cur_hysteresis"] -= 1           # tolerated: the scale stays
        state["last_overflow_iter"] = state["cur_iter"]
    else:
        if state["consecutive_hysteresis"]:
            state["cur_hysteresis"] = state["delayed_shift"]
        stable = state["cur_iter"] - state["last_overflow_iter"] - 1
        if stable > 0 and stable % state["scale_window"] == 0:
            if not state["consecutive_hysteresis"]:
                state["cur_hysteresis"] = state["delayed_shift"]
            state["cur_scale"] *= state["scale_factor"]
    state["cur_iter"] += 1
    # END SOLUTION

# %% [markdown] id="ex04-03"
# Try it by hand: DeepSpeed's defaults (S = 2¹⁶, hysteresis 2) with a short window of 2, and a
# few overflow flags. Predict each line before you run it.

# %% id="ex04-04"
state = new_state(init_scale=2.0 ** 16, scale_window=2, delayed_shift=2)
for overflow in (True, True, False, False, False, True, False):
    update_scale(state, overflow)
    print(f"overflow={overflow!s:<5}  ->  S = {state['cur_scale']:>7g}, hysteresis {state['cur_hysteresis']}, "
          f"last_overflow_iter {state['last_overflow_iter']}, cur_iter {state['cur_iter']}")

# %% [markdown] id="ex04-05"
# **The check.** First it feeds your function six scaler settings with strings of overflow flags
# (DeepSpeed's defaults over 1,000+ steps, no hysteresis, hysteresis 3, `consecutive_hysteresis`,
# a floor that clamps the cut, and an overflow at the floor), comparing your state after every
# call with zerolab's `DynamicLossScaler`, which is tested against traces recorded from DeepSpeed.
#
# Then the real engine: on 2 ranks, fp16 `TinyLM` at ZeRO stage 2, a `DynamicLossScaler` subclass
# that calls your `update_scale` is installed as `engine.scaler`, and at chosen steps rank 1's loss
# is multiplied by inf. Every update is compared with the reference fed the same overflow flag;
# then the run is repeated with the engine's own scaler, and both must use the same S at every
# step, skip the same steps on every rank, and end with bit-identical fp32 master weights.
#
# On the first difference it names the iteration, your state and the expected one, and which part
# of the rule to look at.

# %% id="ex04-06" tags=["check"]
check_update_scale(update_scale)
