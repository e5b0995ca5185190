"""``train``, ``cancel``, ``resume``, ``runs``, ``delete-run`` and ``worker``: training runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from workbench.cli import common
from workbench.errors import WorkbenchError
from workbench.messages import N_

if TYPE_CHECKING:
    from workbench.training.run_info import RunInfo


def _args_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, help="corpus name or id")
    # No `choices`: the presets live in core_model (importing it costs every command a torch
    # import); an unknown name is refused with the list of known ones.
    p.add_argument(
        "--preset",
        help="model size preset (default: auto, the recipe's pick); a wrong name lists them all",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=common.positive_int, help="train for N epochs")
    budget.add_argument(
        "--minutes", type=common.positive_float, help="train for M minutes of wall-clock time"
    )
    budget.add_argument(
        "--tokens",
        type=common.positive_int,
        help="train for N source + target tokens: the same budget on any machine",
    )
    # No `choices` either: the precisions live in core_model (see --preset).
    p.add_argument(
        "--precision",
        help="number precision (default: auto, bf16 where the CPU/GPU has it natively); "
        "a wrong name lists them all",
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--continue-from",
        type=common.positive_int,
        metavar="ID",
        help="warm-start from this version's weights and tokenizer (default: the newest "
        "version of the corpus whose tokenizer still covers it, see `--new`)",
    )
    start.add_argument(
        "--new", action="store_true", help="start a new model (new tokenizer, fresh weights)"
    )
    p.add_argument("--max-steps", type=common.positive_int, help="cap on optimizer steps")
    p.add_argument(
        "--processes",
        type=common.positive_int,
        help="data-parallel training processes (default: the fastest of one per core, one in "
        "all, and the splits between, timed on the worker's machine; on GPUs one per GPU; "
        "on a CPU at most one per core)",
    )
    p.add_argument("--wait", action="store_true", help="block until the run ends")


def _cmd_train(args: argparse.Namespace) -> int:
    from workbench.training import continuation, runs, train_options

    extra = {"max_steps": args.max_steps} if args.max_steps else {}
    start, why = args.continue_from, None
    if start is None and not args.new:  # the Train page's default, by the same rule
        automatic = args.epochs is None and args.minutes is None and args.tokens is None
        start, why = continuation.default_start(args.corpus, automatic)
    run_id = runs.enqueue_training(
        args.corpus,
        preset=args.preset or train_options.DEFAULT_PRESET,
        epochs=args.epochs,
        minutes=args.minutes,
        tokens=args.tokens,
        precision=args.precision or train_options.DEFAULT_PRECISION,
        device=args.device,
        init_version_id=start,
        processes=args.processes,
        **extra,
    )
    if why is not None:  # said once the run is queued: a refused run prints only its error
        print(f"{'continuing' if start else 'new model'}: {why}", file=sys.stderr)
    return _follow(run_id, args.wait)


def _follow(run_id: int, wait: bool) -> int:
    """Make sure a worker will take the queued run; with `wait`, report its progress on stderr
    until it ends, then print the outcome as one JSON line (exit 1 unless it succeeded)."""
    from workbench.models import registry
    from workbench.training import worker_process
    from workbench.training.run_info import get_run
    from workbench.training.runs import RunStatus

    pid = worker_process.ensure_worker()
    if pid is not None:
        print(f"started a worker (pid {pid})", file=sys.stderr)
    if not wait:
        print(json.dumps({"run_id": run_id, "status": RunStatus.QUEUED, "version_id": None}))
        return common.EXIT_OK
    last_step, polls = -1, 0
    while (run := get_run(run_id)).active:
        polls += 1
        # The worker may have exited idle just before the enqueue, or died: starting one
        # (if none is alive) first takes back the runs of dead workers.
        if (run.status == RunStatus.QUEUED and polls % 5 == 0) or run.worker_lost:
            worker_process.ensure_worker()
        if run.progress_step != last_step and run.progress_total:
            last_step = run.progress_step
            print(f"run {run_id}: {_progress_line(run)}", file=sys.stderr)
        time.sleep(1.0)
    if run.stopped_because:
        why = f"stopped at step {run.progress_step}: {run.stopped_because}"
        print(f"run {run_id}: {why}", file=sys.stderr)
    # what the budget bought, from the trained version (none for a failed or cancelled run)
    trained = registry.get_version(run.version_id).metrics if run.version_id else {}
    print(
        json.dumps(
            {
                "run_id": run.id,
                "status": run.status,
                "version_id": run.version_id,
                "continued_from": run.init_version_id,
                "device": run.device,
                "steps": run.progress_step,
                "stop_reason": run.stop_reason,
                "error": run.error,
                **{key: trained.get(key) for key in RESULT_FIGURES},
            },
            ensure_ascii=False,
        )
    )
    return common.EXIT_OK if run.status == RunStatus.SUCCEEDED else common.EXIT_INTERNAL


# The trained version's figures that `train --wait` prints: every figure compares across
# machines only with its tokens, speed, steps, precision, processes and threads (and the
# layouts timed to choose them: processes, threads, tokens/s each).
RESULT_FIGURES = (
    "budget_tokens",
    "budget_passes",
    "calibration",
    "tokens_trained",
    "tokens_per_s",
    "train_time_s",
    "precision",
    "processes",
    "threads_per_process",
    "layout_timings",
    "threads",
)


def _progress_line(run: RunInfo) -> str:
    """'step 130 of at most 1000, 13% of its steps, at most 474s left; stops early once …'"""
    bound = "at most " if run.early_stop_rule else ""
    line = f"step {run.progress_step} of {bound}{run.progress_total}"
    line += f", {100 * run.fraction_done:.0f}% of its {run.limit}"
    if run.eta_s:
        line += f", {bound}{run.eta_s:.0f}s left"
    return line + (f"; {run.early_stop_rule}" if run.early_stop_rule else "")


def _args_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=common.row_id, help="id of a failed or cancelled run (see `runs`)")
    p.add_argument("--wait", action="store_true", help="block until the run ends")


def _cmd_resume(args: argparse.Namespace) -> int:
    from workbench.training import runs

    step = runs.resume_run(args.run)
    print(f"run {args.run}: resumes from its checkpoint at step {step}", file=sys.stderr)
    return _follow(args.run, args.wait)


def _args_cancel(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=common.row_id, help="id of a queued or running run (see `runs`)")


def _cmd_cancel(args: argparse.Namespace) -> int:
    from workbench.training import runs
    from workbench.training.runs import RunStatus

    status = runs.cancel_run(args.run)
    if status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        raise WorkbenchError(
            N_("Run {id} has already ended ({status}): there is nothing to cancel."),
            id=args.run,
            status=status,
        )
    if status == RunStatus.RUNNING:
        print(f"run {args.run}: asked to stop; its worker stops it within seconds")
    else:
        print(f"run {args.run} is cancelled")
    return common.EXIT_OK


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.training import run_info, runs

    runs.reap_stale_runs()  # list a run whose worker died as what it now is (queued again)
    listed = run_info.list_runs()
    if args.json:
        print(json.dumps([_run_record(r) for r in listed], ensure_ascii=False))
    elif not listed:
        print("no training runs yet: start one with `python -m workbench train`")
    else:
        table = run_info.runs_table(runs=listed)
        table["error"] = table["error"].str.slice(0, 60)
        common.print_table(table)
    return common.EXIT_OK


def _run_record(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "corpus": run.corpus_name,
        "status": run.status,
        "preset": run.config.get("preset"),  # as asked ('auto': the recipe's pick)
        "model_size": run.model_size,  # what it trains (a continued run: its version's size)
        "budget": run.budget,
        "train_time_s": run.trained_s,
        "device": run.device,
        "pairs": run.snapshot_size,
        "steps": run.progress_step,
        "stop_reason": run.stop_reason,
        "stopped_because": run.stopped_because,
        "version_id": run.version_id,
        "error": run.error,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def _args_delete_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=common.row_id, help="run id; its model version, if any, is kept")


def _cmd_delete_run(args: argparse.Namespace) -> int:
    from workbench.training import runs

    runs.delete_run(args.run)
    return common.print_done(f"deleted run {args.run}")


def _args_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="process one queued run, then exit")
    p.add_argument("--idle-exit", type=float, help="exit after this many idle seconds")


def _cmd_worker(args: argparse.Namespace) -> int:
    from workbench.training.worker import WORKER_NICENESS, run_worker

    # Background work yields to the app and the CLI: a run uses every core, yet a page or a
    # translation asked for meanwhile gets the CPU first (its ranks inherit this).
    os.nice(WORKER_NICENESS)
    run_worker(once=args.once, idle_exit_s=args.idle_exit)
    return common.EXIT_OK


COMMANDS = [
    common.Command("train", "queue a training run (and start a worker)", _args_train, _cmd_train),
    common.Command(
        "cancel", "cancel a queued run, or stop a running one", _args_cancel, _cmd_cancel
    ),
    common.Command("resume", "resume a failed or cancelled run", _args_resume, _cmd_resume),
    common.Command(
        "runs", "list the training runs", common.json_option("one JSON array of runs"), _cmd_runs
    ),
    common.Command(
        "delete-run", "delete a run and its checkpoint", _args_delete_run, _cmd_delete_run
    ),
    common.Command("worker", "train queued runs in this process", _args_worker, _cmd_worker),
]
