"""The scale simulator: memory per GPU and step time of a model on N GPUs, per ZeRO stage.

What a run on a real cluster will cost, from the same formulas the chapters measure:

* **memory per GPU** = model states (the ZeRO paper: 2 + 2 + 12 bytes per parameter in mixed
  precision, sharded by stage; offload moves the optimizer states, and at stage 3 the
  parameters, to the CPU) + activations (Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) bytes
  per layer; with activation checkpointing only each layer's input, 2·s·b·h, plus one layer
  in full) + the gathered working set at stage 3 (two layers' parameters);
* **step time** = the slowest of compute (6 Ψ FLOPs per token, 8 Ψ with checkpointing, at a
  model-FLOPs utilisation), communication (the ideal bytes of the stage, chapter 3's 2Ψ / 2Ψ /
  3Ψ, over a link T = α + S/β) and, with offload, the PCIe transfers; plus the CPU optimizer
  step when it is offloaded (it does not overlap).

Links and GPUs come from a small table of published figures (``LINKS``, ``GPUS``: vendor
peak numbers and typical nccl-tests bus bandwidths, approximate), or from a fit measured here
(``zerolab.bench``: ``link=fit``). These are estimates: the point is the shape (which stage fits,
what dominates), not the last 10 %.

    zerolab simulate --params 7e9 --layers 32 --hidden 4096 --seq 2048 --gpus 8
"""
from __future__ import annotations

import dataclasses
import math

from .memory import model_state_bytes

__all__ = ["LINKS", "GPUS", "Estimate", "simulate", "table", "capacity_check"]

# (alpha seconds, beta bytes/s of bus bandwidth per GPU): approximate published figures
LINKS = {
    "nvlink-a100": (10e-6, 230e9),     # DGX A100, NVLink 3 (600 GB/s per GPU); nccl-tests all-reduce busbw ~230 GB/s
    "nvlink-h100": (10e-6, 360e9),     # DGX H100, NVLink 4 (900 GB/s per GPU); busbw ~360 GB/s
    "pcie4": (15e-6, 20e9),            # GPUs talking over PCIe 4.0 x16 (~25 GB/s per direction)
    "ib-hdr": (20e-6, 23e9),           # one 200 Gb/s InfiniBand HDR port per GPU across nodes
    "ethernet-100g": (30e-6, 11e9),    # 100 Gb/s Ethernet
}
# (memory bytes, dense bf16 peak FLOP/s)
GPUS = {
    "a100-40gb": (40e9, 312e12),
    "a100-80gb": (80e9, 312e12),
    "h100-80gb": (80e9, 989e12),
}
PCIE_BYTES_PER_S = 25e9                # host <-> GPU, PCIe 4.0 x16, one direction
CPU_ADAM_ELEMS_PER_S = 1e9             # a server CPU's vectorised Adam, elements/s per GPU's share


@dataclasses.dataclass
class Estimate:
    stage: int
    gpus: int
    offload: str                       # "", "optimizer", "optimizer+params"
    gpu_bytes: dict                    # params, grads, optimizer_states, activations, working, total
    cpu_bytes: float                   # per GPU's share of host memory
    fits: bool
    compute_s: float
    comm_s: float
    transfer_s: float                  # host <-> GPU (offload)
    cpu_step_s: float                  # optimizer step on the CPU (offload)
    step_s: float

    @property
    def bound_by(self) -> str:
        parts = {"compute": self.compute_s, "communication": self.comm_s, "PCIe transfers": self.transfer_s,
                 "CPU optimizer": self.cpu_step_s}
        return max(parts, key=parts.get)


def _activations(layers, hidden, seq, micro_batch, heads, checkpointing) -> float:
    per_layer = seq * micro_batch * hidden * (34 + 5 * heads * seq / hidden)
    if checkpointing:
        return layers * 2 * seq * micro_batch * hidden + per_layer
    return layers * per_layer


