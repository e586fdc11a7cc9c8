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
peak numbers and typical nccl-tests bus bandwidths, approximate; kept in :mod:`zerolab.tools.hardware`
and re-exported here), or from a fit measured here (``zerolab.tools.bench``: ``link=fit``;
:func:`calibrate`, kept in :mod:`zerolab.tools.calibrate`, holds the model against runs here).
These are estimates: the point is the shape (which stage fits, what dominates), not the last 10 %.

    zerolab simulate --params 7e9 --layers 32 --hidden 4096 --seq 2048 --gpus 8

**Two links: nodes.** With ``ranks_per_node`` and an ``inter_link``, the GPUs sit in nodes of
``ranks_per_node``: ``link`` joins the GPUs of one node (NVLink), ``inter_link`` joins the nodes
(InfiniBand). The model, per collective call, T = α + S/β:

* a collective whose ranks all sit in one node runs on ``link``: S = the bytes one rank puts on
  the wire (ring convention: (k-1)/k of the tensor for an all-gather over k ranks);
* a collective whose ranks span nodes runs at **the slower link**: α = the larger α, β = the
  smaller β. Its ring enters and leaves each node once per channel, so a node's network cards
  carry, together, the bytes one rank sends (S), and each NVLink hop carries S too; that is why
  an ``inter_link``'s β is the node's whole network bandwidth (all its ports), not one port's;
* ``link_bytes`` reports both: ``"intra"``, bytes one rank sends over its node's link, and
  ``"inter"``, bytes that leave each node per step; ``rank_link_bytes`` files one rank's bytes
  by collective instead, as the engine's ``Ledger.by_link()`` does: ``"intra"``, in collectives
  whose ranks share a node, ``"inter"``, in collectives that span nodes.

Latency is one α per call, whatever the ranks (a ring's latency grows with them; NCCL's trees
and newer algorithms bound it): this model is for the bandwidth, which dominates ZeRO's big
gathers.

