"""Batch shapes and training speed: tokens/s of the product's training steps, per precision,
on one synthetic shape, on a corpus' real length-bucketed batches, and with their lengths
rounded up to a multiple (few distinct shapes).

Why: CPU bf16 (oneDNN) prepares its kernels per shape, and a real run's batches have a new
shape nearly every step, so one shape timed again and again overstates what a run gets
(issue 38). Padding lengths to a multiple of 8 leaves a handful of shapes per side, at the
cost of computing some padding; only real (non-pad) tokens count in the figures, so the
comparison is what a run trains.

The model and batch are the recipe's for `--tokens` on the corpus (by default the Multi30k
10-minute click's below 3.5M tokens: `small`, 4k joint pieces, 625-token batches — the model
of docs/TRAINING.md's figures); the lengths are those of the corpus'
training pairs under a SentencePiece model of the recipe's size, trained here. Every
measurement is `calibration.measure` (forward, loss, backward, clipping, fused Adam) in a
**fresh process** — no kernel prepared by an earlier measurement — on `--steps` steps of
batches drawn from a different slice of the corpus each round; the modes and precisions are
interleaved within each round, so a machine shared with other work slows them alike, and
the ratios are per round. As in a run's calibration, the `--steps` steps visit half as many
batches twice: tokens/s is the steady speed of the second visits, `new_shape_s` the extra
seconds of a first step on a shape, `run_shapes` the distinct shapes of the slice's batches.
Prints one JSON object: per precision and mode the tokens/s of each round and their median,
the ratios to the real batches, the shapes' figures, the CPU's flags and the load.

    python -m bench.batch_shapes [--corpus multi30k] [--rounds 3] [--steps 60] [--threads 2]
        [--device cpu|cuda]

(On a GPU the recipe's batch is the GPU's, 8,192 tokens.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench.data import DATASETS, splits
from core_model.batching import encode_pairs
from core_model.tokenizer import train_tokenizers
from core_model.training import TrainConfig, recipe
from core_model.training.calibration import measure
from core_model.training.precision import cpu_supports_bf16
from core_model.transformer import ModelConfig

MODES = ("one_shape", "real", "padded_8")
MULTIPLES = {"one_shape": 1, "real": 1, "padded_8": 8}


def cpu_flags() -> list[str]:
    """The CPU's flags that decide its matrix kernels."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma")
    return sorted(set(flags) & set(wanted))


def corpus_lengths(corpus: str, tokens: int, device: str) -> tuple[dict, list[list[int]]]:
    """The recipe's model config (as a dict) and batch for `tokens` on `corpus`, and the real
    (source, target) subword lengths of its training pairs under a tokenizer of the planned
    vocabulary."""
    data = splits(corpus)
    facts = recipe.CorpusFacts.of(data["train"], data["valid"])
    cfg = recipe.resolve(TrainConfig(token_budget=tokens, device=device), facts, False).cfg
    tok = train_tokenizers(
        [s for s, _ in data["train"]],
        [t for _, t in data["train"]],
        vocab_size=cfg.vocab_size,
        joint=cfg.joint_vocab,
    )
    examples = encode_pairs(data["train"], tok, cfg.max_len)
    mcfg = cfg.model_config(tok.src.vocab_size, tok.tgt.vocab_size, tok.shared)
    lengths = [[len(ex.src), len(ex.tgt)] for ex in examples]
    return {"model": mcfg.to_dict(), "batch_tokens": cfg.max_tokens_per_batch}, lengths


def one(spec_path: str, mode: str, precision: str, round_: int) -> None:
    """A child: one measurement, printed as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    lengths = [tuple(p) for p in spec["lengths"][round_ :: spec["rounds"]]]
    if mode == "one_shape":  # the median pair, as many as the slice has, in equal batches
        src = int(statistics.median(s for s, _ in lengths))
        tgt = int(statistics.median(t for _, t in lengths))
        per_batch = spec["batch_tokens"] // max(src, tgt + 1)
        lengths = [(src, tgt)] * (per_batch * max(1, len(lengths) // per_batch))
    cal = measure(
        ModelConfig.from_dict(spec["model"]),
        spec["batch_tokens"],
        lengths,
        torch.device(spec["device"]),
        precision,
        spec["threads"],
        seconds=10_000.0,
        multiple=MULTIPLES[mode],
        max_steps=spec["steps"],
    )
    print(json.dumps(cal.to_dict()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", choices=DATASETS, default="multi30k")
    p.add_argument("--tokens", type=int, default=3_400_000, help="the budget whose recipe runs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60, help="timed steps per measurement")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precisions", default=None, help="comma-separated (default: fp32[,bf16])")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        one(*args.child[:3], int(args.child[3]))
        return
    bf16 = cpu_supports_bf16() or args.device == "cuda"
    precisions = (args.precisions or ("fp32,bf16" if bf16 else "fp32")).split(",")
    load_before = os.getloadavg()
    model, lengths = corpus_lengths(args.corpus, args.tokens, args.device)
    spec = {**model, "lengths": lengths, "rounds": args.rounds, "steps": args.steps}
    spec.update(threads=args.threads, device=args.device)
    timed: dict[str, dict[str, list[dict]]] = {p: {m: [] for m in MODES} for p in precisions}
    with tempfile.TemporaryDirectory() as folder:
        spec_path = Path(folder) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        for round_ in range(args.rounds):
            for precision in precisions:
                for mode in MODES:
                    cmd = [sys.executable, "-m", "bench.batch_shapes", "--child"]
                    cmd += [str(spec_path), mode, precision, str(round_)]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                    timed[precision][mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    result: dict = {
        "corpus": args.corpus,
        "model": {k: model["model"][k] for k in ("d_model", "n_encoder_layers", "src_vocab_size")},
        "batch_tokens": model["batch_tokens"],
        "steps": args.steps,
        "threads": args.threads,
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "cpu_flags": cpu_flags(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "precisions": {},
    }
    for precision, modes in timed.items():
        rows = {}
        for mode, cals in modes.items():
            speeds = [c["tokens_per_s"] for c in cals]
            rows[mode] = {
                "tokens_per_s": speeds,
                "median": statistics.median(speeds),
                "shapes": [c["shapes"] for c in cals],
                "new_shape_s": [c["new_shape_s"] for c in cals],
                "run_shapes": [c["run_shapes"] for c in cals],
            }
        for mode in MODES:  # per round, then the median: the rounds share their load
            ratios = [
                a / b
                for a, b in zip(
                    rows[mode]["tokens_per_s"], rows["real"]["tokens_per_s"], strict=True
                )
            ]
            rows[mode]["to_real"] = round(statistics.median(ratios), 3)
        result["precisions"][precision] = rows
    if "bf16" in timed and "fp32" in timed:
        result["bf16_to_fp32"] = {
            mode: round(
                statistics.median(
                    b["tokens_per_s"] / f["tokens_per_s"]
                    for b, f in zip(timed["bf16"][mode], timed["fp32"][mode], strict=True)
                ),
                3,
            )
            for mode in MODES
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
