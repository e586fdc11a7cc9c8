"""The small GPT that tests/test_zeropp_engine.py and tests/test_zeropp_hpz.py train at stage 3
with ZeRO++ (bf16; biases and LayerNorms persistent), its config and its token batches."""
import torch

from zerolab.models import GPT

VOCAB, D, SEQ = 48, 48, 24


def gpt():
    return GPT(vocab=VOCAB, d=D, heads=2, layers=2, seq_len=SEQ)


def gpt_config(world, **zero):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 2 * world,
            "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
            # biases and LayerNorms persistent; each weight its own gathered group (shards of a multiple
            # of 8 elements at 2, 3 and 4 ranks), all in one prefetch batch
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 200,
                                  "reduce_bucket_size": 20000, **zero}}


def gpt_batches(steps, n, seed=0):
    """``steps`` batches of ``n`` random token sequences (inputs, next-token targets)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        t = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
        out.append((t[:, :-1], t[:, 1:]))
    return out
