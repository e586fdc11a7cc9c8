"""qgZ (ZeRO++'s quantized gradients): stage 3's reduce-scatter as quantized all-to-alls.

Used by ``reduce.py``'s :class:`~zerolab.zero.reduce.ReduceScatterInBackward` when
``zero_quantized_gradients`` is on and the crew spans more than one node.
"""
from __future__ import annotations

import math

import torch

from . import quant
from ..memory.flat import FlatGroup
from ..i18n import catalogue

T = catalogue("engine")        # the warnings in the edition's language (zerolab/i18n/messages_zh.py)

__all__ = ["QuantizedReduce"]


class QuantizedReduce:
    """qgZ: DeepSpeed 0.19.8's ``all_to_all_quant_reduce`` (``runtime/comm/coalesced_collectives.py``;
    kernels ``swizzle_quant``, ``quantized_reduction`` and ``dequantize`` in ``csrc/quantization``),
    for a crew of K nodes of L ranks (N = K L). Each rank's gradient of M elements is cut into N
    partitions of P = M / N (rank r's partition r: what a reduce-scatter would give it):

    1. convert to fp16 and quantize to int4 in N g blocks (g per partition), one fp32 scale each;
    2. *swizzle*: order the partitions so that those bound for local rank j (j, j + L, j + 2L, ...,
       one per node) lie together (DeepSpeed's ``swizzled_quant_kernel``; 2 nodes of 4:
       0 4 1 5 2 6 3 7);
    3. all-to-all inside the node (int4 values, two per byte, then the scales): local rank j
       receives its K partitions from each of the L ranks of its node;
    4. *quantized reduction*: dequantize the L copies, add them in fp16, quantize the sum again to
       int4 (K g blocks);
    5. all-to-all across nodes (values, then scales): rank r receives partition r, summed within
       each node, from every node;
    6. dequantize (fp16), add the K pieces and divide by K.

    The result is the sum over all N ranks divided by K, the number of nodes: DeepSpeed 0.19.8 does
    not pre-divide here (its reduce-scatter path divides by N), so its qgZ gradient is L times the
    mean the reduce-scatter gives; zerolab does the same. Adam's update barely changes with a
    constant gradient scale; gradient clipping and SGD see it.

    Bytes a rank sends (M elements, g blocks per partition): inside the node (L-1)/L of M/2 bytes
    of int4 plus 4 N g of scales; across nodes (K-1)/K of M/(2L) plus 4 K g. A reduce-scatter of
    fp16/bf16 sends (N-1)/N of 2 M, all of it across nodes when the group spans them.

    Fallbacks, as DeepSpeed: a gradient of 1-D parameters only (DeepSpeed reduce-scatters 1-D
    tensors) or whose size is not a multiple of 2N is reduce-scattered, pre-divided by N. With
    one node DeepSpeed does not use qgZ at all (plain reduce-scatter).

    Where zerolab differs (its stage 3 partitions each module's flat buffer, DeepSpeed each
    parameter): the tensor is a module's padded flat gradient, not one parameter's, so there are
    fewer, larger calls; and the blocks: DeepSpeed cuts a parameter of shape (s0, s1, ...) into
    max(s0, s1, N) blocks, zerolab cuts each partition into the fewest equal blocks no larger than
    that block size for the module's 2-D parameters (:meth:`per_partition_groups`). DeepSpeed's
    kernels read the gradient as fp16 without converting it (correct for fp16 gradients only);
    zerolab converts to fp16 first, as DeepSpeed's qwZ quantizer does. Its kernels are CUDA only:
    this runs their arithmetic in torch, on gloo's ``all_to_all_single``. The calls block (DeepSpeed
    issues them on its reduction stream, which a GPU overlaps with backward; on a CPU rank nothing
    would run beside them)."""

    BITS = 4

    def __init__(self, comm):
        self.comm = comm
        self.node, self.cross = comm.node_comm(), comm.cross_comm()     # (collective: made on every rank)
        self.n, self.local, self.nodes = comm.world_size, self.node.world_size, self.cross.world_size
        if self.nodes > 1 and self.local > 1 and comm.rank == 0:
            import warnings
            warnings.warn(T("zero_quantized_gradients: as in DeepSpeed 0.19.8, qgZ's gradients come out {local}x "
                            "the mean (ranks per node): its all-to-all path sums inside each node and divides only "
                            "by the number of nodes ({nodes}), while its reduce-scatter fallback (1-D parameters) "
                            "divides by all {n} ranks. Adam barely notices a constant scale; gradient clipping and "
                            "the reported gradient norm see it", local=self.local, nodes=self.nodes, n=self.n),
                          stacklevel=2)

    def per_partition_groups(self, g: FlatGroup) -> int | None:
        """Blocks per partition for group ``g``'s gradient, or None where DeepSpeed falls back to a
        reduce-scatter (only 1-D parameters; a size not a multiple of 2N)."""
        dims = [s for s in g.shapes if len(s) >= 2]
        if not dims or g.padded_numel % (2 * self.n):
            return None
        block = min(max(1, math.prod(s) // max(s[0], s[1], self.n)) for s in dims)
        part = g.padded_numel // self.n
        k = math.ceil(part / block)
        while part % k:
            k += 1
        return k

    def reduce(self, grad: torch.Tensor, per_part: int, tag: str) -> torch.Tensor:
        """This rank's partition of (sum over ranks of ``grad``) / nodes, in fp16 (steps 1-6)."""
        n, local, nodes, bits = self.n, self.local, self.nodes, self.BITS
        part = grad.numel() // n
        q, s = quant.quantize(grad.to(torch.float16), n * per_part, bits)
        # 2. swizzle: partition p = node * L + j goes to place j * K + node
        q = q.view(nodes, local, part).transpose(0, 1).reshape(-1)
        s = s.view(nodes, local, per_part).transpose(0, 1).reshape(-1)
        # 3. all-to-all inside the node: from each local rank, the K partitions bound for this one
        packed = quant.pack_int4(q)
        got, got_s = torch.empty_like(packed), torch.empty_like(s)
        self.node.all_to_all(got, packed, tag=f"{tag} intra")
        self.node.all_to_all(got_s, s, tag=f"{tag} intra scales")
        # 4. quantized reduction: dequantize the L copies, add them in fp16, quantize the sum again
        parts = quant.dequantize(quant.unpack_int4(got), got_s).to(torch.float16).view(local, nodes * part)
        total = torch.zeros(nodes * part, dtype=torch.float16, device=grad.device)
        for j in range(local):
            total += parts[j]
        q2, s2 = quant.quantize(total, nodes * per_part, bits)
        # 5. all-to-all across nodes: from every node, its sum of this rank's partition
        packed2 = quant.pack_int4(q2)
        got2, got2_s = torch.empty_like(packed2), torch.empty_like(s2)
        self.cross.all_to_all(got2, packed2, tag=f"{tag} inter")
        self.cross.all_to_all(got2_s, s2, tag=f"{tag} inter scales")
        # 6. dequantize, add the nodes' sums, divide by the number of nodes
        final = quant.dequantize(quant.unpack_int4(got2), got2_s).to(torch.float16)
        return sum(list(final.chunk(nodes))) / nodes
