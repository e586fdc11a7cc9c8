"""Where stage 3's step goes on one GPU, beside torch's own step: torch.profiler over a few steps.

tools/gpu_check.py measured zerolab's stage 3 at 2.3-3.4x torch's own single-GPU step on its
37.8M-parameter MLP (world size 1, NCCL), against 1.0-1.8x at stages 0-2. This script says where
that time goes: for torch's step and for zerolab stages 0 and 3 (fp32), the wall time per step, the
CPU time of the ops that took most of it (self time), and the host-device synchronizations
(``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaMemcpy`` that waits, ``aten::item``,
``aten::_local_scalar_dense``) per step: each one makes the CPU wait for the GPU's queue to drain,
so the Python of the next module can no longer run ahead of the GPU.

    python benchmarks/gpu_stage3_profile.py [--steps 10] [--out FILE]      # on a CUDA machine
    python benchmarks/gpu_stage3_profile.py --device cpu --small           # the code path on the CPU
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaEventSynchronize",
         "aten::item", "aten::_local_scalar_dense")


def profile(width: int, layers: int, steps: int) -> str:
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import zerolab
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from gpu_check import make_model, torch_step, zero_cfg

    dev = zerolab.rank_info().device
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, width, generator=g).to(dev), torch.randn(64, width, generator=g).to(dev)
    loss_fn = nn.MSELoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    out = [f"{dev}, MLP width {width} x {layers} layers, {steps} profiled steps after 3 warm-up steps"]

    model = make_model(width, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    candidates = [("torch", lambda: torch_step(model, opt, loss_fn, x, y), None)]
    for stage in (0, 3):
        engine = zerolab.initialize(make_model(width, layers), zero_cfg(stage, 64, 1))

        def z_step(engine=engine):
            loss = loss_fn(engine(x), y)
            engine.backward(loss)
            engine.step()
            return loss.detach()
        candidates.append((f"zerolab stage {stage}", z_step, engine))
    losses = {}
    for name, step, engine in candidates:
        kept = [step() for _ in range(3)]
        sync()
        t0 = time.perf_counter()
        kept += [step() for _ in range(steps)]
        sync()
        wall = (time.perf_counter() - t0) / steps
        with torch_profile(activities=activities) as prof:
            kept += [step() for _ in range(steps)]
            sync()
        losses[name] = [float(v) for v in kept]
        events = prof.key_averages()
        syncs = {e.key: e.count / steps for e in events if e.key in SYNCS}
        out.append(f"\n== {name}: {wall * 1e3:.2f} ms a step (unprofiled); synchronizations a step: "
                   + (", ".join(f"{k} {v:g}" for k, v in sorted(syncs.items())) or "none"))
        out.append(events.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
        if engine is not None:
            engine.close()
    for name in losses:      # every candidate trained from the same start on the same batch
        gap = max(abs(a - b) / abs(b) for a, b in zip(losses[name], losses["torch"]))
        out.append(f"{name}: largest relative loss gap to torch over {len(losses[name])} steps {gap:.1e}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--small", action="store_true", help="a tiny model (for the CPU)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=None, help="also write the report here")
    a = ap.parse_args(argv)
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_stage3_profile: no CUDA GPU here", file=sys.stderr)
        return 2
    sys.path.insert(0, ROOT)
    import zerolab
    width, layers = (64, 2) if a.small else (2048, 8)
    text = zerolab.launch(profile, 1, width, layers, a.steps, backend="nccl" if a.device == "cuda" else "gloo",
                          timeout=600, echo=True)[0]
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
