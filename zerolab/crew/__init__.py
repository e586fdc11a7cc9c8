"""zerolab.crew: ranks: processes started from a notebook or a script (crew.py), inside a rank
(worker.py), the rank cap and errors (limits.py), processes (procs.py), machines (topology.py), the
shared-memory transport (shm*.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .crew import (CrewError, CrewTimeout, RankError, TooManyRanks, fit_ranks, max_ranks, resolve_backend,
    set_max_ranks, RankInfo, device, init_from_env, rank, rank_info, under_torchrun, world_size, Crew,
    launch)
