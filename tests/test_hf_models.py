"""Hugging Face transformers built from small configs (nothing downloaded) at every stage.

GPT-2 (Conv1D layers, a tied lm_head, a ModelOutput instead of a tensor) and Llama (grouped
key/value heads, RMSNorm, rotary embeddings, tied embeddings) train to the same parameters as
data-parallel training in one process. Skipped where transformers is not installed.
"""
import itertools

import pytest
import torch
import torch.nn.functional as F

import zerolab
from zerolab.zero.reference import train_engine, train_reference_per_rank

transformers = pytest.importorskip("transformers")


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=31, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=31, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                                   tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def lm_loss(out, y):
    return F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), y.reshape(-1))


def run(names, stages):
    world, out = zerolab.world_size(), {}
    for name, stage in itertools.product(names, stages):
        cfg = {"train_batch_size": 2 * world, "gradient_clipping": 0.5,
               "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
               "zero_optimization": {"stage": stage, "reduce_bucket_size": 300,
                                     "stage3_param_persistence_threshold": 40}}
        g = torch.Generator().manual_seed(1)
        batches = [(b[:, :-1], b[:, 1:]) for b in torch.randint(0, 31, (3, 2 * world, 9), generator=g)]
        make = {"gpt2": gpt2, "llama": llama}[name]
        start = {k: v.detach().clone() for k, v in make().named_parameters()}
        ref = train_reference_per_rank(make(), cfg, batches, lm_loss, world)
        engine = zerolab.initialize(make(), cfg)
        train_engine(engine, batches, lm_loss)
        got = engine.full_params()
        engine.close()
        out[f"{name} stage {stage}"] = (max(float((got[k] - ref[k]).abs().max()) for k in ref),
                                        min(float((ref[k] - start[k]).abs().max()) for k in ref))
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_hugging_face_models_train_like_ddp_at_every_stage(world):
    results = zerolab.launch(run, world, ["gpt2", "llama"], [0, 1, 2, 3], echo=False, timeout=280)[0]
    for key, (diff, moved) in results.items():
        assert moved > 1e-7, f"{key}: some parameter did not train (moved {moved:.1e})"
        assert diff < 1e-5, f"world {world}, {key}: max |difference| from DDP training {diff:.1e}"


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_compare_builds_the_same_transformer_on_both_sides(name):
    """``zerolab compare --model gpt2|llama`` builds the model on DeepSpeed's side and on zerolab's
    from the same seeds (compare_ds.build): the same weights and batch every time, a finite loss."""
    from zerolab.tools import compare_ds
    a, xa, loss_a = compare_ds.build(name, 0)
    b, xb, _ = compare_ds.build(name, 0)
    assert torch.equal(xa, xb)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(xa, compare_ds.build(name, 1)[1])          # each rank its own batch
    assert torch.isfinite(loss_a(a(xa)))
