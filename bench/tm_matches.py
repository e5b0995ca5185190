"""Memory matches at 100k pairs: the index's build time and the time per sentence.

    python -m bench.tm_matches [--pairs N] [--queries Q] [--workdir DIR]

Makes a corpus of N synthetic English→German-like pairs (sentences of 6-16 words from a
2,000-word vocabulary, so that many pairs share words, as a real memory's do) in a fresh
WORKBENCH_HOME, builds the index (``workbench.memory.matches``: the first lookup), then
times ``find_matches`` for Q sentences one at a time: a third exact sources, a third
one-word edits of a source, a third new sentences. The index's own check of the change
history (one query per lookup) is included. Also times rapidfuzz's
``process.extract`` over every source (a scan) for comparison.

The last line printed is one JSON object (milliseconds per sentence). Timings depend on the
machine and on whatever else runs on it: say so when reporting them.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from bench.home import fresh_home


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(6, 16))).capitalize() + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    fresh_home(args.workdir, "tm_matches_")

    from rapidfuzz import fuzz, process

    from workbench.corpus import corpora, importing
    from workbench.memory import matches

    rng = random.Random(7)
    words = [
        "".join(rng.choice("abcdefghijklmnoprstuvw") for _ in range(rng.randint(2, 9)))
        for _ in range(2000)
    ]
    sources = list(dict.fromkeys(_sentence(rng, words) for _ in range(args.pairs)))
    tsv = "".join(f"{s}\t{s[::-1]}\n" for s in sources).encode()
    corpus = corpora.create_corpus("tm bench", "en", "de")
    importing.import_file(corpus.id, tsv, fmt="tsv")

    started = time.perf_counter()
    matches.find_matches(corpus.id, ["warm up"])
    build_s = time.perf_counter() - started

    queries = []
    for i in range(args.queries):
        base = rng.choice(sources)
        if i % 3 == 0:
            queries.append(base)
        elif i % 3 == 1:
            tokens = base.split()
            tokens[rng.randrange(len(tokens))] = rng.choice(words)
            queries.append(" ".join(tokens))
        else:
            queries.append(_sentence(rng, words))
    times, exact_found = [], 0
    for q in queries:
        t = time.perf_counter()
        (found,) = matches.find_matches(corpus.id, [q], limit=3)
        times.append((time.perf_counter() - t) * 1000)
        exact_found += bool(found and found[0].exact)
    normalised = [matches.normalized(s) for s in sources]
    scans = []
    for q in queries[:30]:
        t = time.perf_counter()
        process.extract(q, normalised, scorer=fuzz.ratio, limit=3, score_cutoff=50)
        scans.append((time.perf_counter() - t) * 1000)
    times.sort()
    print(
        json.dumps(
            {
                "pairs": len(sources),
                "queries": len(queries),
                "index_build_s": round(build_s, 2),
                "p50_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
                "max_ms": round(times[-1], 2),
                "exact_sources_found": f"{exact_found}/{len(queries[::3])}",
                "scan_extract_p50_ms": round(statistics.median(scans), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
