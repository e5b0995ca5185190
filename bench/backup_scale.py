"""Backup scale benchmark: back up (and restore) a SQLite workbench holding N synthetic pairs.

    python bench/backup_scale.py [--pairs 1000000] [--workdir DIR] [--no-restore]

The pairs (random CJK source, made-up syllable words as target: ``corpus_scale``'s text) are
written straight into the SQLite file with one ``executemany`` in one transaction (the FTS
index's triggers fill it as an import would), so that setting up stays quick; that time is
not the benchmark. Timed is ``python -m workbench backup FILE`` as a user runs it (a fresh
process: start-up included), then ``restore`` of that archive into a fresh data folder,
whose pair count is checked; both for a plain ``backup.tar`` and a gzip-compressed
``backup.tar.gz`` (the archive's name asks for it), compared in the same run. The last line
printed is one JSON object; the target is a backup under 120 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus_scale import make_vocabulary  # noqa: E402

TARGET_S = 120.0
MB = 1 << 20
CHUNK = 50_000  # rows per executemany (all in one transaction)


def fill(corpus_id: int, n: int, seed: int = 0) -> None:
    """``n`` pairs into the corpus in one transaction (hashes and splits as the app makes
    them), indexed for search set-based as a bulk import does (``db.search``)."""
    from db import search
    from workbench.corpus.text_rules import default_split, pair_hash
    from workbench.storage import engine

    rng = random.Random(seed)
    vocab = make_vocabulary(rng)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3500)]
    now = time.strftime("%Y-%m-%d %H:%M:%S.000000", time.gmtime())

    def row(i: int) -> tuple:
        src = "".join(rng.choices(cjk, k=rng.randint(6, 28))) + "。"
        tgt = " ".join(rng.choices(vocab, k=rng.randint(4, 16))).capitalize() + f" {i}."
        digest = pair_hash(src, tgt)
        return corpus_id, src, tgt, default_split(src, n), "", digest, now, now

    with engine().begin() as conn:
        trigger = search.suspend_fts_insert_trigger(conn)
        for first in range(0, n, CHUNK):
            conn.exec_driver_sql(
                "INSERT INTO pairs (corpus_id, source, target, split, note, content_hash, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [row(i) for i in range(first, min(n, first + CHUNK))],
            )
        if trigger:
            search.index_rows_after(conn, 0)
            search.restore_trigger(conn, trigger)
    with engine().connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def workbench(home: Path, *args: str) -> tuple[float, dict]:
    """Run ``python -m workbench ARGS`` on ``home``; returns (wall seconds, its JSON line)."""
    env = {**os.environ, "WORKBENCH_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("WORKBENCH_DB_URL", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"workbench {args[0]} failed: {done.stderr.strip()}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--workdir", default=None, help="keep files here instead of a temp dir")
    ap.add_argument("--no-restore", action="store_true", help="time the backup only")
    args = ap.parse_args()

    keep = bool(args.workdir)  # files kept where the user asked for them
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wb-backup-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)
    from workbench import settings
    from workbench.corpus import corpora
    from workbench.storage import engine

    engine()  # the schema, migrated
    corpus = corpora.create_corpus(f"bench-{args.pairs}", "zh", "en")
    database = settings.database_url().removeprefix("sqlite:///")
    started = time.perf_counter()
    fill(corpus.id, args.pairs)
    fill_s = time.perf_counter() - started
    db_mb = os.path.getsize(database) / MB
    print(f"wrote {args.pairs:,} pairs in {fill_s:.1f}s ({db_mb:.0f} MiB)", file=sys.stderr)

    result: dict = {
        "pairs": args.pairs,
        "db_mb": round(db_mb, 1),
        "target_s": TARGET_S,
        "cpus": os.cpu_count(),
        "fill_seconds": round(fill_s, 1),
    }
    for kind, name in (("plain", "backup.tar"), ("gzip", "backup.tar.gz")):
        result[kind] = timed(home, work / name, args.pairs, not args.no_restore, keep)
    result["gzip_size_ratio"] = round(
        result["gzip"]["archive_mb"] / result["plain"]["archive_mb"], 3
    )
    result["gzip_time_ratio"] = round(result["gzip"]["seconds"] / result["plain"]["seconds"], 3)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


def timed(home: Path, archive: Path, pairs: int, restore: bool, keep: bool) -> dict:
    """Back ``home`` up into ``archive`` (and restore it into a fresh folder, checked); the
    files stay when ``keep``."""
    backup_s, summary = workbench(home, "backup", str(archive))
    if summary["counts"]["pairs"] != pairs:
        raise SystemExit(f"backed up {summary['counts']['pairs']} pairs, expected {pairs}")
    result = {
        "archive_mb": round(archive.stat().st_size / MB, 1),
        "seconds": round(backup_s, 2),
        "backup_service_seconds": summary["seconds"],
    }
    if restore:
        fresh = archive.with_name(f"restored-{archive.name}")
        restore_s, restored = workbench(fresh, "restore", str(archive))
        check = sqlite3.connect(fresh / "workbench.db")
        (count,) = check.execute("SELECT count(*) FROM pairs").fetchone()
        check.close()
        if count != pairs or restored["counts"]["pairs"] != pairs:
            raise SystemExit(f"restored {count} pairs, expected {pairs}")
        result["restore_seconds"] = round(restore_s, 2)
        if not keep:
            shutil.rmtree(fresh, ignore_errors=True)
    if not keep:
        archive.unlink()
    return result


if __name__ == "__main__":
    main()
