"""zerolab.zero.stage3: stage 3's parameters: gathered per module (gather.py), fetched (fetch.py), hooked (hooks.py), grouped (units.py), traced (trace.py), their states (lifecycle.py).

Its layer in docs/ARCHITECTURE.md."""
