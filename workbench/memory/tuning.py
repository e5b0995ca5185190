"""Choosing a store's k, λ and T on the corpus' valid split, in two rounds.

1. **Likelihood** (``core_model.retrieval.tune``): one teacher-forced pass over the valid
   pairs, then every (k, λ, T) of the grid scored by the mean log-probability of the reference
   tokens — cheap, as nothing is decoded.
2. **BLEU**: λ and T again, jointly, by the BLEU of the valid pairs translated with the
   memory both ways a user decodes (greedy, the default, and beam 4, the beam search's
   default width): the mean of the two. The likelihood rewards any vote for the reference
   token, also where the model already chooses it; what a user sees is the chosen token. On
   the default 10-minute click's Multi30k version (valid, 1,014 pairs, beam 4) the greedy
   round's choice (λ 0.2, T) gave +1.42 BLEU, λ 0.4 at 2T +1.74: a beam keeps the model's
   own alternatives, and a flatter vote of the neighbours (a higher T) with more weight helps
   it more than greedy decoding. λ 0 is a candidate: where the memory does not help valid
   translations, it only follows exact matches (``KnnSettings.exact_lambda``), which is what
   a saved correction needs.

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
from workbench.models.translation import DEFAULT_BEAM

BLEU_LAMBDAS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6)
BLEU_TEMPERATURE_FACTORS = (1.0, 2.0)  # × the likelihood round's T, with each λ above 0
BLEU_BEAMS = (1, DEFAULT_BEAM)  # greedy and the beam search's default: what users decode with


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
        """The mean BLEU of the valid pairs over the decodings of BLEU_BEAMS."""
        memory = RetrievalMemory(store, settings)
        scores = [
            corpus_bleu(
                [r.text for r in translate(loaded, sources, beam, retrieval=memory)], references
            )
            for beam in BLEU_BEAMS
        ]
        return sum(scores) / len(scores)

    candidates = [replace(first, lam=0.0)] + [
        replace(first, lam=lam, temperature=first.temperature * factor)
        for lam in BLEU_LAMBDAS
        if lam > 0
        for factor in BLEU_TEMPERATURE_FACTORS
    ]
    scored = [(bleu(candidate), candidate) for candidate in candidates]
    # the first of the best (max keeps the first): a tie keeps the smaller λ, then T
    best_bleu, best = max(scored, key=lambda item: item[0])
    return best, {
        **figures,
        "likelihood_lambda": first.lam,
        "valid_bleu_model": scored[0][0],
        "valid_bleu_knn": best_bleu,
        "valid_bleu_pairs": float(len(valid)),
    }
