"""DeepSpeed's model-state memory estimators, re-derived: same signatures, same numbers.

An engineer who has used ``deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_*`` or
``stage3.estimate_zero3_*`` can call these with the same arguments and get the same bytes
(checked digit for digit against DeepSpeed 0.19.8). Two differences, both on purpose:

- the printed tables label their numbers **GiB** (they are bytes / 2**30; DeepSpeed prints the
  same numbers labelled "GB"), and the option column says ``cpu`` (DeepSpeed 0.19.8 under
  Python 3.11 prints ``OffloadDeviceEnum.cpu`` there);
- ``zero2_rows`` / ``zero3_rows`` return the table as data, for plots and tests.

These estimators are DeepSpeed's own accounting, not the paper's (see ``zerolab.memory``):
Ψ = unique parameters, L = the largest module's own parameters, N = total GPUs,
g = GPUs per node, n = nodes, f = ``additional_buffer_factor`` (headroom, default 1.5).
All results are bytes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..i18n import catalogue
from ..memory import count_params, largest_layer_params

if TYPE_CHECKING:
    import torch

__all__ = [
    "estimate_zero2_model_states_mem_needs", "estimate_zero2_model_states_mem_needs_all_cold",
    "estimate_zero2_model_states_mem_needs_all_live", "estimate_zero3_model_states_mem_needs",
    "estimate_zero3_model_states_mem_needs_all_cold", "estimate_zero3_model_states_mem_needs_all_live",
    "model_to_params", "zero2_rows", "zero3_rows",
]

_GIB = 2**30
# zerolab's note in the edition's language (zerolab/i18n/messages_zh.py); the table itself is DeepSpeed's, in its words
T = catalogue("around")


def model_to_params(model: torch.nn.Module) -> tuple[int, int]:
    """(Ψ, L): unique parameters (tied once) and the largest single module's own parameters."""
    return count_params(model), largest_layer_params(model)


# --------------------------------------------------------------------------- ZeRO-2

def estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node=1, num_nodes=1,
                                          cpu_offload=True, additional_buffer_factor=1.5):
    """(cpu_bytes, gpu_bytes) for ZeRO-2 model states.

    Optimizer offloaded to CPU: the GPU keeps only the 2-byte (fp16/bf16) params, 2Ψ; the host
    holds fp32 params, grads and Adam moments for every process: Ψ·max(4N, 16)·f.
    Not offloaded: 2Ψ of params plus an N-th of 18Ψ (2 fp16 grads + 4 fp32 grads + 4 fp32
    params + 8 Adam moments); the host needs a transient fp32 copy per process for model
    init, 4Ψ·g·f. (DeepSpeed's memory.rst still shows an older 4Ψ + 16Ψ/N.)
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_bytes = 2 * total_params
        cpu_bytes = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_bytes = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_bytes = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_bytes), int(gpu_bytes)


def zero2_rows(total_params, num_gpus_per_node=1, num_nodes=1, additional_buffer_factor=1.5):
    """The ZeRO-2 table as data: one dict per option (offload_optimizer cpu, then none)."""
    rows = []
    for offload in (True, False):
        cpu, gpu = estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node, num_nodes,
                                                         offload, additional_buffer_factor)
        rows.append({"offload_optimizer": "cpu" if offload else "none",
                     "cpu_bytes": cpu, "gpu_bytes": gpu})
    return rows


def _header(total_params, num_gpus_per_node, num_nodes, extra=""):
    nodes = "nodes" if num_nodes > 1 else "node"
    gpus = "GPUs" if num_gpus_per_node > 1 else "GPU"
    return ("Estimated memory needed for params, optim states and gradients for a:\n"
            f"HW: Setup with {num_nodes} {nodes}, {num_gpus_per_node} {gpus} per node.\n"
            f"SW: Model with {int(total_params / 1e6)}M total params{extra}.\n"
            + T("(GiB = 2**30 bytes; DeepSpeed prints these same numbers labelled 'GB')") + "\n"
            "  per CPU   |  per GPU  |   Options")


def _line(cpu_bytes, gpu_bytes, options):
    return f" {cpu_bytes / _GIB:7.2f}GiB | {gpu_bytes / _GIB:6.2f}GiB | {options}"


def estimate_zero2_model_states_mem_needs_all_cold(total_params, num_gpus_per_node=1, num_nodes=1,
                                                   additional_buffer_factor=1.5):
    """Print the ZeRO-2 table for a hypothetical model of `total_params` parameters."""
    print(_header(total_params, num_gpus_per_node, num_nodes))
    for r in zero2_rows(total_params, num_gpus_per_node, num_nodes, additional_buffer_factor):
        print(_line(r["cpu_bytes"], r["gpu_bytes"], f"offload_optimizer={r['offload_optimizer']:4}"))


def estimate_zero2_model_states_mem_needs_all_live(model, num_gpus_per_node=1, num_nodes=1,
                                                   additional_buffer_factor=1.5):
    """Print the ZeRO-2 table for a real `model` (Ψ counted from it, tied weights once)."""
    estimate_zero2_model_states_mem_needs_all_cold(count_params(model), num_gpus_per_node, num_nodes,
                                                   additional_buffer_factor)


# --------------------------------------------------------------------------- ZeRO-3

def estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, num_gpus_per_node=1,
                                          num_nodes=1, cpu_offload=True, cpu_offload_params=True,
                                          zero_init=True, additional_buffer_factor=1.5):
    """(cpu_bytes, gpu_bytes, largest_layer_bytes) for ZeRO-3 model states.

    Every GPU must hold one gathered layer while it works: 4L (2-byte params + 2-byte grads).
    `cpu_offload` is offload_optimizer=cpu, `cpu_offload_params` offload_param=cpu (which
    DeepSpeed only allows with the optimizer offloaded too). Host memory is per node, so the
    node's share of the states is Ψ·k/n; with ``zero_init=False`` each of the g processes
    first builds the full fp32 model (4Ψ·g), which may dominate:

    - param cpu, optimizer cpu: GPU 4L; CPU 18Ψ/n·f (zero_init) or Ψ·max(4g, 18/n)·f
    - param none, optimizer cpu: GPU 4L + 2Ψ/N; CPU 16Ψ/n·f or Ψ·max(4g, 16/n)·f
    - param none, optimizer none: GPU 4L + 18Ψ/N; CPU 4L·g·f or 4Ψ·g·f
    """
    total_gpus = num_nodes * num_gpus_per_node
    node_share = 1 / num_nodes
    largest_layer_bytes = 4 * largest_layer_params
    f = additional_buffer_factor
    if cpu_offload:
        k = 18 if cpu_offload_params else 16  # host keeps the fp16 params too when they are offloaded
        gpu_bytes = largest_layer_bytes + (0 if cpu_offload_params else int(2 * total_params / total_gpus))
        if zero_init:
            cpu_bytes = total_params * k * node_share * f
        else:
            cpu_bytes = total_params * max(4 * num_gpus_per_node, k * node_share) * f
    else:
        gpu_bytes = largest_layer_bytes + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_bytes = largest_layer_params * 4 * num_gpus_per_node * f
        else:
            cpu_bytes = total_params * 4 * num_gpus_per_node * f
    return int(cpu_bytes), int(gpu_bytes), largest_layer_bytes


def zero3_rows(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1,
               additional_buffer_factor=1.5):
    """The ZeRO-3 table as data: six dicts in DeepSpeed's order (param offload without
    optimizer offload is not a valid DeepSpeed setup and is skipped)."""
    rows = []
    for offload_opt, offload_param in ((True, True), (True, False), (False, False)):
        for zero_init in (True, False):
            cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
                total_params, largest_layer_params, num_gpus_per_node, num_nodes,
                offload_opt, offload_param, zero_init, additional_buffer_factor)
            rows.append({"offload_param": "cpu" if offload_param else "none",
                         "offload_optimizer": "cpu" if offload_opt else "none",
                         "zero_init": int(zero_init), "cpu_bytes": cpu, "gpu_bytes": gpu})
    return rows


def estimate_zero3_model_states_mem_needs_all_cold(total_params, largest_layer_params,
                                                   num_gpus_per_node=1, num_nodes=1,
                                                   additional_buffer_factor=1.5):
    """Print the ZeRO-3 table for a hypothetical model (Ψ and L given)."""
    extra = f", {int(largest_layer_params / 1e6)}M largest layer params"
    print(_header(total_params, num_gpus_per_node, num_nodes, extra))
    for r in zero3_rows(total_params, largest_layer_params, num_gpus_per_node, num_nodes,
                        additional_buffer_factor):
        options = (f"offload_param={r['offload_param']:4}, offload_optimizer={r['offload_optimizer']:4}, "
                   f"zero_init={r['zero_init']}")
        print(_line(r["cpu_bytes"], r["gpu_bytes"], options))


def estimate_zero3_model_states_mem_needs_all_live(model, num_gpus_per_node=1, num_nodes=1,
                                                   additional_buffer_factor=1.5):
    """Print the ZeRO-3 table for a real `model` (Ψ and L counted from it)."""
    total, largest = model_to_params(model)
    estimate_zero3_model_states_mem_needs_all_cold(total, largest, num_gpus_per_node, num_nodes,
                                                   additional_buffer_factor)
