"""zerolab.checkpoint: checkpoints saved through an engine (save.py) and loaded into one (load.py), their
format and face (checkpoint.py), read back and consolidated without an engine (read.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .load import load_checkpoint
from .read import CheckpointError, consolidate, read_full_state, resolve
from .save import save_checkpoint
