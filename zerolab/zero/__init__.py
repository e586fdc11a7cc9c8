"""zerolab.zero: the ZeRO engine: the Engine and the reference it is tested against, the Stage, its
table and switches; stage 3's parameters in stage3/.

Its layer in docs/ARCHITECTURE.md."""
