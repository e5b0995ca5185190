"""A core taken under data-parallel ranks: what a 2 x 1 run (two single-threaded ranks) keeps
when another program holds one core (`taskset -c 1 yes > /dev/null`), against the same run
idle, measured in the same rounds.

Each run is the product's own training loop (`distributed.train_data_parallel`, the recipe's
model and batch for a minutes budget on the corpus, rank 0 this process), so the ranks take
their parts of each update by speed (`pace.RankShares`) on cores of their own
(`parallel.CorePin`), as a click's would. One process with one thread on the same busy machine
(`1x1`) is timed too: what the run would keep without its second rank. The `yes` process is
started and stopped by its PID. Prints one JSON object: per layout and condition, each run's
steps, tokens, tokens/s of its steps alone and the parts it took, their medians, and the busy
run's tokens/s against the idle one's of its round.

    python -m bench.busy_ranks [--corpus multi30k] [--rounds 2] [--seconds 60] [--core 1]
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
from core_model.training import TrainConfig
from core_model.training.parallel import Layout

LAYOUTS = {"2x1": Layout(2, 1), "1x1": Layout(1, 1)}
VALID_PAIRS = 200  # validations as short as a click's are rare: a sample keeps them brief


def one_run(layout: Layout, data: dict, seconds: float, precision: str) -> dict[str, Any]:
    cfg = TrainConfig(time_budget_s=seconds, device="cpu", precision=precision)
    result = train_data_parallel(layout, data["train"], data["valid"][:VALID_PAIRS], cfg)
    m, pace = result.metrics, result.metrics["pace"]
    return {
        "steps": m["steps"],
        "tokens": m["tokens_trained"],
        "step_tokens_per_s": pace["step_tokens_per_s"],
        "precision": pace["precision"],
        "processes": m["world_size"],
        "threads_per_process": m["threads"],
        "parts": [c["shares"] for c in pace["share_changes"]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", choices=DATASETS, default="multi30k")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=60.0, help="each run's minutes budget, in s")
    p.add_argument("--core", type=int, default=1, help="the core `yes` takes")
    p.add_argument("--precision", default="auto")
    args = p.parse_args()
    data = splits(args.corpus)
    runs: dict[str, list[dict[str, Any]]] = {"2x1 idle": [], "2x1 busy": [], "1x1 busy": []}
    for _ in range(args.rounds):
        runs["2x1 idle"].append(one_run(LAYOUTS["2x1"], data, args.seconds, args.precision))
        hog = subprocess.Popen(["taskset", "-c", str(args.core), "yes"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            for name in ("2x1", "1x1"):
                run = one_run(LAYOUTS[name], data, args.seconds, args.precision)
                runs[f"{name} busy"].append(run)
        finally:
            hog.kill()
            hog.wait()
    speeds = {k: [r["step_tokens_per_s"] for r in v] for k, v in runs.items()}
    print(
        json.dumps(
            {
                "corpus": args.corpus,
                "seconds": args.seconds,
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
