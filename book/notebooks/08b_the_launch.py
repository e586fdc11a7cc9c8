# %% [markdown] id="ch08b-00"
# # Chapter 8b · ZeRO-3 in production (2): the checklist, line by line, and the launch
#
# *Read every line before you trust it; then start the move the way the other crew did.*
#
# In part 1 (`08_zero3_in_production.ipynb`) the captain tried the checklist's knobs on a small
# house, one at a time. Before the real move two things are left: read **every line** of the
# checklist (some are DeepSpeed's defaults written out, some are copied from an old manual, two
# are filed under the wrong heading), check its **tuning table** of "recommended values", and
# **launch** the move the way the other crew did, with a launcher that starts one worker per
# device.
#
# The checklist is `configs/seed002_zero3_offload.json` (part 1 shows it as published). Its launch
# line: `deepspeed --num_gpus=8 train.py --deepspeed ds_config_zero3.json --model_name
# meta-llama/Llama-2-7b-hf --per_device_train_batch_size 4 --gradient_accumulation_steps 4`. Its
# tuning table: `reduce_bucket_size` 5e8-1e9, `stage3_prefetch_bucket_size` 5e8-1e9,
# `stage3_max_live_parameters` 1e9-2e9, `stage3_param_persistence_threshold` 1e5.
#
# **What we do here:** read every key beside DeepSpeed 0.19.8's real default (from its source:
# `deepspeed/runtime/zero/config.py`, `offload_config.py`) and beside what zerolab reads; ask
# `zerolab explain` what the config does on 8 ranks; measure the tuning table's values on the small
# house; run the config with `zerolab train`; and run a DeepSpeed training script on zerolab under
# `torchrun` with one line changed.

# %% id="ch08b-01"
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt

import zerolab
from zerolab.course.knobs import DS_DEFAULTS, checklist_rows, measure_all, show

ROOT = Path(zerolab.__file__).resolve().parents[1]
SEED = ROOT / "configs" / "seed002_zero3_offload.json"
seed = json.loads(SEED.read_text())
work = Path(tempfile.mkdtemp(prefix="zerolab-ch08b-"))      # the launches write here
print(f"the checklist: {SEED.relative_to(ROOT)}; {len(DS_DEFAULTS)} zero_optimization keys to read")

# %% [markdown] id="ch08b-02"
# ## 1. The checklist, key by key
#
# `zerolab.course.knobs.checklist_rows` sets each key's value in the checklist beside DeepSpeed 0.19.8's
# default, read from its source, not from its documentation page, which disagrees in places (it
# says 5e8 for `stage3_prefetch_bucket_size`; the code says 5e7), and beside what zerolab's
# `load_config` reads from the file for 8 ranks.
#
# **Predict, then run.** Apart from `stage: 3`, how many of the checklist's 13 other
# `zero_optimization` keys differ from DeepSpeed's default at stage 3? Which ones? Write your list
# down.

# %% id="ch08b-03"
rows = checklist_rows(seed, 8)
at_stage3 = {"overlap_comm": True}               # DeepSpeed's None means: true at stage 3
print(f"{'zero_optimization key':<36}{'checklist':>10}{'DS 0.19.8 default':>19}{'zerolab reads':>15}"
      f"{'changes':>9}")
differ = []
for key, value, default, read in rows:
    differs = key != "stage" and show(value) != show(at_stage3.get(key, default))
    differ += [key] * differs
    print(f"{key:<36}{show(value):>10}{show(default):>19}{show(read):>15}{'<--' if differs else '':>9}")
print(f"{len(differ)} of {len(rows) - 1} keys differ from DeepSpeed's stage-3 defaults")
cfg = zerolab.load_config(seed, 8)
print(f"batch: train_batch_size {seed['train_batch_size']} = micro-batch "
      f"{cfg.train_micro_batch_size_per_gpu} x {cfg.gradient_accumulation_steps} accumulation x 8 ranks")
