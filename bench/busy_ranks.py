"""A core taken under data-parallel ranks: what a 2 x 1 run (two single-threaded ranks) keeps
when another program holds one core (`taskset -c 1 yes > /dev/null`), against the same run
idle, measured in the same rounds.

Each run is the product's own training loop (`distributed.train_data_parallel`, rank 0 this
process) of the model, vocabulary and batch the recipe chooses for a 10-minute click's tokens
(`--tokens`, as `bench.busy_core`; a minute's budget alone would plan a smaller model, whose
steps weigh the ranks' exchange differently), for `--seconds`, so the ranks take
their parts of each update by speed (`pace.RankShares`) on cores of their own
(`parallel.CorePin`), as a click's would. One process with one thread on the same busy machine
(`1x1`) is timed too: what the run would keep without its second rank. The `yes` process is
started and stopped by its PID. Prints one JSON object: per layout and condition, each run's
steps, tokens, tokens/s of its steps alone and the parts it took, their medians, and the busy
run's tokens/s against the idle one's of its round.

    python -m bench.busy_ranks [--corpus multi30k] [--tokens 5000000] [--rounds 2] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from typing import Any

from bench.batch_shapes import cpu_flags
from bench.data import DATASETS, splits
from core_model.distributed import train_data_parallel
from core_model.training import TrainConfig, recipe
from core_model.training.parallel import Layout

LAYOUTS = {"2x1": Layout(2, 1), "1x1": Layout(1, 1)}
VALID_PAIRS = 200  # validations as short as a click's are rare: a sample keeps them brief


def click_config(data: dict, tokens: int, seconds: float, precision: str) -> TrainConfig:
    """The recipe's model, vocabulary and batch for `tokens`, trained for `seconds`."""
    facts = recipe.CorpusFacts.of(data["train"], data["valid"])
    plan = recipe.resolve(TrainConfig(token_budget=tokens, device="cpu"), facts, False).cfg
    return TrainConfig(
        preset=plan.preset,
        vocab_size=plan.vocab_size,
        joint_vocab=plan.joint_vocab,
        max_tokens_per_batch=plan.max_tokens_per_batch,
        dropout=plan.dropout,
        time_budget_s=seconds,
        device="cpu",
        precision=precision,
    )


def one_run(layout: Layout, data: dict, cfg: TrainConfig) -> dict[str, Any]:
    result = train_data_parallel(layout, data["train"], data["valid"][:VALID_PAIRS], cfg)
    m, pace = result.metrics, result.metrics["pace"]
    return {
        "steps": m["steps"],
        "tokens": m["tokens_trained"],
        "step_tokens_per_s": pace["step_tokens_per_s"],
        "precision": pace["precision"],
        "processes": m["world_size"],
        "threads_per_process": m["threads"],
        "parts": [c["shares"] for c in pace.get("share_changes", [])],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", choices=DATASETS, default="multi30k")
    p.add_argument("--tokens", type=int, default=5_000_000, help="the click's planned tokens")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=60.0, help="each run's minutes budget, in s")
    p.add_argument("--core", type=int, default=1, help="the core `yes` takes")
    p.add_argument("--precision", default="auto")
    args = p.parse_args()
    data = splits(args.corpus)
    cfg = click_config(data, args.tokens, args.seconds, args.precision)
    runs: dict[str, list[dict[str, Any]]] = {"2x1 idle": [], "2x1 busy": [], "1x1 busy": []}
    for _ in range(args.rounds):
        runs["2x1 idle"].append(one_run(LAYOUTS["2x1"], data, cfg))
        hog = subprocess.Popen(["taskset", "-c", str(args.core), "yes"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            for name in ("2x1", "1x1"):
                runs[f"{name} busy"].append(one_run(LAYOUTS[name], data, cfg))
        finally:
            hog.kill()
            hog.wait()
    speeds = {k: [r["step_tokens_per_s"] for r in v] for k, v in runs.items()}
    print(
        json.dumps(
            {
                "corpus": args.corpus,
                "seconds": args.seconds,
                "model": {k: getattr(cfg, k) for k in ("preset", "vocab_size", "dropout")}
                | {"batch_tokens": cfg.max_tokens_per_batch},
                "cpu_flags": cpu_flags(),
                "cores": os.cpu_count(),
                "runs": runs,
                "median_tokens_per_s": {k: statistics.median(v) for k, v in speeds.items()},
                "2x1_busy_to_idle": [
                    round(b / i, 3)
                    for b, i in zip(speeds["2x1 busy"], speeds["2x1 idle"], strict=True)
                ],
                "2x1_busy_to_1x1_busy": [
                    round(b / o, 3)
                    for b, o in zip(speeds["2x1 busy"], speeds["1x1 busy"], strict=True)
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
