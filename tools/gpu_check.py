#!/usr/bin/env python3
"""zerolab on a GPU: one script to run the day a GPU is there (a few minutes on one GPU).

    python tools/gpu_check.py                      # on a machine with a CUDA GPU (and a CUDA torch)
    python tools/gpu_check.py --device cpu --dry-run --out /tmp/x.json   # the whole code path on the CPU, tiny

What it checks, and writes to ``benchmarks/results/gpu_check.json`` (and a readable ``.txt`` beside it):

1. **World size 1 on CUDA** (a crew of one rank, NCCL), ZeRO stages 0-3, each in fp32 and bf16,
   with the optimizer states offloaded to the CPU (``pin_memory: true``; fp32 and bf16), at stage 3
   with the parameters offloaded too, and to NVMe files (a temporary folder). For each: the ledger's
   bytes (``engine.memory()``: model states, buffers; ``memory("nvme")``) beside
   ``torch.cuda.memory_allocated`` (what the CUDA allocator holds above what was there before the
   engine), its peak, and what is left once the engine is closed; whether the offloaded host tensors
   (or the NVMe swap buffers) are really pinned and no swap file outlives ``close()``; the step time
   beside torch's own single-GPU training of the same model (fp32 AdamW, and bf16 autocast); the fp32
   runs' losses beside torch's fp32 losses (TF32 off: they should agree to float32 rounding), an
   offloaded bf16 run's beside the same run on the device. Then a Hugging Face GPT-2 built from a
   config (if transformers is installed) at stages 0-3, and accumulating two micro-batches into
   offloaded gradient shards, its losses beside torch's.
2. **Two or more GPUs**: a crew of one rank per GPU (up to 8) through ``zerolab.launch`` on NCCL, stages
   0-3 in fp32 against torch DDP in the same processes, taking turns round by round (median ratio), and
   their losses against DDP's.

Without a CUDA GPU it refuses with one line and exit code 2, and writes nothing. ``--device cpu --dry-run``
runs every step of the script on the CPU (gloo, a tiny model, two steps, the multi-GPU part on two CPU
ranks) so that the script is known to run before a GPU is lent; a dry run never writes the GPU results
file unless ``--out`` names it.

The script asserts nothing about speed or memory: it measures and records, and flags what looks wrong
(a fp32 loss gap above 1e-4, CUDA bytes below the ledger's, host tensors not pinned). It exits 1 if any
variant raised (its traceback is in the results), 0 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import tempfile
import json
import os
import pathlib
import platform
import shutil
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "benchmarks", "results", "gpu_check.json")
NOT_RUN = {"status": "not run yet",
           "note": "no GPU has been available to this project: zerolab's GPU path (CUDA, NCCL, pinned offload) "
                   "is untested. Run `python tools/gpu_check.py` on a machine with a CUDA GPU; it replaces "
                   "this file with its results."}

SIZES = {  # width, layers, batch, warm-up steps, timed steps
    "gpu": dict(width=2048, layers=8, batch=64, warmup=3, steps=20),
    "dry": dict(width=64, layers=2, batch=8, warmup=1, steps=2),
}
FP32_TOL = 1e-4         # relative loss gap to torch fp32 flagged above this
BF16_TOL = 1e-3         # relative loss gap of an offloaded bf16 run to the same run on the device


def make_model(width: int, layers: int):
    """An MLP of ``layers`` blocks (LayerNorm, Linear, GELU) and a Linear head: 33.6M parameters at 2048 x 8."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods, nn.Linear(width, width))


