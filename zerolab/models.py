"""Tiny models and data made on the spot (no downloads), shaped to exercise the engine.

:class:`TinyLM` has everything that makes ZeRO bookkeeping hard: tied weights (the output
head shares the embedding matrix), a frozen parameter, LayerNorms, and sizes that do not
divide by common world sizes (vocabulary 37, width 26).
"""
from __future__ import annotations

import functools
import platform

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .i18n import catalogue

__all__ = ["TinyLM", "MLP", "lm_batches", "lm_loss", "regression_batches", "mse_loss"]

T = catalogue("around")   # the messages in the edition's language (zerolab/i18n/messages_zh.py)


class Block(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.ln(x))))


class TinyLM(nn.Module):
    """A next-token model: embedding -> blocks -> LayerNorm -> head tied to the embedding."""

    def __init__(self, vocab: int = 37, d: int = 26, hidden: int = 53, layers: int = 2,
                 seq_len: int = 16, seed: int = 0):
        super().__init__()
        g = torch.random.fork_rng()
        with g:
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(seq_len, d) * 0.02)
            self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.embed.weight          # tied: one Parameter, two users
            self.temperature = nn.Parameter(torch.tensor(1.0), requires_grad=False)   # frozen

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x)) / self.temperature


class MLP(nn.Module):
    def __init__(self, sizes=(13, 31, 7), seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return x


def lm_batches(steps: int, batch: int, seq_len: int = 16, vocab: int = 37, seed: int = 0):
    """``steps`` global batches of (tokens, targets): targets are tokens shifted by one."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, vocab, (steps, batch, seq_len + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def lm_loss(logits, targets):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def regression_batches(steps: int, batch: int, d_in: int = 13, d_out: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, d_in, generator=g), torch.randn(batch, d_out, generator=g))
            for _ in range(steps)]


def mse_loss(out, y):
    return F.mse_loss(out.float(), y)


# -- a small GPT and a public-domain text (chapter 9) ---------------------------------------------
@functools.cache
def _flash_may_crash() -> bool:
    """Whether torch's CPU flash attention may fail in bf16/fp16 on this machine.

    On an x86 CPU with AMX, torch's flash kernel packs its operands with a routine that exists only
    in its AVX-512 build, and raises "pack_vnni2 is only supported when avx512 is supported" when
    the kernels were lowered (``ATEN_CPU_CAPABILITY=avx2`` or ``default``, as the test suite does to
    check that no stored output depends on them). There the math kernel is used instead.
    """
    return platform.machine().lower() in ("x86_64", "amd64") and \
        torch.backends.cpu.get_cpu_capability() != "AVX512"


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with a causal mask (GPT-2's, without dropout)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        if d % heads:
            raise ValueError(T("width {d} does not split into {heads} heads", d=d, heads=heads))
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and _flash_may_crash():
            with sdpa_kernel(SDPBackend.MATH):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class GPTBlock(nn.Module):
    """Pre-LayerNorm transformer block: x + attention(ln(x)), then x + MLP(ln(x))."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    """A small GPT (GPT-2's layout): token and position embeddings, pre-LN blocks of causal
    self-attention and a 4x MLP, a final LayerNorm, and a head tied to the token embedding.
    ``GPT(vocab=75)`` has about 0.35 M parameters: a character model that learns visibly in a
    minute or two on a CPU. Deterministic initialisation from ``seed`` (GPT-2's: normal, 0.02)."""

    def __init__(self, vocab: int, d: int = 96, heads: int = 4, layers: int = 3, seq_len: int = 64,
                 seed: int = 0):
        super().__init__()
        self.seq_len = seq_len
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq_len, d)
            self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight             # tied, as in GPT-2
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

    def forward(self, tokens):
        t = tokens.shape[1]
        if t > self.seq_len:
            raise ValueError(T("{t} tokens, but the model has positions for {n}", t=t, n=self.seq_len))
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def public_domain_text(name: str = "alice") -> str:
    """A public-domain text shipped with zerolab (nothing is downloaded): ``"alice"`` is Lewis
    Carroll's *Alice's Adventures in Wonderland* (1865), Project Gutenberg eBook #11, the text
    only (see ``zerolab/data/README.md``)."""
    from pathlib import Path
    path = Path(__file__).resolve().parent / "data" / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(T("no text {name} in {dir}", name=repr(name), dir=path.parent))
    return path.read_text(encoding="utf-8")


class CharTokenizer:
    """Characters to integers and back: the alphabet is every character of the training text,
    sorted (so the same text gives the same ids on every machine)."""

    def __init__(self, text: str):
        self.alphabet = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.alphabet)}

    @property
    def vocab(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.alphabet[int(i)] for i in ids)


def text_batches(ids: torch.Tensor, steps: int, batch: int, seq_len: int, seed: int = 0):
    """``steps`` global batches of (tokens, targets), each ``batch`` windows of ``seq_len``
    characters at random offsets of ``ids`` (a seeded generator: the same batches everywhere);
    targets are the tokens shifted by one."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - seq_len - 1, (steps, batch), generator=g)
    out = []
    for row in starts:
        win = torch.stack([ids[s:s + seq_len + 1] for s in row.tolist()])
        out.append((win[:, :-1], win[:, 1:]))
    return out


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, new_tokens: int, *, temperature: float = 0.0,
             seed: int = 0) -> torch.Tensor:
    """Extend ``prompt`` (1-D token ids) by ``new_tokens``: greedy (``temperature`` 0, the most
    likely token each time) or sampled at ``temperature`` from a seeded generator. The model sees
    at most its last ``model.seq_len`` tokens. Returns the whole sequence, prompt included."""
    g = torch.Generator().manual_seed(seed)
    seq = prompt.clone()
    window = getattr(model, "seq_len", seq.numel())
    for _ in range(new_tokens):
        logits = model(seq[-window:].unsqueeze(0))[0, -1].float()
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g))
        seq = torch.cat([seq, torch.tensor([nxt], dtype=seq.dtype)])
    return seq


__all__ += ["GPT", "CharTokenizer", "public_domain_text", "text_batches", "generate"]
