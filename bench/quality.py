"""Translation quality within a wall-clock budget: Multi30k de→en (task 1, raw).

    python bench/quality.py --minutes 30 [--device auto] [--preset small] [--config '{...}']

Trains on train.{de,en}.gz with val.{de,en}.gz for validation/early stopping/model selection
only, then reports sacreBLEU (detokenized, cased, 13a) and chrF of beam-search translations of
test_2016_flickr — the set everybody reports — plus throughput and parameter count. The last
line printed is one JSON object. Hyper-parameters were tuned on val only.

Data: ../shared/data/multi30k relative to the project root (or --data DIR); the script exits
with a message when it is absent.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from core_model.metrics import score  # noqa: E402
from core_model.training import ProgressEvent, TrainConfig, train  # noqa: E402
from core_model.translator import translate_ids  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "multi30k"

# The CPU recipe, tuned on val with 10-minute pilots on 2 shared cores (valid greedy BLEU after
# 10 min: post-norm + Noam 1.5e-3/800 warm-up 10.7; pre-norm + 2e-3/300 15.4; + dropout 0
# 26.9; + linear decay to 0 over the time budget 29.5). A 'small' Transformer (d_model 256,
# 3+3 layers) made pre-norm, a joint 8k SentencePiece vocabulary (tied embeddings), ~2.5k-token
# batches, bf16 autocast (2x on this CPU), no dropout (a 30-minute run is far from
# overfitting, and dropout costs CPU time), label smoothing 0.1, the average of the
# last epochs if it validates better, beam 4 at test time (§6.1).
# Measured (2 shared cores, AVX512-BF16, --minutes 30): test BLEU 37.3, chrF 57.1, 2126 steps,
# ~6k tokens/s, 7.6M parameters; --minutes 10: BLEU 29.8.
RECIPE: dict = {
    "preset": "small",
    "model_overrides": {"norm_first": True},
    "vocab_size": 8000,
    "joint_vocab": True,
    "max_tokens_per_batch": 2500,
    "dropout": 0.0,
    "lr_schedule": "linear",
    "lr": 2e-3,
    "warmup_steps": 300,
    "label_smoothing": 0.1,
    "average_last": 5,
    "patience": None,
    "valid_max_sentences": 300,
    "early_stop_metric": "bleu",
}


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_split(data: Path, name: str, src: str = "de", tgt: str = "en") -> list[tuple[str, str]]:
    s, t = read_gz(data / f"{name}.{src}.gz"), read_gz(data / f"{name}.{tgt}.gz")
    if len(s) != len(t):
        raise SystemExit(f"{name}: {len(s)} {src} lines but {len(t)} {tgt} lines")
    return list(zip(s, t, strict=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget")
    p.add_argument("--device", default="auto")
    p.add_argument("--preset", default=None, help="model preset (default: the recipe's)")
    p.add_argument("--precision", default="auto")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--config", default="{}", help="JSON object overriding TrainConfig fields")
    p.add_argument("--train-limit", type=int, default=None, help="use only N training pairs")
    p.add_argument("--out", type=Path, default=None, help="write the model folder here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()

    if not (args.data / "train.de.gz").is_file():
        raise SystemExit(f"Multi30k not found in {args.data} (see ../shared/data/README.md)")
    train_pairs = load_split(args.data, "train")[: args.train_limit]
    valid_pairs = load_split(args.data, "val")
    test_pairs = load_split(args.data, "test_2016_flickr")

    settings = {**RECIPE, **json.loads(args.config)}
    if args.preset:
        settings["preset"] = args.preset
    settings.update(
        device=args.device,
        precision=args.precision,
        time_budget_s=args.minutes * 60.0,
        epochs=settings.get("epochs") or 10_000,  # the clock is the budget
    )
    cfg = TrainConfig.from_dict(settings)

    last = [0.0]

    def report(e: ProgressEvent) -> None:
        if args.quiet or (e.kind == "step" and e.elapsed_s - last[0] < 60):
            return
        last[0] = e.elapsed_s
        fields = {
            "kind": e.kind, "epoch": e.epoch, "step": e.step, "train_loss": e.train_loss,
            "valid_loss": e.valid_loss, "bleu": e.bleu, "lr": e.lr,
            "tok_s": round(e.tokens_per_s), "elapsed": round(e.elapsed_s),
        }  # fmt: skip
        print(json.dumps(fields), file=sys.stderr, flush=True)

    start = time.monotonic()
    result = train(train_pairs, valid_pairs, cfg, out_dir=args.out, callback=report)
    train_s = time.monotonic() - start

    t0 = time.monotonic()
    with torch.autocast("cpu", enabled=False):
        outputs = translate_ids(
            result.model, result.tokenizers, [s for s, _ in test_pairs], beam=args.beam
        )
    decode_s = time.monotonic() - t0
    test = score([o.text for o in outputs], [t for _, t in test_pairs], tokenize="13a")
    m = result.metrics
    print(
        json.dumps(
            {
                "bench": "quality",
                "data": "multi30k de-en test_2016_flickr",
                "bleu": test["bleu"],
                "chrf": test["chrf"],
                "n_test": test["n"],
                "valid_bleu_greedy": m.get("bleu"),
                "valid_loss": m.get("valid_loss"),
                "minutes": args.minutes,
                "train_time_s": round(train_s, 1),
                "decode_time_s": round(decode_s, 1),
                "beam": args.beam,
                "tokens_per_s": m.get("tokens_per_s"),
                "parameters": m.get("parameters"),
                "steps": m.get("steps"),
                "epochs": m.get("epochs"),
                "selected": m.get("selected"),
                "precision": m.get("precision"),
                "device": m.get("device"),
                "threads": torch.get_num_threads(),
                "config": {k: settings[k] for k in sorted(settings) if k != "time_budget_s"},
            }
        )
    )


if __name__ == "__main__":
    main()
