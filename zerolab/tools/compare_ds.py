"""DeepSpeed's side of ``zerolab compare``: run a DeepSpeed config on real DeepSpeed (CPU, gloo)
and record every torch.distributed call it makes, family by family.

This file imports nothing of zerolab: it runs in a DeepSpeed venv, started by ``zerolab compare``
(``zerolab/tools/compare.py``) under torchrun, and ``benchmarks/ds_reference/ds_side_by_side.py`` loads
its recorder by path. The models and the data are defined here so that both sides build the same
ones from the same seeds.

    DS_ACCELERATOR=cpu python -m torch.distributed.run --standalone --nproc_per_node 2 \
        zerolab/tools/compare_ds.py --config ds.json --model mlp --steps 5 --out ds.json

How calls are counted: deepspeed.comm calls torch.distributed.<fn> by attribute at call time,
except all_gather_into_tensor / reduce_scatter_tensor, captured when it is built, and
all_gather_base / all_gather_coalesced, called through distributed_c10d; so the wrappers go in
before deepspeed is imported, in both namespaces (a call made inside another counted one is not
counted again), and a second count is kept on ProcessGroup's methods.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

STATE = {"on": False, "depth": 0, "phase": "", "calls": [], "pg": []}

FAMILY = {   # torch.distributed function -> (family, argument holding the *full* tensor)
    "all_reduce": ("all_reduce", "tensor"), "all_reduce_coalesced": ("all_reduce", "tensors"),
    "reduce": ("reduce", "tensor"), "broadcast": ("broadcast", "tensor"),
    "all_gather": ("all_gather", "tensor_list"), "all_gather_into_tensor": ("all_gather", "output_tensor"),
    "_all_gather_base": ("all_gather", "output_tensor"), "all_gather_single": ("all_gather", "output_tensor"),
    "all_gather_coalesced": ("all_gather", "output_tensor_lists"),
    "reduce_scatter": ("reduce_scatter", "input_list"), "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "_reduce_scatter_base": ("reduce_scatter", "input"), "reduce_scatter_single": ("reduce_scatter", "input"),
    "all_to_all": ("all_to_all", "input_tensor_list"), "all_to_all_single": ("all_to_all", "input"),
    "send": ("send/recv", "tensor"), "recv": ("send/recv", "tensor"), "isend": ("send/recv", "tensor"),
    "irecv": ("send/recv", "tensor"), "batch_isend_irecv": ("send/recv", "p2p_op_list"),
    "barrier": ("barrier", None), "monitored_barrier": ("barrier", None),
    "gather": ("gather/scatter", "tensor"), "scatter": ("gather/scatter", "tensor"),
    "broadcast_object_list": ("object", None), "all_gather_object": ("object", None),
    "gather_object": ("object", None), "scatter_object_list": ("object", None),
}
PG_FAMILY = {  # ProcessGroup method -> (family, index of the positional argument with the full tensor)
    "allreduce": ("all_reduce", 0), "allreduce_coalesced": ("all_reduce", 0), "reduce": ("reduce", 0),
    "broadcast": ("broadcast", 0), "allgather": ("all_gather", 0), "_allgather_base": ("all_gather", 0),
    "all_gather_single": ("all_gather", 0), "all_gather_single_coalesced": ("all_gather", 0),
    "allgather_coalesced": ("all_gather", 0), "allgather_into_tensor_coalesced": ("all_gather", 0),
    "reduce_scatter": ("reduce_scatter", 1), "_reduce_scatter_base": ("reduce_scatter", 1),
    "reduce_scatter_single": ("reduce_scatter", 1), "reduce_scatter_single_coalesced": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 1), "alltoall": ("all_to_all", 1),
    "alltoall_base": ("all_to_all", 1), "all_to_all_single": ("all_to_all", 1), "send": ("send/recv", 0),
    "recv": ("send/recv", 0), "recv_anysource": ("send/recv", 0), "barrier": ("barrier", None),
    "monitored_barrier": ("barrier", None), "gather": ("gather/scatter", 1), "scatter": ("gather/scatter", 0),
}


def _tensors(x):
    """The tensors in x (a tensor, a list of them, nested lists, P2POps)."""
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    if hasattr(x, "tensor"):                     # P2POp
        return _tensors(x.tensor)
    return []


def _describe(x) -> tuple[int, str, int]:
    ts = _tensors(x)
    numel = sum(t.numel() for t in ts)
    dtype = str(ts[0].dtype).replace("torch.", "") if ts else ""
    return numel, dtype, sum(t.numel() * t.element_size() for t in ts)


def install() -> None:
    """Wrap torch.distributed's collectives (in torch.distributed and in distributed_c10d, one
    wrapper for both names, so that a reference DeepSpeed captured at import or a call through
    the module path is counted the same) and, one level down, ProcessGroup's methods (every
    Python-level collective ends there). A call made inside another wrapped call (all_gather_object
    using all_gather, _all_gather_base using all_gather_into_tensor) is counted once, the outer."""
    import inspect
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    def wrap(name, family, arg):
        orig = getattr(c10d, name, None) or getattr(dist, name, None)
        if orig is None or getattr(orig, "_sbs", False):
            return
        try:
            sig = inspect.signature(orig)
        except (TypeError, ValueError):
            sig = None

        @functools.wraps(orig)
        def counted(*args, **kwargs):
            outer = STATE["depth"] == 0
            if STATE["on"] and outer:
                bound = {}
                if sig is not None:
                    try:
                        b = sig.bind_partial(*args, **kwargs)
                        bound = dict(b.arguments)
                    except TypeError:
                        bound = {}
                target = bound.get(arg) if arg else None
                numel, dtype, nbytes = _describe(target) if target is not None else (0, "", 0)
                op = bound.get("op")
                STATE["calls"].append({"family": family, "api": name, "numel": numel, "dtype": dtype,
                                       "bytes": nbytes, "phase": STATE["phase"],
                                       "op": str(op).split(".")[-1] if op is not None else None,
                                       "async": bool(bound.get("async_op", False))})
            STATE["depth"] += 1
            try:
                return orig(*args, **kwargs)
            finally:
                STATE["depth"] -= 1
        counted._sbs = True
        for mod in (c10d, dist):
            if getattr(mod, name, None) is orig:
                setattr(mod, name, counted)

    for name, (family, arg) in FAMILY.items():
        wrap(name, family, arg)

    pg_cls = dist.ProcessGroup
    for meth, (family, idx) in PG_FAMILY.items():
        orig = getattr(pg_cls, meth, None)
        if orig is None:
            continue

        def pg_counted(self, *args, _orig=orig, _meth=meth, _family=family, _idx=idx, **kwargs):
            if STATE["on"]:
                target = args[_idx] if _idx is not None and len(args) > _idx else None
                numel, dtype, nbytes = _describe(target) if target is not None else (0, "", 0)
                STATE["pg"].append({"family": _family, "api": _meth, "numel": numel, "dtype": dtype,
                                    "bytes": nbytes, "phase": STATE["phase"]})
            return _orig(self, *args, **kwargs)
        setattr(pg_cls, meth, pg_counted)


def dump_json(obj, path: str) -> None:
    """JSON with every innermost object (a call, a family's totals) on one line."""
    import re
    text = json.dumps(obj, indent=1)
    text = re.sub(r"\{\n\s+([^{}\[\]]*?)\n\s+\}", lambda m: "{" + re.sub(r"\n\s+", " ", m.group(1)) + "}", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def summarize(calls: list[dict], small: int = 64) -> dict:
    """family -> {calls, numel, bytes} for the calls over ``small`` bytes, and the same for the
    small ones under "small"."""
    out: dict = {"families": {}, "small": {}}
    for c in calls:
        where = out["small"] if c["bytes"] <= small else out["families"]
        s = where.setdefault(c["family"], {"calls": 0, "numel": 0, "bytes": 0})
        s["calls"] += 1
        s["numel"] += c["numel"]
        s["bytes"] += c["bytes"]
    return out


# --------------------------------------------------------------------------- models and data
def build(model: str, rank: int):
    """(model, inputs, loss function): ``mlp`` is a residual MLP of 4 Linear(284) and 3 LayerNorm
    (325,464 parameters), ``tied`` a small language model with a tied embedding,
    ``nn.MultiheadAttention`` and a weight its root reads with ``F.linear``; ``gpt2`` and ``llama``
    Hugging Face transformers built from small configs (both sides need ``transformers``); a fixed
    batch per rank."""
    import torch
    from torch import nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1000 + rank)
    if model == "mlp":
        class ResMLP(nn.Module):
            def __init__(self, width=284):
                super().__init__()
                self.lins = nn.ModuleList(nn.Linear(width, width) for _ in range(4))
                self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(3))

            def forward(self, x):
                x = self.lins[0](x)
                for lin, norm in zip(self.lins[1:], self.norms):
                    x = x + lin(norm(torch.relu(x)))
                return x
        net = ResMLP()
        x, y = torch.randn(8, 284, generator=g), torch.randn(8, 284, generator=g)
        return net, x, lambda out: ((out - y) ** 2).mean()
    if model == "tied":
        V, D, S = 96, 64, 8

        class TiedLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(V, D)
                self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
                self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
                self.mix = nn.Linear(D, D, bias=False)
                self.head = nn.Linear(D, V, bias=False)
                self.head.weight = self.embed.weight

            def forward(self, t):
                h = self.embed(t)
                a, _ = self.attn(h, h, h, need_weights=False)
                h = h + a
                h = h + self.mlp(h)
                return self.head(F.linear(h, self.mix.weight))
        net = TiedLM()
        tokens = torch.randint(0, V, (4, S + 1), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]
        return net, x, lambda out: F.cross_entropy(out.reshape(-1, V), y.reshape(-1))
    if model in ("gpt2", "llama"):
        import transformers                   # built from a small config: nothing is downloaded
        V, S = 31, 8
        if model == "gpt2":
            net = transformers.GPT2LMHeadModel(transformers.GPT2Config(
                vocab_size=V, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
        else:
            net = transformers.LlamaForCausalLM(transformers.LlamaConfig(
                vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=16, tie_word_embeddings=True))
        tokens = torch.randint(0, V, (4, S + 1), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]
        return net, x, lambda out: F.cross_entropy(out.logits.reshape(-1, V), y.reshape(-1))
    raise ValueError(f"unknown model {model!r} ({', '.join(MODELS)})")


MODELS = ("mlp", "tied", "gpt2", "llama")


def in_model_dtype(x, module):
    """Float inputs in the dtype of the engine's model, as a DeepSpeed script casts them under
    fp16 or bf16 (the engine does not, unless fp16's auto_cast); token ids as they are."""
    return x.to(next(module.parameters()).dtype) if x.is_floating_point() else x


def runnable_on_cpu(cfg: dict) -> dict:
    """The config as DeepSpeed can run it here, with the same update: FusedAdam, which an Adam or
    AdamW config asks for, has no op built on this CPU, so torch's AdamW/Adam stands in, with
    FusedAdam's weight decay when the config gives none (torch.optim.AdamW's own default is 0.01;
    a config that asks for torch_adam keeps it, as DeepSpeed does)."""
    cfg = json.loads(json.dumps(cfg))
    opt = cfg.setdefault("optimizer", {"type": "Adam", "params": {"lr": 1e-3}})
    if str(opt.get("type", "")).lower() in ("adam", "adamw"):
        params = opt.setdefault("params", {})
        if not params.get("torch_adam"):
            params["torch_adam"] = True
            params.setdefault("weight_decay", 0.0)
    cfg.setdefault("zero_allow_untested_optimizer", True)
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--model", default="mlp", choices=MODELS)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    install()                                   # before deepspeed is imported
    import torch
    import deepspeed
    import torch.distributed as dist
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    with open(a.config) as f:
        cfg = runnable_on_cpu(json.load(f))
    model, x, loss_fn = build(a.model, rank)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    x = in_model_dtype(x, engine.module)
    steps = []
    for step in range(1, a.steps + 1):
        STATE["calls"], STATE["pg"] = [], []
        dist.barrier()
        STATE["on"] = True
        t0 = time.perf_counter()
        STATE["phase"] = "forward"
        loss = loss_fn(engine(x))
        STATE["phase"] = "backward"
        engine.backward(loss)
        STATE["phase"] = "step"
        engine.step()
        STATE["on"] = False
        steps.append({"step": step, "seconds": time.perf_counter() - t0, "loss": float(loss.detach()),
                      "summary": summarize(STATE["calls"]), "calls": list(STATE["calls"])})
    if rank == 0:
        dump_json({"deepspeed": deepspeed.__version__, "torch": torch.__version__, "world": dist.get_world_size(),
                   "config": cfg, "model": a.model, "steps": steps}, a.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    # run by path, this file's folder (zerolab/, which has a deepspeed.py of its own) is first on
    # sys.path: take it off, so that `import deepspeed` finds DeepSpeed
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    main()
