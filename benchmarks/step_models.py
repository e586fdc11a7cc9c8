"""The benchmark models, shared by the step-time and checkpoint benchmarks (and the DeepSpeed side)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn


def make_model(width: int, layers: int) -> nn.Module:
    """An MLP of ``layers`` Linear+GELU blocks (about 1.05M parameters at 512 x 4)."""
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods, nn.Linear(width, 1))


class ResMLP(nn.Module):
    """Issue 10's benchmark shape: a residual MLP of 4 Linear and 3 LayerNorm layers, 325,464
    parameters (width 284)."""
    WIDTH = 284

    def __init__(self, width: int = WIDTH):
        super().__init__()
        torch.manual_seed(0)
        self.lins = nn.ModuleList(nn.Linear(width, width) for _ in range(4))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(3))

    def forward(self, x):
        x = self.lins[0](x)
        for lin, norm in zip(self.lins[1:], self.norms):
            x = x + lin(norm(torch.relu(x)))
        return x


def hand_zero(x, y, stage: int, clip: float = 1.0, lr: float = 1e-4, tick=None):
    """One rank's side of a ResMLP training step written by hand with plain torch.distributed
    calls: the calls DeepSpeed 0.19.8 makes for ResMLP at its defaults (fp32, Adam, clipping,
    ``benchmarks/results/side_by_side.txt``) and nothing else: no engine, no ledger, no hooks, no
    checks. The floor that any engine keeping DeepSpeed's calls can reach on a transport.

    stage 0: backward into one flat gradient, one all-reduce of it after backward (DeepSpeed's
             engine: summed, then multiplied by 1/N), the norm (divided by N) all-reduced in 4
             bytes as DeepSpeed's ``clip_grad_norm_`` does, Adam over the whole model.
    stage 1: backward into one flat gradient (divided by N first, as DeepSpeed's), one all-reduce
             of it (DeepSpeed's ``reduce_scatter`` with ``use_multi_rank_bucket_allreduce``), a
             4-byte fp32 norm all-reduce, Adam on this rank's slice, one all-gather of the
             parameters.
    stage 3: every ResMLP parameter is under the persistence threshold and stays whole. Backward,
             the gradients laid out rank by rank and reduce-scattered in one call, an 8-byte fp64
             norm all-reduce, Adam on this rank's pieces, then one all-gather per parameter, all
             issued before any is waited on (DeepSpeed's ``_post_step``).

    ``tick(phase)``, if given, is called as each phase of a step ends: "forward", "backward",
    "reduce" (the gradients' collective), "norm" (the norm's and the clipping), "step" (Adam),
    "publish" (the parameters' all-gathers; not at stage 0). ``benchmarks/step_phases.py`` times
    them. Returns the step function; each call returns the loss (a tensor)."""
    tick = tick or (lambda phase: None)
    if stage not in (0, 1, 3):
        raise ValueError(f"hand_zero: stage 0, 1 or 3, not {stage}")
    r, n = dist.get_rank(), dist.get_world_size()
    dev = x.device
    model, loss_fn = ResMLP().to(dev), nn.MSELoss()
    params = list(model.parameters())

    def coefficient(sq):                  # DeepSpeed's: clip / (norm + 1e-6), applied when < 1
        coef = clip / (float(sq) ** 0.5 + 1e-6)
        return coef if coef < 1.0 else 1.0

    if stage == 0:
        total = sum(p.numel() for p in params)
        gflat = torch.zeros(total, device=dev)
        off = 0
        for p in params:
            p.grad = gflat[off:off + p.numel()].view_as(p)
            off += p.numel()
        opt = torch.optim.Adam(params, lr=lr)

        def step():
            gflat.zero_()
            loss = loss_fn(model(x), y)
            tick("forward")
            loss.backward()
            tick("backward")
            dist.all_reduce(gflat)
            gflat.mul_(1.0 / n)
            tick("reduce")
            # DeepSpeed's clip_grad_norm_: the norm divided by N, all-reduced (4 bytes), then clip
            norm = torch.stack([p.grad.norm() for p in params]).square().sum().sqrt().div_(n)
            dist.all_reduce(norm)
            gflat.mul_(torch.clamp(clip / (norm + 1e-6), max=1.0))
            tick("norm")
            opt.step()
            tick("step")
            return loss.detach()
        return step

    if stage == 1:
        total = sum(p.numel() for p in params)
        total += (-total) % n
        s = total // n
        flat, gflat = torch.zeros(total, device=dev), torch.zeros(total, device=dev)
        off = 0
        for p in params:                  # parameters and gradients: views of two flat buffers
            k = p.numel()
            flat[off:off + k].copy_(p.data.view(-1))
            p.data, p.grad = flat[off:off + k].view_as(p), gflat[off:off + k].view_as(p)
            off += k
        master = flat[r * s:(r + 1) * s].clone().requires_grad_()
        opt = torch.optim.Adam([master], lr=lr)
        sq = torch.zeros(1, device=dev)

        def step():
            gflat.zero_()
            loss = loss_fn(model(x), y)
            tick("forward")
            loss.backward()
            tick("backward")
            dist.all_reduce(gflat.div_(n))
            tick("reduce")
            mine = gflat[r * s:(r + 1) * s]
            sq[0] = torch.linalg.vector_norm(mine, dtype=torch.float64).square()
            dist.all_reduce(sq)
            master.grad = mine.mul(coefficient(sq[0]))
            tick("norm")
            opt.step()
            tick("step")
            dist.all_gather_into_tensor(flat, master.detach())
            tick("publish")
            return loss.detach()
        return step

    sizes = [(p.numel() + n - 1) // n for p in params]         # each parameter's piece per rank
    width = sum(sizes)
    whole, pieces = [], []
    for p, sp in zip(params, sizes):
        buf = torch.zeros(sp * n, device=dev)
        buf[:p.numel()].copy_(p.data.view(-1))
        p.data = buf[:p.numel()].view_as(p)
        whole.append(buf)
        pieces.append(buf[r * sp:(r + 1) * sp].clone().requires_grad_())
    opt = torch.optim.Adam(pieces, lr=lr)
    laid, mine = torch.zeros(width * n, device=dev), torch.empty(width, device=dev)
    sq = torch.zeros(1, dtype=torch.float64, device=dev)

    def step():
        loss = loss_fn(model(x), y)
        tick("forward")
        loss.backward()
        tick("backward")
        laid.zero_()
        off = 0
        for p, sp in zip(params, sizes):  # rank j's piece of every parameter, side by side
            g = p.grad.view(-1)
            for j in range(n):
                piece = g[j * sp:(j + 1) * sp]
                laid[j * width + off:j * width + off + piece.numel()].copy_(piece)
            off += sp
            p.grad = None
        dist.reduce_scatter_tensor(mine, laid.div_(n))
        tick("reduce")
        sq[0] = torch.linalg.vector_norm(mine, dtype=torch.float64).square()
        dist.all_reduce(sq)
        coef = coefficient(sq[0])
        off = 0
        for piece, sp in zip(pieces, sizes):
            piece.grad = mine[off:off + sp].mul(coef)
            off += sp
        tick("norm")
        opt.step()
        tick("step")
        handles = [dist.all_gather_into_tensor(buf, piece.detach(), async_op=True)
                   for buf, piece in zip(whole, pieces)]
        for h in handles:
            h.wait()
        tick("publish")
        return loss.detach()
    return step


def against_exact(out: dict, steps: dict, rounds: int, per_round: int, device=None) -> None:
    """Time the variants' ``steps`` in turns (:func:`round_robin`) and add to each ``out[name]``
    its median step time, its median ratio to the ``"exact"`` variant's round by round, and its
    largest loss gap to the exact run's ``losses`` (the ZeRO++ benchmarks' comparison)."""
    times = round_robin(steps, rounds, per_round, device or torch.device("cpu"))
    for name in steps:
        out[name]["median_s"] = statistics.median(times[name])
        out[name]["ratio"] = statistics.median(a / b for a, b in zip(times[name], times["exact"]))
        out[name]["loss_gap"] = max(abs(a - b) for a, b in zip(out[name]["losses"], out["exact"]["losses"]))


def round_robin(steps: dict, rounds: int, per_round: int, device) -> dict:
    """Time every candidate's step in turns: in each round, every candidate runs ``per_round``
    steps (each timed alone, between barriers), the order rotating from round to round. The
    slow spells of a shared machine (on a 2-vCPU VM a collective takes 0.3 ms or 2 ms for seconds
    at a time) then fall on every candidate alike. Returns name -> list of per-round medians."""
    names = list(steps)
    for step in steps.values():                            # warm-up
        for _ in range(5):
            step()
    out: dict[str, list] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times = []
            for _ in range(per_round):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                dist.barrier()
                t0 = time.perf_counter()
                steps[name]()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out[name].append(statistics.median(times))
    return out


def run_deepspeed(python: str, world: int, script: str, args: list[str]) -> dict:
    """Run a DeepSpeed reference script under torch.distributed.run in DeepSpeed's venv
    (``python``), on the CPU, with ``--out FILE`` appended; returns the JSON it wrote there."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ds.json")
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "PET_LOG_DIR": os.path.join(tmp, "torchrun-logs")}
        for attempt in range(3):       # DeepSpeed's own CPU shared-memory op aborts a start now and then
            run = subprocess.run([python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                  str(world), script, *args, "--out", out],
                                 env=env, capture_output=True, text=True, timeout=1800)
            if run.returncode == 0:
                break
            print(f"DeepSpeed run failed (attempt {attempt + 1}), retrying", file=sys.stderr)
        if run.returncode:
            raise RuntimeError(f"the DeepSpeed run failed:\n{run.stderr[-3000:]}\n{run.stdout[-3000:]}")
        with open(out) as f:
            return json.load(f)


class TiedNet(nn.Module):
    """Stage 3's awkward parameters in one small language model (issue 33): an embedding tied to
    the output layer, ``nn.MultiheadAttention`` (it reads ``out_proj.weight`` without calling
    ``out_proj``), an MLP, and a weight ``mix`` that the root's own forward reads with
    ``F.linear`` (an external parameter of the root). 39,168 parameters; every parameter is over 16
    elements, so every gather is over 64 bytes."""
    VOCAB, DIM, SEQ = 96, 64, 8

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        v, d = self.VOCAB, self.DIM
        self.embed = nn.Embedding(v, d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.mix = nn.Linear(d, d, bias=False)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.embed.weight                    # tied

    def forward(self, tokens):
        h = self.embed(tokens)
        a, _ = self.attn(h, h, h, need_weights=False)
        h = h + a
        h = h + self.mlp(h)
        h = torch.nn.functional.linear(h, self.mix.weight)     # a child's weight, read by the root
        return self.head(h)


class CheckpointedResMLP(ResMLP):
    """ResMLP whose residual blocks run under ``torch.utils.checkpoint`` (non-reentrant): backward
    recomputes each block's forward, so stage 3 gathers its parameters a third time."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        x = self.lins[0](x)
        for lin, norm in zip(self.lins[1:], self.norms):
            x = x + checkpoint(lambda t, lin=lin, norm=norm: lin(norm(torch.relu(t))), x, use_reentrant=False)
        return x


SIDE_BY_SIDE_MODELS = {"resmlp": ResMLP, "tied": TiedNet, "ckpt": CheckpointedResMLP}


def side_by_side_batch(model: str, rank: int):
    """(model, inputs, loss function) of the side-by-side matrix: a fixed batch per rank."""
    g = torch.Generator().manual_seed(1000 + rank)
    net = SIDE_BY_SIDE_MODELS[model]()
    if model == "tied":
        tokens = torch.randint(0, TiedNet.VOCAB, (4, TiedNet.SEQ + 1), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]

        def loss_fn(out):
            return torch.nn.functional.cross_entropy(out.reshape(-1, TiedNet.VOCAB), y.reshape(-1))
        return net, x, loss_fn
    x = torch.randn(8, ResMLP.WIDTH, generator=g)
    y = torch.randn(8, ResMLP.WIDTH, generator=g)
    return net, x, lambda out: ((out - y) ** 2).mean()
