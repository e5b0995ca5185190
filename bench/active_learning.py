"""Does "what to correct next" pick better pairs than chance? A simulation on Multi30k de→en
through the product's own path (and the pool's ranking speed with the start version).

    python -m bench.active_learning [--start 2000] [--add 1000] [--pool 10000] [--minutes 3]
        [--preset auto|tiny|small] [--patience N] [--control] [--home DIR]

1. **Start.** A corpus of `--start` Multi30k training pairs (a seeded sample) plus the
   validation pairs is imported, a run is queued with the product's defaults and a budget of
   `--minutes` (`runs.enqueue_training(corpus, preset, minutes=M)`), and a real worker process
   (`python -m workbench worker --once`) trains and registers the start version.
2. **Uncertainty.** `--pool` other training sentences (their German side only) are uploaded
   to a copy of the start corpus' pool (`pool.add_to_pool`); a pool job
   (`pool_jobs.enqueue_translation`, taken by a worker process) translates them with the start
   version and ranks them by its uncertainty (length-normalised log-probability). The
   `--add` most uncertain are "corrected" in review (`pool.review(..., "edit", reference)`):
   their reference translations stand in for a user's corrections.
3. **Random.** Another copy of the start corpus gets `--add` pairs drawn at random (seeded)
   from the same pool, with their references.
4. **Retrain.** Each copy is trained from the start version (`init_version_id`: the loop a
   user runs — correct, then retrain the current version) with the same `--minutes` budget.
   With `--control`, a third copy with no added pairs is retrained too: the gain that more
   training alone gives. Every version is scored on the whole validation set (greedy) by
   the product's comparison (`evaluation.compare`: BLEU and chrF with 95 % intervals, and
   p-values against the random choice by paired bootstrap); reported: each gain over the
   start version, and uncertainty − random with its p-value. Budgets are wall-clock, so each
   run's steps and tokens/s are reported beside it (the machine's cores are shared).
5. **Ranking speed.** The pool job's wall time for `--pool` sentences (the worker process'
   start, model loading, greedy translation, scoring and the writes), as sentences/s and as
   the time 100k sentences would take at that rate — an extrapolation when `--pool` < 100k.
Nothing is tuned on the test set (the test split is not read). The last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import data

ROOT = Path(__file__).resolve().parents[1]
FULL_POOL = 100_000  # the pool size whose ranking time is reported


def _tsv(rows: list[tuple[str, str, str]]) -> bytes:
    """(source, target, split) rows as the workbench's TSV import format."""
    lines = ["source\ttarget\tsplit", *(f"{s}\t{t}\t{split}" for s, t, split in rows)]
    return ("\n".join(lines) + "\n").encode()


def _corpus(name: str, rows: list[tuple[str, str, str]]) -> int:
    from workbench.corpus import corpora, importing

    info = corpora.create_corpus(name, "de", "en")
    importing.import_file(info.id, _tsv(rows), fmt="tsv")
    return info.id


