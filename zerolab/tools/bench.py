"""The alpha-beta model of a collective, fitted on this machine: T(S) = alpha + S / beta.

``alpha`` is the fixed cost of one call (latency: start-up, synchronisation, Python), ``beta``
the bandwidth in bytes per second, and ``S`` the bytes one rank puts on the wire by the ring
convention of :mod:`zerolab.comm` (an all-reduce of B bytes is 2(N-1)/N B). Few big
collectives pay alpha few times, which is why gradients travel in buckets: the story's boxes
instead of shouting item by item.

    fit = zerolab.tools.bench.run(world_size=2)          # measure and fit, on fresh ranks
    fit.save("alpha_beta.json")
    fit.predict(engine.ledger)                     # seconds the ledger's collectives should take

From the shell: ``zerolab bench --nproc 2 --out alpha_beta.json``.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import time

import torch
import torch.distributed as dist

from ..comm import Comm, Ledger, wire_factor

__all__ = ["Fit", "measure", "run", "OPS", "Bandwidth", "bandwidths", "format_bandwidths"]

OPS = ("all_reduce", "reduce_scatter", "all_gather")


@dataclasses.dataclass
class Fit:
    world_size: int
    backend: str
    ops: dict           # op -> {"alpha_s": float, "beta_Bps": float}
    samples: list       # [op, wire bytes, median seconds] as measured

    def time(self, op: str, wire_bytes: float) -> float:
        """Predicted seconds of one call (an op not fitted uses all_reduce's fit)."""
        if self.world_size <= 1:
            return 0.0
        f = self.ops.get(op) or self.ops["all_reduce"]
        return f["alpha_s"] + wire_bytes / f["beta_Bps"]

    def predict(self, ledger: Ledger) -> float:
        """Seconds the collectives recorded in ``ledger`` should take on this machine."""
        return sum(self.time(r.op, r.wire_bytes) for r in ledger.records if r.op in OPS or r.op == "broadcast")

    def describe(self) -> str:
        lines = [f"alpha-beta fit on {self.world_size} ranks ({self.backend}): T = alpha + S/beta, "
                 "S = wire bytes per rank"]
        for op, f in self.ops.items():
            lines.append(f"  {op:<15} alpha {f['alpha_s'] * 1e6:9.1f} us   beta {f['beta_Bps'] / 1e9:7.3f} GB/s")
        return "\n".join(lines)

    def save(self, path) -> None:
        with open(path, "w") as fh:
            json.dump(dataclasses.asdict(self), fh, indent=1)

    @classmethod
    def load(cls, path) -> "Fit":
        with open(path) as fh:
            return cls(**json.load(fh))


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """y = a + b x by least squares on the *relative* error (weights 1/y^2), so the small sizes
    (which set alpha) count as much as the large ones (which set beta); a >= 0, b > 0."""
    w = [1.0 / (y * y) for y in ys]
    sw, sx, sy = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * y for wi, y in zip(w, ys))
    sxx = sum(wi * x * x for wi, x in zip(w, xs))
    sxy = sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    det = sw * sxx - sx * sx
    b = (sw * sxy - sx * sy) / det if det else 0.0
    b = max(b, 1e-15)
    a = max((sy - b * sx) / sw, 0.0)
    return a, b


