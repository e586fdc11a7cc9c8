"""`zerolab compare` over the README's configs and the cases the notes cite, one after another,
printed and stored in ``benchmarks/results/compare_configs.txt``: calls and bytes per family and
the losses of zerolab beside DeepSpeed 0.19.8 (run from ``--ds-python``).

    python benchmarks/compare_configs.py --ds-python /path/to/dsvenv/bin/python
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile

from zerolab.tools.compare import main as compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")


def _zero3_fp16(**zero) -> dict:
    with open(os.path.join(CONFIGS, "zero3_fp16.json")) as f:
        cfg = json.load(f)
    cfg["zero_optimization"].update(zero)
    return cfg


def _tied(stage: int, precision: str = "fp32", clip: float = 1.0, mel: bool = False) -> dict:
    """The tied model's config at ``stage`` (memory_efficient_linear off at stage 3 unless ``mel``)."""
    cfg = _zero3_fp16()
    del cfg["fp16"]
    cfg["zero_optimization"] = {"stage": stage}
    if stage == 3 and not mel:
        cfg["zero_optimization"]["memory_efficient_linear"] = False
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
    cfg["gradient_clipping"] = clip
    return cfg


# (what, config file or dict, world, model)
CASES = [
    ("the README's zero1_fp32", "zero1_fp32.json", 2, "mlp"),
    ("the README's zero2_bf16", "zero2_bf16.json", 2, "mlp"),
    ("the README's zero3_fp16", "zero3_fp16.json", 2, "mlp"),
    ("stage 1, AdamW with weight decay and clipping, 3 ranks",
     {"train_batch_size": 12, "gradient_clipping": 1.0, "zero_optimization": {"stage": 1},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}}}, 3, "mlp"),
    # the tied model clips every step (its norm is over 1): the clipping factor in DeepSpeed's
    # dtypes, and stage 3's identity functions on module I/O (MultiheadAttention called as (h, h, h))
    ("stage 0 fp32 on the tied model, clipping 1.0 (clip_grad_norm_'s fp32 factor)", _tied(0), 2, "tied"),
    ("stage 1 fp32 on the tied model, clipping 1.0 (fp32 tensor factor)", _tied(1), 2, "tied"),
    ("stage 2 bf16 on the tied model, clipping 1.0", _tied(2, "bf16"), 2, "tied"),
    ("stage 3 fp32 on the tied model, clipping 1.0, memory_efficient_linear false", _tied(3), 2, "tied"),
    ("stage 3 bf16 on the tied model, clipping 1.0, memory_efficient_linear false", _tied(3, "bf16"), 2, "tied"),
    ("zero3_fp16 on the tied model (memory_efficient_linear true: both replace F.linear)", "zero3_fp16.json", 2, "tied"),
    ("the same with memory_efficient_linear false (both keep torch's)", _zero3_fp16(memory_efficient_linear=False),
     2, "tied"),
    ("zero3_fp16 on the tied model, 3 ranks", "zero3_fp16.json", 3, "tied"),
    ("stage 0 fp32 on the tied model, 3 ranks (the engine's sum, then x 1/3)", _tied(0), 3, "tied"),
    # Hugging Face transformers from small configs (transformers in both venvs)
    ("the README's zero3_fp16 on Llama (nn.Linear without bias, RMSNorm, rotary, grouped KV)", "zero3_fp16.json", 2,
     "llama"),
    ("the README's zero2_bf16 on GPT-2 (Conv1D, tied head)", "zero2_bf16.json", 2, "gpt2"),
    ("stage 3 fp32 on Llama, clipping 1.0, 3 ranks", _tied(3, mel=True), 3, "llama"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ds-python", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "compare_configs.txt"))
    a = ap.parse_args()
    lines = [f"zerolab compare, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC "
             f"(python benchmarks/compare_configs.py)", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for what, cfg, world, model in CASES:
            path = os.path.join(CONFIGS, cfg) if isinstance(cfg, str) else os.path.join(tmp, "config.json")
            if not isinstance(cfg, str):
                with open(path, "w") as f:
                    json.dump(cfg, f)
            lines += [f"== {what} (--world {world} --model {model})"]
            said: list[str] = []
            rc = compare(path, world=world, model=model, ds_python=a.ds_python, out=said.append)
            lines += [s.replace(tmp, "<tmp>").replace(ROOT + os.sep, "") for s in said] + [f"exit status {rc}", ""]
            print("\n".join(lines[-len(said) - 3:]), flush=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
