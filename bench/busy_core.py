"""A busy core: which way of using the threads keeps the most training tokens/s when another
program takes one core (`taskset -c 1 yes > /dev/null`, as a laptop's browser or build would).

Variants, each timed by the product's calibration (`calibration.measure_layout`: full steps of
the recipe's model on batches of the corpus' length mix) in a fresh process, so that the
OpenMP wait policy, read when torch loads its runtime, is the variant's:
- `1x2`: one process, a thread per core, OpenMP's default wait policy (threads spin);
- `1x2-passive`: the same with OMP_WAIT_POLICY=passive (waiting threads sleep);
- `1x1`: one process, one thread (what `pace.ThreadWatch` falls back to);
- `2x1`: two data-parallel ranks of one thread each.
Each round times every variant idle and with the core taken, interleaved, so other work on
the machine slows them alike; the `yes` process is started and stopped by its PID. Prints
one JSON object: per variant and condition the tokens/s of each round and their median, and
busy / idle per round.

    python -m bench.busy_core [--corpus multi30k] [--rounds 2] [--seconds 6] [--core 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.batch_shapes import cpu_flags
from bench.data import DATASETS, splits
from core_model.training import TrainConfig, recipe
from core_model.training.calibration import measure_layout
from core_model.training.parallel import Layout
from core_model.transformer import ModelConfig

VARIANTS = {
    "1x2": (Layout(1, 2), "active"),
    "1x2-passive": (Layout(1, 2), "passive"),
    "1x1": (Layout(1, 1), "active"),
    "2x1": (Layout(2, 1), "active"),
}


def recipe_spec(corpus: str, tokens: int) -> dict:
    """The recipe's model and batch for `tokens` on `corpus`, and its length mix."""
    data = splits(corpus)
    facts = recipe.CorpusFacts.of(data["train"], data["valid"])
    cfg = recipe.resolve(TrainConfig(token_budget=tokens, device="cpu"), facts, False).cfg
    vocab = int(cfg.vocab_size or 0)
    mcfg = cfg.model_config(vocab, vocab, bool(cfg.joint_vocab))
    batch = int(cfg.max_tokens_per_batch or 0)
    return {"model": mcfg.to_dict(), "batch_tokens": batch, "lengths": facts.length_mix()}


def child(spec_path: str, variant: str, seconds: float, precision: str) -> None:
    """One variant's measurement, printed as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    (cal,) = measure_layout(
        VARIANTS[variant][0],
        ModelConfig.from_dict(spec["model"]),
        spec["batch_tokens"],
        [tuple(pair) for pair in spec["lengths"]],
        torch.device("cpu"),
        [precision],
        seconds,
    )
    print(json.dumps(cal.to_dict()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", choices=DATASETS, default="multi30k")
    p.add_argument("--tokens", type=int, default=3_400_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--core", type=int, default=1, help="the core `yes` takes")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child, args.seconds, args.precision)
        return
    load_before = os.getloadavg()
    folder = tempfile.mkdtemp(prefix="busy-core-")
    spec_path = Path(folder) / "spec.json"
    spec_path.write_text(json.dumps(recipe_spec(args.corpus, args.tokens)))
    timed: dict[str, dict[str, list[float]]] = {v: {"idle": [], "busy": []} for v in VARIANTS}
    for _ in range(args.rounds):
        for condition in ("idle", "busy"):
            hog = None
            if condition == "busy":
                cmd = ["taskset", "-c", str(args.core), "yes"]
                hog = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
                time.sleep(0.5)
            try:
                for variant, (_, policy) in VARIANTS.items():
                    env = {**os.environ, "OMP_WAIT_POLICY": policy.upper()}
                    cmd = [sys.executable, "-m", "bench.busy_core", "--child", str(spec_path)]
                    cmd += [variant, "--seconds", str(args.seconds), "--precision", args.precision]
                    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                    speed = json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"]
                    timed[variant][condition].append(speed)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    shutil.rmtree(folder, ignore_errors=True)
    result = {
        "corpus": args.corpus,
        "precision": args.precision,
        "seconds": args.seconds,
        "cpu_flags": cpu_flags(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "variants": {
            v: {
                **speeds,
                "idle_median": statistics.median(speeds["idle"]),
                "busy_median": statistics.median(speeds["busy"]),
                "busy_to_idle": [
                    round(b / i, 3) for b, i in zip(speeds["busy"], speeds["idle"], strict=True)
                ],
            }
            for v, speeds in timed.items()
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
