"""Multi-process (DDP) training entry point: the same `train()` under `torchrun`.

    torchrun --nproc_per_node 2 -m core_model.distributed --train pairs.tsv --out model_dir

Each process trains on its shard of the length buckets (`batching.shard_batches`); gradients
are all-reduced by DistributedDataParallel, so every rank holds identical weights after every
step. Rank 0 trains the tokenizers (and sends them to the others), validates, checkpoints,
reports and writes the model folder. Backend: NCCL on GPUs, Gloo on CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch
from torch import distributed as dist

from core_model.artifact import unique_state_dict
from core_model.training import TrainConfig, TrainingError, train


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """source<TAB>target lines (extra columns ignored, lines without a tab skipped)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 2:
                pairs.append((cols[0], cols[1]))
    return pairs


def state_sha256(model: torch.nn.Module) -> str:
    """Digest of every weight (names, shapes and bytes): equal digests = identical models."""
    h = hashlib.sha256()
    for name, t in sorted(unique_state_dict(model).items()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.float().numpy().tobytes())
    return h.hexdigest()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m core_model.distributed", description=__doc__)
    p.add_argument("--train", required=True, help="training pairs, TSV source<TAB>target")
    p.add_argument("--valid", help="validation pairs, TSV")
    p.add_argument("--out", help="model folder to write (rank 0)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", help="JSON object of further TrainConfig fields")
    p.add_argument("--hash-dir", help="each rank writes rank<R>.sha256 of its final weights")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    extra = json.loads(args.config) if args.config else {}
    cfg = TrainConfig.from_dict(
        {
            "preset": args.preset,
            "epochs": args.epochs,
            "max_steps": args.max_steps,
            "max_tokens_per_batch": args.max_tokens,
            "device": args.device,
            "precision": args.precision,
            "seed": args.seed,
            **extra,
        }
    )
    use_cuda = cfg.device != "cpu" and torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    rank = dist.get_rank() if dist.is_initialized() else 0
    try:
        valid = read_tsv(args.valid) if args.valid else None
        result = train(read_tsv(args.train), valid, cfg, out_dir=args.out)
        if args.hash_dir:
            Path(args.hash_dir).mkdir(parents=True, exist_ok=True)
            digest = state_sha256(result.model)
            (Path(args.hash_dir) / f"rank{rank}.sha256").write_text(digest + "\n")
        if rank == 0:
            print(json.dumps({"metrics": result.metrics}, default=str))
        return 0
    except TrainingError as exc:
        print(f"rank {rank}: {exc}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
