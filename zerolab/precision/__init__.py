"""zerolab.precision: mixed precision: what fp16 and bf16 can hold (formats.py), DeepSpeed's loss
scalers (loss_scaler.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .formats import (FP16_MAX, FP16_MIN_NORMAL, FP16_MIN_SUBNORMAL, BF16_MAX, BF16_MIN_NORMAL,
    BF16_MIN_SUBNORMAL, FP32_MIN_SUBNORMAL, grad_magnitudes, underflow_report, scaler_trace,
    dtype_range_table)
