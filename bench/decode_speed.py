"""Decoding speed on ~200 Multi30k validation sentences, three ways, equal output length.

1. the seeds' way: one sentence at a time, re-running the decoder over the whole prefix;
2. batched greedy with the key/value cache;
3. batched beam search (beam 4) with the cache.
Every way decodes exactly `--length` tokens per sentence (EOS forbidden), so they do the
same work. A trained model folder can be given with --model; otherwise a `small` model with
random weights is used (speed does not depend on the weights).
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import torch

from core_model import ModelConfig, Transformer
from core_model.artifact import load_model
from core_model.batching import encode_source, pad_sources
from core_model.decoding import beam_search, greedy_decode
from core_model.tokenizer import train_tokenizers

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


def read_lines(name: str, limit: int) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(limit), f, strict=False)]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="a saved model folder (default: random `small` model)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--length", type=int, default=24, help="forced output length")
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if not DATA.exists():
        raise SystemExit(f"error: {DATA} not found (the shared Multi30k data)")
    torch.manual_seed(0)
    sources = read_lines("val.de.gz", args.sentences)
    if args.model:
        loaded = load_model(args.model, device=args.device)
        model, tokenizers = loaded.model, loaded.tokenizers
    else:
        tokenizers = train_tokenizers(
            read_lines("train.de.gz", 5000), read_lines("train.en.gz", 5000), vocab_size=8000
        )
        cfg = ModelConfig.from_preset(
            "small",
            src_vocab_size=tokenizers.src.vocab_size,
            tgt_vocab_size=tokenizers.tgt.vocab_size,
            shared_vocab=tokenizers.shared,
        )
        model = Transformer(cfg)
    model = model.to(args.device).eval()
    encoded = sorted(
        (encode_source(tokenizers, s, model.cfg.max_len) for s in sources), key=len
    )  # length-sorted, as the translator batches
    batches = [
        pad_sources(encoded[i : i + args.batch]).to(args.device)
        for i in range(0, len(encoded), args.batch)
    ]
    singles = [pad_sources([ids]).to(args.device) for ids in encoded]
    n = args.length

    def seeds_way() -> None:
        for src in singles:
            greedy_decode(model, src, use_cache=False, fixed_length=n)

    def cached_greedy() -> None:
        for src in batches:
            greedy_decode(model, src, fixed_length=n)

    def cached_beam4() -> None:
        for src in batches:
            beam_search(model, src, beam_size=4, fixed_length=n)

    cached_greedy()  # warm-up
    seconds = {
        "seeds_greedy_uncached_one_by_one": timed(seeds_way),
        "batched_greedy_cached": timed(cached_greedy),
        "batched_beam4_cached": timed(cached_beam4),
    }
    base = seconds["seeds_greedy_uncached_one_by_one"]
    print(
        json.dumps(
            {
                "bench": "decode_speed",
                "device": args.device,
                "sentences": len(sources),
                "forced_length": n,
                "parameters": model.num_parameters(),
                "seconds": {k: round(v, 3) for k, v in seconds.items()},
                "sentences_per_s": {k: round(len(sources) / v, 1) for k, v in seconds.items()},
                "speedup_greedy_cached_vs_seeds": round(base / seconds["batched_greedy_cached"], 2),
                "speedup_beam4_cached_vs_seeds": round(base / seconds["batched_beam4_cached"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