print(f"fp16: loss_scale 0 = dynamic, from 2^{cfg.fp16.initial_scale_power} (DeepSpeed's default too)")
bare = checklist_rows({"train_batch_size": 8, "zero_optimization": {"stage": 3}}, 8)
plain = [(k, d, r) for k, _, d, r in bare if isinstance(d, (bool, float))]
print(f"zerolab's own defaults equal DeepSpeed 0.19.8's for {sum(d == r for _, d, r in plain)} of these "
      f"{len(plain)} numeric keys")

# %% [markdown] id="ch08b-04"
# Five lines differ from DeepSpeed's defaults (and one of them, `round_robin_gradients`, is never
# read at stage 3); the rest write the defaults out. What each line does, and where the checklist
# is wrong:
#
# - `overlap_comm: true`, `contiguous_gradients: true`, `reduce_bucket_size: 5e8`, `loss_scale: 0`,
#   `initial_scale_power: 16`: **all DeepSpeed's defaults at stage 3.** Writing them changes
#   nothing (harmless, and it documents intent). `reduce_bucket_size` is in **elements**: 5·10⁸
#   fp16 gradients make a 1 GB bucket (chapter 6).
# - `stage3_prefetch_bucket_size: 5e8`, "prefetch bucket size": how many parameter elements one
#   **top-up** may all-gather ahead of use. DeepSpeed's default is **5e7**, not 5e8: the
#   documentation page says 5e8 and the checklist copied it; the code has said 5e7 for years. At
#   every module's fetch DeepSpeed tops up once: the next modules of the recorded order, taken
#   while fewer than min(this, `stage3_max_live_parameters` − what is gathered or in flight)
#   elements are taken (the module that crosses it is taken too). It bounds one top-up, not what
#   is in flight (part 1, section 3).
# - `stage3_param_persistence_threshold: 1e5`, "small parameters are not partitioned": **half
#   right**. A parameter of at most 10⁵ elements keeps its 16-bit copy whole on every rank and is
#   never gathered in forward or backward; but its gradient and optimizer states are still
#   sharded, and it is all-gathered once after every step, so that every rank's copy takes the
#   update (part 1, section 2).
# - `stage3_max_live_parameters: 1e9`, "most parameters on the GPU at once": **not a cap.** It
#   bounds only what *prefetch* may add: a module's own gather always happens, and the module
#   that crosses the budget is taken too (part 1, section 4).
# - `stage3_max_reuse_distance: 1e9`: keep a parameter gathered if it will be used again within
#   that many **elements** of the recorded order (part 1, section 5: on a small model, everything).
# - `offload_optimizer` / `offload_param` with `pin_memory: true`: optimizer states and parameter
#   shards in CPU memory (chapter 5). `pin_memory` is already true by default in DeepSpeed 0.19.8.
# - **Filed under the wrong heading, "communication optimisation":** `sub_group_size` tiles the
#   **optimizer step** (how many elements of a rank's shard are stepped at once, which bounds the
#   CPU/NVMe working memory under offload); it sends nothing. `round_robin_gradients` reorders
#   which rank owns which gradient **at stages 1 and 2 only**, to spread the device-to-host copies
#   of offload; DeepSpeed's stage 3 never reads it (zerolab reads it as false here). Part 1,
#   section 6 measures both.
#
# `zerolab explain` says the same for any DeepSpeed config. Run here with the checklist's own
# numbers, 8 ranks and a 7B model:

# %% id="ch08b-05"
out = subprocess.run([sys.executable, "-m", "zerolab.cli", "explain", str(SEED), "--world", "8",
                      "--params", "7e9"], capture_output=True, text=True, check=True).stdout
for line in out.splitlines():
    print(textwrap.fill(line, 98, subsequent_indent="      ") if line.strip() else "")

