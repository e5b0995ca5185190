"""Decoding: the key/value cache changes speed, never the tokens."""

from __future__ import annotations

import pytest
import torch

from core_model import ModelConfig, Transformer
from core_model.decoding import beam_search, greedy_decode, length_penalty


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0)
    # An untrained model outputs arbitrary (but deterministic) tokens: sharpen it a little so
    # outputs vary by input, then compare paths.
    m = Transformer(cfg).eval()
    with torch.no_grad():
        m.generator.proj.weight.mul_(3.0)
    return m


def _batch() -> torch.Tensor:
    torch.manual_seed(1)
    src = torch.randint(4, 40, (4, 8))
    src[1, 5:] = 0
    src[3, 2:] = 0
    src[:, -1].masked_fill_(src[:, -1] != 0, 2)
    return src


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_uncached_greedy_give_identical_tokens(model: Transformer, norm_first) -> None:
    if norm_first:
        cfg = ModelConfig.from_preset(
            "tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0, norm_first=True
        )
        torch.manual_seed(2)
        model = Transformer(cfg).eval()
    src = _batch()
    cached = greedy_decode(model, src, need_attention=True)
    uncached = greedy_decode(model, src, use_cache=False, need_attention=True)
    assert [r.tokens for r in cached] == [r.tokens for r in uncached]
    assert any(len(r.tokens) > 2 for r in cached)
    for a, b in zip(cached, uncached, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-4)
        assert torch.allclose(a.attention, b.attention, atol=1e-5)


def test_cached_and_uncached_beam_give_identical_tokens(model: Transformer) -> None:
    src = _batch()
    cached = beam_search(model, src, beam_size=4)
    uncached = beam_search(model, src, beam_size=4, use_cache=False)
    assert [r.tokens for r in cached] == [r.tokens for r in uncached]


def test_batched_decoding_equals_one_sentence_at_a_time(model: Transformer) -> None:
    src = _batch()
    batched = greedy_decode(model, src)
    for i, result in enumerate(batched):
        row = src[i : i + 1]
        row = row[:, : int((row != 0).sum())]  # no padding at all when alone
        assert greedy_decode(model, row)[0].tokens == result.tokens
    beams = beam_search(model, src, beam_size=3)
    for i, result in enumerate(beams):
        row = src[i : i + 1, : int((src[i] != 0).sum())]
        assert beam_search(model, row, beam_size=3)[0].tokens == result.tokens


def test_beam_of_one_is_greedy(model: Transformer) -> None:
    src = _batch()
    assert [r.tokens for r in beam_search(model, src, beam_size=1, length_penalty_alpha=0.0)] == [
        r.tokens for r in greedy_decode(model, src)
    ]


def test_beam_finds_at_least_the_greedy_log_probability(model: Transformer) -> None:
    src = _batch()
    greedy = greedy_decode(model, src)
    beams = beam_search(model, src, beam_size=6, length_penalty_alpha=0.0)
    for g, b in zip(greedy, beams, strict=True):
        assert b.score >= g.score - 1e-4


def test_output_length_is_bounded_and_fixed_length_is_exact(model: Transformer) -> None:
    src = _batch()
    outputs = greedy_decode(model, src, max_len_a=1.0, max_len_b=2)
    for r, n in zip(outputs, (src != 0).sum(1), strict=True):
        assert len(r.tokens) <= int(n) + 2
    for decode in (greedy_decode, beam_search):
        results = decode(model, src, fixed_length=12, need_attention=True)
        assert all(len(r.tokens) == 12 for r in results)
        assert results[3].attention.shape == (12, 2)  # a row per output token; 2 real src tokens


def test_length_penalty_is_gnmt() -> None:
    assert length_penalty(torch.tensor(1), 0.6) == pytest.approx(1.0)
    assert length_penalty(torch.tensor(7), 0.0) == pytest.approx(1.0)
