"""zerolab.comm: collectives: every one through Comm (comm.py), written in the ledger (ledger.py) and
the timeline (timeline.py); the rings the chapters teach with (rings.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .comm import (CommRecord, Ledger, wire_factor, ring_all_gather, ring_all_reduce, ring_reduce_scatter,
    Pending, Comm, default_comm)