# %% [markdown] id="ch08b-06"
# ## 2. The tuning table, checked
#
# The table recommends `stage3_prefetch_bucket_size` 5e8-1e9, ten to twenty times DeepSpeed's
# default, and `stage3_max_live_parameters` 1e9-2e9. Part 1 measured the rule on the small house
# (8 weights of 4,096 elements, biases persistent, reuse distance 0); here the table's values go
# through the same measurement (`zerolab.course.knobs.measure`, 2 ranks).
#
# **Predict, then run.** On the small house, prefetch at 0, at DeepSpeed's 5e7 and at the table's
# 5e8: all-gather calls per step and the peak of gathered elements? Will 5e8 change anything
# against 5e7? And the live budget at 1,000, far below the table's 1e9: the peak?

# %% id="ch08b-07"
crew = zerolab.Crew(2, threads=1)
knob = {"stage3_param_persistence_threshold": 64}
table = crew.run(measure_all, {
    "prefetch 0": {"zero": {**knob, "stage3_prefetch_bucket_size": 0}},
    "prefetch 5e7": {"zero": {**knob, "stage3_prefetch_bucket_size": 50_000_000}},
    "prefetch 5e8": {"zero": {**knob, "stage3_prefetch_bucket_size": 500_000_000}},
    "max_live 1,000": {"zero": {**knob, "stage3_max_live_parameters": 1000}},
    "persistence 1e5": {"zero": {"stage3_param_persistence_threshold": 100_000}}})[0]
crew.close()
print(f"{'small house, 2 ranks':<20}{'all-gather calls':>17}{'bytes gathered':>15}{'peak elements':>14}"
      f"{'persistent':>11}")
for name, r in table.items():
    print(f"{name:<20}{r['calls']:>17}{r['gathered_bytes']:>15,}{r['peak']:>14,}{len(r['persistent']):>11}")
LAYER, BIGGEST = 4 * 4096 * 4096 + 3 * 4096 * 11008, 4096 * 11008
print(f"Llama-2-7B: 5e8 elements = {5e8 / LAYER:.1f} layers = {5e8 / BIGGEST:.0f} of its largest "
      f"modules (an MLP projection);")
print(f"            5e7 = {5e7 / BIGGEST:.1f} of them")
print(f"a reduce_bucket_size of 5e8 = {5e8 * 2 / 1e9:.0f} GB of fp16 gradients in one bucket buffer")

