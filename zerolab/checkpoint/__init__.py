"""zerolab.checkpoint: checkpoints saved and loaded through an engine (checkpoint.py), read back and
consolidated without one (read.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .checkpoint import (CheckpointError, consolidate, read_full_state, resolve, save_checkpoint,
    load_checkpoint)
