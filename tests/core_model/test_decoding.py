"""Decoding (plain and constrained): the key/value cache changes speed, never the tokens."""

from __future__ import annotations

import copy

import pytest
import torch

from core_model import ModelConfig, Transformer, constrained_decoding
from core_model.constrained_decoding import constrained_beam_search
from core_model.decoding import (
    LENGTH_PENALTY_ALPHA,
    _in_place_order,
    _top_k,
    beam_search,
    greedy_decode,
    length_penalty,
)


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(3)  # a draw whose sentences end at four different steps
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0)
    # An untrained model outputs arbitrary (but deterministic) tokens: large weights (Xavier,
    # a sharpened output layer) make outputs vary by input, then the paths are compared.
    m = Transformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                torch.nn.init.xavier_uniform_(p)
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


@pytest.mark.parametrize("vocab", [40, 300, 8000, 7997])
def test_block_top_k_is_top_k(vocab: int) -> None:
    torch.manual_seed(vocab)
    x = torch.randn(37, vocab).log_softmax(-1)
    x[:, [0, 1]] = float("-inf")  # banned tokens, as the decoder bans PAD and BOS
    x[3] = x[3].sort().values  # the best values all in the last columns
    for k in (1, 2, 8):
        expected = x.topk(k, dim=-1)
        values, indices = _top_k(x, k)
        assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)


def test_beam_slots_stay_in_place() -> None:
    """A hypothesis's first child keeps its slot; only further children move, into the slots
    of hypotheses without children."""
    parents = torch.tensor([[0, 0, 1, 0], [2, 3, 1, 0], [3, 3, 3, 3]])  # best first
    order = _in_place_order(parents)
    assert order.tolist() == [[0, 2, 1, 3], [3, 2, 0, 1], [1, 2, 3, 0]]
    assert parents.gather(1, order).tolist() == [[0, 1, 0, 0], [0, 1, 2, 3], [3, 3, 3, 3]]


def test_finished_sentences_leave_the_batch(model: Transformer) -> None:
    """Each step runs only the rows of unfinished sentences (greedy: one per sentence; beam
    search: one per sentence on the first step, then K)."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.generator.proj.bias[model.cfg.eos_id] += 5.0  # sentences end after 2-12 steps
    src = _batch()
    rows_per_step: list[int] = []
    real_decode = model.decode_states  # what every decoding step runs

    def counting_decode(tgt, *args, **kwargs):
        rows_per_step.append(tgt.size(0))
        return real_decode(tgt, *args, **kwargs)

    model.decode_states = counting_decode  # type: ignore[method-assign]
    greedy = greedy_decode(model, src, max_len_a=0.0, max_len_b=12)
    steps = [len(r.tokens) + r.ended for r in greedy]  # the step each one finished in
    assert len(set(steps)) == 4
    assert rows_per_step == [sum(s > t for s in steps) for t in range(max(steps))]
    rows_per_step.clear()
    beam_search(model, src, beam_size=3, max_len_a=0.0, max_len_b=12)
    assert rows_per_step[:2] == [4, 12]
    assert all(n % 3 == 0 for n in rows_per_step[1:]) and rows_per_step[-1] < 12


def _contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_constrained_search_writes_every_term_and_scores_what_it_wrote(model: Transformer) -> None:
    """The cached, row-reordered search reports the log-probability that re-running the
    decoder over its whole output (teacher forcing) gives: the cache followed the parents."""
    cfg = model.cfg
    src = _batch()[:1]
    free = beam_search(model, src, beam_size=4)[0].tokens
    constraints = [[t, t + 1] for t in range(5, 40) if not _contains(free, [t, t + 1])][:1]
    constraints.append(next([t] for t in range(39, 4, -1) if t not in free))
    result = constrained_beam_search(model, src, constraints, beam_size=8)
    assert all(_contains(result.tokens, c) for c in constraints)

    written = torch.tensor(result.tokens + ([cfg.eos_id] if result.ended else []))
    with torch.no_grad():
        tgt_in = torch.tensor([[cfg.bos_id, *result.tokens]])  # [1, T+1]
        log_probs = model(src, tgt_in).float()
        log_probs[..., [cfg.pad_id, cfg.bos_id]] = float("-inf")
        log_probs = log_probs.log_softmax(-1)[0, : len(written)]  # [|written|, V]
    total = float(log_probs.gather(1, written[:, None]).sum())
    normalised = total / length_penalty(len(written), LENGTH_PENALTY_ALPHA)
    assert result.score == pytest.approx(normalised, abs=1e-4)


def test_a_term_is_written_even_where_no_word_may_end_before_it(
    model: Transformer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the word rule leaves a term nowhere to start (a threshold no distribution
    reaches), the search drops that rule rather than the term; right after the term still
    comes only a piece that begins a word (here the term is the only one)."""
    monkeypatch.setattr(constrained_decoding, "WORD_END_MASS", 1.01)
    cfg = model.cfg
    src = _batch()[:1]
    free = beam_search(model, src, beam_size=4)[0].tokens
    term = next(t for t in range(5, 40) if t not in free)
    word_starts = torch.zeros(cfg.tgt_vocab_size, dtype=torch.bool)
    word_starts[term] = True
    result = constrained_beam_search(model, src, [[term]], beam_size=8, word_starts=word_starts)
    assert term in result.tokens
    at = result.tokens.index(term)
    assert result.tokens[at + 1 : at + 2] in ([], [term])