# %% [markdown] id="ch08b-08"
# On the small house 5e8 and 5e7 are the same: either pops the whole trace at the root's fetch,
# takes the 8 weights in one call and marks each one fetched for its backward use, so that
# DeepSpeed releases none of them after its forward, even at reuse distance 0: 9 calls with the 8
# biases' refresh (one per bias), 133,120 bytes, against 24 calls and 264,192 bytes with prefetch
# off, where the backward gathers every weight again (part 1, section 3). The difference between
# 5e7 and 5e8 shows only on a large model:
#
# - `stage3_prefetch_bucket_size` 5e8-1e9: on a 7B model, 5·10⁸ elements is two and a half layers
#   taken by one top-up, about 1 GB in fp16, and top-ups repeat at every module's fetch: what is in
#   flight is bounded only by `stage3_max_live_parameters` (1e9, five layers). What that buys
#   (fewer, earlier gathers, more overlap) and what it costs (the peak of gathered parameters grows
#   with the prefetch bucket until it is the whole model) is what the small house shows.
# - `stage3_max_live_parameters` 1e9-2e9: a budget for prefetch, not a cap on memory: a budget of
#   1,000 still gathers a 4,096-element module.
# - `reduce_bucket_size` 5e8-1e9: the default is already 5e8. Larger buckets send the same bytes in
#   fewer calls (chapter 6), each costing a buffer: at stage 3 DeepSpeed fills one bucket buffer per
#   dtype (its single IPG buffer; stages 1-2 with `overlap_comm` keep two), 1 GB in fp16 at 5e8.
# - `stage3_param_persistence_threshold` 1e5: the default, and sensible for 7B (only the norm
#   weights fall under it); on the small house it makes every parameter persistent: 16 calls a
#   step, each parameter refreshed on its own after the step.
#
# Times (how much a larger prefetch bucket speeds up a real 7B step on 8 GPUs) cannot be checked on
# a 2-core CPU: the table gives no measurement either. The offload rows of the same source (70B on
# 4 A100-40GB "at about 35% speed") are checked in chapter 5: 70B needs 1,120 GB of model states,
# more than any row's CPU memory.
#
# ### Beside real DeepSpeed: `zerolab compare`
#
# Every number so far is zerolab's. `zerolab compare CONFIG.json` runs one config on **real
# DeepSpeed 0.19.8** (its CPU build, under `torchrun`, gloo) and on zerolab, on the same model and
# data, and prints the collectives of the steady steps (3 to 5) side by side. A recorded run (you do
# not need DeepSpeed to read it; the two configs and the full outputs, losses included, are in
# `benchmarks/results/compare/`): `--model mlp`, a residual MLP of 4 `Linear(284)` and 3
# `LayerNorm` (Ψ = 325,464, 1.30 MB in fp32), 2 ranks, stage 3, `stage3_max_reuse_distance` 0,
# `stage3_param_persistence_threshold` 0, first with prefetch at DeepSpeed's default (5e7), then
# with `stage3_prefetch_bucket_size` 0:
#
# ```
# $ zerolab compare zero3_prefetch_reuse0.json
#   family           zerolab calls        bytes  DeepSpeed calls        bytes   verdict
#   all_gather                   1    1,301,856                1    1,301,856   ok
#   reduce_scatter               1    1,301,856                1    1,301,856   ok
# => the same calls and bytes
#
# $ zerolab compare zero3_no_prefetch_reuse0.json
#   family           zerolab calls        bytes  DeepSpeed calls        bytes   verdict
#   all_gather                  14    2,603,712               14    2,603,712   ok
#   reduce_scatter               1    1,301,856                1    1,301,856   ok
# => the same calls and bytes
# ```
#
# The same calls and bytes on both sides. With DeepSpeed's default prefetch **one** all-gather
# carries the whole model (Ψ once, 1.30 MB): the prefetcher pops the whole trace at the first fetch
# and marks every parameter fetched for its backward use, so even at reuse distance 0 nothing is
# released and the backward gathers nothing again. With prefetch off the same config makes 14
# all-gathers and moves twice the bytes (2.60 MB): each module is gathered in forward and again in
# backward, the paper's 3Ψ with the reduce-scatter. In DeepSpeed, prefetch changes the bytes.
# (The losses, in the stored files, agree to four or five significant digits: two
# implementations, the same arithmetic in a different order.)
#
# To run it live, with your own config, in a Python where zerolab is installed:
#
# ```
# DS_BUILD_OPS=0 pip install 'zerolab[deepspeed]'     # DeepSpeed 0.19.8, CPU only, no ops compiled
# zerolab compare my_config.json                        # --world 3, --model tied, --steps 6
# ```
#
# Without DeepSpeed it says how to install it; `--ds-python /path/to/venv/bin/python` takes
# DeepSpeed from another environment. It exits with 1 when a family's calls or bytes differ.
#
# ## 3. The launch line, and its equivalents here
#
# The checklist's launch line, `deepspeed --num_gpus=8 train.py --deepspeed ds_config_zero3.json ...`,
# starts 8 processes on one machine, each with its rank in the environment, and `train.py` calls
# `deepspeed.initialize`. (`--model_name`, `--per_device_train_batch_size` and
# `--gradient_accumulation_steps` are the script's own arguments, Hugging Face Trainer style; the
# config's `train_batch_size` 128 = 4 × 4 × 8 must agree with them.) The same on this machine:
#
# | DeepSpeed | zerolab |
# |---|---|
# | `deepspeed --num_gpus=8 train.py --deepspeed_config ds.json` | `torchrun --nproc_per_node 2 train.py --deepspeed_config ds.json` (with `import zerolab.deepspeed as deepspeed`) |
# | (no built-in trainer) | `zerolab train --config ds.json --nproc 2` (a small model, generated data) |
#
# `zerolab train` with a config in the checklist's spirit (stage 3, fp16, optimizer offload,
# prefetch at DeepSpeed's default, persistence off so that this small model's parameters travel),
# 2 ranks, 6 steps of 2 micro-batches each.
#
# **Predict, then run.** How many all-reduces and how many reduce-scatters will rank 0's ledger
# show for the 6 steps? (Stage 3 reduce-scatters the gradients in every micro-batch, one call per
# `reduce_bucket_size` bucket, 5·10⁸ elements by default; every step sends DeepSpeed's small
# all-reduces: at stage 3 with fp16, the overflow flag as 1 byte, then the gradient norm as one
# sum, 8-byte fp64 without offload, 4-byte fp32 with `offload_optimizer` as here.)

