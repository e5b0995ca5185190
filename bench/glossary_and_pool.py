"""A trained version's glossary hit rate with and without enforcement, and how long ranking a
pool takes — both through the product's services.

    python -m bench.glossary_and_pool --model FOLDER [--glossary-terms 20] [--min-count 8]
        [--glossary-sentences 300] [--sentences 10000] [--home DIR]

A trained de→en model folder (e.g. a `small` Multi30k version, the product's default size,
trained on Multi30k's training split only) is registered in a fresh WORKBENCH_HOME
(`model_import.import_version`) and linked to a de→en corpus.

**Glossary.** A glossary is built deterministically from the validation pairs
(`build_glossary`): German nouns (capitalised words not opening the sentence) seen in at least
`--min-count` validation sources, each paired with the English word of the references it
co-occurs with most by Dice's coefficient (2·both / (de + en), counted in sentences; at least
0.5; each English word used once); the `--glossary-terms` most frequent nouns are kept. On
the first `--glossary-sentences` validation pairs whose source contains a term,
`evaluation.evaluate` reports the term-hit rate (greedy) without enforcement and with it
(constrained beam search for the sentences that miss a term), with BLEU/chrF and the time.

**Ranking.** The German side of the first `--sentences` distinct Multi30k training sentences
is uploaded to the corpus' pool (`pool.add_to_pool`), a pool job is queued
(`pool_jobs.enqueue_translation`) and a real worker process (`python -m workbench worker
--once`) translates and ranks them (greedy, length-normalised log-probability). Reported:
the upload time, the job's wall time (process start and model loading included),
sentences/s, and the time 100k sentences would take at that rate — an extrapolation when
fewer were ranked (the job's work is linear: chunk after chunk) — and the review queue's
query time. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import data
from bench.active_learning import FULL_POOL, worker_once

_WORD = re.compile(r"[^\W\d_]+")


def build_glossary(
    pairs: data.Pairs, n_terms: int, min_count: int, min_dice: float = 0.5
) -> list[tuple[str, str]]:
    """A de→en glossary from parallel sentences, deterministically (see the module
    docstring): frequent German nouns and the English word each co-occurs with most."""
    de_count: Counter[str] = Counter()
    en_count: Counter[str] = Counter()
    both: dict[str, Counter[str]] = {}  # German noun -> English words in the same pairs
    for src, tgt in pairs:
        words = _WORD.findall(src)
        nouns = {w for w in words[1:] if w[0].isupper()}
        english = {w.lower() for w in _WORD.findall(tgt)}
        de_count.update(nouns)
        en_count.update(english)
        for d in nouns:
            both.setdefault(d, Counter()).update(english)
    best: list[tuple[float, int, str, str]] = []
    for d, n in de_count.items():
        if n < min_count:
            continue
        dice, e = max((2 * c / (n + en_count[e_]), e_) for e_, c in both[d].items())
        if dice >= min_dice:
            best.append((dice, n, d, e))
    used: set[str] = set()
    chosen: list[tuple[int, str, str]] = []
    for _dice, n, d, e in sorted(best, key=lambda b: (-b[0], -b[1], b[2])):
        if e not in used:
            used.add(e)
            chosen.append((n, d, e))
    return [(d, e) for _n, d, e in sorted(chosen, key=lambda c: (-c[0], c[1]))[:n_terms]]


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="a trained de→en model folder")
    p.add_argument("--glossary-terms", type=int, default=20)
    p.add_argument("--min-count", type=int, default=8, help="a glossary noun's least count")
    p.add_argument("--glossary-sentences", type=int, default=300)
    p.add_argument("--sentences", type=int, default=10_000, help="pool sentences to rank")
    p.add_argument("--home", type=Path, help="WORKBENCH_HOME (default: a temporary folder)")
    args = p.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="wb-gp-"))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)
    import torch

    from workbench.corpus import corpora, glossary
    from workbench.curation import pool, pool_jobs
    from workbench.evaluation import evaluation
    from workbench.models import model_import, registry

    corpus = corpora.create_corpus("multi30k", "de", "en").id
    version = model_import.import_version(args.model, "multi30k")
    config = json.loads((args.model / "config.json").read_text(encoding="utf-8"))
    valid = data.multi30k("val")

    terms = build_glossary(valid, args.glossary_terms, args.min_count)
    glossary.set_terms(corpus, terms)
    table = glossary.glossary_of(corpus)
    sample = [pair for pair in valid if table.matches(pair[0])][: args.glossary_sentences]
    gloss = {}
    for enforce in (False, True):
        began = time.monotonic()
        scores = evaluation.evaluate(version, sample, glossary=table, enforce=enforce)
        gloss["enforced" if enforce else "off"] = scores | {
            "seconds": round(time.monotonic() - began, 1)
        }
        print(f"glossary {'enforced' if enforce else 'off'}: {scores}", flush=True)

    sources = list(dict.fromkeys(s for s, _ in data.multi30k("train")))[: args.sentences]
    began = time.monotonic()
    uploaded = pool.add_to_pool(corpus, "\n".join(sources).encode())
    upload_s = time.monotonic() - began
    pool_jobs.enqueue_translation(corpus, version)
    rank_s = worker_once()
    ranked = pool.pool_stats(corpus).translated
    began = time.monotonic()
    pool.review_queue(corpus, limit=50)
    queue_s = time.monotonic() - began
    per_s = ranked / rank_s
    metrics = registry.get_version(version).metrics
    print(
        json.dumps(
            {
                "bench": "glossary_and_pool",
                "model": {
                    "preset": config.get("training", {}).get("preset"),
                    "parameters": metrics.get("parameters"),
                    "train_pairs": metrics.get("train_pairs"),
                    "steps": metrics.get("steps"),
                },
                "glossary": {
                    "built_from": "Multi30k val: German nouns x English words, Dice >= 0.5",
                    "terms": terms,
                    "sentences": len(sample),
                    "decoding": "greedy; enforced: constrained beam search where a term misses",
                    **gloss,
                },
                "ranking": {
                    "sentences": ranked,
                    "upload_s": round(upload_s, 1),
                    "rank_s": round(rank_s, 1),
                    "sentences_per_s": round(per_s, 1),
                    f"seconds_for_{FULL_POOL}": round(FULL_POOL / per_s),
                    "extrapolated": ranked < FULL_POOL,
                    "review_queue_top50_s": round(queue_s, 3),
                    "uploaded": uploaded.added,
                    "torch_threads": torch.get_num_threads(),
                },
                "home": str(home),
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()
