"""Step time of zerolab stages 0-3 against torch DDP (and DeepSpeed 0.19.8, and torch's ZeRO
baselines), the candidates taking turns in the same processes.

Model (issue 10's shape): a residual MLP of 4 Linear and 3 LayerNorm layers, 325,464 fp32
parameters, Adam, gradient clipping 1.0, batch 32 per rank, 2 ranks (gloo on CPU, NCCL on GPUs).
All candidates are built first; then, in each of ``--rounds`` rounds, every candidate runs
``--steps`` steps (each timed alone, between barriers; the order rotates). A candidate's ratio is
the median over rounds of (its median step time in the round / torch DDP's in the same round):
on a shared 2-vCPU machine the same collective takes 0.3 ms or 2 ms for seconds at a time, and
taking turns lets those spells fall on every candidate alike. DeepSpeed runs in its own venv and
processes, in turns with its own torch DDP (ds_reference/ds_step_time.py).

Three floors take their turns beside them: DeepSpeed's calls for stage 0, stages 1-2 and stage 3
written by hand with plain torch.distributed and no engine (``step_models.hand_zero``). No engine
that keeps DeepSpeed's calls can beat them on the transport of the run unless it overlaps them
with backward (the floors call after backward, as DeepSpeed does without ``overlap_comm``);
"x floor" is zerolab's time over the floor of its stage (module_groups makes other calls, so it
has none).

    python benchmarks/step_time.py [--repeats 2] [--rounds 40] [--steps 5] [--world 2]
        [--backend auto|gloo|nccl|shm]               # the transport of every candidate of the run
        [--ds-python /path/to/dsvenv/bin/python]     # adds DeepSpeed stages 1-3 (own processes)
        [--torch-zero]                               # adds ZeroRedundancyOptimizer and FSDP2

One transport per run, for every candidate in the crew: torch DDP, torch's ZeRO baselines and
zerolab's stages all go through the backend of ``--backend`` (``shm`` is zerolab's shared-memory
backend ``zshm``, zerolab/crew/shm.py, over which torch DDP runs too). To compare transports, run it
once per backend. DeepSpeed runs in its own processes over gloo (with its own CPU collectives),
beside a torch DDP of its own over gloo.

Wire bytes per step come from zerolab's ledger (in units of Psi x 4 B, divided by the ring factor
(N-1)/N: DDP's all-reduce is 2).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from torch import nn

import zerolab

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import ResMLP, hand_zero, round_robin, run_deepspeed  # noqa: E402


def bench(batch, rounds, per_round, torch_zero, variants):
    info = zerolab.rank_info()
    dev = info.device
    torch.manual_seed(1 + info.rank)
    x = torch.randn(batch, ResMLP.WIDTH, device=dev)
    y = torch.randn(batch, ResMLP.WIDTH, device=dev)
    loss_fn = nn.MSELoss()
    steps, engines = {}, {}
    from torch.nn.parallel import DistributedDataParallel as DDP

    def torch_step(model, opt):
        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        return step

    ddp = DDP(ResMLP().to(dev))
    steps["torch DDP"] = torch_step(ddp, torch.optim.Adam(ddp.parameters(), lr=1e-4))
    for stage in FLOOR:                   # DeepSpeed's calls written by hand, no engine
        steps[FLOOR[stage]] = hand_zero(x, y, stage)
    if torch_zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        zddp = DDP(ResMLP().to(dev))
        steps["torch ZeroRedundancyOptimizer"] = torch_step(
            zddp, ZeroRedundancyOptimizer(zddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4))
        from torch.distributed.fsdp import fully_shard
        model = ResMLP().to(dev)
        for m in model.modules():
            if isinstance(m, nn.Linear):
                fully_shard(m)
        fully_shard(model)
        steps["torch FSDP2"] = torch_step(model, torch.optim.Adam(model.parameters(), lr=1e-4))
    for name, stage, zero in variants:
        cfg = {"train_batch_size": batch * info.world_size, "gradient_clipping": 1.0,
               "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
               "zero_optimization": {"stage": stage, **{k: v for k, v in zero.items() if k != "zerolab"}},
               **({"zerolab": zero["zerolab"]} if "zerolab" in zero else {})}
        engine = engines[name] = zerolab.initialize(ResMLP(), cfg)

        def z_step(engine=engine):
            engine.backward(loss_fn(engine(x), y))
            engine.step()
        steps[name] = z_step
    times = round_robin(steps, rounds, per_round, dev)
    wire = {}
    ring = (info.world_size - 1) / info.world_size or 1
    for name, engine in engines.items():
        mark = engine.ledger.mark()
        steps[name]()
        wire[name] = engine.ledger.since(mark).wire_bytes / ring
        engine.close()
    return times, wire


FLOOR = {0: "floor: stage 0's calls, no engine", 1: "floor: stage 1-2's calls, no engine",
         3: "floor: stage 3's calls, no engine"}
VARIANTS = [("zerolab stage 0", 0, {}), ("zerolab stage 0 + overlap", 0, {"overlap_comm": True}),
            ("zerolab stage 1", 1, {}), ("zerolab stage 2", 2, {}),
            ("zerolab stage 2 + overlap", 2, {"overlap_comm": True}),
            ("zerolab stage 3", 3, {}),
            ("zerolab stage 3, module_groups", 3, {"zerolab": {"module_groups": True}})]   # zerolab's own layout


def deepspeed_run(python, world, rounds, steps, batch) -> dict:
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ds_reference", "ds_step_time.py")
    return run_deepspeed(python, world, script, ["--rounds", str(rounds), "--steps", str(steps),
                                                 "--batch", str(batch)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="steps per candidate per round")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ds-python", default=None, help="python of a venv with deepspeed==0.19.8")
    ap.add_argument("--torch-zero", action="store_true", help="add ZeroRedundancyOptimizer and FSDP2")
    ap.add_argument("--backend", choices=("auto", "gloo", "nccl", "shm"), default="auto",
                    help="the transport of every candidate in the crew (shm: zerolab's zshm)")
    a = ap.parse_args()
    ratios: dict[str, list] = {}
    ms: dict[str, list] = {}
    wire: dict[str, float] = {}
    psi = sum(p.numel() for p in ResMLP().parameters())

    def add(times: dict, base: str, rename=lambda n: n):
        for name, per_round in times.items():
            ratios.setdefault(rename(name), []).extend(t / b for t, b in zip(per_round, times[base]))
            ms.setdefault(rename(name), []).extend(per_round)

    for r in range(a.repeats):
        times, w = zerolab.launch(bench, a.world, a.batch, a.rounds, a.steps, a.torch_zero, VARIANTS,
                                  backend=a.backend, timeout=1800, echo=False)[0]
        add(times, "torch DDP")
        wire.update(w)
        if a.ds_python:
            add(deepspeed_run(a.ds_python, a.world, a.rounds, a.steps, a.batch), "torch DDP",
                lambda n: n if n != "torch DDP" else "torch DDP (DeepSpeed's processes)")
        print(f"repeat {r + 1}/{a.repeats} done", file=sys.stderr)
    print(f"{a.world} ranks, every candidate over {zerolab.crew.resolve_backend(a.backend, a.world)}"
          f"{' (DeepSpeed: its own processes, over gloo)' if a.ds_python else ''}, ResMLP {psi:,} params "
          f"(fp32, Adam, clip 1.0), batch {a.batch} per rank; {a.repeats} x {a.rounds} rounds of {a.steps} steps "
          "per candidate, in turns; medians")
    print(f"{'':36}{'step ms':>9}{'x DDP':>8}{'x DeepSpeed':>13}{'x floor':>9}{'wire (Psi)':>12}")
    for name in ratios:
        x = statistics.median(ratios[name])
        stage = name.split("stage ")[-1][:1] if "zerolab stage" in name else None
        ds = ratios.get(f"DeepSpeed stage {stage}")
        vs = f"{x / statistics.median(ds):.2f}" if ds and stage in "123" else ""
        fl = ratios.get(FLOOR[{"0": 0, "1": 1, "2": 1, "3": 3}[stage]]) if stage else None
        vf = f"{x / statistics.median(fl):.2f}" if fl and "module_groups" not in name else ""
        w = f"{wire[name] / (psi * 4):.2f}" if name in wire else ""
        print(f"{name:36}{statistics.median(ms[name]) * 1e3:>9.2f}{x:>8.2f}{vs:>13}{vf:>9}{w:>12}")


if __name__ == "__main__":
    main()