# %% id="ch08b-09"
small = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
         "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 8},
         "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                               "offload_optimizer": {"device": "cpu"}, "sub_group_size": 2048}}
(work / "ds_config.json").write_text(json.dumps(small, indent=1))
env = {**os.environ, "OMP_NUM_THREADS": "1"}
run = subprocess.run([sys.executable, "-m", "zerolab.cli", "train", "--config", "ds_config.json",
                      "--nproc", "2", "--steps", "6", "--no-progress", "--picture", "train.png"],
                     cwd=work, capture_output=True, text=True, env=env, timeout=300)
status = {"zerolab train": run.returncode}
print("exit status", run.returncode)
for line in run.stdout.splitlines():
    if line.lstrip().startswith(("loss:", "lr:", "time:", "where it went")):
        line = re.sub(r"\d+\.\d+(e-?\d+)?", "#", line)       # loss, lr and times vary by machine
    print(textwrap.fill(line, 98, subsequent_indent="      ") if len(line) > 98 else line)

# %% [markdown] id="ch08b-10"
# 12 all-reduces (two per step: the overflow flag, 1 byte, and the gradient norm, 4 bytes; 30
# bytes in all) and 12 reduce-scatters (one per micro-batch: this model fits one bucket). The
# all-gathers are stage 3's parameter gathers. The first micro-batch
# runs before any order is recorded: module by module, each released when its module is done, in
# forward and again in backward, 20 calls; the tied embedding alone is gathered four times, for
# itself and for the head in forward and again in backward (DeepSpeed releases each module's
# parameters after its backward). From the second micro-batch on, prefetch follows the recorded
# order (the root module, then the rest in one top-up) and the reuse distance at DeepSpeed's
# default, 10⁹, keeps everything gathered from forward to backward: 2 calls per micro-batch, so
# 20 + 11 × 2 = 42. (The loss, learning
# rate and time lines are masked with `#`: their digits depend on the CPU. The memory and traffic
# lines are exact.) The picture it saved (loss and learning rate per step, bytes per step by
# collective, memory per rank):

# %% id="ch08b-11"
img = plt.imread(work / "train.png")
fig, ax = plt.subplots(figsize=(11, 11 * img.shape[0] / img.shape[1]))
ax.imshow(img)
ax.axis("off")
plt.show()

# %% [markdown] id="ch08b-12"
# ## 4. A DeepSpeed script, one line changed
#
# Below, a training script written the way DeepSpeed's own examples are: `argparse` with
# `deepspeed.add_config_arguments` (`--deepspeed`, `--deepspeed_config`), `deepspeed.initialize`
# with `args`, `model`, `model_parameters` and `training_data`, returning the 4-tuple (engine,
# optimizer, data loader, scheduler), and `engine.backward` / `engine.step`. Read it first; the next
# cell changes one line, `import deepspeed` into `import zerolab.deepspeed as deepspeed`, and runs it
# under `torchrun` on 2 ranks with the config of section 3 (fp32) plus a warmup scheduler.

