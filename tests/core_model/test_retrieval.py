"""kNN-MT (core_model.retrieval): the interpolation's arithmetic, and a datastore that
steers the real decoders (greedy and beam) of an untrained model onto a stored target."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core_model import ModelConfig, Transformer
from core_model.batching import Example
from core_model.decoding import beam_search, greedy_decode
from core_model.retrieval import (
    KnnSettings,
    RetrievalMemory,
    TuningData,
    explain,
    interpolate,
    knn_probs,
    knn_weights,
    mean_log_likelihood,
    row_lambdas,
    teacher_forced_entries,
    tune,
)
from workbench.memory.datastore import FaissStore, entry_id, new_index


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(5)
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0)
    return Transformer(cfg).eval()


def _store(model: Transformer, examples: list[Example]) -> FaissStore:
    entries = teacher_forced_entries(model, examples)
    store = FaissStore(new_index(model.cfg.d_model, entries.keys))
    ids = np.array(
        [
            entry_id(int(e), int(p), int(t))
            for e, p, t in zip(entries.example, entries.position, entries.tokens, strict=True)
        ],
        dtype=np.int64,
    )
    store.add(entries.keys, ids)
    return store


def test_knn_probabilities_sum_the_votes_of_each_token() -> None:
    distances = torch.tensor([[0.0, 1.0, 1.0], [math.inf, math.inf, math.inf]])
    tokens = torch.tensor([[3, 5, 5], [-1, -1, -1]])
    p = knn_probs(distances, tokens, vocab_size=8, temperature=1.0)
    w = torch.softmax(torch.tensor([0.0, -1.0, -1.0]), dim=0)
    assert torch.allclose(p[0, 3], w[0]) and torch.allclose(p[0, 5], w[1] + w[2])
    assert float(p[0].sum()) == pytest.approx(1.0)
    assert float(p[1].abs().sum()) == 0.0  # no neighbours: no votes


def test_interpolation_is_the_papers_mixture_and_the_model_alone_without_neighbours() -> None:
    model_lp = torch.log_softmax(torch.randn(2, 6), dim=-1)
    distances = torch.tensor([[0.5, 1.0, 2.0], [math.inf, math.inf, math.inf]])
    tokens = torch.tensor([[2, 4, 2], [-1, -1, -1]])
    weights = knn_weights(distances, tokens, temperature=1.0)
    lam = torch.tensor([0.25, 0.0])
    mixed = interpolate(model_lp.clone(), tokens, weights, lam)
    dense = knn_probs(distances, tokens, 6, temperature=1.0)
    expected = 0.25 * dense[0] + 0.75 * model_lp[0].exp()  # the paper's eq. 2, densely
    assert torch.allclose(mixed[0].exp(), expected, atol=1e-6)
    assert torch.allclose(mixed[1], model_lp[1])
    assert float(mixed[0].exp().sum()) == pytest.approx(1.0, abs=1e-5)


def test_an_exact_context_raises_lambda() -> None:
    s = KnnSettings(lam=0.2, exact_distance=1e-3, exact_lambda=0.9)
    d = torch.tensor([[0.0, 5.0], [2.0, 3.0], [math.inf, math.inf]])
    assert row_lambdas(d, s).tolist() == pytest.approx([0.9, 0.2, 0.0])


def test_a_stored_target_is_decoded_by_an_untrained_model(model: Transformer) -> None:
    """The store holds one pair: decoding its source, the exact contexts (same source and
    prefix, distance ≈ 0) make greedy and beam search write the stored target; without the
    memory the untrained model writes something else."""
    src = (7, 9, 11, 13, 2)
    tgt = (21, 22, 23, 24, 25, 26)
    memory = RetrievalMemory(_store(model, [Example(src, tgt)]), KnnSettings(k=4))
    ids = torch.tensor([src])
    [plain] = greedy_decode(model, ids, max_len_a=0.0, max_len_b=12)
    assert tuple(plain.tokens) != tgt
    [greedy] = greedy_decode(model, ids, max_len_a=0.0, max_len_b=12, retrieval=memory)
    [beam] = beam_search(model, ids, beam_size=3, max_len_a=0.0, max_len_b=12, retrieval=memory)
    assert tuple(greedy.tokens) == tgt
    assert tuple(beam.tokens) == tgt


def test_explaining_gives_each_steps_neighbours_lambda_and_choice(model: Transformer) -> None:
    src, tgt = (7, 9, 2), (21, 22)
    memory = RetrievalMemory(_store(model, [Example(src, tgt)]), KnnSettings(k=2))
    steps = explain(model, src, [*tgt, model.cfg.eos_id], memory)
    assert len(steps) == len(tgt) + 1  # + EOS
    first = steps[0]
    assert first.neighbours[0].token == 21 and first.neighbours[0].distance < 1e-3
    assert first.neighbours[0].entry == entry_id(0, 0, 21)  # pair 0 of the store, position 0
    assert first.lam == pytest.approx(0.9) and first.final_top == 21
    assert first.final_p > first.model_p or first.model_top == 21
    assert [s.final_top for s in steps] == [*tgt, model.cfg.eos_id]


def test_tuning_picks_the_mixture_that_explains_valid_references_best() -> None:
    """Neighbours that always vote for the reference: the tuned λ is the largest offered,
    and its log-likelihood beats the model's own."""
    m = 200
    reference = torch.randint(3, 50, (m,))
    data = TuningData(
        model_log_prob=torch.full((m,), math.log(0.1)),
        distances=torch.linspace(1.0, 2.0, 32).expand(m, 32).contiguous(),
        tokens=reference[:, None].expand(m, 32).contiguous(),
        reference=reference,
    )
    settings, figures = tune(data)
    assert settings.lam == pytest.approx(0.7)
    assert figures["valid_log_likelihood_knn"] > figures["valid_log_likelihood_model"]
    assert mean_log_likelihood(data, 8, 0.0, 1.0) == pytest.approx(math.log(0.1), abs=1e-5)
