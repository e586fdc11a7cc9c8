"""What ZeRO++'s quantized collectives move and cost at stage 3: qwZ (zero_quantized_weights) and
qgZ (zero_quantized_gradients), each against the exact run, on a small GPT in bf16.

Per rank and step: the wire bytes of the parameter fetches (all-gathers, the persistent
parameters' refresh apart) and of the gradient reduction, split by link (intra-/inter-node);
peak gathered parameters; the median step time of each variant relative to the exact one (the
engines take turns in the same processes, ``step_models.round_robin``); and the largest loss gap
to the exact run over the training steps.

    python benchmarks/zeropp_quant.py [--rounds 10] [--steps 3]

Crews: 2 ranks, 3 ranks (one node each) and 4 ranks as 2 nodes of 2 (qgZ only acts with more
than one node, as in DeepSpeed). DeepSpeed's quantizer kernels are CUDA only; zerolab runs their
arithmetic in torch on the CPU, so the step times here say what the quantization costs on this
machine's CPU, not on a GPU.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

import zerolab
from zerolab.models import GPT, lm_loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_models import against_exact  # noqa: E402

VARIANTS = {"exact": {}, "qwZ": {"zero_quantized_weights": True}, "qgZ": {"zero_quantized_gradients": True},
            "qwZ+qgZ": {"zero_quantized_weights": True, "zero_quantized_gradients": True}}


def _config(world: int, zero: dict) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 200,
                                  "reduce_bucket_size": 20000, **zero}}


def bench(rounds: int, per_round: int, train_steps: int) -> dict:
    world, rank = zerolab.world_size(), zerolab.rank_info().rank
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(0, 48, (2 * world, 25), generator=g) for _ in range(train_steps)]
    engines, steps, out = {}, {}, {}
    for name, zero in VARIANTS.items():
        eng = zerolab.initialize(GPT(vocab=48, d=48, heads=2, layers=2, seq_len=24), _config(world, zero))
        losses = []
        for t in data:                                   # training: the loss curve
            x, y = t[2 * rank:2 * rank + 2, :-1], t[2 * rank:2 * rank + 2, 1:]
            loss = lm_loss(eng(x), y)
            eng.backward(loss)
            eng.step()
            losses.append(float(loss))
        mark = eng.ledger.mark()
        x, y = data[0][2 * rank:2 * rank + 2, :-1], data[0][2 * rank:2 * rank + 2, 1:]
        eng.backward(lm_loss(eng(x), y))
        eng.step()
        one = eng.ledger.since(mark)
        fetch = [r for r in one.records if r.op == "all_gather" and "persistent" not in r.tag]
        grads = [r for r in one.records if r.tag.startswith("grads")]
        link = lambda recs, k: sum(r.wire_bytes for r in recs if r.link == k)  # noqa: E731
        out[name] = {"fetch": {k: link(fetch, k) for k in ("intra", "inter")},
                     "grads": {k: link(grads, k) for k in ("intra", "inter")},
                     "calls": {op: int(t["calls"]) for op, t in one.totals().items()},
                     "peak_gathered": eng.stage.params.peak_gathered_numel, "losses": losses}

        def step(e=eng, x=x, y=y):
            e.backward(lm_loss(e(x), y))
            e.step()
        engines[name], steps[name] = eng, step
    against_exact(out, steps, rounds, per_round)
    for e in engines.values():
        e.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--train", type=int, default=24)
    args = ap.parse_args()
    for world, nodes in ((2, 1), (3, 1), (4, 2)):
        r = zerolab.launch(bench, world, args.rounds, args.steps, args.train, backend="gloo", nodes=nodes,
                           echo=False, timeout=900)[0]
        print(f"stage 3, GPT(vocab 48, d 48, 2 layers) bf16, {world} ranks as {nodes} node(s) of {world // nodes}, "
              f"gloo; bytes per rank per step (intra/inter node):")
        for name, v in r.items():
            f, gr = v["fetch"], v["grads"]
            print(f"  {name:<8} param all-gathers {f['intra']:>9,.0f} / {f['inter']:>9,.0f} B   "
                  f"gradients {gr['intra']:>9,.0f} / {gr['inter']:>9,.0f} B   step {v['median_s'] * 1e3:6.1f} ms "
                  f"(x{v['ratio']:.2f})   max loss gap over {args.train} steps {v['loss_gap']:.4f}   "
                  f"calls {v['calls']}")


if __name__ == "__main__":
    main()