**ZeRO++** (Wang et al. 2023; DeepSpeed 0.19.8's keys, stage 3 only), as formulas per
micro-step (hpZ: per optimizer step), Ψ parameters, bf16/fp16 (2 bytes), N ranks, k per node,
m = N/k nodes:

* ``quantized_weights`` (``zero_quantized_weights``, qwZ): every parameter all-gather carries int8
  plus one fp32 scale per group of at most 8,000 elements (DeepSpeed's
  ``CUDAQuantizer.target_group_size``): 1 + 4/8000 bytes per element instead of 2;
* ``hpz_partition_size`` h (``zero_hpz_partition_size``, hpZ): after the forward gather each rank
  keeps a secondary shard of Ψ/h (2Ψ/h bytes more on the GPU, no communication), and the backward
  all-gather runs among h consecutive ranks: inside a node when h divides k (the engine does it:
  ``zerolab/zeropp/hpz.py``). DeepSpeed keeps the secondary until the optimizer step, so with G micro-steps
  of gradient accumulation only the step's first forward gathers over all N ranks: the other G-1
  forwards and all G backwards gather inside the group (per optimizer step: 1 gather over N and
  2G-1 over h);
* ``quantized_gradients`` (``zero_quantized_gradients``, qgZ): instead of the reduce-scatter,
  DeepSpeed's ``all_to_all_quant_reduce`` (``runtime/comm/coalesced_collectives.py``): 4-bit
  values plus one fp32 scale per group (``hidden`` elements per group for a square layer): an
  all-to-all inside the node ((k-1)/k of Ψ), a reduction, then one between nodes among the ranks
  of the same local index ((m-1)/m of Ψ/k each, so (m-1)/m of Ψ per node), 0.5 + 4/hidden bytes
  per element each time. Only with more than one node: on one, DeepSpeed's stage 3 keeps the
  reduce-scatter (``stage3.py``, ``__avg_scatter_grads``: ``num_nodes > 1``), and so does the
  engine (``reduce.py``).

Without ZeRO++ stage 3 moves 3 × 2Ψ (N-1)/N per micro-step, all across nodes; with all three,
about Ψ + 0 + 0.5Ψ leave each node: the paper's "4x less cross-node traffic". Calls are
approximate for ZeRO++ (the scales travel in calls of their own: two per gather; qgZ makes four
calls per 2-D gradient tensor, counted here as four per layer).

**Offload over PCIe**: ``pcie_Bps`` is one GPU's host link in one direction (PCIe 4.0 x16 by
default; :data:`PCIE5_BYTES_PER_S` for an H100's PCIe 5.0 x16).

:data:`CLUSTERS` names three clusters (DGX A100, DGX H100, and H100 nodes with one 400 Gb/s
port each) as keyword arguments for :func:`simulate`; :data:`SOURCES` says where each figure
comes from. :attr:`Estimate.hide_tokens` is the tokens per GPU per step at which the compute
equals the slower of the communication and the PCIe transfers.
"""
from __future__ import annotations

import dataclasses
import math

from .calibrate import calibrate as _calibrate, comm_factor, format_calibration  # noqa: F401  (re-exported)
from .hardware import (CLUSTERS, CPU_ADAM_ELEMS_PER_S, GPUS, LINKS, PCIE5_BYTES_PER_S,  # noqa: F401
                       PCIE_BYTES_PER_S, QWZ_GROUP_NUMEL, SOURCES)
from ..i18n import catalogue
from ..memory import model_state_bytes

__all__ = ["LINKS", "GPUS", "CLUSTERS", "SOURCES", "Estimate", "simulate", "table", "capacity_check", "calibrate",
           "comm_factor"]

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)


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
    wire_bytes: float = 0.0            # per GPU per step, the stage's ideal gradient + parameter traffic
    calls: int = 0                     # collective calls per step in the model
    tokens: int = 0                    # per GPU per optimizer step
    link_bytes: dict = dataclasses.field(default_factory=dict)   # "intra": per rank; "inter": leaving each node
    zeropp: str = ""                   # the ZeRO++ options on ("qwZ+hpZ 8+qgZ"), for the table
    # one rank's wire bytes in collectives inside its node ("intra") and spanning nodes ("inter"):
    # what the engine's Ledger.by_link() counts
    rank_link_bytes: dict = dataclasses.field(default_factory=dict)

    @property
    def hide_tokens(self) -> float:
        """Tokens per GPU per optimizer step at which the compute takes as long as the slower of
        the communication and the PCIe transfers (their bytes and calls do not depend on the
        tokens; the compute is proportional to them): above it, overlap can hide them."""
        return self.tokens * max(self.comm_s, self.transfer_s) / self.compute_s if self.compute_s else math.inf

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


def _alpha_beta(link) -> tuple[float, float]:
    """A key of :data:`LINKS`, an (alpha seconds, beta bytes/s) pair, or a :class:`zerolab.tools.bench.Fit`."""
    if isinstance(link, str):
        return LINKS[link]
    if isinstance(link, tuple):
        return float(link[0]), float(link[1])
    return link.ops["all_reduce"]["alpha_s"], link.ops["all_reduce"]["beta_Bps"]   # a Fit measured here


def _stage3_zeropp(psi, n, k, hidden, layers, buckets, qwz, hpz, qgz, intra, slow, accum=1):
    """Stage 3's collectives of one optimizer step of ``accum`` micro-steps, as (calls, seconds,
    wire bytes per rank, intra bytes per rank, inter bytes per node, a rank's bytes in collectives
    inside its node, a rank's bytes in collectives that span nodes), by the module docstring's
    two-link model and ZeRO++ formulas."""
    m = n // k
    rows = []                               # one tuple as above per kind of collective

    def flat(group, nbytes, ncalls, times=1):   # `times` ring all-gathers / reduce-scatters over `group` ranks
        if group > 1 and times:
            s = (group - 1) / group * nbytes * times
            alpha, beta = slow if group > k else intra
            rows.append((ncalls * times, ncalls * times * alpha + s / beta, s, s if min(group, k) > 1 else 0.0,
                         s if group > k else 0.0, 0.0 if group > k else s, s if group > k else 0.0))

    gather = psi * (1 + 4 / QWZ_GROUP_NUMEL) if qwz else 2 * psi
    per_gather = 2 if qwz else 1                         # qwZ's scales travel in an all-gather of their own
    group = hpz if hpz > 1 else n                       # hpZ's secondary group, or all
    flat(n, gather, layers * per_gather)                # the step's first forward: the step dropped the secondary
    flat(group, gather, layers * per_gather, accum - 1)  # later micro-steps' forwards: the secondary is kept
    flat(group, gather, layers * per_gather, accum)     # every backward
    if qgz and m > 1:                                   # 4 bits + an fp32 scale per `hidden` elements
        q = psi * (0.5 + 4 / hidden)
        if k > 1:                                       # all-to-all inside the node: (k-1)/k of it
            s = (k - 1) / k * q * accum
            rows.append((2 * layers * accum, 2 * layers * accum * intra[0] + s / intra[1], s, s, 0.0, s, 0.0))
        if m > 1:                                       # then between nodes: (m-1)/m of Ψ/k per rank,
            s = (m - 1) / m * q / k * accum             # and the k ranks of a node share its network
            rows.append((2 * layers * accum, 2 * layers * accum * slow[0] + k * s / slow[1], s, 0.0, k * s, 0.0, s))
    else:
        flat(n, 2 * psi, buckets, accum)                # the gradients' reduce-scatter, in buckets (qgZ on
        #                                                 one node too: DeepSpeed's all-to-alls need two nodes)
    return tuple(sum(col) for col in zip(*rows))


def simulate(params: float, layers: int, hidden: int, seq: int, micro_batch: int, gpus: int, stage: int, *,
             gpu: str = "a100-80gb", link="nvlink-a100", grad_accum: int = 1, mfu: float = 0.4,
             checkpointing: bool = True, heads: int | None = None, offload_optimizer: bool = False,
             offload_param: bool = False, overlap: bool = True, reduce_bucket_size: float = 5e8,
             ideal_reduce_scatter: bool = False,
             cpu_adam_elems_per_s: float = CPU_ADAM_ELEMS_PER_S, host_bytes: float | None = None,
             comm_factor: float = 1.0, inter_link=None, ranks_per_node: int | None = None,
             quantized_weights: bool = False, hpz_partition_size: int = 1, quantized_gradients: bool = False,
             pcie_Bps: float = PCIE_BYTES_PER_S) -> Estimate:
    """One configuration. ``link`` is a key of :data:`LINKS`, an (alpha, beta) pair or a
    :class:`zerolab.tools.bench.Fit`;
    ``host_bytes``: the host memory of the whole job (None: not checked); ``comm_factor``: the
    ratio of measured to α-β communication time in training (:func:`calibrate` measures it
    here; 1 is the bare link model). The traffic is DeepSpeed 0.19.8's: stage 0 all-reduces in
    buckets of 5e8; stages 1-2 all-reduce each bucket (2 Psi) and all-gather the partitions in one
    call (Psi); ``ideal_reduce_scatter`` gives the paper's reduce-scatter instead (Psi), as
    zerolab's opt-in of that name does; stage 3 all-gathers each layer in forward and again in
    backward and reduce-scatters each bucket.

    Nodes, ZeRO++ and PCIe (see the module docstring for the model): ``ranks_per_node`` (None:
    one node holds every GPU) and ``inter_link`` (None: ``link`` everywhere);
    ``quantized_weights``, ``hpz_partition_size`` and ``quantized_gradients`` are DeepSpeed's
    ``zero_quantized_weights``, ``zero_hpz_partition_size`` and ``zero_quantized_gradients``
    (stage 3); ``pcie_Bps``: one GPU's host link, one direction."""
    if offload_param and stage != 3:
        raise ValueError(T("offload_param needs stage 3 (as in DeepSpeed)"))
    psi, n = float(params), int(gpus)
    zeropp = {"zero_quantized_weights": quantized_weights, "zero_hpz_partition_size": hpz_partition_size > 1,
              "zero_quantized_gradients": quantized_gradients}
    if stage != 3 and any(zeropp.values()):
        on = ", ".join(k for k, v in zeropp.items() if v)
        raise ValueError(T("{key} needs stage 3 (as in DeepSpeed: ZeRO++ is stage 3's); set stage=3 or turn it "
                           "off", key=on))
    k = n if ranks_per_node is None else int(ranks_per_node)
    if k < 1 or n % k:
        raise ValueError(T("ranks_per_node={k} must divide gpus={n} (whole nodes)", k=ranks_per_node, n=n))
    if inter_link is not None and ranks_per_node is None:
        raise ValueError(T("inter_link needs ranks_per_node (how many GPUs share a node's link)"))
    h = int(hpz_partition_size)
    if h < 1 or n % h or (h < k and k % h) or (h > k and h % k):
        raise ValueError(T("hpz_partition_size={h} must divide gpus={n} (DeepSpeed's rule) and divide "
                           "ranks_per_node={k} or be a multiple of it; hpZ's usual size is ranks_per_node",
                           h=hpz_partition_size, n=n, k=k))
    heads = heads or max(hidden // 128, 1)
    mem_cap, peak = GPUS[gpu]
    states = model_state_bytes(psi, stage, n)
    gpu_b = {"params": states["params"], "grads": states["grads"], "optimizer_states": states["optimizer_states"]}
    if h > 1:                    # hpZ's secondary shard, kept from the forward gather to the backward one
        gpu_b["params"] += 2 * psi / h
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
    intra = _alpha_beta(link)
    outer = intra if inter_link is None else _alpha_beta(inter_link)
    slow = (max(intra[0], outer[0]), min(intra[1], outer[1]))
    spans = n > k
    if stage == 3 and n > 1 and any(zeropp.values()):
        c, secs, wire, on_intra, on_inter, inside, across = _stage3_zeropp(
            psi, n, k, hidden, layers, math.ceil(psi / reduce_bucket_size), quantized_weights, h,
            quantized_gradients, intra, slow, grad_accum)
        calls, comm = round(c), secs * comm_factor
        link_bytes = {"intra": on_intra, "inter": on_inter}
        rank_link_bytes = {"intra": inside, "inter": across}
    else:
        if stage == 0:
            wire, calls = 2 * f * grads_bytes, max(1, math.ceil(psi / 5e8))
        elif stage in (1, 2):
            rs_times = grad_accum if stage == 2 else 1
            per = 1 if ideal_reduce_scatter else 2          # reduce-scatter (the paper) or all-reduce (DeepSpeed)
            wire = per * f * grads_bytes * rs_times + f * grads_bytes
            calls = math.ceil(psi / reduce_bucket_size) * rs_times + (
                math.ceil(psi / reduce_bucket_size) if ideal_reduce_scatter else 1)
        else:
            wire = (2 * f * grads_bytes + f * grads_bytes) * grad_accum
            calls = (2 * layers + math.ceil(psi / reduce_bucket_size)) * grad_accum
        if n == 1:
            wire, calls = 0.0, 0
        alpha, beta = slow if spans else intra              # every collective spans all the ranks
        comm = (calls * alpha + wire / beta) * comm_factor
        link_bytes = {"intra": wire if k > 1 else 0.0, "inter": wire if spans else 0.0}
        rank_link_bytes = {"intra": 0.0 if spans else wire, "inter": wire if spans else 0.0}
    transfer, cpu_step = 0.0, 0.0
    if offload_optimizer:
        # DeepSpeed 0.19.8 moves the reduced gradients down as fp32 (converted on the GPU before the
        # copy: stage3.py line 1457, stage_1_and_2.py line 1909 with non_blocking=True) and the updated
        # 16-bit parameters up: 4 + 2 bytes per owned element (the ZeRO-Offload paper's 2 + 2 sends fp16 down)
        transfer += (4 + 2) * psi / (n if stage >= 1 else 1) / pcie_Bps
        cpu_step = psi / (n if stage >= 1 else 1) / cpu_adam_elems_per_s
    if offload_param:                                       # gathered from the host in forward and backward
        transfer += 2 * 2 * psi / n * grad_accum / pcie_Bps
    busy = max(compute, comm, transfer) if overlap else compute + comm + transfer
    offload = "+".join(w for w, on in (("optimizer", offload_optimizer), ("params", offload_param)) if on)
    pp = "+".join(w for w, on in (("qwZ", quantized_weights), (f"hpZ {h}", h > 1), ("qgZ", quantized_gradients))
                  if on)
    return Estimate(stage, n, offload, gpu_b, cpu_b, fits, compute, comm, transfer, cpu_step, busy + cpu_step,
                    wire, calls, tokens, link_bytes, pp, rank_link_bytes)


# Published transformer shapes (GPT-3's Table 2.1; Llama's), for a parameter count given alone.
SHAPES = (("GPT-3 125M", 125e6, 12, 768), ("GPT-3 350M", 350e6, 24, 1024), ("GPT-3 760M", 760e6, 24, 1536),
          ("GPT-3 1.3B", 1.3e9, 24, 2048), ("GPT-3 2.7B", 2.7e9, 32, 2560), ("Llama-2 7B", 6.7e9, 32, 4096),
          ("Llama-2 13B", 13e9, 40, 5120), ("Llama 33B", 33e9, 60, 6656), ("Llama-2 70B", 70e9, 80, 8192),
          ("GPT-3 175B", 175e9, 96, 12288))


def default_shape(params: float, layers: int | None = None, hidden: int | None = None) -> tuple[int, int, str]:
    """(layers, hidden, the model it follows) for ``params`` when one or both are not given: the
    published model nearest in parameters (by ratio); within 15 % of it its shape as published,
    else its layers and the hidden size that makes 12 x layers x hidden^2 = params (a multiple of 128)."""
    name, size, l0, h0 = min(SHAPES, key=lambda m: abs(math.log(max(params, 1.0) / m[1])))
    layers = layers or l0
    if hidden is None:
        near = abs(params / size - 1) <= 0.15 and layers == l0
        hidden = h0 if near else max(128, round(math.sqrt(max(params, 1.0) / (12 * layers)) / 128) * 128)
    return int(layers), int(hidden), name


def bound_by_label(r: "Estimate") -> str:
    """What sets a row's step time, for the CLI's table: the slowest of the overlapped compute,
    communication and PCIe transfers, and "+ CPU step" when the host's optimizer step (which runs
    after them, not beside them) adds a tenth or more; "CPU step" when it is the larger part."""
    parts = {"compute": r.compute_s, "comm.": r.comm_s, "PCIe": r.transfer_s}
    main = max(parts, key=parts.get)
    if r.cpu_step_s <= 0.1 * r.step_s:
        return {"comm.": "communication", "PCIe": "PCIe transfers"}.get(main, main)
    return f"CPU step+{main}" if r.cpu_step_s > parts[main] else f"{main}+CPU step"


def table(params, layers, hidden, seq, micro_batch, gpus, zeropp: dict | None = None, **kw) -> list[Estimate]:
    """Stages 0-3, then stage 3 with optimizer offload and with optimizer + parameter offload;
    ``zeropp`` (e.g. ``dict(quantized_weights=True, hpz_partition_size=8, quantized_gradients=True)``):
    one more row, stage 3 with those ZeRO++ options."""
    rows = [simulate(params, layers, hidden, seq, micro_batch, gpus, s, **kw) for s in range(4)]
    rows.append(simulate(params, layers, hidden, seq, micro_batch, gpus, 3, offload_optimizer=True, **kw))
    rows.append(simulate(params, layers, hidden, seq, micro_batch, gpus, 3, offload_optimizer=True,
                         offload_param=True, **kw))
    if zeropp:
        rows.append(simulate(params, layers, hidden, seq, micro_batch, gpus, 3, **zeropp, **kw))
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
            f"{'step s':>9}{'bound by':>18}")
    lines = [head]
    for r in rows:
        name = f"stage {r.stage}" + (f" + offload {r.offload}" if r.offload else "") + (
            f" + {r.zeropp}" if r.zeropp else "")
        states = r.gpu_bytes["params"] + r.gpu_bytes["grads"] + r.gpu_bytes["optimizer_states"]
        lines.append(f"{name:<36}{r.gpu_bytes['total'] / 1e9:>9.1f}{states / 1e9:>9.1f}"
                     f"{r.gpu_bytes['activations'] / 1e9:>7.1f}  {r.cpu_bytes / 1e9:>8.1f}"
                     f"{'yes' if r.fits else 'NO':>6}{r.step_s:>9.2f}{bound_by_label(r):>18}")
    lines.append(f"GB = 1e9 bytes; GPU memory {cap / 1e9:.0f} GB each; CPU GB is each GPU's share of host memory;")
    if any(r.cpu_step_s > 0.1 * r.step_s for r in rows):
        lines.append("offload: the CPU optimizer step runs after the overlapped compute, communication and PCIe,")
        lines.append("  so a row bound by 'compute+CPU step' takes the compute's time plus the CPU step's;")
    lines.append("estimates from published link/GPU figures (zerolab.tools.simulate.LINKS, GPUS)")
    return "\n".join(lines)


def calibrate(world_size: int = 2, **kw) -> list[dict]:
    """:func:`zerolab.tools.calibrate.calibrate` with this simulator as the prediction: the engine's
    measured traffic and time for stages 0-3 beside :func:`simulate`'s."""
    return _calibrate(world_size, predict=simulate, **kw)