def worker_once() -> float:
    """One job taken by a real worker process; returns its wall time in seconds."""
    began = time.monotonic()
    worker = subprocess.run(
        [sys.executable, "-m", "workbench", "worker", "--once"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    if worker.returncode != 0:
        raise SystemExit(f"error: the worker failed\n{worker.stderr[-2000:]}")
    return time.monotonic() - began


def _train(
    corpus_id: int, preset: str, minutes: float, patience: int | None, init: int | None = None
) -> dict:
    """Queue a run with the defaults, a preset, a time budget and an early-stopping patience
    (epochs; 0: never), train it in a worker process; returns the version id and what the run
    reports (steps, tokens/s, ...)."""
    from workbench.models import registry
    from workbench.training import run_info, runs

    extra = {} if patience is None else {"patience": patience}
    run_id = runs.enqueue_training(
        corpus_id, preset, minutes=minutes, init_version_id=init, **extra
    )
    seconds = worker_once()
    run = run_info.get_run(run_id)
    if run.status != runs.RunStatus.SUCCEEDED or run.version_id is None:
        raise SystemExit(f"error: run {run_id} {run.status}: {run.error}")
    m = registry.get_version(run.version_id).metrics
    return {
        "version": run.version_id,
        "preset": preset,
        "budget_minutes": minutes,
        "steps": m.get("steps"),
        "tokens_per_s": m.get("tokens_per_s"),
        "train_time_s": m.get("train_time_s"),
        "stop_reason": m.get("stop_reason"),
        "parameters": m.get("parameters"),
        "worker_wall_s": round(seconds, 1),
    }


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--start", type=int, default=2000, help="training pairs to start from")
    p.add_argument("--add", type=int, default=1000, help="pairs added by each strategy")
    p.add_argument("--pool", type=int, default=10000, help="pool sentences to rank")
    p.add_argument("--minutes", type=float, default=3.0, help="budget of every training run")
    p.add_argument(
        "--preset",
        default="auto",
        help="model preset of every run (auto: the recipe's choice, `small` for 2k pairs)",
    )
    p.add_argument(
        "--patience",
        type=int,
        help="early-stopping patience in epochs (default: the product's; 0: never stop early)",
    )
    p.add_argument("--control", action="store_true", help="also retrain with no added pairs")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--home", type=Path, help="WORKBENCH_HOME (default: a temporary folder)")
    return p.parse_args()


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    args = _parse()

    home = args.home or Path(tempfile.mkdtemp(prefix="wb-al-"))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)
    from workbench.corpus import importing
    from workbench.corpus.text_rules import normalize_text
    from workbench.curation import pool, pool_jobs
    from workbench.errors import WorkbenchError
    from workbench.evaluation import evaluation

    train, valid = data.multi30k("train"), data.multi30k("val")
    rng = random.Random(args.seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    start = [train[i] for i in order[: args.start]]
    pool_pairs = [train[i] for i in order[args.start : args.start + args.pool]]
    reference = {normalize_text(s): t for s, t in pool_pairs}
    base_rows = [(s, t, "train") for s, t in start] + [(s, t, "valid") for s, t in valid]

    start_corpus = _corpus("start", base_rows)
    runs_report = {"start": _train(start_corpus, args.preset, args.minutes, args.patience)}
    start_version = runs_report["start"]["version"]
    print(f"start: {runs_report['start']}", flush=True)

    # Uncertainty: rank the pool with the start version, correct the top ones in review.
    chosen_corpus = _corpus("uncertainty", base_rows)
    uploaded = pool.add_to_pool(chosen_corpus, "\n".join(s for s, _ in pool_pairs).encode())
    pool_jobs.enqueue_translation(chosen_corpus, start_version)
    rank_s = worker_once()
    ranked = pool.pool_stats(chosen_corpus).translated
    began = time.monotonic()
    queue = pool.review_queue(chosen_corpus, limit=args.add + 100)
    queue_s = time.monotonic() - began
    top, refused = [], 0
    for item in queue:
        if len(top) == args.add:
            break
        try:
            pool.review(item.id, "edit", reference[item.source])
            top.append(item)
        except WorkbenchError:  # e.g. the pair is in the corpus already
            refused += 1
    print(f"ranked {ranked} pool sentences in {rank_s:.1f} s; {len(top)} corrected", flush=True)

    random_corpus = _corpus("random", base_rows)
    picked = rng.sample(pool_pairs, args.add)
    added_random = importing.import_file(
        random_corpus, _tsv([(s, t, "train") for s, t in picked]), fmt="tsv"
    ).added

    strategies = {"uncertainty": chosen_corpus, "random": random_corpus}
    if args.control:
        strategies["control"] = _corpus("control", base_rows)
    for name, corpus in strategies.items():
        runs_report[name] = _train(
            corpus, args.preset, args.minutes, args.patience, init=start_version
        )
        print(f"{name}: {runs_report[name]}", flush=True)

    # Every version on the whole validation set, through the product's comparison: the random
    # choice is the baseline, so each p-value says whether a version differs from it.
    names = ["random", "uncertainty", "start", *(["control"] if args.control else [])]
    comparison = evaluation.compare([runs_report[n]["version"] for n in names], valid)
    scores = dict(zip(names, comparison.as_dict()["versions"], strict=True))
    valid_scores = {
        n: {k: v[k] for k in ("bleu", "bleu_ci95", "chrf", "chrf_ci95", "p_value", "chrf_p_value")}
        for n, v in scores.items()
    }
    bleu = {n: v["bleu"] for n, v in scores.items()}
    chrf = {n: v["chrf"] for n, v in scores.items()}
    print(f"validation: {valid_scores}", flush=True)

    per_s = ranked / rank_s
    report = {
        "bench": "active_learning",
        "data": "multi30k de-en (train sample; validation = val)",
        "start_pairs": args.start,
        "added_pairs": {"uncertainty": len(top), "random": added_random},
        "review_refused": refused,
        "pool_sentences": uploaded.added,
        "retrain_from": "the start version (init_version_id), same budget",
        "runs": runs_report,
        "validation": "whole val set (1,014 pairs), greedy; p-values vs random (paired bootstrap)",
        "valid": valid_scores,
        "gain_bleu": {n: round(bleu[n] - bleu["start"], 2) for n in bleu if n != "start"},
        "gain_chrf": {n: round(chrf[n] - chrf["start"], 2) for n in chrf if n != "start"},
        "uncertainty_minus_random": {
            "bleu": round(bleu["uncertainty"] - bleu["random"], 2),
            "bleu_p_value": valid_scores["uncertainty"]["p_value"],
            "chrf": round(chrf["uncertainty"] - chrf["random"], 2),
            "chrf_p_value": valid_scores["uncertainty"]["chrf_p_value"],
        },
        "mean_source_words": {
            "uncertainty": round(sum(len(i.source.split()) for i in top) / len(top), 1),
            "random": round(sum(len(s.split()) for s, _ in picked) / len(picked), 1),
            "pool": round(sum(len(s.split()) for s, _ in pool_pairs) / len(pool_pairs), 1),
        },
        "ranking": {
            "sentences": ranked,
            "seconds": round(rank_s, 1),
            "sentences_per_s": round(per_s, 1),
            f"seconds_for_{FULL_POOL}": round(FULL_POOL / per_s, 0),
            "extrapolated": ranked < FULL_POOL,
            "review_queue_query_s": round(queue_s, 3),
            "cpu_threads": os.cpu_count(),
        },
        "home": str(home),
    }
    print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
