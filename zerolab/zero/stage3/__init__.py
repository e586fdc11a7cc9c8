"""zerolab.zero.stage3: stage 3's parameters: gathered per module (gather.py), all-gathered
(fetch.py, quantized in qwz_gather.py), hooked (hooks.py), grouped (units.py), traced (trace.py),
their gradient order (grad_order.py), their states (lifecycle.py), the gathers in flight
(inflight.py), their shards (param_shards.py).

Its layer in docs/ARCHITECTURE.md ("Inside zero")."""
