"""Decoding speed and quality of one trained model on its CPU, engine by engine.

    python -m bench.decode_speed --model MODEL_FOLDER [--sentences 1000] [--threads N]
                                 [--engines ours_fp32,ours_int8,ct2_float32,ct2_int8]
                                 [--baseline SOURCE_DIR] [--equal-work]

Engines (each run in a fresh process, so its peak memory is its own):
- ours_fp32 / ours_int8 / ours_bf16: core_model's decoder on the model as trained, with its
  linear layers int8 (core_model.quantization), or all in bf16;
- ct2_float32 / ct2_int8: the model exported to CTranslate2 (workbench.models.ctranslate2_export)
  with float32 or int8 weights, decoded by workbench.models.ctranslate2_translator;
- ours_fp32_baseline (with --baseline DIR): ours_fp32 with the core_model found in DIR (e.g.
  `git archive <commit> core_model | tar -x -C DIR`): the decoder before a change.
Every engine translates the first N Multi30k validation sentences (de→en) text to text —
tokenizing, batching (the translator's batches), decoding, detokenizing — greedy and beam 4,
with the translator's output bound a·|src| + b, on the same number of threads. Reported per
engine and decoding: seconds, sentences/s, output tokens/s (pieces + EOS), peak resident memory
of its process, and BLEU (sacreBLEU 13a, cased) against the references. Then the issue's
targets as ratios. `--equal-work` adds the older comparison of decoding loops at a forced
output length (uncached one by one vs batched with the cache).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("ours_fp32", "ours_int8", "ours_bf16", "ct2_float32", "ct2_int8")
DEFAULT_ENGINES = ("ours_fp32", "ours_int8", "ct2_float32", "ct2_int8")
BEAMS = (1, 4)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_engine(engine: str, model_dir: str, export_dir: str | None, n: int, threads: int) -> dict:
    """Translate the sentences with one engine, greedy and beam 4 (in this process)."""
    import torch

    from bench import data
    from core_model.metrics import corpus_bleu

    torch.set_num_threads(threads)
    pairs = data.multi30k("val")[:n]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    if engine.startswith("ct2_"):
        from workbench.models.ctranslate2_translator import load_export, translate

        ct2 = load_export(export_dir, threads=threads)

        def run(texts: list[str], beam: int) -> list:
            return translate(ct2, texts, beam=beam)

    else:
        from core_model.artifact import load_model
        from core_model.translator import translate_ids

        loaded = load_model(model_dir)
        model, tokenizers = loaded.model, loaded.tokenizers
        if engine == "ours_int8":
            from core_model.quantization import quantize_int8

            model = quantize_int8(model)
        elif engine == "ours_bf16":
            model = model.to(torch.bfloat16)

        def run(texts: list[str], beam: int) -> list:
            return translate_ids(model, tokenizers, texts, beam=beam)

    out: dict = {}
    run(sources[:16], 4)  # warm-up: first calls pay for allocations and kernel selection
    for beam in BEAMS:
        start, cpu_start = time.perf_counter(), time.process_time()
        results = run(sources, beam)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        # output tokens: pieces + EOS where produced (TranslationResult.out_pieces)
        tokens = sum(len(r.out_pieces) for r in results)
        out[f"beam{beam}"] = {
            "seconds": round(seconds, 2),
            "sentences_per_s": round(len(sources) / seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1),
            # CPU time of all the process's threads: less disturbed by other load than wall time
            "cpu_seconds": round(cpu_seconds, 2),
            "tokens_per_cpu_s": round(tokens / cpu_seconds, 1),
            "output_tokens": tokens,
            "bleu": round(corpus_bleu([r.text for r in results], refs, tokenize="13a"), 2),
        }
    out["peak_rss_mb"] = round(_peak_rss_mb(), 1)  # the whole process: Python, torch, model
    return out


def _subprocess(args: list[str], pythonpath: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def equal_work(model_dir: str, n: int, length: int, threads: int) -> dict:
    """The decoding loops at a forced output length (EOS forbidden): equal work for each."""
    import torch

    from bench import data
    from core_model.artifact import load_model
    from core_model.batching import encode_source, pad_sources
    from core_model.decoding import beam_search, greedy_decode

    torch.set_num_threads(threads)
    loaded = load_model(model_dir)
    model, tokenizers = loaded.model, loaded.tokenizers
    sources = [s for s, _ in data.multi30k("val")[:n]]
    encoded = sorted((encode_source(tokenizers, s, model.cfg.max_len) for s in sources), key=len)
    batches = [pad_sources(encoded[i : i + 64]) for i in range(0, len(encoded), 64)]
    singles = [pad_sources([ids]) for ids in encoded]

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return round(time.perf_counter() - start, 2)

    seconds = {
        "uncached_one_by_one_greedy": timed(
            lambda: [greedy_decode(model, s, use_cache=False, fixed_length=length) for s in singles]
        ),
        "batched_cached_greedy": timed(
            lambda: [greedy_decode(model, b, fixed_length=length) for b in batches]
        ),
        "batched_cached_beam4": timed(
            lambda: [beam_search(model, b, beam_size=4, fixed_length=length) for b in batches]
        ),
    }
    return {"sentences": len(sources), "forced_length": length, "seconds": seconds}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def targets(engines: dict) -> dict:
    """The issue's targets on this CPU, as measured ratios (beam 4 unless named). Judged on
    tokens per CPU-second (`met`): on a machine shared with other work, a process's wall
    time also counts the time it waited for a core; wall-time ratios are given beside."""

    def speed(name: str, beam: int = 4, per: str = "tokens_per_cpu_s") -> float:
        return engines[name][f"beam{beam}"][per]

    def ratios(a: str, b: str, beam: int = 4) -> dict:
        return {
            "cpu": _ratio(speed(a, beam), speed(b, beam)),
            "wall": _ratio(speed(a, beam, "tokens_per_s"), speed(b, beam, "tokens_per_s")),
        }

    def bleu(name: str, beam: int = 4) -> float:
        return engines[name][f"beam{beam}"]["bleu"]

    out: dict = {}
    if {"ct2_int8", "ours_fp32"} <= engines.keys():
        ratio = ratios("ct2_int8", "ours_fp32")
        delta = round(bleu("ct2_int8") - bleu("ours_fp32"), 2)
        out["ct2_int8_vs_ours_fp32"] = {
            "tokens_per_s_ratio": ratio,
            "bleu_delta": delta,
            "met": ratio["cpu"] >= 4 and abs(delta) <= 0.5,
        }
    if {"ours_int8", "ours_fp32"} <= engines.keys():
        ratio = ratios("ours_int8", "ours_fp32")
        delta = round(bleu("ours_int8") - bleu("ours_fp32"), 2)
        out["ours_int8_vs_ours_fp32"] = {
            "tokens_per_s_ratio": ratio,
            "greedy_tokens_per_s_ratio": ratios("ours_int8", "ours_fp32", 1),
            "bleu_delta": delta,
            "met": ratio["cpu"] >= 2 and abs(delta) <= 0.3,
        }
    ours = [e for e in engines if e.startswith("ours_") and not e.endswith("_baseline")]
    if ours and "ct2_float32" in engines:
        best = max(ours, key=speed)
        ratio = ratios(best, "ct2_float32")
        out["ours_best_vs_ct2_float32"] = {
            "ours_best": best,
            "tokens_per_s_ratio": ratio,
            "met": ratio["cpu"] >= 0.5,
            "parity": ratio["cpu"] >= 1.0,
        }
    if {"ours_fp32", "ours_fp32_baseline"} <= engines.keys():
        out["ours_fp32_vs_baseline"] = {
            f"beam{b}_tokens_per_s_ratio": ratios("ours_fp32", "ours_fp32_baseline", b)
            for b in BEAMS
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a trained model folder (a version's)")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--engines", default=",".join(DEFAULT_ENGINES), help=", ".join(ENGINES))
    p.add_argument("--baseline", help="a folder holding another core_model to time as well")
    p.add_argument("--equal-work", action="store_true", help="also the forced-length loops")
    p.add_argument("--length", type=int, default=24, help="forced output length (--equal-work)")
    p.add_argument("--engine", help=argparse.SUPPRESS)  # internal: run one engine, print JSON
    p.add_argument("--export", help=argparse.SUPPRESS)
    args = p.parse_args()

    import torch

    threads = args.threads or torch.get_num_threads()
    if args.engine:
        print(json.dumps(run_engine(args.engine, args.model, args.export, args.sentences, threads)))
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"error: unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    from bench import data

    data.require_file(data.MULTI30K)
    common = ["--model", args.model, "--sentences", str(args.sentences), "--threads", str(threads)]
    result: dict = {
        "bench": "decode_speed",
        "model": args.model,
        "sentences": args.sentences,
        "threads": threads,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "output_bound": "3.0·|src| + 50 (the translator's)",
        "engines": {},
    }
    with tempfile.TemporaryDirectory(prefix="decode-speed-") as tmp:
        exports = {}
        for engine in engines:
            if engine.startswith("ct2_"):
                from workbench.models.ctranslate2_export import export_ctranslate2

                start = time.perf_counter()
                exports[engine] = export_ctranslate2(
                    args.model, Path(tmp) / engine, engine.removeprefix("ct2_")
                )
                result.setdefault("export_seconds", {})[engine] = round(
                    time.perf_counter() - start, 2
                )
        if args.baseline:
            result["engines"]["ours_fp32_baseline"] = _subprocess(
                [*common, "--engine", "ours_fp32"], f"{args.baseline}{os.pathsep}{ROOT}"
            )
        for engine in engines:
            extra = ["--export", str(exports[engine])] if engine in exports else []
            result["engines"][engine] = _subprocess(
                [*common, "--engine", engine, *extra], str(ROOT)
            )
    result["targets"] = targets(result["engines"])
    if args.equal_work:
        result["equal_work"] = equal_work(
            args.model, min(args.sentences, 200), args.length, threads
        )
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
