"""zerolab.models.GPT, the shipped text, the tokenizer, text batches and generation (chapter 9)."""
from __future__ import annotations

import importlib.resources

import pytest
import torch

from zerolab.models import GPT, CharTokenizer, generate, lm_loss, public_domain_text, text_batches


def test_the_text_ships_with_the_package():
    text = public_domain_text("alice")
    assert len(text) == 144_600 and "Alice was beginning to get very tired" in text
    assert "Project Gutenberg" not in text             # the text only, without PG's licence and trademark
    assert importlib.resources.files("zerolab").joinpath("data", "README.md").is_file()
    with pytest.raises(FileNotFoundError):
        public_domain_text("no-such-book")


def test_tokenizer_round_trip_and_sorted_alphabet():
    text = public_domain_text()
    tok = CharTokenizer(text)
    assert tok.vocab == 75 and tok.alphabet == sorted(tok.alphabet)
    assert tok.decode(tok.encode(text[:500])) == text[:500]


def test_gpt_shape_size_tied_head_and_causality():
    m = GPT(75)
    assert sum(p.numel() for p in m.parameters()) == 349_056
    assert m.head.weight is m.tok.weight
    assert m(torch.zeros(2, 64, dtype=torch.long)).shape == (2, 64, 75)
    x = torch.randint(0, 75, (1, 10))
    y = x.clone()
    y[0, 7] = (y[0, 7] + 1) % 75
    with torch.no_grad():   # changing token 7 changes no logit before position 7
        assert torch.equal(m(x)[0, :7], m(y)[0, :7]) and not torch.equal(m(x)[0, 7:], m(y)[0, 7:])
    with pytest.raises(ValueError):
        m(torch.zeros(1, 65, dtype=torch.long))
    assert all(torch.equal(a, b) for a, b in zip(GPT(75, seed=3).parameters(), GPT(75, seed=3).parameters()))


def test_text_batches_are_shifted_windows_and_seeded():
    ids = torch.arange(1000)
    b = text_batches(ids, 3, 4, 16, seed=5)
    assert len(b) == 3 and b[0][0].shape == (4, 16)
    x, y = b[0]
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x))
    assert all(torch.equal(p[0], q[0]) for p, q in zip(b, text_batches(ids, 3, 4, 16, seed=5)))


def test_a_few_steps_learn_and_generate_stays_in_the_alphabet():
    text = public_domain_text()
    tok = CharTokenizer(text)
    m = GPT(tok.vocab, d=32, heads=2, layers=1, seq_len=32)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    batches = text_batches(tok.encode(text), 30, 16, 32)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = lm_loss(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 4.0 and sum(losses[-5:]) / 5 < 3.5
    prompt = tok.encode("Alice")
    out = generate(m, prompt, 40)
    assert out.shape == (45,) and torch.equal(out[:5], prompt)
    assert torch.equal(out, generate(m, prompt, 40))                  # greedy: deterministic
    s1 = generate(m, prompt, 40, temperature=1.0, seed=1)
    assert torch.equal(s1, generate(m, prompt, 40, temperature=1.0, seed=1))
    assert set(tok.decode(s1)) <= set(tok.alphabet)
