"""Data-parallel (DDP) training: `train_data_parallel`, one run spread over a machine's cores
or GPUs by the calling process itself, and the same `train()` under `torchrun`:

    torchrun --nproc_per_node 2 -m core_model.distributed --train pairs.tsv --out model_dir

Each process trains on its part of every update (`batching.rank_share` of one batch of the size the
recipe chose, whatever the number of ranks; on CPUs the parts follow the ranks' speeds,
`pace.RankShares`); gradients are all-reduced by DistributedDataParallel, so every rank holds
identical weights after every step. Rank 0 trains the tokenizers (and sends them to the others),
validates, checkpoints, reports and writes the model folder. Every rank, whoever started it, trains
a `parallel.TrainTask` through `train_task`; the ranks themselves (the spec, the backend, starting
and stopping them) are `training/parallel.py`'s. `python -m core_model.distributed --child SPEC
RANK` is a child rank of a `parallel.RankGroup` (a run's, or a speed measurement's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import distributed as dist

from core_model.artifact import unique_state_dict
from core_model.training import TrainConfig, TrainingError, TrainResult, train
from core_model.training.calibration import measure_share
from core_model.training.parallel import (
    Calibration,
    Layout,
    MeasureTask,
    RankGroup,
    TrainTask,
    join_as_child,
    join_torchrun,
    rank_device,
)
from core_model.training.precision import resolve_device

CHILD_DEATH_WAIT_S = 2.0  # a rank's socket closes as it dies: give its exit status a moment


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


def train_data_parallel(
    layout: Layout,
    train_pairs: Sequence[tuple[str, str]],
    valid_pairs: Sequence[tuple[str, str]] | None,
    cfg: TrainConfig,
    speed: Calibration | None = None,
    *,
    init_from: str | Path | None = None,
    resume_from: str | Path | None = None,
    **rank_zero: Any,
) -> TrainResult:
    """`train()` spread as `layout` says: this process is rank 0 (it reports, checkpoints and
    writes the model as a one-process run does: `rank_zero` are `train()`'s arguments for
    that) and starts the other ranks, which end with it. `speed` is the measurement the
    layout was chosen by. A rank that dies ends the run with a TrainingError saying which and
    how; the others are stopped."""
    task = TrainTask(
        train=tuple(train_pairs),
        valid=tuple(valid_pairs or ()),
        config=cfg,
        speed=speed,
        threads=layout.threads or None,
        init_from=None if init_from is None else str(init_from),
        resume_from=None if resume_from is None else str(resume_from),
    )
    if layout.processes == 1:
        return train_task(task, **rank_zero)
    with RankGroup(layout, task, resolve_device(cfg.device)) as group:
        try:
            return train_task(task, **rank_zero)
        except RuntimeError as exc:  # a collective failed: did a rank die?
            deadline = time.monotonic() + CHILD_DEATH_WAIT_S
            while (why := group.failure()) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if why is not None:
                raise TrainingError(why) from exc
            raise


def train_task(task: TrainTask, **rank_zero: Any) -> TrainResult:
    """What every rank of a run does: `train()` as the task says (rank 0 adds `rank_zero`)."""
    return train(
        task.train,
        task.valid or None,
        task.config,
        init_from=task.init_from,
        resume_from=task.resume_from,
        speed=task.speed,
        threads=task.threads,
        **rank_zero,
    )


def _child(spec_path: str, rank: str) -> NoReturn:
    """A child rank of a `RankGroup`: its task, then out at once (`_leave`)."""
    number = int(rank)

    def work() -> None:
        task = join_as_child(Path(spec_path), number)
        if isinstance(task, MeasureTask):
            measure_share(task, rank_device(task.device, number))
        else:
            train_task(task)

    _leave(_exit_status(number, work))


def _leave(status: int) -> NoReturn:
    """A rank's end once its work is done and its process group left: streams flushed, then
    out without the interpreter's own teardown. That teardown (torch's, Gloo's threads) took
    1.4 s of CPU per rank, so ranks sharing cores outlived a group's `STOP_GRACE_S` and were
    stopped by SIGTERM at a run's normal end; and under torchrun it now and then aborted a rank
    ("terminate called without an active exception": 1 run in 12 measured, after both ranks
    had written their weights), which failed the whole run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _exit_status(rank: int, work: Callable[[], None]) -> int:
    """A rank's exit status: 0, or 1 with its TrainingError on stderr in one line that names
    the rank; the process group is left either way, so no peer waits on it."""
    try:
        work()
        return 0
    except TrainingError as exc:
        print(f"rank {rank}: {exc}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


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


def main(argv: Sequence[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        _child(*argv[1:3])
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
    join_torchrun(resolve_device(cfg.device))
    rank = dist.get_rank() if dist.is_initialized() else 0

    def work() -> None:
        valid = read_tsv(args.valid) if args.valid else ()
        task = TrainTask(train=tuple(read_tsv(args.train)), valid=tuple(valid), config=cfg)
        result = train_task(task, out_dir=args.out)
        if args.hash_dir:
            Path(args.hash_dir).mkdir(parents=True, exist_ok=True)
            digest = state_sha256(result.model)
            (Path(args.hash_dir) / f"rank{rank}.sha256").write_text(digest + "\n")
        if rank == 0:
            print(json.dumps({"metrics": result.metrics}, default=str))

    _leave(_exit_status(rank, work))


if __name__ == "__main__":
    main()
