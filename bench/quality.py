"""Translation quality after M minutes or N tokens of training, through the product's own path.

    python -m bench.quality --data multi30k|tatoeba (--minutes M | --tokens N)
        [--precision auto|fp32|bf16] [--processes N] [--threads T] [--split valid|test]
        [--set KEY=VALUE ...]
        [--chain K] [--reference] [--train-limit N]

What a user gets, nothing private: the training (and validation) pairs are imported as a corpus
in a fresh WORKBENCH_HOME, a run is queued with the product's defaults and a time budget
(`enqueue_training(..., minutes=M)`) or a token budget (`tokens=N`: the same point of learning
on any machine) in the asked precision, a real worker process (`python -m workbench worker
--once`) trains and registers the version, and the registered version translates the test set
with beam 4 (`workbench.evaluation.evaluation.evaluate`). sacreBLEU, detokenized, cased.

`--chain K` trains K runs of the budget one after another on the same corpus, each starting
where the Train button's default starts (the second on: "Continue from #N", the previous
version); the last version is scored and each link's greedy validation BLEU is listed. Compare
it with one run of K times the budget (`--chain 3 --tokens N` against `--tokens 3N`).

`--split valid` scores the validation split instead of the test set: tuning looks only at
that (`--set lr=2e-3 warmup_steps=30 ...` overrides a recipe choice for such a sweep; the
product's defaults are what is measured without it). `--precision fp32` stands in for a CPU
without bf16 (most laptops); `--processes 1` trains in one process as the product did before
it spread runs over the cores (default: the product's timed choice); `--threads 2` pins the
CPU threads (per process).

- multi30k: de→en; test = test_2016_flickr (the set everybody reports).
- tatoeba: zh→en; the product's grouped split (bench/data.py: no test sentence in train).
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
from core_model.training.config import PRECISIONS

ROOT = Path(__file__).resolve().parents[1]


def _tsv(pairs_by_split: dict[str, data.Pairs]) -> bytes:
    """The pairs as the workbench's TSV import format (source, target, split)."""
    lines = ["source\ttarget\tsplit"]
    for split, pairs in pairs_by_split.items():
        lines += [f"{s}\t{t}\t{split}" for s, t in pairs]
    return ("\n".join(lines) + "\n").encode()


def _path() -> str | None:
    """The caller's PYTHONPATH (packages installed beside the environment stay importable)."""
    return os.environ.get("PYTHONPATH")


def import_corpus(
    name: str, src_lang: str, tgt_lang: str, train: data.Pairs, valid: data.Pairs
) -> tuple[int, int]:
    """The pairs imported as a new corpus, as a user's import does: (corpus id, pairs added)."""
    from workbench.corpus import corpora, importing

    info = corpora.create_corpus(name, src_lang, tgt_lang)
    imported = importing.import_file(info.id, _tsv({"train": train, "valid": valid}), fmt="tsv")
    return info.id, imported.added


def train_through_product(
    corpus_id: int,
    minutes: float | None,
    tokens: int | None = None,
    precision: str = "auto",
    continue_default: bool = False,
    **overrides: object,
) -> dict:
    """Queue a run of the corpus with the defaults and a budget of `minutes` or `tokens`
    (neither: the automatic budget) in `precision`, plus any `overrides` (TrainConfig fields),
    and train it in a real worker process; returns the run and the registered version's
    metrics. `continue_default`: start where the Train button's default starts ("Continue
    from #N" when a version's tokenizer covers the corpus, else a new model)."""
    from workbench.training import continuation, run_info, runs

    start = continuation.default_start(corpus_id).version_id if continue_default else None
    clicked = time.monotonic()
    run_id = runs.enqueue_training(
        corpus_id,
        init_version_id=start,
        minutes=minutes,
        tokens=tokens,
        precision=precision,
        **overrides,
    )
    worker = subprocess.run(
        [sys.executable, "-m", "workbench", "worker", "--once"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        },
        capture_output=True,
        text=True,
    )
    ready_s = time.monotonic() - clicked
    run = run_info.get_run(run_id)
    if run.status != runs.RunStatus.SUCCEEDED or run.version_id is None:
        tail = worker.stdout[-2000:] + worker.stderr[-2000:]
        raise SystemExit(f"error: run {run_id} {run.status}: {run.error}\n{tail}")
    return {
        "run_id": run_id,
        "continued_from": start,
        "click_to_ready_s": round(ready_s, 1),
        **registered(run.version_id),
    }


