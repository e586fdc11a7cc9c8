"""zerolab.tools: what the commands run: the report, train, compare, the scale simulator and its
calibration, DeepSpeed's estimators and logs.

Its layer in docs/ARCHITECTURE.md."""
