"""Two answers to "the network between nodes is slow", side by side on one virtual topology:
torch FSDP2's hybrid sharding (HSDP: shard inside a node, replicate across nodes) and ZeRO++'s
hpZ (``zero_hpz_partition_size``: a secondary parameter shard inside each node), with plain
ZeRO-3 / FSDP2 full sharding as the baseline.

4 ranks as 2 nodes of 2 (ranks 0-1 and 2-3), gloo, the same small GPT in bf16 (parameters
gathered and gradients reduced in bf16, as DeepSpeed does in bf16 without ``grad_accum_dtype``).
Per rank and steady step: the wire bytes of each collective kind, by phase (forward, backward
with the step) and link (inside a node, across nodes), and what each rank keeps between steps
(parameter shard, optimizer states) and at its peak (hpZ's secondary shard).

FSDP2's collectives are counted by wrapping ``torch.distributed``'s functions in the ranks
(all_gather_single, reduce_scatter_single, all_reduce); zerolab's come from its ledger. Wire
bytes are the ring's: (n-1)/n of the gathered size for an all-gather or a reduce-scatter on n
ranks, twice that for an all-reduce.

    python benchmarks/hsdp_vs_hpz.py            # prints the table (results/hsdp_vs_hpz.txt)
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import torch.distributed as dist

import zerolab
from zerolab.models import GPT, lm_loss

WORLD, NODES = 4, 2
PER_NODE = WORLD // NODES
MODEL = dict(vocab=48, d=48, heads=2, layers=2, seq_len=24)


def _batch(rank: int, step: int):
    g = torch.Generator().manual_seed(100 + step)
    t = torch.randint(0, MODEL["vocab"], (2 * WORLD, MODEL["seq_len"] + 1), generator=g)
    t = t[2 * rank:2 * rank + 2]
    return t[:, :-1], t[:, 1:]


def _link(ranks) -> str:
    return "inter" if len({r // PER_NODE for r in ranks}) > 1 else "intra"


def _wire(op: str, full_bytes: int, n: int) -> float:
    return (2 if op == "all_reduce" else 1) * (n - 1) / n * full_bytes


# ----------------------------------------------------------------------------- torch FSDP2
def fsdp2(hybrid: bool) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    rank = dist.get_rank()
    log: list[tuple[str, str, float]] = []
    phase = ["forward"]
    ops = {"all_gather_single": "all_gather", "reduce_scatter_single": "reduce_scatter", "all_reduce": "all_reduce"}
    for fname, op in ops.items():
        real = getattr(dist, fname)

        def counted(*a, _real=real, _op=op, **k):
            group = k.get("group")
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(WORLD))
            tensors = [x for x in list(a) + list(k.values()) if isinstance(x, torch.Tensor)]
            full = max(x.numel() * x.element_size() for x in tensors)
            log.append((phase[0], f"{_op} {_link(ranks)}", _wire(_op, full, len(ranks))))
            return _real(*a, **k)
        setattr(dist, fname, counted)

    shape, names = ((NODES, PER_NODE), ("replicate", "shard")) if hybrid else ((WORLD,), ("shard",))
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    torch.manual_seed(0)
    model = GPT(**MODEL)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    for step in range(3):
        if step == 2:
            log.clear()
        phase[0] = "forward"
        x, y = _batch(rank, step)
        loss = lm_loss(model(x), y)
        phase[0] = "backward"
        loss.backward()
        opt.step()
        opt.zero_grad()
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # noqa: E731
    params = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    states = sum(local(v).numel() * local(v).element_size()
                 for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    moved: dict[str, float] = defaultdict(float)
    for ph, kind, b in log:
        moved[f"{ph} {kind}"] += b
    return {"moved": dict(moved), "kept": {"parameters": params, "optimizer states": states},
            "psi": sum(p.numel() for p in model.parameters())}


# ----------------------------------------------------------------------------- zerolab stage 3
def zero3(hpz: int) -> dict:
    rank = dist.get_rank()
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
            "reduce_bucket_size": 20000}
    if hpz > 1:
        zero["zero_hpz_partition_size"] = hpz
    cfg = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
           "zero_optimization": zero}
    torch.manual_seed(0)
    eng = zerolab.initialize(GPT(**MODEL), cfg)
    moved: dict[str, float] = defaultdict(float)
    for step in range(3):
        x, y = _batch(rank, step)
        m0 = eng.ledger.mark()
        loss = lm_loss(eng(x), y)
        m1 = eng.ledger.mark()
        eng.backward(loss)
        eng.step()
        if step == 2:
            forward = eng.ledger.since(m0).records[:m1 - m0]
            for ph, records in (("forward", forward), ("backward", eng.ledger.since(m1).records)):
                for r in records:
                    moved[f"{ph} {r.op} {r.link}"] += r.wire_bytes
    m = eng.memory()
    out = {"moved": dict(moved), "kept": {"parameters": m["params"], "optimizer states": m["optimizer_states"]},
           "peak": m["peak_buffers"]}
    eng.close()
    return out


def _row(name: str, r: dict) -> str:
    m = r["moved"]
    get = lambda ph, ops, link: sum(v for k, v in m.items()  # noqa: E731
                                   if k.startswith(ph) and k.split()[1] in ops and k.endswith(link))
    cells = [get(ph, ops, link) for ph, ops in (("forward", ("all_gather",)), ("backward", ("all_gather",)),
                                                ("backward", ("reduce_scatter", "all_reduce")))
             for link in ("intra", "inter")]
    kept = r["kept"]
    return (f"{name:<24}" + "".join(f"{c:>9,.0f}" for c in cells)
            + f"{kept['parameters']:>10,}{kept['optimizer states']:>10,}"
            + (f"{r['peak']:>10,}" if "peak" in r else f"{'-':>10}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hpz", type=int, default=PER_NODE, help="zero_hpz_partition_size (default: ranks per node)")
    args = ap.parse_args()
    runs = {
        "FSDP2 full shard": lambda: zerolab.launch(fsdp2, WORLD, False, backend="gloo", echo=False)[0],
        "FSDP2 HSDP 2x2": lambda: zerolab.launch(fsdp2, WORLD, True, backend="gloo", echo=False)[0],
        "ZeRO-3": lambda: zerolab.launch(zero3, WORLD, 1, backend="gloo", nodes=NODES, echo=False)[0],
        f"ZeRO-3 + hpZ {args.hpz}": lambda: zerolab.launch(zero3, WORLD, args.hpz, backend="gloo", nodes=NODES,
                                                           echo=False)[0],
    }
    print(f"GPT{tuple(MODEL.values())} in bf16, {WORLD} ranks as {NODES} nodes of {PER_NODE}, gloo; "
          f"wire bytes per rank in one steady step, and bytes each rank keeps")
    print(f"{'':<24}{'fwd param gathers':>18}{'bwd param gathers':>18}{'grad reduction':>18}"
          f"{'kept':>20}{'peak':>10}")
    print(f"{'':<24}" + f"{'intra':>9}{'inter':>9}" * 3 + f"{'params':>10}{'optim':>10}{'buffers':>10}")
    for name, run in runs.items():
        print(_row(name, run()))


if __name__ == "__main__":
    main()
