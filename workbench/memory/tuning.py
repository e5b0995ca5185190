"""Choosing a store's k, λ and T on the corpus' valid split, in two rounds.

1. **Likelihood** (``core_model.retrieval.tune``): one teacher-forced pass over the valid
   pairs, then every (k, λ, T) of the grid scored by the mean log-probability of the reference
   tokens — cheap, as nothing is decoded.
2. **BLEU**: λ and T again, by the BLEU of greedy translations of the same pairs with the
   memory. The likelihood rewards any vote for the reference token, also where the model
   already chooses it; what a user sees is the chosen token. On the default 10-minute click's
   Multi30k version the likelihood picked λ 0.5 and gave +0.62 test BLEU; the decoded output
   is what this round judges. λ 0 is a candidate: where the memory does not help valid
   translations, it only follows exact matches (``KnnSettings.exact_lambda``), which is what a
   saved correction needs.

Nothing here looks at a test set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from core_model.artifact import LoadedModel
from core_model.batching import Example
from core_model.metrics import corpus_bleu
from core_model.retrieval import Datastore, KnnSettings, RetrievalMemory, tune, tuning_data
from core_model.translator import translate

BLEU_LAMBDAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
BLEU_TEMPERATURE_FACTORS = (0.5, 2.0)  # × the likelihood's T, tried at the best λ


def tune_store(
    loaded: LoadedModel,
    store: Datastore,
    valid: Sequence[tuple[str, str]],
    examples: Sequence[Example],
) -> tuple[KnnSettings, dict[str, float]]:
    """The settings for `store` from the valid `pairs` (source, target) and their encoded
    `examples`, and the figures behind them (both rounds' valid scores)."""
    first, figures = tune(tuning_data(loaded.model, store, examples))
    sources, references = [s for s, _ in valid], [t for _, t in valid]

    def bleu(settings: KnnSettings) -> float:
        memory = RetrievalMemory(store, settings)
        out = translate(loaded, sources, retrieval=memory)
        return corpus_bleu([r.text for r in out], references)

    scored = {lam: bleu(replace(first, lam=lam)) for lam in BLEU_LAMBDAS}
    lam = max(scored, key=lambda value: (scored[value], -value))  # a tie: the smaller λ
    best, best_bleu = replace(first, lam=lam), scored[lam]
    if lam > 0:
        for factor in BLEU_TEMPERATURE_FACTORS:
            candidate = replace(first, lam=lam, temperature=first.temperature * factor)
            if (score := bleu(candidate)) > best_bleu:
                best, best_bleu = candidate, score
    return best, {
        **figures,
        "likelihood_lambda": first.lam,
        "valid_bleu_model": scored[0.0],
        "valid_bleu_knn": best_bleu,
        "valid_bleu_pairs": float(len(valid)),
    }
