"""A step reads values back from the device a fixed number of times, whatever the model's size.

Each read of a tensor's value into Python (``.item()``, ``float(t)``, ``if t != 1``) makes the host
wait for the GPU. torch's own step does a handful; zerolab's stages make DeepSpeed's few (the
overflow flag, the norms), and none per parameter or per tile: the GPU profile of 2026-12-04
(``benchmarks/results/gpu_stage3_profile.txt``) found stage 3 waiting on the GPU per tile, which
a CPU run can count but not time. Counted here on the CPU with a dispatch mode: every
``_local_scalar_dense`` / ``is_nonzero`` whose innermost caller is zerolab's own code (torch's
Adam reads its step counters, host tensors, which never wait)."""
import traceback

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import zerolab

_READS = ("_local_scalar_dense", "is_nonzero")


class _CountReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.where: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket.__name__ in _READS:
            frames = [f for f in traceback.extract_stack()[:-1]
                      if "/zerolab/" in f.filename or "/torch/optim/" in f.filename]
            if frames and "/zerolab/" in frames[-1].filename:
                key = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}"
                self.where[key] = self.where.get(key, 0) + 1
        return func(*args, **(kwargs or {}))


def _reads_in_one_step(stage, layers, precision, clip, zero):
    torch.manual_seed(0)
    cfg = {"train_batch_size": 4 * zerolab.world_size(), "gradient_clipping": clip,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": stage, **zero}}
    dtype = torch.float32
    if precision:
        cfg[precision] = {"enabled": True}
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    engine = zerolab.initialize(nn.Sequential(*[nn.Linear(16, 16) for _ in range(layers)]), cfg)
    x = torch.randn(4, 16, dtype=dtype)
    for _ in range(2):
        engine.backward(engine(x).float().pow(2).mean())
        engine.step()
    spy = _CountReads()
    with spy:
        engine.backward(engine(x).float().pow(2).mean())
        engine.step()
    engine.close()
    return spy.where


def _all(configs):
    return [{layers: _reads_in_one_step(stage, layers, precision, clip, zero) for layers in (2, 8)}
            for stage, precision, clip, zero in configs]


@pytest.mark.parametrize("precision", [None, "bf16", "fp16"])
def test_host_reads_per_step_do_not_grow_with_the_model(precision):
    # stage 3 twice: its parameters kept whole (the default threshold keeps these small ones), and
    # gathered and released module by module, with prefetch
    configs = [(stage, precision, clip, {}) for stage in (0, 1, 2, 3) for clip in (0.0, 1.0)]
    configs += [(3, precision, clip, {"stage3_param_persistence_threshold": 0}) for clip in (0.0, 1.0)]
    got = zerolab.launch(_all, 2, configs, backend="gloo", echo=False, timeout=180)[0]
    for (stage, _, clip, _), reads in zip(configs, got):
        small, large = reads[2], reads[8]
        assert small == large, f"stage {stage}, clip {clip}: 4 parameters {small}, 16 parameters {large}"
        assert sum(large.values()) <= 4, f"stage {stage}, clip {clip}: {large}"
