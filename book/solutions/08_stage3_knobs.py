# %% [markdown] id="ex08-00"
# # Exercise 8 · Tuning the fetch: prefetch, persistence, the live budget and reuse
#
# *Three goals for the same small house; you choose the knobs, the engine runs them.*
#
# In chapter 8 five keys moved the stage-3 gathers around without changing a single number the
# model computes: `stage3_param_persistence_threshold` (and its cap
# `stage3_model_persistence_threshold`), `stage3_prefetch_bucket_size`,
# `stage3_max_live_parameters` and `stage3_max_reuse_distance`. Here you pick their values to meet a goal, as you would tune a
# real run, and the check **runs your values in the engine on 2 ranks** and measures.
#
# The model: an MLP of 8 `Linear(64, 64)` layers (8 weights of 4,096 elements, 8 biases of 64),
# stage 3, 2 ranks, 3 steps; what counts is the **last** step (the order recorded, prefetch on):
#
# | goal | what must hold in the last step |
# |---|---|
# | **A** | all 8 biases persistent, no weight persistent |
# | **B** | biases persistent, at most 19 parameter all-gather calls (the 8 biases' refresh after the step, one call each, among them), at most 18,432 elements (4.5 weights) gathered or in flight at once |
# | **C** | no weight persistent, `stage3_prefetch_bucket_size` left at DeepSpeed's 5e7, and 0 groups gathered ahead of use |
#
# The rule behind B and C is DeepSpeed's (chapter 8, sections 3 and 4): at every module's fetch,
# the root's included, one all-gather of the next groups in the recorded order, taken while
# fewer than min(`stage3_max_live_parameters` − available, `stage3_prefetch_bucket_size`)
# elements are taken, **the group that crosses the limit included** (available: what is gathered
# or in flight).
#
# Write `knobs(goal)`: return a dict of those five keys (a key left out keeps DeepSpeed's default:
# persistence 1e5, no cap, prefetch 5e7, live budget 1e9, reuse distance 1e9).
#
# `measure(knobs)` runs the engine with your values and returns what the check reads: `calls`
# (parameter all-gather calls, from `engine.ledger.records`: ZeRO's own; zerolab's 16-byte order
# checks are filed apart and not counted), `prefetches` (groups gathered ahead of use), `peak`
# (most elements gathered or in flight at once), `persistent` (the sizes of the persistent
# parameters) and `param_bytes` (per rank). Use it to try values.
#
# **When a check fails** it says what was measured, what the goal was, and a hint. To see the full
# traceback as well, run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the
# check cell again.

# %% id="ex08-01"
from zerolab.course.checks.ch08 import check_knobs, measure

# %% [markdown] id="ex08-02"
# **Predict, then run.** DeepSpeed's defaults (an empty dict) on this model: how many parameter
# all-gathers per step, and how many persistent parameters?

# %% id="ex08-03"
m = measure({})
print({k: v for k, v in m.items() if k != "persistent"}, f"{len(m['persistent'])} persistent")

# %% id="ex08-04"
def knobs(goal):
    """The stage-3 keys that meet goal "A", "B" or "C"."""
    # BEGIN SOLUTION: one dict of stage-3 keys per goal
    if goal == "A":                   # numel <= threshold: 64 is in, 4,096 is out
        return {"stage3_param_persistence_threshold": 64}
    if goal == "B":                   # room for the crossing weight: 18,432 - 4,096; no reuse
        return {"stage3_param_persistence_threshold": 64, "stage3_max_live_parameters": 14336,
                "stage3_max_reuse_distance": 0}
    if goal == "C":                   # the root's fetch has 0 available: only a budget of 0 leaves no room
        return {"stage3_param_persistence_threshold": 64, "stage3_max_live_parameters": 0}
    raise ValueError(goal)
    # END SOLUTION

# %% [markdown] id="ex08-05"
# Try your values for goal B before the check (a few seconds):

# %% id="ex08-06"
m = measure(knobs("B"))
print(f"all-gather calls {m['calls']}, peak {m['peak']:,}, prefetched {m['prefetches']}, "
      f"{len(m['persistent'])} persistent")

# %% [markdown] id="ex08-07"
# **The check.** Your three answers and one run with DeepSpeed's defaults, on 2 ranks: each goal
# measured in the last step, and the trained parameters compared bit for bit with the defaults'.

# %% id="ex08-08" tags=["check"]
check_knobs(knobs)

# %% [markdown] id="ex08-09"
# ## Where this lives in zerolab
#
# `make_units` (`zerolab/zero/stage3/units.py`) decides persistence, parameter by parameter in the model's
# order; `GatheredParams.unshard_unit` (`zerolab/zero/stage3/gather.py`), `top_up` (a module without parameters
# of its own) and `UnitFetch.plan` (`zerolab/zero/stage3/fetch.py`) follow the recorded order and take the next
# groups by DeepSpeed's budget. DeepSpeed's counterparts are `mark_persistent_parameters`
# (`parameter_offload.py`) and `fetch_sub_module` (`partitioned_param_coordinator.py`).
# `UnitFetch.check_unit`, the 16-byte order check, is zerolab's own (DeepSpeed sends none; `"zerolab": {"order_checks": false}` turns it off).
#
# Questions:
#
# 1. Goal B has more than one answer. Find one with `stage3_max_live_parameters` 16,384, and
#    one with a different `stage3_max_reuse_distance`; say why the calls and the peak move the
#    way they do.
# 2. Why can no value of `stage3_max_live_parameters` push the peak below 4,096 elements here?
# 3. In goal C, would `"stage3_prefetch_bucket_size": 0` have been the simpler answer? Why does
#    a budget of one weight (4,096) still prefetch once per step?

# %% id="ex08-10"
import zerolab.course.checks
zerolab.course.checks.close_crews()