def simulate(params: float, layers: int, hidden: int, seq: int, micro_batch: int, gpus: int, stage: int, *,
             gpu: str = "a100-80gb", link="nvlink-a100", grad_accum: int = 1, mfu: float = 0.4,
             checkpointing: bool = True, heads: int | None = None, offload_optimizer: bool = False,
             offload_param: bool = False, overlap: bool = True, reduce_bucket_size: float = 5e8,
             cpu_adam_elems_per_s: float = CPU_ADAM_ELEMS_PER_S, host_bytes: float | None = None) -> Estimate:
    """One configuration. ``link`` is a key of :data:`LINKS` or a :class:`zerolab.bench.Fit`;
    ``host_bytes``: the host memory of the whole job (None: not checked)."""
    if offload_param and stage != 3:
        raise ValueError("offload_param needs stage 3 (as in DeepSpeed)")
    psi, n = float(params), int(gpus)
    heads = heads or max(hidden // 128, 1)
    mem_cap, peak = GPUS[gpu]
    states = model_state_bytes(psi, stage, n)
    gpu_b = {"params": states["params"], "grads": states["grads"], "optimizer_states": states["optimizer_states"]}
    cpu_b = 0.0
    if offload_optimizer:        # ZeRO-Offload: fp32 masters, moments and fp32 gradients live on the host
        cpu_b += gpu_b["optimizer_states"] + 4 * psi / (n if stage >= 1 else 1)
        gpu_b["optimizer_states"] = 0.0
        gpu_b["grads"] = 0.0     # reduced gradients are copied down as they are produced
    if offload_param:
        cpu_b += gpu_b["params"]
        gpu_b["params"] = 0.0
    gpu_b["activations"] = _activations(layers, hidden, seq, micro_batch, heads, checkpointing)
    gpu_b["working"] = 2 * 2 * psi / max(layers, 1) if stage == 3 else 0.0   # two layers gathered
    if offload_optimizer or stage >= 2:
        gpu_b["working"] += 2 * min(reduce_bucket_size, psi)                 # a gradient bucket in flight
    gpu_b["total"] = sum(gpu_b.values())
    fits = gpu_b["total"] <= mem_cap and (host_bytes is None or cpu_b * n <= host_bytes)

    tokens = micro_batch * seq * grad_accum
    compute = (8 if checkpointing else 6) * psi * tokens / (peak * mfu)
    f = (n - 1) / n
    grads_bytes = 2 * psi
    if stage == 0:
        wire, calls = 2 * f * grads_bytes, math.ceil(psi / reduce_bucket_size)
    elif stage in (1, 2):
        rs_times = grad_accum if stage == 2 else 1
        wire = f * grads_bytes * rs_times + f * grads_bytes
        calls = math.ceil(psi / reduce_bucket_size) * rs_times + math.ceil(psi / reduce_bucket_size)
    else:
        wire = (2 * f * grads_bytes + f * grads_bytes) * grad_accum
        calls = (2 * layers + math.ceil(psi / reduce_bucket_size)) * grad_accum
    if n == 1:
        wire, calls = 0.0, 0
    if isinstance(link, str):
        alpha, beta = LINKS[link]
    else:                                                   # a zerolab.bench.Fit measured here
        alpha, beta = link.ops["all_reduce"]["alpha_s"], link.ops["all_reduce"]["beta_Bps"]
    comm = calls * alpha + wire / beta
    transfer, cpu_step = 0.0, 0.0
    if offload_optimizer:
        # fp16 gradients down and updated fp16 parameters up: 2 + 2 bytes per owned element
        transfer += 4 * psi / (n if stage >= 1 else 1) / PCIE_BYTES_PER_S
        cpu_step = psi / (n if stage >= 1 else 1) / cpu_adam_elems_per_s
    if offload_param:                                       # gathered from the host in forward and backward
        transfer += 2 * 2 * psi / n * grad_accum / PCIE_BYTES_PER_S
    busy = max(compute, comm, transfer) if overlap else compute + comm + transfer
    offload = "+".join(k for k, on in (("optimizer", offload_optimizer), ("params", offload_param)) if on)
    return Estimate(stage, n, offload, gpu_b, cpu_b, fits, compute, comm, transfer, cpu_step, busy + cpu_step)


def table(params, layers, hidden, seq, micro_batch, gpus, **kw) -> list[Estimate]:
    """Stages 0-3, then stage 3 with optimizer offload and with optimizer + parameter offload."""
    rows = [simulate(params, layers, hidden, seq, micro_batch, gpus, s, **kw) for s in range(4)]
    rows.append(simulate(params, layers, hidden, seq, micro_batch, gpus, 3, offload_optimizer=True, **kw))
    rows.append(simulate(params, layers, hidden, seq, micro_batch, gpus, 3, offload_optimizer=True,
                         offload_param=True, **kw))
    return rows


def capacity_check(params: float, gpus: int, gpu_bytes_each: float, cpu_bytes_total: float,
                   bytes_per_param: int = 16) -> dict:
    """Can the model states fit at all? 16 Ψ of model states (mixed-precision Adam) must fit in
    the GPUs' and the host's memory together, whatever ZeRO stage or offload is chosen."""
    need = bytes_per_param * float(params)
    have = gpus * gpu_bytes_each + cpu_bytes_total
    return {"need": need, "have": have, "feasible": need <= have}


def format_table(rows: list[Estimate], gpu: str = "a100-80gb") -> str:
    cap = GPUS[gpu][0]
    head = (f"{'config':<36}{'GPU GB':>9}{'(states':>9}{'act':>7}{')':<2}{'CPU GB':>8}{'fits':>6}"
            f"{'step s':>9}{'bound by':>16}")
    lines = [head]
    for r in rows:
        name = f"stage {r.stage}" + (f" + offload {r.offload}" if r.offload else "")
        states = r.gpu_bytes["params"] + r.gpu_bytes["grads"] + r.gpu_bytes["optimizer_states"]
        lines.append(f"{name:<36}{r.gpu_bytes['total'] / 1e9:>9.1f}{states / 1e9:>9.1f}"
                     f"{r.gpu_bytes['activations'] / 1e9:>7.1f}  {r.cpu_bytes / 1e9:>8.1f}"
                     f"{'yes' if r.fits else 'NO':>6}{r.step_s:>9.2f}{r.bound_by:>16}")
    lines.append(f"GB = 1e9 bytes; GPU memory {cap / 1e9:.0f} GB each; CPU GB is each GPU's share of host memory;")
    lines.append("estimates from published link/GPU figures (zerolab.simulate.LINKS, GPUS)")
    return "\n".join(lines)