# %% id="ch08b-13"
SCRIPT = """
import argparse

import torch
import torch.nn.functional as F
import deepspeed


class Data(torch.utils.data.Dataset):
    def __init__(self, n=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        self.y = self.x[:, :4].sum(1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(16, 64)
        self.fc2 = torch.nn.Linear(64, 64)
        self.fc3 = torch.nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser(description="a DeepSpeed example")
    parser.add_argument("--local_rank", type=int, default=-1, help="passed by the launcher")
    parser.add_argument("--epochs", type=int, default=3)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed()
    net = Net()
    parameters = filter(lambda p: p.requires_grad, net.parameters())
    model_engine, optimizer, trainloader, lr_scheduler = deepspeed.initialize(
        args=args, model=net, model_parameters=parameters, training_data=Data())

    first = last = None
    for epoch in range(args.epochs):
        total = 0.0
        for inputs, labels in trainloader:
            inputs, labels = inputs.to(model_engine.device), labels.to(model_engine.device)
            if model_engine.fp16_enabled():
                inputs = inputs.half()
            loss = F.mse_loss(model_engine(inputs).float(), labels)
            model_engine.backward(loss)
            model_engine.step()
            total += loss.item()
        first = total if first is None else first
        last = total
    if model_engine.global_rank == 0:
        print(f"world {model_engine.world_size}, ZeRO stage {model_engine.zero_optimization_stage()}, "
              f"{len(trainloader)} micro-batches per epoch, {model_engine.global_steps} optimizer steps")
        print(f"scheduler {type(lr_scheduler).__name__}, optimizer {type(optimizer).__name__}")
        print(f"last epoch's loss below the first's: {last < first}")
        ledger = getattr(model_engine, "ledger", None)      # zerolab only: every collective
        if ledger is not None:
            for op, t in sorted(ledger.totals().items()):
                print(f"  {op:<15}{int(t['calls']):>5} calls{int(t['bytes']):>10,} bytes")


if __name__ == "__main__":
    main()
"""

# %% [markdown] id="ch08b-14"
# **Predict, then run.** 64 samples, 2 ranks, a micro-batch of 4 per rank, 2 micro-batches
# accumulated per optimizer step, 3 epochs: how many micro-batches per epoch will each rank's data
# loader give, and how many optimizer steps will the engine count at the end?

# %% id="ch08b-15"
changed = SCRIPT.replace("\nimport deepspeed\n", "\nimport zerolab.deepspeed as deepspeed\n")
diff = [(a, b) for a, b in zip(SCRIPT.splitlines(), changed.splitlines()) if a != b]
print(f"lines changed: {len(diff)}: {diff[0][0]!r} -> {diff[0][1]!r}")
(work / "train.py").write_text(changed)
ds = {**small, "fp16": {"enabled": False},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2,
                                                   "warmup_num_steps": 4}}}
(work / "ds_config.json").write_text(json.dumps(ds, indent=1))
torchrun = str(Path(sys.executable).with_name("torchrun"))
cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "train.py", "--deepspeed",
       "--deepspeed_config", "ds_config.json"]
print("$", " ".join(["torchrun"] + cmd[1:]))
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300,   # (PET_LOG_DIR: torchrun's
                     env={**env, "OMP_NUM_THREADS": "1", "PET_LOG_DIR": str(work / "torchrun-logs")})  # logs, in work)
status["torchrun train.py"] = run.returncode
print("exit status", run.returncode)
print(run.stdout.strip() if run.returncode == 0 else run.stdout[-2000:] + run.stderr[-3000:])

