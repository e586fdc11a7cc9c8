"""Tiny models and data made on the spot (no downloads), shaped to exercise the engine.

:class:`TinyLM` has everything that makes ZeRO bookkeeping hard: tied weights (the output
head shares the embedding matrix), a frozen parameter, LayerNorms, and sizes that do not
divide by common world sizes (vocabulary 37, width 26).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TinyLM", "MLP", "lm_batches", "lm_loss", "regression_batches", "mse_loss"]


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
