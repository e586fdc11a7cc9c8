# %% [markdown] id="ex09-00"
# # Exercise 9 · The whole move in one config
#
# *Write the plan the crew will follow: who carries what, where the notebook waits, how fast to start.*
#
# In chapter 9 one DeepSpeed config described the whole run. Here **you write it**, as a function
# of the number of ranks, from this brief:
#
# - **batch:** 24 sequences per optimizer step on any number of ranks, accumulated over **2**
#   micro-batches per rank; give all three keys (`train_batch_size`,
#   `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`) and make them agree;
# - **ZeRO:** stage 3; the optimizer states **and** the parameter shards offloaded to the CPU;
#   every parameter sharded, however small (`stage3_param_persistence_threshold`);
# - **precision:** bf16 (with fp32 master weights, which zerolab and DeepSpeed keep by themselves);
# - **optimizer:** AdamW, lr 6e-3, betas (0.9, 0.95), weight decay 0.01; gradients clipped to a
#   global norm of 1.0;
# - **schedule:** DeepSpeed's `WarmupDecayLR`: from 0, in a straight line, to 6e-3 over 15 steps,
#   then down to 0 at step 100.
#
# DeepSpeed's keys are those of its documentation (the config JSON page); `configs/` has examples.
#
# **When a check fails** it says in a few lines which key is wrong, what it expected, and a hint.
# To see the full traceback as well, run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()`
# and run the check cell again.

# %% id="ex09-01"
from zerolab.course.checks.ch09 import check_capstone_config

# %% id="ex09-02"
def capstone_config(world_size):
    """The DeepSpeed config (a dict) of the capstone run on world_size ranks."""
    # BEGIN SOLUTION: the batch triple from world_size, ZeRO-3 with both offloads, bf16, AdamW, WarmupDecayLR
    gas = 2
    return {
        "train_batch_size": 24,
        "train_micro_batch_size_per_gpu": 24 // (gas * world_size),
        "gradient_accumulation_steps": gas,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 6e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 6e-3, "warmup_num_steps": 15,
                                 "total_num_steps": 100, "warmup_type": "linear"}},
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu"},
            "offload_param": {"device": "cpu"},
            "stage3_param_persistence_threshold": 0,
        },
    }
    # END SOLUTION

# %% [markdown] id="ex09-03"
# Look at it the way the engine will, on 3 ranks. **Predict** the micro-batch first.

# %% id="ex09-04"
import zerolab

print(zerolab.load_config(capstone_config(3), 3).describe().splitlines()[1])

# %% [markdown] id="ex09-05"
# **The check.** First your config alone, for 1, 2, 3, 4 and 6 ranks: it must load under
# DeepSpeed's rules (the batch triple must agree), make every choice of the brief, and give the
# brief's learning rate at each of the 100 steps. Then on 2 and 3 ranks the GPT of chapter 9
# trains a few steps on the book with your config and with zerolab's; the engine must hold the
# parameter shards and optimizer states in host memory, and the losses and learning rates must be
# the same, step for step.

# %% id="ex09-06" tags=["check"]
check_capstone_config(capstone_config)

# %% [markdown] id="ex09-07"
# ## Going further
#
# 1. Why must `train_batch_size` stay 24 on every number of ranks for a checkpoint to resume on
#    another one? What would DeepSpeed say if you resumed a 2-rank run on 3 ranks with a fixed
#    micro-batch of 6?
# 2. With 2 accumulation steps, which world sizes can this config not run on? (Try 5.)
# 3. Replace `"cpu"` by `"nvme"` in `offload_optimizer` (it needs an `nvme_path`): what does
#    `zerolab.load_config(...).describe()` say changes?