def measure(sizes_bytes=(4 << 10, 64 << 10, 1 << 20, 8 << 20), repeats: int = 7,
            ops=OPS) -> list[list]:
    """On the ranks (inside ``zerolab.launch``): the median time of each op at each size of the
    full tensor, fp32, through the engine's own path (``Comm``), less the time spent waiting
    for the last rank to arrive where the transport tells it (``CommRecord.waited``). Returns [op, wire bytes per rank, seconds] rows (the same on every rank:
    rank 0's medians, broadcast)."""
    comm = Comm()
    n, device = comm.world_size, _device()
    cells = [(op, size) for op in ops for size in sizes_bytes]
    bufs = {}
    for op, size in cells:
        numel = max(size // 4 // n, 1) * n
        bufs[op, size] = (torch.ones(numel, device=device), torch.ones(numel // n, device=device))
    times = {cell: [] for cell in cells}
    # the repeats go round every (op, size) in turn: a disturbance that lasts (a process starting
    # beside the ranks, a page cache flush) lands on one round of every cell, which the median
    # drops, instead of on every repeat of the cells measured while it lasted
    for k in range(repeats + 1):
        for cell in cells:
            full, shard = bufs[cell]
            dist.barrier()
            t0 = time.perf_counter()
            if cell[0] == "all_reduce":            # the engine's own path (zerolab.comm.Comm)
                comm.all_reduce(full)
            elif cell[0] == "reduce_scatter":
                comm.reduce_scatter(shard, full)
            else:
                comm.all_gather(full, shard)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if k:                                   # the first round warms up; what is left of
                # the ranks' skew after the barrier is waiting, not moving bytes (known on
                # the shared-memory path, zerolab.crew.shm): the model leaves it out
                times[cell].append(time.perf_counter() - t0 - comm.ledger.records[-1].waited)
    med = torch.tensor([statistics.median(times[cell]) for cell in cells], dtype=torch.float64, device=device)
    dist.broadcast(med, 0)
    rows = []
    for (op, size), t in zip(cells, med.tolist()):
        rows.append([op, wire_factor(op, n) * bufs[op, size][0].numel() * 4, t])
    return rows


@dataclasses.dataclass(frozen=True)
class Bandwidth:
    """nccl-tests' two bandwidths of one collective call (its ``PERFORMANCE.md``).

    ``algbw = size / time``, where size is the bytes of the full tensor (the all-reduced buffer,
    the all-gathered output, the reduce-scattered input): what the caller sees. ``busbw = algbw x
    factor``, the factor being what one rank must put on the wire per byte of that tensor on a
    ring: 2(N-1)/N for all-reduce, (N-1)/N for all-gather and reduce-scatter, 1 for broadcast and
    reduce. The bus bandwidth is comparable across operations and world sizes, and against the
    link's speed; it is what this module's beta fits (S = wire bytes, ``CommRecord.wire_bytes``).
    At N = 2 an all-reduce's two bandwidths are equal and an all-gather's bus bandwidth is half its
    algorithm bandwidth; as N grows the all-reduce's factor tends to 2."""
    op: str
    bytes: int
    seconds: float
    world_size: int

    @property
    def factor(self) -> float:
        return wire_factor(self.op, self.world_size)

    @property
    def algbw(self) -> float:
        """Bytes of the full tensor per second."""
        return self.bytes / self.seconds if self.seconds > 0 else float("nan")

    @property
    def busbw(self) -> float:
        """Bytes on a ring's busiest link per second: algbw x factor."""
        return self.algbw * self.factor


def bandwidths(records) -> list[Bandwidth]:
    """nccl-tests' algorithm and bus bandwidth of each collective in ``records`` (a
    :class:`~zerolab.comm.Ledger` or its ``records``), from the time this rank saw (waiting for
    peers included: the bandwidth a training step got, not the link's best)."""
    records = getattr(records, "records", records)
    return [Bandwidth(r.op, r.bytes, r.seconds, r.world_size) for r in records
            if r.op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")]


def format_bandwidths(rows: list[Bandwidth]) -> str:
    """Per operation: calls, bytes, the factor, and the total bytes over the total time both ways
    (measured values are written ``~x GB/s``: they depend on the machine and its load)."""
    lines = [f"{'op':<15}{'calls':>6}{'bytes':>13}{'busbw/algbw':>13}{'algbw':>16}{'busbw':>16}"]
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        size, secs = sum(r.bytes for r in mine), sum(r.seconds for r in mine)
        alg = size / secs if secs > 0 else float("nan")
        lines.append(f"{op:<15}{len(mine):>6}{size:>13,}{mine[0].factor:>13.3f}"
                     + "".join(f"{f'~{v / 1e9:.3f} GB/s':>16}" for v in (alg, alg * mine[0].factor)))
    return "\n".join(lines)


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def fit(rows: list[list], world_size: int, backend: str) -> Fit:
    ops = {}
    for op in dict.fromkeys(r[0] for r in rows):
        xs = [r[1] for r in rows if r[0] == op]
        ys = [r[2] for r in rows if r[0] == op]
        a, b = _fit_line(xs, ys)
        ops[op] = {"alpha_s": a, "beta_Bps": 1.0 / b}
    return Fit(world_size, backend, ops, rows)


def _measure_on_ranks(sizes, repeats):
    rows = measure(sizes, repeats)
    return rows, Comm().transport()


def run(world_size: int = 2, sizes_bytes=(4 << 10, 64 << 10, 1 << 20, 8 << 20), repeats: int = 7,
        backend: str = "auto") -> Fit:
    """Start ``world_size`` ranks, measure, and fit."""
    from ..crew import launch
    rows, used = launch(_measure_on_ranks, world_size, list(sizes_bytes), repeats, backend=backend,
                        echo=False, timeout=600)[0]
    return fit(rows, world_size, used)
