"""The memory ledger, the ZeRO formulas and the DeepSpeed-compatible estimators."""
import math

import pytest
import torch
from torch import nn

from zerolab.tools import estimate as est
from zerolab.memory.memory import (comm_ops, comm_volume, count_params, format_bytes, largest_layer_params,
                            measure_activations, model_state_bytes, precision_bytes, tensor_bytes,
                            zero_paper_table)

GIB = 2**30


def measure_model_states(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Measured bytes of the three model-state giants of an ordinary (unsharded) model.

    Same keys as :func:`model_state_bytes`, so the measurement and the formula can be compared.
    Gradients that are not allocated yet (``p.grad is None``) count 0: they appear at backward.
    """
    params = list(model.parameters())
    out = {
        "params": tensor_bytes(params),
        "grads": tensor_bytes([p.grad for p in params]),
        "optimizer_states": tensor_bytes(list(optimizer.state.values())) if optimizer else 0,
    }
    out["total"] = out["params"] + out["grads"] + out["optimizer_states"]
    return out


# --------------------------------------------------------------------------- measuring

def test_tensor_bytes_counts_each_storage_once():
    flat = torch.zeros(100)  # 400 bytes
    views = [flat[:30], flat[30:], flat.view(10, 10), flat]
    assert tensor_bytes(views) == 400
    assert tensor_bytes(flat[:30]) == 400  # a view holds its whole buffer alive
    assert tensor_bytes([flat, None, torch.zeros(5, dtype=torch.float16)]) == 410
    assert tensor_bytes({"a": flat, "b": [flat[1:], (torch.zeros(3, dtype=torch.int64),)]}) == 424
    assert tensor_bytes([torch.empty(1000, device="meta")]) == 0
    assert tensor_bytes([]) == 0 and tensor_bytes(None) == 0
    with pytest.raises(TypeError, match="parameters"):
        tensor_bytes(nn.Linear(2, 2))  # ambiguous: params? buffers? grads?


class Tied(nn.Module):
    def __init__(self, vocab=50, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied


def test_count_params_and_tensor_bytes_with_tied_weights():
    m = Tied()
    assert count_params(m) == 50 * 8 + 8 * 8 + 8
    assert tensor_bytes(m.parameters()) == 4 * count_params(m)
    # two Parameter objects over the same memory: still counted once (DeepSpeed uses data_ptr)
    m2 = Tied()
    m2.head.weight = nn.Parameter(m2.emb.weight.data)
    assert count_params(m2) == count_params(m)
    assert largest_layer_params(m) == 50 * 8  # embedding; the root module owns no params itself


def test_count_params_on_meta_device():
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
    assert count_params(m) == 4 * 6 + 6 + 6 * 2 + 2
    assert largest_layer_params(m) == 30


def test_measure_model_states_fp32_adam_is_16_bytes_per_param():
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    psi = count_params(m)
    opt = torch.optim.Adam(m.parameters())
    before = measure_model_states(m, opt)
    assert before == {"params": 4 * psi, "grads": 0, "optimizer_states": 0, "total": 4 * psi}
    m(torch.randn(3, 16)).sum().backward()
    opt.step()
    got = measure_model_states(m, opt)
    p, g, o = precision_bytes("fp32", "adam")
    formula = model_state_bytes(psi, 0, 1, param_bytes=p, grad_bytes=g, optimizer_bytes=o)
    assert got["params"] == formula["params"] and got["grads"] == formula["grads"]
    # Adam also keeps one scalar `step` tensor per parameter tensor: a few bytes over the formula
    assert 0 <= got["optimizer_states"] - formula["optimizer_states"] <= 8 * len(list(m.parameters()))


class TinyAttention(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        x = x + self.out(att @ v)
        return x + self.mlp(x)


def test_activations_grow_with_batch_and_sequence():
    torch.manual_seed(0)
    m = TinyAttention()
    act = {(b, s): measure_activations(m, torch.randn(b, s, 16))["activation_bytes"]
           for b, s in [(2, 8), (4, 8), (2, 16)]}
    assert act[(4, 8)] == pytest.approx(2 * act[(2, 8)], rel=0.05)  # batch: linear
    assert act[(2, 16)] > 2 * act[(2, 8)]  # sequence: more than linear (the s x s scores)
    # the weights, exactly: 3216 fp32 elements, one storage each
    params = list(m.parameters())
    numel = (16 * 48 + 48) + (16 * 16 + 16) + (16 * 64 + 64) + (64 * 16 + 16)
    assert sum(p.numel() for p in params) == numel == 3216
    assert tensor_bytes(params) == numel * 4 == sum(p.numel() * p.element_size() for p in params)
    # the same memory seen again (the list twice, views, .data, the state dict) adds nothing...
    again = params + params + [p.view(-1)[1:] for p in params] + [p.data for p in params]
    assert tensor_bytes(again + list(m.state_dict().values())) == numel * 4
    # ...but a copy is new memory: a second storage of the same size and values counts again
    assert tensor_bytes([m.qkv.bias, m.qkv.bias.detach().clone()]) == 2 * 48 * 4
    assert tensor_bytes([m.qkv.bias, m.qkv.bias.half()]) == 48 * 4 + 48 * 2


def test_activations_exclude_parameters_and_report_inputs():
    m = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x = torch.randn(7, 10)
    r = measure_activations(m, x, loss_fn=lambda out: out.pow(2).sum())
    # saved: x (for linear 1's weight grad), the relu output (kept once, shared by ReLU and
    # linear 2), linear 2's output (for pow); linear 2's weight is saved too, but is not counted
    assert r["activation_bytes"] == (7 * 10 + 7 * 20 + 7 * 5) * 4
    assert r["input_bytes"] == 7 * 10 * 4
    assert r["saved_tensors"] == 4 and r["skipped_param_tensors"] == 1
    assert measure_activations(m, x)["activation_bytes"] == (7 * 10 + 7 * 20) * 4  # no loss, no pow
    frozen = measure_activations(m.requires_grad_(False), x)
    assert frozen["activation_bytes"] == 0  # nothing to differentiate, nothing kept


def test_format_bytes_names_the_unit():
    assert format_bytes(120e9, "GB") == "120.00 GB"
    assert format_bytes(2**30, "GiB") == "1.00 GiB"
    assert format_bytes(2**30, "GB") == "1.07 GB"
    assert format_bytes(3 * 2**20) == "3.00 MiB"
    assert format_bytes(1.5 * 2**30) == "1.50 GiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(5e6, "MB", digits=0) == "5 MB"
    with pytest.raises(ValueError, match="unknown unit"):
        format_bytes(1, "gb")


# --------------------------------------------------------------------------- formulas

def test_precision_bytes():
    assert precision_bytes("fp32", "adam") == (4, 4, 8)
    assert precision_bytes("fp16", "adam") == (2, 2, 12)
    assert precision_bytes("bf16", "adam") == (2, 2, 12)
    assert precision_bytes("fp32", "sgd") == (4, 4, 0)
    assert precision_bytes("fp16", "sgd") == (2, 2, 4)
    assert precision_bytes("fp32", "sgd_momentum") == (4, 4, 4)
    assert precision_bytes("bf16", "sgd_momentum") == (2, 2, 8)
    with pytest.raises(ValueError):
        precision_bytes("fp8")


def test_model_state_rows():
    psi, n = 1000, 4
    assert model_state_bytes(psi, 0, n) == {"params": 2000, "grads": 2000, "optimizer_states": 12000,
                                            "total": 16000}
    assert model_state_bytes(psi, 1, n)["total"] == 4 * psi + 12 * psi / n
    assert model_state_bytes(psi, 2, n)["total"] == 2 * psi + 14 * psi / n
    assert model_state_bytes(psi, 3, n)["total"] == 16 * psi / n
    assert model_state_bytes(psi, 3, 1)["total"] == 16 * psi
    assert model_state_bytes(psi, 2, n, param_bytes=4, grad_bytes=4, optimizer_bytes=8)["total"] == 4 * psi + 12 * psi / n
    with pytest.raises(ValueError):
        model_state_bytes(psi, 4, n)
    with pytest.raises(ValueError):
        comm_volume(psi, 2, 0)


def test_zero_paper_worked_example():
    rows = zero_paper_table(7.5e9, 64)
    assert [r["stage"] for r in rows] == [0, 1, 2, 3]
    assert [round(r["total"] / 1e9, 1) for r in rows] == [120.0, 31.4, 16.6, 1.9]  # GB, as in the paper


def test_comm_volume():
    psi, n, b = 1000, 4, 2
    ring = (n - 1) / n
    for stage in (0, 1, 2):
        assert comm_volume(psi, stage, n, b) == pytest.approx(2 * ring * psi * b)
    assert comm_volume(psi, 3, n, b) == pytest.approx(3 * ring * psi * b)
    assert comm_ops(psi, 0, n, b)["all_reduce"] == pytest.approx(2 * ring * psi * b)
    ops = comm_ops(psi, 3, n, b)
    assert ops["all_gather"] == pytest.approx(2 * ops["reduce_scatter"])
    # 100 persistent elements cost 2(N-1)/N instead of 3(N-1)/N
    assert comm_volume(psi, 3, n, b, persistent_numel=100) == pytest.approx(ring * b * (3 * 900 + 2 * 100))
    assert comm_volume(psi, 3, 1, b) == 0
    with pytest.raises(ValueError):
        comm_volume(psi, 3, n, b, persistent_numel=psi + 1)


# --------------------------------------------------------------------------- DeepSpeed estimators

T5_PSI, T5_L = 2851e6, 32e6  # t5-3b, DeepSpeed's memory.rst


def test_zero3_estimator_t5_3b():
    rows = est.zero3_rows(T5_PSI, T5_L, num_gpus_per_node=8, num_nodes=1)
    got = [(round(r["cpu_bytes"] / GIB, 2), round(r["gpu_bytes"] / GIB, 2)) for r in rows]
    assert got == [(71.69, 0.12), (127.45, 0.12), (63.72, 0.78), (127.45, 0.78), (1.43, 6.09), (127.45, 6.09)]
    assert [(r["offload_param"], r["offload_optimizer"], r["zero_init"]) for r in rows] == [
        ("cpu", "cpu", 1), ("cpu", "cpu", 0), ("none", "cpu", 1), ("none", "cpu", 0),
        ("none", "none", 1), ("none", "none", 0)]
    cpu, gpu, layer = est.estimate_zero3_model_states_mem_needs(T5_PSI, T5_L, 8, 1, cpu_offload=False,
                                                                cpu_offload_params=False)
    assert layer == 4 * T5_L and gpu == int(4 * T5_L + int(18 * T5_PSI / 8))
    assert isinstance(cpu, int) and isinstance(gpu, int)


def test_zero3_estimator_multi_node_uses_max():
    # zero_init=0 with many GPUs per node: the per-process fp32 init copies dominate
    cpu, _, _ = est.estimate_zero3_model_states_mem_needs(1e9, 1e7, 8, 4, zero_init=False)
    assert cpu == int(1e9 * max(4 * 8, 18 / 4) * 1.5)
    cpu, _, _ = est.estimate_zero3_model_states_mem_needs(1e9, 1e7, 8, 4, zero_init=True)
    assert cpu == int(1e9 * 18 / 4 * 1.5)


def test_zero2_estimator_t5_3b():
    cpu, gpu = est.estimate_zero2_model_states_mem_needs(T5_PSI, 8, 1, cpu_offload=False)
    assert gpu == 2 * T5_PSI + int(18 * T5_PSI / 8)
    assert round(gpu / GIB, 2) == 11.28 and round(cpu / GIB, 2) == 127.45
    cpu, gpu = est.estimate_zero2_model_states_mem_needs(T5_PSI, 8, 1, cpu_offload=True)
    assert round(gpu / GIB, 2) == 5.31 and cpu == int(T5_PSI * 32 * 1.5)
    cpu, _ = est.estimate_zero2_model_states_mem_needs(1e6, 1, 1, cpu_offload=True)
    assert cpu == int(1e6 * 16 * 1.5)  # the max(4N, 16) floor


def test_printed_tables_say_gib(capsys):
    est.estimate_zero3_model_states_mem_needs_all_cold(T5_PSI, T5_L, num_gpus_per_node=8)
    out = capsys.readouterr().out
    assert "HW: Setup with 1 node, 8 GPUs per node." in out
    assert "SW: Model with 2851M total params, 32M largest layer params." in out
    assert "GiB = 2**30" in out
    assert "   71.69GiB |   0.12GiB | offload_param=cpu , offload_optimizer=cpu , zero_init=1" in out
    assert "127.45GiB |   6.09GiB | offload_param=none, offload_optimizer=none, zero_init=0" in out
    assert len([l for l in out.splitlines() if "zero_init=" in l]) == 6

    est.estimate_zero2_model_states_mem_needs_all_cold(T5_PSI, num_gpus_per_node=8)
    out = capsys.readouterr().out
    assert "SW: Model with 2851M total params." in out
    assert " 127.45GiB |   5.31GiB | offload_optimizer=cpu " in out
    assert " 127.45GiB |  11.28GiB | offload_optimizer=none" in out


def test_all_live_counts_the_model(capsys):
    m = Tied(vocab=1000, dim=1000)
    assert est.model_to_params(m) == (1000 * 1000 + 1000 * 1000 + 1000, 1000 * 1000 + 1000)
    assert est.estimate_zero3_model_states_mem_needs_all_live(m, num_gpus_per_node=2) is None
    assert "SW: Model with 2M total params, 1M largest layer params." in capsys.readouterr().out
    est.estimate_zero2_model_states_mem_needs_all_live(m)
    assert "HW: Setup with 1 node, 1 GPU per node." in capsys.readouterr().out


def test_live_buffers_keep_tensor_bytes_count_as_buffers_come_and_go():
    """The stage's live-buffer count is kept incrementally; at every change it equals
    tensor_bytes of what is live (views of one storage once and whole, a replaced key's old
    buffer gone, an empty tensor nothing), and the peak is the largest of those."""
    import random
    from zerolab.zero.switches import LiveBuffers
    rng = random.Random(0)
    flat = torch.zeros(1000)
    pool = [flat[:10], flat[500:], torch.zeros(0), torch.zeros(3, 7)] + [torch.zeros(rng.randint(1, 300))
                                                                         for _ in range(6)]
    live, peak = LiveBuffers(), 0
    for _ in range(400):
        key = f"k{rng.randint(0, 7)}"
        live.track(key, None if rng.random() < 0.3 else rng.choice(pool))
        want = tensor_bytes(list(live.live.values()))
        peak = max(peak, want)
        assert live.bytes() == want and live.peak_bytes == peak
    live.clear()
    assert live.bytes() == 0 and live.live == {}