def registered(version_id: int) -> dict:
    """A registered version's metrics and what the recipe chose for it (the resolved config
    saved with the model)."""
    from workbench.models import registry

    version = registry.get_version(version_id)
    saved = json.loads((registry.artifact_dir(version_id) / "config.json").read_text())
    training, model = saved["training"], saved["model"]
    return {
        "version_id": version.id,
        "recipe": {
            "model": {k: model[k] for k in ("d_model", "n_encoder_layers", "n_decoder_layers")},
            "vocab_size": training["vocab_size"],
            "joint_vocab": training["joint_vocab"],
            "batch_tokens": training["max_tokens_per_batch"],
            "lr": training["lr"],
            "warmup_steps": training["warmup_steps"],
            "dropout": training["dropout"],
        },
        "metrics": version.metrics,
    }


def _link(ours: dict, valid: dict) -> dict:
    """One run of a chain: where it started, what it trained, how it validates (greedy)."""
    m = ours["metrics"]
    return {
        "version_id": ours["version_id"],
        "continued_from": ours["continued_from"],
        "tokens": m.get("tokens_trained"),
        "tokens_per_s": m.get("tokens_per_s"),
        "steps": m.get("steps"),
        "warmup_steps": ours["recipe"]["warmup_steps"],
        "lr": ours["recipe"]["lr"],
        "valid_bleu_greedy": valid["bleu"],
    }


