"""zerolab.zeropp: ZeRO++: the block quantizer (quant.py), qgZ (qgz.py), hpZ's secondary shards
(hpz.py).

Its layer in docs/ARCHITECTURE.md."""