# %% [markdown] id="ch08b-16"
# The script did not know it was not running on DeepSpeed: the 4-tuple, the data loader split
# over the ranks (64 samples, 2 ranks, micro-batch 4: 8 micro-batches per rank per epoch), the
# accumulation over 2 micro-batches (24 micro-batches, 12 optimizer steps), the scheduler and the
# stage-3 gathers all came from the config. The only zerolab-specific lines are the
# `getattr(model_engine, "ledger", None)` block, which a DeepSpeed run skips: every collective with
# its calls and bytes, exact, the same on every machine.
#
# ## 5. What DeepSpeed itself prints
#
# On the real move the crew reports in DeepSpeed's own words, and the captain has to read them.
# Three outputs matter: `ds_report` (what was built and what can be), the progress and
# throughput lines every `steps_per_print` steps, and, with `wall_clock_breakdown: true`, rank 0's
# timers. They were recorded from DeepSpeed 0.19.8 itself (CPU build, 2 ranks over gloo, stage 2,
# the 325k-parameter benchmark MLP, 30 steps, micro-batch 32 per rank) and are kept in
# `benchmarks/results/recorded/` with the machine and date; `zerolab.tools.dslog` reads them.
# `nvidia-smi` is not among them: no GPU was available when they were recorded, and the course
# does not invent one. (On a GPU its "Memory-Usage" column is what the CUDA allocator reserved
# plus each process's CUDA context, so it reads higher than DeepSpeed's `MemAllocated`.)
#
# **Predict, then run.** The throughput line reports `CurrSamplesPerSec`. The recorded run had
# 2 ranks with 32 samples each per step. Is that figure one rank's samples per second, or the
# crew's? And what will `skipped` say in an fp32 run?

# %% id="ch08b-17"
from zerolab.tools import dslog

REC = ROOT / "benchmarks" / "results" / "recorded"
log = dslog.read_log(REC / "ds_stage2_train_log_cpu.txt")
print("train_batch_size in the printed config:", log.config["train_batch_size"])
for prog, tput in zip(log.progress[1:], log.throughput):
    step_ms = int(log.config["train_batch_size"]) / tput["current"] * 1e3
    print(f"step {prog['step']:>2}: skipped {prog['skipped']}, CurrSamplesPerSec {tput['current']:7.1f} "
          f"-> one step of 64 samples in {step_ms:5.1f} ms")

# %% [markdown] id="ch08b-18"
# DeepSpeed's `ThroughputTimer` is built with `batch_size = train_batch_size` (micro-batch x
# accumulation × ranks: 32 × 1 × 2 = 64 here) and timed on rank 0's clock, so the samples per
# second are the **crew's**, not one worker's: divide by the ranks for a per-GPU figure.
# `RunningAvgSamplesPerSec` averages every step so far; `CurrSamplesPerSec` is the last step
# alone (on this busy 2-core machine it swings several-fold). `skipped` counts the steps the fp16
# loss scaler threw away after an overflow (chapter 4); in fp32 and bf16 it stays 0.
#
# **Predict, then run.** With `wall_clock_breakdown`, DeepSpeed splits `bwd` into `bwd_inner`
# (autograd) and `bwd_allreduce` (the gradient reduction of stages 1-2, the buckets of chapter 6).
# On two CPU ranks over gloo, which of the two is larger?

# %% id="ch08b-19"
med = log.timer_medians()
print("DeepSpeed 0.19.8, stage 2, recorded: rank 0's timers, median over 30 steps")
for key in ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "optimizer_allgather"):
    print(f"  {key:<20}{med[key]:7.2f} ms")
print(f"  the reduction is {med['bwd_allreduce'] / med['bwd']:.0%} of bwd")
rep = dslog.read_report(REC / "ds_report_cpu.txt")
print("ds_report, recorded:", rep["env"]["deepspeed info"].split(",")[0], "with torch", rep["env"]["torch version"])
for name, (installed, compatible) in rep["ops"].items():
    print(f"  {name:<26} installed {'YES' if installed else 'NO ':<4} compatible {'OKAY' if compatible else 'NO'}")

