"""zerolab.offload: where the optimizer states live: device, host or NVMe (offload.py's StateHome), the
shard stores (store.py), the NVMe store (nvme.py), what a refused write means (disk.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .offload import (pack_sizes, NvmeStore, tile_ranges, ParamWriter, StateHome, master_numel,
    make_state_home)
