"""The corpus memory (kNN-MT) of a trained version, through the product's services.

    python -m bench.knn_memory --home HOME --version ID [--data multi30k] [--beam 4]
        [--corrections 200]

HOME/ID: a version trained through the product's default path (e.g. by `bench.quality
--home HOME`, which imports the dataset's train and valid pairs as a corpus). Measured:

- the store of the version over its corpus' train split: build time (decoder states of every
  train position, the index, tuning k/λ/T on the valid split), entries, size on disk, the
  process' peak memory, and the tuned settings;
- the test set translated with beam `--beam`, without and with the memory
  (`workbench.memory.recall.decode`): BLEU, chrF, sentences/s and their ratio;
- corrections that act at once: `--corrections` test sentences whose output (with the
  memory) differs from their reference are saved as pairs (source, reference) the way the
  Translate page's "Save as pair" does (`translation.save_correction`): the first alone, its
  source translated at once and timed from the save (that translation syncs the store
  first), then the others; each source is translated again with the memory (chrF against the
  reference; the share ≥ 95), and a one-word variant of each source (its last word before
  the final punctuation dropped) is scored before and after the saves. The saved pairs are
  deleted at the end; a corpus that already holds test sources in train is refused.

Nothing here is tuned on the test set: the store's settings come from the valid split. The
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from bench import data
from core_model.metrics import score


def _variant(source: str) -> str:
    """The source without its last word before the final punctuation (a one-word edit)."""
    words = source.split()
    if len(words) < 3:
        return source
    last = words[-1]
    tail = last[-1] if not last[-1].isalnum() else ""
    return " ".join([*words[:-2], words[-2] + tail])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--data", choices=tuple(data.DATASETS), default="multi30k")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--corrections", type=int, default=200)
    p.add_argument(
        "--reuse-store", action="store_true", help="keep a built store (no build timing)"
    )
    args = p.parse_args()
    os.environ["WORKBENCH_HOME"] = str(args.home)
    os.environ.pop("WORKBENCH_DB_URL", None)

    from sacrebleu.metrics import CHRF

    from workbench.corpus import pairs
    from workbench.memory import datastore, recall
    from workbench.models import registry, translation
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    test = data.splits(args.data)["test"]
    sources, refs = [s for s, _ in test], [t for _, t in test]
    info = registry.get_version(args.version)
    registry.load_version(args.version)  # loading is not the store's cost
    leaked, page = 0, 1
    while len(rows := pairs.search_pairs(info.corpus_id, "", "train", page, 1000).rows):
        leaked, page = leaked + int(rows["source"].isin(set(sources)).sum()), page + 1
    if leaked:  # e.g. the corrections of an earlier run that was killed before removing them
        raise SystemExit(f"error: {leaked} test sources are train pairs of the corpus")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    path = datastore.store_path(info.id, info.corpus_id)
    if not args.reuse_store:
        path.unlink(missing_ok=True)
    started = time.perf_counter()
    store = datastore.open_store(args.version)
    build_s = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    store_figures = {
        **store.describe(),
        "build_s": round(build_s, 1),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "peak_rss_growth_mb": round((rss_after - rss_before) / 1024, 1),
    }
    print(json.dumps({"store": store_figures}), flush=True)

    def run(knn: bool, texts: list[str]) -> tuple[list[str], float]:
        started = time.perf_counter()
        out = recall.decode(args.version, texts, translation.DecodingOptions(args.beam, knn=knn))
        return [r.text for r in out], time.perf_counter() - started

    plain, plain_s = run(False, sources)
    with_memory, memory_s = run(True, sources)
    quality = {
        "without": {**score(plain, refs), "sentences_per_s": round(len(sources) / plain_s, 1)},
        "with": {**score(with_memory, refs), "sentences_per_s": round(len(sources) / memory_s, 1)},
    }
    quality["bleu_gain"] = round(quality["with"]["bleu"] - quality["without"]["bleu"], 2)
    quality["speed_ratio"] = round(plain_s / memory_s, 2)
    print(json.dumps({"test": quality}), flush=True)

    chrf = CHRF()
    wrong = [i for i, (h, r) in enumerate(zip(with_memory, refs, strict=True)) if h != r]
    chosen = wrong[: args.corrections]
    variants = [_variant(sources[i]) for i in chosen]
    variants_before, _ = run(True, variants)
    # one correction saved, then translated at once: what a translator does
    saved = [
        translation.save_correction(
            info.corpus_id, sources[chosen[0]], refs[chosen[0]], note="bench correction"
        )
    ]
    started = time.perf_counter()
    first, _ = run(True, [sources[chosen[0]]])
    first_s = time.perf_counter() - started
    for i in chosen[1:]:
        saved.append(
            translation.save_correction(
                info.corpus_id, sources[i], refs[i], note="bench correction"
            )
        )
    again, _ = run(True, [sources[i] for i in chosen])
    variants_after, _ = run(True, variants)
    pairs.apply_edits(info.corpus_id, deleted=saved)  # the corpus as it was: a rerun is honest

    def chrfs(hyps: list[str]) -> list[float]:
        return [chrf.sentence_score(h, [refs[i]]).score for h, i in zip(hyps, chosen, strict=True)]

    def mean_chrf(hyps: list[str]) -> float:
        values = chrfs(hyps)
        return round(sum(values) / max(1, len(values)), 2)

    scores = chrfs(again)

    corrections = {
        "saved": len(chosen),
        "share_chrf_95": round(sum(s >= 95 for s in scores) / max(1, len(scores)), 3),
        "first_translation_after_save_s": round(first_s, 2),
        "first_is_reference": first[0] == refs[chosen[0]],
        "variant_chrf_before": mean_chrf(variants_before),
        "variant_chrf_after": mean_chrf(variants_after),
    }
    print(
        json.dumps(
            {
                "version": args.version,
                "beam": args.beam,
                "store": store_figures,
                "test": quality,
                "corrections": corrections,
                "threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