# %% [markdown] id="ch08b-20"
# More than half of backward was the gradient reduction: on CPU ranks over gloo the reduction is not
# hidden (chapter 6 measured why), where on GPUs with `overlap_comm` most of it runs on NCCL's
# own stream behind autograd and `bwd_allreduce` shrinks to what is left exposed. zerolab's
# equivalent is the engine's timeline (`engine.timeline.summary()`: compute, exposed and hidden
# communication), and its ledger counts what DeepSpeed's timers cannot: the calls and bytes.
#
# `ds_report` reads the same way on every machine. "installed" is NO for every op because the
# package was built with `DS_BUILD_OPS=0`: each op is compiled just in time when first used, if it
# is "compatible". `async_io` is not: it needs `libaio` (`apt install libaio-dev`), and without it
# **NVMe offload cannot run** (chapter 5's warehouse on disk). `cpu_adam`, the host-side Adam
# behind `offload_optimizer`, is compatible and would be compiled on first use. zerolab's own
# `zerolab report` gives the same kind of page for this machine: run it in a terminal.
#
# ## What we measured

# %% id="ch08b-21"
print(f"checklist   {len(differ)} of {len(rows) - 1} keys differ from DeepSpeed 0.19.8's stage-3 defaults:")
print(textwrap.fill(", ".join(differ), 96, initial_indent=" " * 12, subsequent_indent=" " * 12))
print(f"table       prefetch 5e7 -> 5e8 on the small house: calls {table['prefetch 5e7']['calls']} -> "
      f"{table['prefetch 5e8']['calls']}, peak {table['prefetch 5e7']['peak']:,} -> "
      f"{table['prefetch 5e8']['peak']:,}")
print(f"            max_live 1,000: peak {table['max_live 1,000']['peak']:,}; persistence 1e5: "
      f"{len(table['persistence 1e5']['persistent'])} of 16 parameters persistent")
print(f"launch      exit status of zerolab train {status['zerolab train']}, of the DeepSpeed script "
      f"under torchrun {status['torchrun train.py']}")

# %% [markdown] id="ch08b-22"
# - The checklist is mostly DeepSpeed's defaults written out. Its real changes are the prefetch
#   bucket (5e8 against the code's 5e7), `sub_group_size` (1e8 against 1e9), offload, and
#   `round_robin_gradients`, which stage 3 never reads.
# - The tuning table's prefetch values are 10 to 20 times DeepSpeed's default: on a 7B model
#   several layers per top-up, bounded only by the live budget, which itself bounds prefetch, not
#   memory.
# - `deepspeed --num_gpus=8 train.py` starts one process per GPU; `torchrun` does the same, and a
#   DeepSpeed script runs on zerolab with one line changed. `zerolab train` runs a config end to end.
# - DeepSpeed's own words, read from a recording: its samples per second are the crew's
#   (`train_batch_size` per step), `skipped` counts fp16 overflow steps, `bwd_allreduce` is the
#   reduction that was not hidden, and `ds_report`'s `async_io` line decides whether NVMe offload
#   can run.
#
# ## Questions
#
# 1. Which two keys of the checklist would you delete without changing anything a run does, and
#    which would you change back to DeepSpeed's default first if the GPU ran out of memory at the
#    forward-to-backward turn?
# 2. In section 2, give the table's 5e8 a model where it matters: how many `Linear(64, 64)` layers
#    would the small house need before 5e7 and 5e8 prefetch differently?
# 3. Change the script of section 4 to ZeRO stage 2 and run it again. Which collectives disappear
#    from its ledger, and which appear?
# 4. The launch line passes `--per_device_train_batch_size 4 --gradient_accumulation_steps 4` on
#    8 GPUs. If the config's `train_batch_size` said 64 instead of 128, which micro-batch per GPU
#    would the config imply (`zerolab.load_config(config, 8)`)? Why must the script's arguments
#    and the config agree?

# %% id="ch08b-23"
import shutil

shutil.rmtree(work, ignore_errors=True)      # the launches' folder: nothing left in the temp folder
