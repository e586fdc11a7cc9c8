"""What hpZ (zero_hpz_partition_size, ZeRO++'s secondary partition) moves, keeps and costs at
stage 3, with and without qwZ and qgZ, on 4 ranks as 2 nodes of 2.

Part 1, a small GPT in bf16 (the model of benchmarks/zeropp_quant.py), stage3_max_reuse_distance 0
so that backward gathers every unit again (with the default reuse distance this tiny model stays
gathered from forward into backward and hpZ has nothing to save). Per rank and step (a step after
the first, so the forward gathers over all ranks, as in every step but the first): the wire bytes
of the parameter all-gathers in forward and in backward, and of the gradient reduction, each split
by link (intra-/inter-node); hpZ's secondary shards after backward (engine.memory()
["params_secondary"]) beside the formula (padded units / h x 2 B); the median step time of each
variant relative to the exact one (the engines take turns in the same processes); the largest loss
gap to the exact run over the training steps.

Part 2, DeepSpeed's call pattern: four Linear(64, 64) in fp32 (benchmarks/ds_reference/ds_hpz.py's
model, data and optimizer), hpZ 2, per micro-step: the ranks of every parameter all-gather, forward
and backward, and the losses, beside DeepSpeed 0.19.8's measured on the CPU
(benchmarks/results/ds_hpz.json, when present).

    python benchmarks/zeropp_hpz.py [--rounds 10] [--steps 3] [--train 24]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from torch import nn

import zerolab
from zerolab.models import GPT, lm_loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import against_exact  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
H = 2
VARIANTS = {"exact": {}, "hpZ": {"zero_hpz_partition_size": H},
            "qwZ": {"zero_quantized_weights": True},
            "qwZ+hpZ": {"zero_quantized_weights": True, "zero_hpz_partition_size": H},
            "hpZ+qgZ": {"zero_hpz_partition_size": H, "zero_quantized_gradients": True},
            "all 3": {"zero_quantized_weights": True, "zero_hpz_partition_size": H,
                      "zero_quantized_gradients": True}}


def _config(zero: dict) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 200,
                                  "reduce_bucket_size": 20000, "stage3_max_reuse_distance": 0, **zero}}


def _links(records) -> dict:
    return {k: sum(r.wire_bytes for r in records if r.link == k) for k in ("intra", "inter")}


def bench(rounds: int, per_round: int, train_steps: int) -> dict:
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(0, 48, (2 * world, 25), generator=g) for _ in range(train_steps)]
    steps, engines, out = {}, {}, {}
    for name, zero in VARIANTS.items():
        eng = zerolab.initialize(GPT(vocab=48, d=48, heads=2, layers=2, seq_len=24), _config(zero))
        losses = []
        for t in data:                                   # training: the loss curve
            x, y = t[2 * rank:2 * rank + 2, :-1], t[2 * rank:2 * rank + 2, 1:]
            loss = lm_loss(eng(x), y)
            eng.backward(loss)
            eng.step()
            losses.append(float(loss))
        x, y = data[0][2 * rank:2 * rank + 2, :-1], data[0][2 * rank:2 * rank + 2, 1:]
        m = eng.ledger.mark()
        loss = lm_loss(eng(x), y)
        fwd = eng.ledger.since(m)
        m = eng.ledger.mark()
        eng.backward(loss)
        bwd = eng.ledger.since(m)
        mem = eng.memory()
        m = eng.ledger.mark()
        eng.step()
        after = eng.ledger.since(m)
        params = lambda recs: [r for r in recs if r.op == "all_gather" and r.tag.startswith("params")  # noqa: E731
                               and "persistent" not in r.tag]
        units = [g.padded_numel for g, keep in zip(eng.stage.groups, eng.stage.params.persistent) if not keep]
        out[name] = {"fwd": _links(params(fwd.records)), "bwd": _links(params(bwd.records)),
                     "grads": _links([r for r in bwd.records + after.records if r.tag.startswith("grads")]),
                     "secondary": mem.get("params_secondary", 0), "params_bytes": mem["params"],
                     "secondary_formula": sum(units) // H * 2 if "zero_hpz_partition_size" in VARIANTS[name] else 0,
                     "units": sum(units), "losses": losses}

        def step(e=eng, x=x, y=y):
            e.backward(lm_loss(e(x), y))
            e.step()
        engines[name], steps[name] = eng, step
    against_exact(out, steps, rounds, per_round)
    for e in engines.values():
        e.close()
    return out


def pattern(gas: int, steps: int, hpz: int) -> dict:
    """ds_hpz.py's run in zerolab: per micro-step, the ranks of each parameter all-gather (global
    ranks, as DeepSpeed's groups list them) and the losses."""
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])
    cfg = {"train_batch_size": 2 * world * gas, "gradient_accumulation_steps": gas,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                 "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                                 "zero_hpz_partition_size": hpz}}
    eng = zerolab.initialize(model, cfg)
    g = torch.Generator().manual_seed(1)
    losses, micro = [], []

    def ranks(recs):
        out = []
        for r in recs:
            if r.op == "all_gather" and r.tag.startswith("params"):
                first = rank - rank % r.world_size              # groups of consecutive ranks
                out.append([r.numel, list(range(first, first + r.world_size))])
        return out
    for _ in range(steps):
        for _ in range(gas):
            x = torch.randn(2 * world, 64, generator=g)[2 * rank:2 * rank + 2]
            m = eng.ledger.mark()
            loss = eng(x).pow(2).mean()
            fwd = eng.ledger.since(m)
            m = eng.ledger.mark()
            eng.backward(loss)
            bwd = eng.ledger.since(m)
            eng.step()
            losses.append(float(loss))
            micro.append({"forward": ranks(fwd.records), "backward": ranks(bwd.records)})
    return {"micro": micro, "losses": losses}


def _groups(phase: list) -> str:
    """A micro-step phase's gathers in short: "4 x 4160 over (0, 1)"."""
    kinds = {}
    for n, r in phase:
        kinds.setdefault((n, tuple(r)), 0)
        kinds[(n, tuple(r))] += 1
    return ", ".join(f"{c} x {n} over {r}" for (n, r), c in kinds.items()) or "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--train", type=int, default=24)
    args = ap.parse_args()
    r = zerolab.launch(bench, 4, args.rounds, args.steps, args.train, backend="gloo", nodes=2, echo=False,
                       timeout=900)[0]
    print("stage 3, GPT(vocab 48, d 48, 2 layers) bf16, 4 ranks as 2 nodes of 2, gloo, stage3_max_reuse_distance 0;")
    print("wire bytes per rank per step (a step after the first), intra / inter node:")
    for name, v in r.items():
        f, b, gr = v["fwd"], v["bwd"], v["grads"]
        print(f"  {name:<8} params fwd {f['intra']:>7,.0f} / {f['inter']:>7,.0f}  bwd {b['intra']:>7,.0f} / "
              f"{b['inter']:>7,.0f}  grads {gr['intra']:>7,.0f} / {gr['inter']:>7,.0f} B")
    u = r["exact"]["units"]
    print(f"  formula (bf16, gathered units padded: {u:,} elements): forward 2 x 3/4 x {u:,} = {2 * 3 / 4 * u:,.0f} B "
          "across nodes;")
    print(f"  backward with hpZ 2 x 1/2 x {u:,} = {2 * u / 2:,.0f} B inside the node. The tied embedding is used twice")
    print("  each way: its second gather (3,456 B across; with hpZ 2,304 B inside the node, from its secondary)")
    print("  comes on top of the forward's and, as DeepSpeed releases after each module's backward, of the backward's")
    print("memory after backward (engine.memory(), bytes per rank), step time, loss gap to exact:")
    for name, v in r.items():
        print(f"  {name:<8} params {v['params_bytes']:>7,}  of which hpZ secondary {v['secondary']:>6,} "
              f"(formula {v['secondary_formula']:>6,})  step {v['median_s'] * 1e3:6.1f} ms (x{v['ratio']:.2f})  "
              f"max loss gap over {args.train} steps {v['loss_gap']:.4f}")
    print()
    print("DeepSpeed's pattern: 4 x Linear(64, 64) fp32, 4 ranks, hpZ 2 (groups (0, 1) and (2, 3): the nodes here),")
    print("rank 0's parameter all-gathers per micro-step (elements over ranks), zerolab beside DeepSpeed 0.19.8:")
    ds_file = os.path.join(HERE, "results", "ds_hpz.json")
    ds = json.load(open(ds_file)) if os.path.exists(ds_file) else {}
    for key, gas, steps, hpz in (("hpz2", 1, 3, 2), ("hpz2gas2", 2, 2, 2), ("off", 1, 3, 1)):
        z = zerolab.launch(pattern, 4, gas, steps, hpz, backend="gloo", nodes=2, echo=False, timeout=300)[0]
        d = ds.get(key)
        print(f"  hpZ {hpz}, gradient accumulation {gas}:")
        for i, zm in enumerate(z["micro"]):
            for ph in ("forward", "backward"):
                same = "" if d is None else ("  = DeepSpeed" if d["micro"][i][ph] == zm[ph]
                                             else f"  DeepSpeed: {_groups(d['micro'][i][ph])}")
                print(f"    step {i // gas + 1} micro {i % gas + 1} {ph:<8} {_groups(zm[ph])}{same}")
        if d is not None:
            gap = max(abs(a - b) for a, b in zip(z["losses"], d["losses"]))
            print(f"    losses {', '.join(f'{x:.6f}' for x in z['losses'])}; max |zerolab - DeepSpeed| {gap:.1e}")


if __name__ == "__main__":
    main()
