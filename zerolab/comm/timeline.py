"""The step timeline: what each rank spent its time on, from real timestamps.

The engine writes *spans* (forward, backward, optimizer step) and its :class:`~zerolab.comm.Comm`
writes every collective: a blocking one as ``comm`` (the rank waits the whole call), an
asynchronous one as ``async`` (issued, then running beside the computation) plus the ``wait``
the rank spends in ``handle.wait()`` for it. With offload the optimizer step's work on the host
is ``host`` (inside the ``step`` span) and each NVMe read or write, on an I/O thread, is ``io``.
From those:

    exposed communication  = blocking collectives + waits     (the rank stood still)
    hidden communication   = async spans - their waits         (ran while the rank computed)
    compute                = wall time of the spans - exposed communication

Times are ``time.perf_counter()`` seconds on this rank. :meth:`Timeline.plot` draws a Gantt
chart; :meth:`Timeline.chrome_trace` writes the Chrome trace format that chrome://tracing,
Perfetto and torch.profiler's viewers read.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from typing import Iterator

from .ledger import BoundedLog

__all__ = ["Event", "Timeline"]

KINDS = ("compute", "comm", "async", "wait", "host", "io")


@dataclasses.dataclass(frozen=True)
class Event:
    kind: str          # compute (a span), comm (blocking collective), async, wait, host, io
    name: str          # "forward", "backward", "step", or the collective's op and tag
    start: float       # perf_counter seconds
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Timeline:
    """An append-only list of :class:`Event`; ``enabled`` turns recording off."""

    MAX_EVENTS = 200_000          # a long run keeps the newest; marks stay valid (see mark)

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.enabled = True
        self._log = BoundedLog(self.MAX_EVENTS)

    def add(self, kind: str, name: str, start: float, end: float) -> None:
        if self.enabled:
            self._log.append(self.events, Event(kind, name, start, end))

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add("compute", name, t0, time.perf_counter())

    def mark(self) -> int:
        return self._log.mark(self.events)

    def since(self, mark: int) -> "Timeline":
        out = Timeline()
        out.events = self._log.since(self.events, mark)
        return out

    def clear(self) -> None:
        self._log.clear(self.events)

    def summary(self) -> dict[str, float]:
        """Seconds: ``wall`` (spans), ``compute``, ``exposed_comm``, ``hidden_comm``, and with
        offload ``host_step`` (host optimizer work, part of compute) and ``nvme_io`` (I/O threads)."""
        wall = sum(e.seconds for e in self.events if e.kind == "compute")
        blocking = sum(e.seconds for e in self.events if e.kind == "comm")
        waits = sum(e.seconds for e in self.events if e.kind == "wait")
        async_ = sum(e.seconds for e in self.events if e.kind == "async")
        exposed = blocking + waits
        return {"wall": wall, "compute": max(wall - exposed, 0.0), "exposed_comm": exposed,
                "hidden_comm": max(async_ - waits, 0.0),
                "host_step": sum(e.seconds for e in self.events if e.kind == "host"),
                "nvme_io": sum(e.seconds for e in self.events if e.kind == "io")}

    def describe(self) -> str:
        s = self.summary()
        return (f"compute {s['compute'] * 1e3:.1f} ms, exposed communication {s['exposed_comm'] * 1e3:.1f} ms, "
                f"hidden {s['hidden_comm'] * 1e3:.1f} ms (of {s['wall'] * 1e3:.1f} ms)")

    def chrome_trace(self, path, rank: int = 0) -> None:
        """Write the events in Chrome's trace-event format (one process per rank)."""
        t0 = min((e.start for e in self.events), default=0.0)
        trace = [{"name": e.name, "cat": e.kind, "ph": "X", "ts": (e.start - t0) * 1e6,
                  "dur": e.seconds * 1e6, "pid": rank, "tid": KINDS.index(e.kind)} for e in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": trace}, f)

    def plot(self, ax=None, title: str | None = None, t0: float | None = None):
        """A Gantt chart: one row per kind, milliseconds from the first event."""
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots(figsize=(9, 2.4))
        start = min((e.start for e in self.events), default=0.0) if t0 is None else t0
        colours = {"compute": "#4c72b0", "comm": "#dd8452", "async": "#55a868", "wait": "#c44e52",
                   "host": "#8172b3", "io": "#937860"}
        labels = {"compute": "compute spans", "comm": "blocking comm", "async": "async comm", "wait": "waits",
                  "host": "host step", "io": "NVMe I/O"}
        kinds = [k for k in KINDS if k in KINDS[:4] or any(e.kind == k for e in self.events)]
        for row, kind in enumerate(kinds):
            spans = [((e.start - start) * 1e3, e.seconds * 1e3) for e in self.events if e.kind == kind]
            if spans:
                ax.broken_barh(spans, (row - 0.35, 0.7), color=colours[kind])
        ax.set_yticks(range(len(kinds)))
        ax.set_yticklabels([labels[k] for k in kinds])
        ax.set_xlabel("time since the first event (ms)")
        ax.set_title(title or self.describe())
        return ax