def _setting(text: str) -> tuple[str, object]:
    """KEY=VALUE of `--set`, the value read as JSON when it is JSON (numbers, objects)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _against_calibration(metrics: dict) -> dict[str, float | None]:
    """Real and steps-only tokens/s as shares of the calibrated speed (None: none measured)."""
    calibrated = (metrics.get("calibration") or {}).get("tokens_per_s")
    pace = metrics.get("pace") or {}
    return {
        f"{key}_vs_calibration": round(pace[key] / calibrated, 3)
        if calibrated and pace.get(key)
        else None
        for key in ("real_tokens_per_s", "step_tokens_per_s")
    }


def _parse() -> argparse.Namespace:
    """The arguments, checked (a bad combination exits with one error line)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", choices=tuple(data.DATASETS), default="multi30k")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, help="training wall-clock budget (default 10)")
    budget.add_argument("--tokens", type=int, help="training budget in source + target tokens")
    p.add_argument("--precision", choices=PRECISIONS, default="auto")
    p.add_argument(
        "--processes", type=int, help="training processes (default: the product's timed choice)"
    )
    p.add_argument(
        "--threads", type=int, help="CPU threads per process (default: the product's choice)"
    )
    p.add_argument("--split", choices=("test", "valid"), default="test", help="what is scored")
    p.add_argument(
        "--set",
        type=_setting,
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe choice (tuning on --split valid only)",
    )
    p.add_argument(
        "--chain",
        type=int,
        default=1,
        metavar="K",
        help="train K runs of the budget one after another, each starting where the Train "
        "button's default starts (Continue from the last version); the last one is scored",
    )
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--train-limit", type=int, help="use only the first N training pairs")
    p.add_argument("--reference", action="store_true", help="also train the paper's settings")
    p.add_argument(
        "--reference-preset",
        default="base",
        help="size of the reference nn.Transformer: base (the paper's) or small (ours)",
    )
    p.add_argument("--home", type=Path, help="WORKBENCH_HOME to use (default: a temp dir)")
    p.add_argument(
        "--version",
        type=int,
        help="score this registered version of --home instead of training one (e.g. a tuning "
        "run's, on the test set once the recipe is frozen)",
    )
    args = p.parse_args()
    if args.set and args.split == "test":
        raise SystemExit("error: --set is for tuning, which looks at --split valid only")
    if args.version is not None and args.home is None:
        raise SystemExit("error: --version scores a version of --home; give --home too")
    if args.reference and args.minutes is None:
        raise SystemExit("error: --reference trains the paper's settings for --minutes")
    if args.minutes is None and args.tokens is None:
        args.minutes = 10.0
    if args.chain < 1 or (args.chain > 1 and (args.version is not None or args.reference)):
        raise SystemExit("error: --chain K (K >= 1) trains K runs; not with --version/--reference")
    return args


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    args = _parse()
    pairs = data.splits(args.data)
    train = pairs["train"][: args.train_limit]
    src_lang, tgt_lang = data.DATASETS[args.data]
    home = args.home or Path(tempfile.mkdtemp(prefix="wb-quality-"))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)

    from workbench.evaluation.evaluation import evaluate

    overrides: dict[str, object] = dict(args.set)
    if args.threads is not None:
        overrides["num_threads"] = args.threads
    if args.processes is not None:
        overrides["processes"] = args.processes
    links: list[dict] = []
    if args.version is not None:
        ours = registered(args.version)
    else:
        corpus_id, _ = import_corpus(
            f"{args.data} bench", src_lang, tgt_lang, train, pairs["valid"]
        )
        for link in range(args.chain):
            ours = train_through_product(
                corpus_id,
                args.minutes,
                args.tokens,
                args.precision,
                continue_default=link > 0,
                **overrides,
            )
            links.append(_link(ours, evaluate(ours["version_id"], pairs["valid"], beam=1)))
            print(json.dumps({"link": link + 1, **links[-1]}), file=sys.stderr, flush=True)
    m = ours["metrics"]
    scored = evaluate(ours["version_id"], pairs[args.split], beam=args.beam)
    valid = (  # greedy on valid: the same yardstick as the reference and the tuning table
        scored
        if (args.split, args.beam) == ("valid", 1)
        else evaluate(ours["version_id"], pairs["valid"], beam=1)
    )
    test_set = "test_2016_flickr" if args.data == "multi30k" else "tatoeba grouped split (test)"
    result: dict = {
        "bench": "quality",
        "data": args.data,
        "direction": f"{src_lang}-{tgt_lang}",
        "split": args.split,
        "scored_set": test_set if args.split == "test" else "valid",
        "minutes": args.minutes,
        "token_budget": args.tokens,
        "settings": dict(args.set),
        "beam": args.beam,
        "train_pairs": len(train),
        "bleu": scored["bleu"],
        "chrf": scored["chrf"],
        "n_scored": scored["n"],
        "valid_bleu_greedy": valid["bleu"],
        "tokens": m.get("tokens_trained"),
        "tokens_per_s": m.get("tokens_per_s"),
        "train_minutes": round(m["train_time_s"] / 60, 2) if m.get("train_time_s") else None,
        "steps": m.get("steps"),
        "epochs": m.get("epochs"),
        "train_time_s": m.get("train_time_s"),
        "click_to_ready_s": ours.get("click_to_ready_s"),
        "home": str(home),
        "version_id": ours["version_id"],
        "stop_reason": m.get("stop_reason"),
        "selected": m.get("selected"),
        "parameters": m.get("parameters"),
        "precision": m.get("precision"),
        "processes": m.get("processes"),
        "threads_per_process": m.get("threads_per_process") or m.get("threads"),
        "layout_reason": m.get("layout_reason"),
        "layout_timings": m.get("layout_timings"),
        "calibration": m.get("calibration"),
        "pace": m.get("pace"),
        # issue 38's ratios: the run's real speed (validations included) and its steps' alone
        # against the calibration the run planned by
        **_against_calibration(m),
        "recipe": ours["recipe"],
    }
    if args.chain > 1:
        result["chain"] = links
        result["chain_tokens"] = sum(link["tokens"] or 0 for link in links)
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
