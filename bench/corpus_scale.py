"""Corpus scale benchmark: import N synthetic pairs, then time filtered search pages.

    python bench/corpus_scale.py [--pairs 1000000] [--db-url URL]

All text is generated here (made-up syllable words and random CJK characters), no shared
data. The import goes through the public ``workbench.corpus.importing.import_file`` (parse,
validate, de-duplicate, one transaction, FTS index); searches through
``workbench.corpus.pairs.search_pairs`` (page of 50 + capped count). As a baseline the same
queries run as a plain LIKE scan. On SQLite a second process meanwhile takes the database's
write lock again and again (as a worker's progress write or a UI edit would) and reports the
longest it had to wait: about the longest time the import held the lock in one piece. The
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SYLLABLES = [
    *("ka", "to", "ri", "men", "sa", "lo", "ve", "dan", "pi", "qua"),
    *("ster", "el", "on", "ar", "bu", "zo", "fi", "ne", "gu", "tra"),
]


def make_vocabulary(rng: random.Random, n: int = 20_000) -> list[str]:
    words = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(n * 2)}
    return sorted(words)[:n]


def write_corpus(path: Path, n: int, seed: int = 0) -> list[str]:
    """Write ``n`` pairs (random CJK source, syllable-word target) as TSV; returns vocab."""
    rng = random.Random(seed)
    vocab = make_vocabulary(rng)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3500)]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            src = "".join(rng.choices(cjk, k=rng.randint(6, 28))) + "。"
            tgt = " ".join(rng.choices(vocab, k=rng.randint(4, 16))).capitalize() + f" {i}."
            fh.write(f"{src}\t{tgt}\n")
    return vocab


# Takes and releases the write lock in a loop until its stop file appears; prints the longest
# wait (seconds) and how often it got the lock.
WRITER_PROBE = """
import os, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=3600, isolation_level=None)
longest, taken = 0.0, 0
while not os.path.exists(sys.argv[2]):
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    longest = max(longest, time.perf_counter() - start)
    conn.execute("ROLLBACK")
    taken += 1
    time.sleep(0.02)
print(longest, taken)
"""


def timed(fn, repeat: int = 5) -> float:
    """Median wall time of ``fn()`` in milliseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--db-url", default=None, help="default: a SQLite file in a temp dir")
    ap.add_argument("--workdir", default=None, help="keep files here instead of a temp dir")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="wb-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["WORKBENCH_HOME"] = str(work / "home")
    if args.db_url:
        os.environ["WORKBENCH_DB_URL"] = args.db_url
    else:
        os.environ.pop("WORKBENCH_DB_URL", None)

    from db import search
    from workbench.corpus import corpora, pairs
    from workbench.corpus.importing import import_file
    from workbench.storage import engine as get_engine
    from workbench.storage import session_scope

    data = work / "pairs.tsv"
    t = time.perf_counter()
    vocab = write_corpus(data, args.pairs)
    gen_s = time.perf_counter() - t
    print(f"generated {args.pairs} pairs in {gen_s:.1f}s ({data.stat().st_size >> 20} MiB)")

    get_engine()  # migrations are not part of the import time
    info = corpora.create_corpus(f"bench-{args.pairs}", "zh", "en")
    load_before = os.getloadavg()[0]
    probe, stop = None, work / "probe.stop"
    engine = get_engine()
    if engine.dialect.name == "sqlite":
        stop.unlink(missing_ok=True)
        probe = subprocess.Popen(
            [sys.executable, "-c", WRITER_PROBE, str(engine.url.database), str(stop)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
    t, cpu = time.perf_counter(), time.process_time()
    result = import_file(info.id, data, fmt="tsv")
    import_s, import_cpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"imported {result.added} pairs in {import_s:.1f}s (cpu {import_cpu:.1f}s)")
    lock_wait_s = lock_takes = None
    if probe is not None:
        stop.touch()
        longest, taken = probe.communicate(timeout=600)[0].split()
        lock_wait_s, lock_takes = round(float(longest), 2), int(taken)
        print(f"another writer waited at most {lock_wait_s}s ({lock_takes} lock takes)")

    rng = random.Random(1)
    common = max(vocab[:2000], key=len)  # a longish word: a few hundred/thousand matches
    rare = f" {args.pairs // 2}."  # exactly one pair carries this number
    queries = {
        "word": common,
        "rare": rare.strip(),
        "phrase": " ".join(rng.choices(vocab, k=1)) + " ",
        "cjk3": "".join(chr(0x4E00 + i) for i in (5, 6, 7)),
        "short_cjk_like_fallback": chr(0x4E00 + 11),
    }
    pages: dict[str, float] = {}
    totals: dict[str, str] = {}
    for label, q in queries.items():
        pages[label] = round(timed(lambda q=q: pairs.search_pairs(info.id, q, page_size=50)), 1)
        res = pairs.search_pairs(info.id, q, page_size=50)
        totals[label] = f"{res.total}{'' if res.total_is_exact else '+'}"
    pages["word_valid_split"] = round(
        timed(lambda: pairs.search_pairs(info.id, common, split="valid", page_size=50)), 1
    )
    pages["no_query_page1"] = round(timed(lambda: pairs.search_pairs(info.id, "", page_size=50)), 1)
    pages["no_query_page_1000"] = round(
        timed(lambda: pairs.search_pairs(info.id, "", page=1000, page_size=50)), 1
    )

    def like_scan(q: str) -> None:
        with session_scope() as s:
            caps = (pairs.COUNT_CAP, pairs.LIKE_SCAN_CAP)
            search._search_like(s.connection(), search._Query(info.id, q, None, 50, 0, *caps))

    baseline = {label: round(timed(lambda q=q: like_scan(q), 3), 1) for label, q in queries.items()}
    search_ms = max(pages[k] for k in ("word", "rare", "phrase", "cjk3", "word_valid_split"))
    for label in pages:
        print(f"search {label:<26} {pages[label]:8.1f} ms  total={totals.get(label, '-')}")
    out = {
        "pairs": args.pairs,
        "backend": get_engine().dialect.name,
        "import_seconds": round(import_s, 2),
        "import_cpu_seconds": round(import_cpu, 2),  # both threads; wall can be less
        "loadavg_1m_before_import": round(load_before, 2),  # other processes on the box
        "pairs_per_s": round(result.added / import_s),
        # SQLite: the longest a concurrent writer waited during the import (≈ longest hold).
        "writer_max_wait_s": lock_wait_s,
        "writer_lock_takes": lock_takes,
        "search_page_ms": search_ms,
        "search_pages_ms": pages,
        "search_totals": totals,
        "baseline_like_scan_ms": baseline,
        "stats_ms": round(timed(lambda: pairs.corpus_stats(info.id), 3), 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
