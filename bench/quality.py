"""Translation quality after M minutes of training, through the product's own path.

    python -m bench.quality --data multi30k|tatoeba --minutes M [--reference] [--train-limit N]

What a user gets, nothing private: the training (and validation) pairs are imported as a corpus
in a fresh WORKBENCH_HOME, a run is queued with the product's defaults and a time budget
(`enqueue_training(..., minutes=M)`), a real worker process (`python -m workbench worker
--once`) trains and registers the version, and the registered version translates the test set
with beam 4 (`workbench.evaluation.evaluation.evaluate`). sacreBLEU, detokenized, cased.

- multi30k: de→en; test = test_2016_flickr (the set everybody reports).
- tatoeba: zh→en; the deterministic split of bench/data.py (hash of the English side).
With `--reference`, the paper's settings on `torch.nn.Transformer` (bench/reference.py) train
for the same minutes on the same pairs and are scored on the same test set, printed beside ours.
Validation pairs are for early stopping and model selection only; nothing is tuned on the test
set. Every figure comes with tokens/s and steps. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import data
from core_model.metrics import bleu_tokenizer_for, score

ROOT = Path(__file__).resolve().parents[1]


def _tsv(pairs_by_split: dict[str, data.Pairs]) -> bytes:
    """The pairs as the workbench's TSV import format (source, target, split)."""
    lines = ["source\ttarget\tsplit"]
    for split, pairs in pairs_by_split.items():
        lines += [f"{s}\t{t}\t{split}" for s, t in pairs]
    return ("\n".join(lines) + "\n").encode()


def train_through_product(
    name: str,
    src_lang: str,
    tgt_lang: str,
    train: data.Pairs,
    valid: data.Pairs,
    minutes: float | None,
) -> dict:
    """Import, queue with the defaults and a time budget (None: the automatic budget), train
    in a real worker process; returns the run and the registered version's metrics."""
    from workbench.corpus import corpora, importing
    from workbench.models import registry
    from workbench.training import run_info, runs

    info = corpora.create_corpus(name, src_lang, tgt_lang)
    imported = importing.import_file(info.id, _tsv({"train": train, "valid": valid}), "tsv")
    clicked = time.monotonic()
    run_id = runs.enqueue_training(info.id, minutes=minutes)
    worker = subprocess.run(
        [sys.executable, "-m", "workbench", "worker", "--once"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    ready_s = time.monotonic() - clicked
    run = run_info.get_run(run_id)
    if run.status != runs.RunStatus.SUCCEEDED or run.version_id is None:
        tail = worker.stdout[-2000:] + worker.stderr[-2000:]
        raise SystemExit(f"error: run {run_id} {run.status}: {run.error}\n{tail}")
    version = registry.get_version(run.version_id)
    return {
        "run_id": run_id,
        "version_id": version.id,
        "imported_pairs": imported.added,
        "click_to_ready_s": round(ready_s, 1),
        "metrics": version.metrics,
    }


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", choices=tuple(data.DATASETS), default="multi30k")
    p.add_argument("--minutes", type=float, default=10.0, help="training wall-clock budget")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--train-limit", type=int, help="use only the first N training pairs")
    p.add_argument("--reference", action="store_true", help="also train the paper's settings")
    p.add_argument(
        "--reference-preset",
        default="base",
        help="size of the reference nn.Transformer: base (the paper's) or small (ours)",
    )
    p.add_argument("--home", type=Path, help="WORKBENCH_HOME to use (default: a temp dir)")
    args = p.parse_args()

    pairs = data.splits(args.data)
    train = pairs["train"][: args.train_limit]
    src_lang, tgt_lang = data.DATASETS[args.data]
    home = args.home or Path(tempfile.mkdtemp(prefix="wb-quality-"))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)

    from workbench.evaluation.evaluation import evaluate

    ours = train_through_product(
        f"{args.data} bench", src_lang, tgt_lang, train, pairs["valid"], args.minutes
    )
    m = ours["metrics"]
    test = evaluate(ours["version_id"], pairs["test"], beam=args.beam)
    valid = evaluate(ours["version_id"], pairs["valid"], beam=1)  # same yardstick as the reference
    result: dict = {
        "bench": "quality",
        "data": args.data,
        "direction": f"{src_lang}-{tgt_lang}",
        "test_set": "test_2016_flickr" if args.data == "multi30k" else "tatoeba hash split (test)",
        "minutes": args.minutes,
        "beam": args.beam,
        "train_pairs": len(train),
        "bleu": test["bleu"],
        "chrf": test["chrf"],
        "n_test": test["n"],
        "valid_bleu_greedy": valid["bleu"],
        "tokens_per_s": m.get("tokens_per_s"),
        "steps": m.get("steps"),
        "epochs": m.get("epochs"),
        "train_time_s": m.get("train_time_s"),
        "click_to_ready_s": ours["click_to_ready_s"],
        "stop_reason": m.get("stop_reason"),
        "selected": m.get("selected"),
        "parameters": m.get("parameters"),
        "precision": m.get("precision"),
        "threads": m.get("threads"),
    }
    if args.reference:
        from bench.reference import train_paper_reference, translate_reference

        model, tokenizers, stats = train_paper_reference(
            train, args.minutes, preset=args.reference_preset
        )
        outputs = translate_reference(model, tokenizers, [s for s, _ in pairs["test"]], args.beam)
        test_refs = [t for _, t in pairs["test"]]
        ref = score(outputs, test_refs, bleu_tokenizer_for(test_refs))
        valid_out = translate_reference(model, tokenizers, [s for s, _ in pairs["valid"]], 1)
        valid_refs = [t for _, t in pairs["valid"]]
        ref_valid = score(valid_out, valid_refs, bleu_tokenizer_for(valid_refs))
        result["reference"] = {
            "what": f"torch.nn.Transformer, paper's settings, {args.reference_preset} size",
            "bleu": ref["bleu"],
            "chrf": ref["chrf"],
            "valid_bleu_greedy": ref_valid["bleu"],
            **stats,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
