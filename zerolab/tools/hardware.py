"""The hardware figures of the scale simulator (:mod:`zerolab.tools.simulate`): links, GPUs, PCIe, a
server CPU's Adam, and three named clusters, each figure with its published source (:data:`SOURCES`).

None of these figures was measured by zerolab: they are vendors' peak numbers and typical
nccl-tests bus bandwidths, approximate. ``zerolab.tools.simulate`` re-exports every name here.
"""
from __future__ import annotations

__all__ = ["LINKS", "GPUS", "PCIE_BYTES_PER_S", "PCIE5_BYTES_PER_S", "CPU_ADAM_ELEMS_PER_S", "QWZ_GROUP_NUMEL",
           "SOURCES", "CLUSTERS"]

# (alpha seconds, beta bytes/s): approximate published figures. beta is a bus bandwidth (nccl-tests'
# busbw: the bytes one rank sends per second); for a link between nodes, the node's whole network
# bandwidth (see the module docstring: a ring carries across each node what one rank sends).
LINKS = {
    "nvlink-a100": (10e-6, 230e9),     # DGX A100, NVLink 3 (600 GB/s per GPU); nccl-tests all-reduce busbw ~230 GB/s
    "nvlink-h100": (10e-6, 360e9),     # DGX H100, NVLink 4 (900 GB/s per GPU); busbw ~360 GB/s
    "pcie4": (15e-6, 20e9),            # GPUs talking over PCIe 4.0 x16 (~25 GB/s per direction)
    "ib-hdr": (20e-6, 23e9),           # one 200 Gb/s InfiniBand HDR port (25 GB/s) per node, or per GPU alone
    "ethernet-100g": (30e-6, 11e9),    # 100 Gb/s Ethernet
    # two-link clusters: a node's network cards together, at 90 % of their line rate (zerolab's assumption)
    "ib-hdr-8x": (20e-6, 180e9),       # DGX A100: 8 x ConnectX-6 200 Gb/s HDR ports = 200 GB/s per node
    "ib-ndr-8x": (20e-6, 360e9),       # DGX H100: 8 x ConnectX-7 400 Gb/s NDR ports = 400 GB/s per node
    "ib-ndr-1x": (20e-6, 45e9),        # one ConnectX-7 400 Gb/s NDR port per node = 50 GB/s (a thin fabric)
}
# (memory bytes, dense bf16 peak FLOP/s)
GPUS = {
    "a100-40gb": (40e9, 312e12),
    "a100-80gb": (80e9, 312e12),
    "h100-80gb": (80e9, 989e12),
    "h200-141gb": (141e9, 989e12),
}
PCIE_BYTES_PER_S = 25e9                # host <-> GPU, PCIe 4.0 x16, one direction
PCIE5_BYTES_PER_S = 50e9               # host <-> GPU, PCIe 5.0 x16 (H100 SXM), one direction
CPU_ADAM_ELEMS_PER_S = 1e9             # a server CPU's vectorised Adam, elements/s per GPU's share
QWZ_GROUP_NUMEL = 8000                 # DeepSpeed's CUDAQuantizer.target_group_size (qwZ: int8 + fp32 scale per group)

# Where each figure comes from (no figure here was measured by zerolab; the 90 % of line rate and
# the busbw values are typical, not guaranteed: measure your own with nccl-tests).
SOURCES = {
    "a100-40gb": "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s dense BF16/FP16 (624 with sparsity), 40 GB",
    "a100-80gb": "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s dense BF16/FP16 (624 with sparsity), 80 GB",
    "h100-80gb": "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 989 TFLOP/s dense BF16 (1,979 with sparsity), 80 GB",
    "h200-141gb": "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 989 TFLOP/s dense BF16 (1,979 sparse), 141 GB",
    "nvlink-a100": "NVIDIA DGX A100 datasheet: NVLink 3 + NVSwitch, 600 GB/s per GPU; all-reduce busbw ~230 GB/s "
                   "(typical nccl-tests)",
    "nvlink-h100": "NVIDIA DGX H100 datasheet: NVLink 4 + NVSwitch, 900 GB/s per GPU; all-reduce busbw ~360 GB/s "
                   "assumed (zerolab's figure; nccl-tests often report more)",
    "pcie4": "PCI-SIG PCIe 4.0 x16: 32 GB/s per direction raw, ~25 GB/s achieved",
    "ib-hdr": "NVIDIA ConnectX-6 HDR InfiniBand: 200 Gb/s = 25 GB/s per port",
    "ethernet-100g": "100 Gb/s Ethernet = 12.5 GB/s",
    "ib-hdr-8x": "NVIDIA DGX A100 datasheet: 8 x single-port ConnectX-6 200 Gb/s HDR (compute fabric) = 200 GB/s "
                 "per node; 90 % assumed",
    "ib-ndr-8x": "NVIDIA DGX H100 datasheet: 8 x ConnectX-7 400 Gb/s NDR (compute fabric) = 400 GB/s per node; "
                 "90 % assumed",
    "ib-ndr-1x": "NVIDIA ConnectX-7 400 Gb/s NDR, one port per node = 50 GB/s; 90 % assumed",
    "pcie4-host": "PCIe 4.0 x16 (A100): 32 GB/s per direction raw; 25 GB/s assumed",
    "pcie5-host": "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (both directions) = 64 GB/s per direction raw; "
                  "50 GB/s assumed",
    "cpu-adam": "zerolab's round figure for DeepSpeed's CPU Adam on one GPU's share of a server CPU: 1e9 elements/s",
}

# Named clusters, as keyword arguments of simulate(): eight GPUs per node
CLUSTERS = {
    "dgx-a100": dict(gpu="a100-80gb", link="nvlink-a100", inter_link="ib-hdr-8x", ranks_per_node=8,
                     pcie_Bps=PCIE_BYTES_PER_S),
    "dgx-h100": dict(gpu="h100-80gb", link="nvlink-h100", inter_link="ib-ndr-8x", ranks_per_node=8,
                     pcie_Bps=PCIE5_BYTES_PER_S),
    "h100-thin": dict(gpu="h100-80gb", link="nvlink-h100", inter_link="ib-ndr-1x", ranks_per_node=8,
                      pcie_Bps=PCIE5_BYTES_PER_S),
}
