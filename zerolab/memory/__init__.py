"""zerolab.memory: bytes: the memory ledger's sizes (memory.py, from what each ZeRO stage shards:
zerolab/config/stages.py), where bytes live (place.py), flat buffers and their partitions
(flat.py), a device-memory budget (budget.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .memory import (tensor_bytes, storage_held, count_params, largest_layer_params, measure_activations, format_bytes, precision_bytes,
    model_state_bytes, zero_paper_table, comm_ops, comm_volume)
from .place import Place
