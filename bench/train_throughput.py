"""Training tokens/s: the handwritten Transformer vs torch.nn.Transformer.

Both models get the same embeddings, positions and generator, identical batches, the same
optimizer and loss, on the same device; only the encoder/decoder stacks differ. Runs fp32
and bf16 autocast, alternating the two models in rounds to cancel machine noise.
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn
from torch.nn import functional as F

from bench.reference import ReferenceModel
from core_model import ModelConfig, Transformer


def make_batches(n: int, tokens: int, vocab: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """Padded batches of ~`tokens` target tokens with caption-like lengths (8–30)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        length = int(torch.randint(8, 31, (1,), generator=gen))
        rows = max(1, tokens // length)
        src = torch.randint(4, vocab, (rows, length + 2), generator=gen)
        tgt = torch.randint(4, vocab, (rows, length + 1), generator=gen)
        for row in range(rows):  # ragged ends, as real batches have
            cut = int(torch.randint(0, 4, (1,), generator=gen))
            if cut:
                src[row, -cut:] = 0
                tgt[row, -cut:] = 0
        batches.append((src, tgt))
    return batches


def train_steps(model: nn.Module, batches, device: str, bf16: bool) -> float:
    """Runs one optimizer step per batch; returns target tokens per second."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    tokens = 0
    start = time.perf_counter()
    for src, tgt in batches:
        src, tgt = src.to(device), tgt.to(device)
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)),
            tgt_out.reshape(-1),
            ignore_index=0,
            label_smoothing=0.1,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += int((tgt_out != 0).sum())
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048, help="target tokens per batch")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ModelConfig(
        src_vocab_size=8000,
        tgt_vocab_size=8000,
        d_model=256,
        n_heads=4,
        n_encoder_layers=3,
        n_decoder_layers=3,
        d_ff=1024,
    )
    ours = Transformer(cfg).to(args.device)
    reference = ReferenceModel(Transformer(cfg)).to(args.device)
    batches = make_batches(args.steps, args.tokens, cfg.src_vocab_size, seed=1)
    result: dict[str, object] = {
        "bench": "train_throughput",
        "device": args.device,
        "threads": torch.get_num_threads(),
        "config": {k: getattr(cfg, k) for k in ("d_model", "n_heads", "d_ff", "src_vocab_size")}
        | {"layers": f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}"},
        "tokens_per_batch": args.tokens,
    }
    for precision in ("fp32", "bf16"):
        bf16 = precision == "bf16"
        train_steps(ours, batches[:2], args.device, bf16)  # warm-up both
        train_steps(reference, batches[:2], args.device, bf16)
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(train_steps(ours, batches, args.device, bf16))
            theirs.append(train_steps(reference, batches, args.device, bf16))
        best_mine, best_theirs = max(mine), max(theirs)
        result[precision] = {
            "ours_tokens_per_s": round(best_mine, 1),
            "nn_transformer_tokens_per_s": round(best_theirs, 1),
            "ratio": round(best_mine / best_theirs, 3),
        }
    result["bf16_speedup_ours"] = round(
        result["bf16"]["ours_tokens_per_s"] / result["fp32"]["ours_tokens_per_s"], 3
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