def torch_step(model, opt, loss_fn, x, y, amp: bool = False):
    """One step of plain torch training (AdamW, clipping 1.0; ``amp``: bf16 autocast), the
    baseline every zerolab run here is set beside; returns the loss."""
    import torch
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
        loss = loss_fn(model(x).float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


def zero_cfg(stage: int, batch: int, world: int, *, bf16=False, offload_opt=False, offload_param=False,
             nvme: str | None = None) -> dict:
    """``nvme``: a folder: what is offloaded goes to files there (ZeRO-Infinity) instead of host memory."""
    zero = {"stage": stage}
    where = {"device": "nvme", "nvme_path": nvme} if nvme else {"device": "cpu"}
    if offload_opt:
        zero["offload_optimizer"] = {**where, "pin_memory": True}
    if offload_param:
        zero["offload_param"] = {**where, "pin_memory": True, **({"max_in_cpu": 0} if nvme else {})}
    cfg = {"train_micro_batch_size_per_gpu": batch, "train_batch_size": batch * world, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
           "zero_optimization": zero}
    if bf16:
        cfg["bf16"] = {"enabled": True}
    return cfg


def variants():
    """(name, stage, options) of the world-size-1 part."""
    out = []
    for stage in range(4):
        out.append((f"stage {stage} fp32", stage, {}))
        out.append((f"stage {stage} bf16", stage, {"bf16": True}))
        if stage > 0:       # DeepSpeed offloads the optimizer only with ZeRO (stages 1-3)
            out.append((f"stage {stage} fp32 + offload_optimizer cpu (pinned)", stage, {"offload_opt": True}))
            out.append((f"stage {stage} bf16 + offload_optimizer cpu (pinned)", stage,
                        {"bf16": True, "offload_opt": True}))
    out.append(("stage 3 bf16 + offload_optimizer + offload_param cpu (pinned)", 3,
                {"bf16": True, "offload_opt": True, "offload_param": True}))
    out.append(("stage 3 bf16 + offload_optimizer nvme", 3, {"bf16": True, "offload_opt": True, "nvme": True}))
    out.append(("stage 3 bf16 + offload_optimizer + offload_param nvme", 3,
                {"bf16": True, "offload_opt": True, "offload_param": True, "nvme": True}))
    return out


def _sync(dev):
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(step, dev, warmup: int, steps: int) -> tuple[list, list]:
    """Run ``step`` (returns the loss tensor) warmup + steps times; the losses of all and the times of the last."""
    losses, times = [], []
    for i in range(warmup + steps):
        _sync(dev)
        t0 = time.perf_counter()
        loss = step()
        _sync(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return losses, times


def _batch(dev, width, batch, rank=0):
    import torch
    g = torch.Generator().manual_seed(100 + rank)
    return (torch.randn(batch, width, generator=g).to(dev), torch.randn(batch, width, generator=g).to(dev))


def _cuda_now(dev) -> int:
    import torch
    return torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0


def _pinned(engine) -> dict:
    """Of the offloaded host tensors the engine holds (optimizer masters, parameter shards): how many
    are pinned. Under NVMe they are in their files between steps: then a buffer of the kind the
    store reads them into is checked instead."""
    import torch
    found = []
    home = engine.stage.home
    found += [t for t in getattr(home, "tensors", []) if isinstance(t, torch.Tensor) and t.device.type == "cpu"
              and t.numel()]
    shards = getattr(engine.stage.params, "shards", None)
    found += [t for t in getattr(shards, "shards", []) or []
              if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel()]
    if getattr(home.store, "files", None) is not None:
        found.append(home.store.buffer(1, torch.float32))
    return {"host_tensors": len(found), "pinned": sum(1 for t in found if t.is_pinned())}


def one_gpu(sizes: dict) -> dict:
    """World size 1 (inside a one-rank crew): torch's own training, then every zerolab variant."""
    import torch
    from torch import nn

    import zerolab
    dev = zerolab.rank_info().device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    w, L, b, warm, n = (sizes[k] for k in ("width", "layers", "batch", "warmup", "steps"))
    x, y = _batch(dev, w, b)
    loss_fn = nn.MSELoss()
    out = {"device": str(dev), "backend": zerolab.rank_info().backend,
           "params": sum(p.numel() for p in make_model(w, L).parameters()), "torch": {}, "zerolab": {}}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        out["gpu"] = {"name": p.name, "memory_bytes": p.total_memory, "capability": f"{p.major}.{p.minor}",
                      "bf16_supported": torch.cuda.is_bf16_supported()}

    for name, amp in (("torch fp32", False), ("torch bf16 autocast", True)):
        model = make_model(w, L).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

        def step(model=model, opt=opt, amp=amp):
            return torch_step(model, opt, loss_fn, x, y, amp)
        losses, times = _timed(step, dev, warm, n)
        out["torch"][name] = {"losses": losses, "median_step_s": statistics.median(times)}
        del model, opt, step
    ref = out["torch"]["torch fp32"]
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    for name, stage, opts in variants():
        r = out["zerolab"][name] = {"stage": stage, **opts}
        engine = step = nvme_dir = None
        try:
            _sync(dev)
            gc.collect()        # (the engine before this one is gone: closed, unreferenced, collected)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(dev)
            base = _cuda_now(dev)
            kw = dict(opts)
            if kw.pop("nvme", False):
                kw["nvme"] = nvme_dir = tempfile.mkdtemp(prefix="zerolab-gpu-check-nvme-")
            engine = zerolab.initialize(make_model(w, L), zero_cfg(stage, b, 1, **kw))

            def step(engine=engine):
                loss = loss_fn(engine(x.to(engine.dtype)).float(), y)
                engine.backward(loss)
                engine.step()
                return loss.detach()
            losses, times = _timed(step, dev, warm, n)
            _sync(dev)
            mem = engine.memory()
            r.update(losses=losses, median_step_s=statistics.median(times),
                     ratio_to_torch_fp32=statistics.median(times) / ref["median_step_s"],
                     ledger_device=mem, ledger_host=engine.memory("host"))
            if opts.get("nvme"):
                r["ledger_nvme"] = engine.memory("nvme")
            if dev.type == "cuda":
                alloc = _cuda_now(dev) - base
                peak = torch.cuda.max_memory_allocated(dev) - base
                counted = mem["model_states"] + mem["buffers"] + mem["model_buffers"]
                r["cuda"] = {"allocated_above_base": alloc, "peak_above_base": peak,
                             "ledger_counted": counted, "allocated_minus_ledger": alloc - counted}
                if alloc < mem["model_states"] - 4096:     # (a few scalars, the step count, live on the host)
                    r.setdefault("flags", []).append("CUDA holds fewer bytes than the ledger's model states")
            if opts.get("offload_opt") or opts.get("offload_param"):
                r["pinning"] = _pinned(engine)
                if dev.type == "cuda" and r["pinning"]["pinned"] < r["pinning"]["host_tensors"]:
                    r.setdefault("flags", []).append("offloaded host tensors not all pinned")
            if not opts.get("bf16"):
                gap = max(abs(a - c) / max(abs(c), 1e-12) for a, c in zip(losses, ref["losses"]))
                r["fp32_loss_gap_to_torch"] = gap
                if gap > FP32_TOL:
                    r.setdefault("flags", []).append(f"fp32 losses differ from torch's by {gap:.2e} (> {FP32_TOL:g})")
            same = f"stage {stage} bf16"      # offloaded bf16: the same arithmetic as on the device
            if opts.get("bf16") and name != same and "losses" in out["zerolab"].get(same, {}):
                gap = max(abs(a - c) / max(abs(c), 1e-12) for a, c in zip(losses, out["zerolab"][same]["losses"]))
                r["loss_gap_to_" + same.replace(" ", "_")] = gap
                if gap > BF16_TOL:
                    r.setdefault("flags", []).append(f"losses differ from {same} without offload by {gap:.2e}")
        except Exception:
            r["error"] = traceback.format_exc()[-3000:]
        finally:
            if engine is not None:
                try:
                    engine.close()
                except Exception:
                    r.setdefault("flags", []).append("close() raised: " + traceback.format_exc()[-500:])
            del engine, step
            gc.collect()
            if nvme_dir:
                left = [str(p) for p in pathlib.Path(nvme_dir).rglob("*")]
                if left:        # the engine removes its swap files when it closes
                    r.setdefault("flags", []).append(f"{len(left)} swap paths left after close: {left[:3]}")
                shutil.rmtree(nvme_dir, ignore_errors=True)
            if dev.type == "cuda" and "cuda" in r:   # what is left once the engine is closed and gone
                r["cuda"]["left_after_close"] = _cuda_now(dev) - base
    return out


def hf_gpt2(sizes: dict) -> dict:
    """A Hugging Face GPT-2 built from a config (nothing downloaded: Conv1D layers, a tied lm_head, a
    ModelOutput) at stages 0-3 in fp32 and stage 3 in bf16, its losses beside torch's own fp32 training."""
    import torch
    import torch.nn.functional as F
    try:
        import transformers
    except ImportError:
        return {"skipped": "transformers is not installed"}
    import zerolab
    dev = zerolab.rank_info().device
    big = sizes["width"] > 64
    cfg = transformers.GPT2Config(vocab_size=1024 if big else 31, n_positions=64 if big else 16,
                                  n_embd=256 if big else 16, n_layer=4 if big else 2, n_head=4 if big else 2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    steps = 10 if big else 2
    g = torch.Generator().manual_seed(3)
    data = torch.randint(0, cfg.vocab_size, (steps, 8, cfg.n_positions + 1), generator=g).to(dev)

    def make():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(cfg)

    def lm_loss(model, b):
        logits = model(b[:, :-1]).logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b[:, 1:].reshape(-1))
    model = make().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ref = []
    for b in data:
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model, b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ref.append(float(loss.detach()))
    del model, opt
    out = {"params": sum(p.numel() for p in make().parameters()), "torch fp32 losses": ref, "zerolab": {}}
    # (stage, bf16, offload_optimizer, micro-steps per step): the last two accumulate two half
    # batches into offloaded (pinned host) gradient shards, the first copied in, the second added
    for stage, bf16, off, gas in [(0, False, False, 1), (1, False, False, 1), (2, False, False, 1),
                                  (3, False, False, 1), (3, True, False, 1), (1, False, True, 2), (2, False, True, 2)]:
        name = f"stage {stage} {'bf16' if bf16 else 'fp32'}" + (f" + offload_optimizer, {gas} micro-steps" if off else "")
        r = out["zerolab"][name] = {}
        engine = None
        try:
            c = zero_cfg(stage, 8 // gas, 1, bf16=bf16, offload_opt=off)
            c["train_batch_size"] = 8
            c["optimizer"]["params"]["lr"] = 1e-3
            c["zero_optimization"]["stage3_param_persistence_threshold"] = 1000
            engine = zerolab.initialize(make(), c)
            losses = []
            for b in data:
                micro = []
                for part in b.chunk(gas):
                    loss = lm_loss(engine, part)
                    engine.backward(loss)
                    engine.step()
                    micro.append(float(loss.detach()))
                losses.append(sum(micro) / gas)
            r["losses"] = losses
            r["loss_gap_to_torch"] = max(abs(a - c) / abs(c) for a, c in zip(losses, ref))
            if not bf16 and r["loss_gap_to_torch"] > FP32_TOL:
                r.setdefault("flags", []).append(f"fp32 losses differ from torch's by {r['loss_gap_to_torch']:.2e}")
        except Exception:
            r["error"] = traceback.format_exc()[-3000:]
        finally:
            if engine is not None:
                engine.close()
    return out


def one_rank(sizes: dict) -> dict:
    """The world-size-1 part, then the GPT-2 part, in the same one-rank crew."""
    out = one_gpu(sizes)
    try:
        out["hf_gpt2"] = hf_gpt2(sizes)
    except Exception:
        out["hf_gpt2"] = {"error": traceback.format_exc()[-3000:]}
    return out


def many_gpus(sizes: dict, rounds: int) -> dict:
    """One rank per GPU: zerolab stages 0-3 (fp32) against torch DDP, taking turns round by round."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import zerolab
    info = zerolab.rank_info()
    dev = info.device
    torch.backends.cuda.matmul.allow_tf32 = False
    w, L, b, warm, n = (sizes[k] for k in ("width", "layers", "batch", "warmup", "steps"))
    x, y = _batch(dev, w, b, info.rank)
    loss_fn = nn.MSELoss()
    steps, losses, errors = {}, {}, {}
    ddp = DDP(make_model(w, L).to(dev), device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, weight_decay=0.01)

    steps["torch DDP"] = lambda: torch_step(ddp, opt, loss_fn, x, y)
    engines = []
    for stage in range(4):
        try:
            engine = zerolab.initialize(make_model(w, L), zero_cfg(stage, b, info.world_size))
            engines.append(engine)

            def z_step(engine=engine):
                loss = loss_fn(engine(x), y)
                engine.backward(loss)
                engine.step()
                return loss.detach()
            steps[f"zerolab stage {stage}"] = z_step
        except Exception:
            errors[f"zerolab stage {stage}"] = traceback.format_exc()[-3000:]
    # the same number of steps for each, from the same start: losses comparable step by step
    for name, step in steps.items():
        losses[name] = [float(step()) for _ in range(warm)]
    times: dict[str, list] = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = []
            for _ in range(n):
                _sync(dev)
                dist.barrier()
                t0 = time.perf_counter()
                losses[name].append(float(steps[name]()))
                _sync(dev)
                t.append(time.perf_counter() - t0)
            times[name].append(statistics.median(t))
    for e in engines:
        e.close()
    out = {"world_size": info.world_size, "backend": info.backend, "errors": errors, "results": {}}
    for name in names:
        ratios = [a / c for a, c in zip(times[name], times["torch DDP"])]
        gap = max(abs(a - c) / max(abs(c), 1e-12) for a, c in zip(losses[name], losses["torch DDP"]))
        out["results"][name] = {"median_step_s": statistics.median(times[name]), "ratio_to_ddp": statistics.median(ratios),
                                "ratio_spread": [min(ratios), max(ratios)], "loss_gap_to_ddp": gap,
                                "final_loss": losses[name][-1]}
    return out


def readable(res: dict) -> str:
    lines = [f"zerolab GPU check, {res['when']} ({'DRY RUN on the CPU: not a GPU result' if res['dry_run'] else 'GPU'})",
             f"torch {res['torch']}, CUDA {res['cuda']}, {res['gpus']} GPU(s): {', '.join(res['gpu_names']) or '-'}",
             f"elapsed {res['elapsed_s']:.0f} s", ""]
    one = res.get("one_gpu") or {}
    if "error" in one:
        lines += ["world size 1: FAILED", one["error"], ""]
    elif one:
        lines.append(f"world size 1 on {one['device']} ({one['backend']}), {one['params']:,} parameters")
        for name, t in one["torch"].items():
            lines.append(f"  {name:<70} {t['median_step_s'] * 1e3:9.2f} ms/step")
        for name, r in one["zerolab"].items():
            if "error" in r:
                lines.append(f"  zerolab {name:<62} ERROR: {r['error'].strip().splitlines()[-1]}")
                continue
            cells = [f"{r['median_step_s'] * 1e3:9.2f} ms/step", f"{r['ratio_to_torch_fp32']:.2f}x torch fp32",
                     f"ledger model states {r['ledger_device']['model_states']:,} B"]
            if "cuda" in r:
                cells.append(f"CUDA allocated {r['cuda']['allocated_above_base']:,} B "
                             f"(peak {r['cuda']['peak_above_base']:,}; after close {r['cuda'].get('left_after_close', 0):,})")
            if "ledger_nvme" in r:
                cells.append(f"on NVMe {r['ledger_nvme']['model_states']:,} B")
            if "pinning" in r:
                cells.append(f"pinned {r['pinning']['pinned']}/{r['pinning']['host_tensors']} host tensors")
            if "fp32_loss_gap_to_torch" in r:
                cells.append(f"fp32 loss gap {r['fp32_loss_gap_to_torch']:.1e}")
            for k, v in r.items():
                if k.startswith("loss_gap_to_stage"):
                    cells.append(f"gap to {k[12:].replace('_', ' ')} {v:.1e}")
            lines.append(f"  zerolab {name:<62} " + ", ".join(cells))
            for f in r.get("flags", []):
                lines.append(f"      FLAG: {f}")
        hf = one.get("hf_gpt2") or {}
        if "error" in hf or "skipped" in hf:
            lines.append(f"GPT-2 (transformers): {'FAILED' if 'error' in hf else 'skipped'}: "
                         f"{(hf.get('error') or hf.get('skipped')).strip().splitlines()[-1]}")
        elif hf:
            lines.append(f"GPT-2 (transformers, from a config), {hf['params']:,} parameters, "
                         f"{len(hf['torch fp32 losses'])} steps, losses beside torch fp32:")
            for name, r in hf["zerolab"].items():
                if "error" in r:
                    lines.append(f"  zerolab {name:<54} ERROR: {r['error'].strip().splitlines()[-1]}")
                else:
                    lines.append(f"  zerolab {name:<54} final loss {r['losses'][-1]:.4f} "
                                 f"(torch {hf['torch fp32 losses'][-1]:.4f}), largest gap {r['loss_gap_to_torch']:.1e}")
                    for f in r.get("flags", []):
                        lines.append(f"      FLAG: {f}")
        lines.append("")
    many = res.get("many_gpus")
    if many is None:
        lines.append("2+ GPUs: not run (fewer than 2 GPUs)")
    elif "error" in many:
        lines += ["2+ GPUs: FAILED", many["error"]]
    else:
        lines.append(f"{many['world_size']} ranks ({many['backend']}): zerolab against torch DDP, taking turns")
        for name, r in many["results"].items():
            lo, hi = r["ratio_spread"]
            lines.append(f"  {name:<20} {r['median_step_s'] * 1e3:9.2f} ms/step  {r['ratio_to_ddp']:.2f}x DDP "
                         f"(rounds {lo:.2f}-{hi:.2f})  loss gap to DDP {r['loss_gap_to_ddp']:.1e}")
        for name, e in many["errors"].items():
            lines.append(f"  {name}: ERROR {e.strip().splitlines()[-1]}")
    return "\n".join(lines) + "\n"


def refuse(msg: str) -> int:
    print(f"gpu_check: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: only with --dry-run (the code path on the CPU, not a measurement)")
    ap.add_argument("--dry-run", action="store_true", help="a tiny model and two steps (with --device cpu: gloo)")
    ap.add_argument("--out", default=None, help=f"results file (default {os.path.relpath(DEFAULT_OUT, ROOT)}; "
                                                "a dry run writes only where --out says)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of the 2+ GPU comparison (default 10, dry 2)")
    ap.add_argument("--max-gpus", type=int, default=8)
    a = ap.parse_args(argv)
    if a.device == "cpu" and not a.dry_run:
        return refuse("--device cpu is only a dry run of the script (add --dry-run); it measures no GPU")
    try:
        import torch
    except ImportError:
        return refuse("torch is not installed")
    if a.device == "cuda" and not torch.cuda.is_available():
        why = ("this torch is a CPU-only build" if torch.version.cuda is None
               else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
        return refuse(f"no CUDA GPU here ({why}): nothing checked, {os.path.relpath(DEFAULT_OUT, ROOT)} unchanged")
    sys.path.insert(0, ROOT)
    import zerolab
    sizes = SIZES["dry" if a.dry_run else "gpu"]
    rounds = a.rounds or (2 if a.dry_run else 10)
    backend = "nccl" if a.device == "cuda" else "gloo"
    gpus = torch.cuda.device_count() if a.device == "cuda" else 0
    res = {"status": "dry run (CPU)" if a.device == "cpu" else "run", "dry_run": a.dry_run,
           "when": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus,
           "gpu_names": [torch.cuda.get_device_name(i) for i in range(gpus)], "sizes": sizes}
    start = time.perf_counter()
    try:
        res["one_gpu"] = zerolab.launch(one_rank, 1, sizes, backend=backend, timeout=900, echo=True)[0]
    except Exception:
        res["one_gpu"] = {"error": traceback.format_exc()[-3000:]}
    world = min(gpus, a.max_gpus) if a.device == "cuda" else 2
    if world >= 2:
        try:
            res["many_gpus"] = zerolab.launch(many_gpus, world, sizes, rounds, backend=backend, timeout=900,
                                              echo=True)[0]
        except Exception:
            res["many_gpus"] = {"error": traceback.format_exc()[-3000:]}
    res["elapsed_s"] = time.perf_counter() - start
    hf = res["one_gpu"].get("hf_gpt2") or {}
    failed = ("error" in res["one_gpu"] or any("error" in r for r in res["one_gpu"].get("zerolab", {}).values())
              or "error" in hf or any("error" in r for r in hf.get("zerolab", {}).values())
              or "error" in (res.get("many_gpus") or {}) or bool((res.get("many_gpus") or {}).get("errors")))
    res["status"] += ": some variants failed" if failed else ": all variants ran"
    text = readable(res)
    print(text, end="")
    out = a.out or (None if a.dry_run else DEFAULT_OUT)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.splitext(out)[0] + ".txt", "w") as f:
            f.write(text)
        print(f"written: {out} (and {os.path.splitext(out)[0]}.txt)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
