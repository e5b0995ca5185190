"""The training worker: `python -m workbench worker [--once]`.

Claims queued runs one at a time (atomically, so several workers — on one machine or on
GPU machines sharing a PostgreSQL database — never train the same run), trains them with
core_model, streams progress rows and a heartbeat, honours cancel requests, and registers
a model version on success. A failure is recorded as one sentence a user can act on.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import threading
import time

import torch
from sqlalchemy import select, update

from core_model.artifact import ArtifactError
from core_model.training import ProgressEvent, TrainConfig, TrainingError, resolve_device, train
from db.engine import session_scope, workbench_home
from db.models import Corpus, RunMetric, TrainingRun, utcnow
from workbench import jobs
from workbench.corpus import snapshot_from_ids
from workbench.registry import artifact_dir, register_version

log = logging.getLogger("workbench.worker")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_next_run(worker: str) -> int | None:
    """Take the oldest queued run. The conditional UPDATE makes the claim atomic on SQLite
    and PostgreSQL alike: of two workers racing for a run, exactly one updates a row."""
    with session_scope() as s:
        candidates = s.scalars(
            select(TrainingRun.id)
            .where(TrainingRun.status == "queued")
            .order_by(TrainingRun.id)
            .limit(5)
        ).all()
    for run_id in candidates:
        now = utcnow()
        with session_scope() as s:
            claimed = s.execute(
                update(TrainingRun)
                .where(TrainingRun.id == run_id, TrainingRun.status == "queued")
                .values(status="running", worker_id=worker, heartbeat_at=now, started_at=now)
            ).rowcount
        if claimed == 1:
            return run_id
    return None


class Heartbeat(threading.Thread):
    """Beats every few seconds from its own thread (so a long validation never looks like a
    dead worker) and picks up cancel requests on the way."""

    def __init__(self, run_id: int) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{run_id}")
        self.run_id = run_id
        self.cancel = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(jobs.HEARTBEAT_INTERVAL_S):
            try:
                with session_scope() as s:
                    s.execute(
                        update(TrainingRun)
                        .where(TrainingRun.id == self.run_id)
                        .values(heartbeat_at=utcnow())
                    )
                    if s.scalar(
                        select(TrainingRun.cancel_requested).where(TrainingRun.id == self.run_id)
                    ):
                        self.cancel.set()
            except Exception:  # a busy database must not kill training; the next beat retries
                log.exception("heartbeat failed for run %s", self.run_id)


def _record_progress(run_id: int, event: ProgressEvent) -> None:
    with session_scope() as s:
        s.add(
            RunMetric(
                run_id=run_id,
                step=event.step,
                epoch=event.epoch,
                train_loss=event.train_loss,
                valid_loss=event.valid_loss,
                lr=event.lr,
                tokens_per_s=event.tokens_per_s,
                bleu=event.bleu,
                chrf=event.chrf,
            )
        )
        s.execute(
            update(TrainingRun)
            .where(TrainingRun.id == run_id)
            .values(
                progress_step=event.step,
                progress_total=event.total_steps,
                eta_s=event.eta_s,
                heartbeat_at=utcnow(),
            )
        )


def _finish(run_id: int, status: str, error: str | None = None) -> None:
    with session_scope() as s:
        s.execute(
            update(TrainingRun)
            .where(TrainingRun.id == run_id)
            .values(status=status, error=error, finished_at=utcnow(), eta_s=0.0)
        )


def execute_run(run_id: int) -> str:
    """Train one claimed run to its end; return its final status."""
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        corpus = s.get(Corpus, run.corpus_id) if run.corpus_id is not None else None
        config = TrainConfig.from_dict(run.config)
        init_version_id = run.init_version_id
        s.expunge(run)
    heartbeat = Heartbeat(run_id)
    heartbeat.start()
    out_dir = workbench_home() / "runs" / str(run_id)
    try:
        device = resolve_device(config.device)
        with session_scope() as s:
            s.execute(
                update(TrainingRun).where(TrainingRun.id == run_id).values(device=str(device))
            )
        if corpus is None:
            raise TrainingError("The corpus of this run was deleted.")
        frozen = snapshot_from_ids(corpus.id, run.snapshot_pair_ids)
        train_pairs, valid_pairs = frozen.train_pairs, frozen.valid_pairs
        if not train_pairs:
            raise TrainingError("The corpus snapshot has no training pairs (were they deleted?).")
        init_from = artifact_dir(init_version_id) if init_version_id is not None else None
        result = train(
            train_pairs,
            valid_pairs,
            config,
            out_dir=out_dir,
            callback=lambda event: _record_progress(run_id, event),
            should_cancel=heartbeat.cancel.is_set,
            init_from=init_from,
            extra_config={
                "corpus": {
                    "id": corpus.id,
                    "name": corpus.name,
                    "src_lang": corpus.src_lang,
                    "tgt_lang": corpus.tgt_lang,
                    "snapshot_hash": run.snapshot_hash,
                    "pairs": run.snapshot_size,
                },
                "run_id": run_id,
            },
        )
        if result.cancelled:
            _finish(run_id, "cancelled")
            shutil.rmtree(out_dir, ignore_errors=True)
            return "cancelled"
        register_version(run_id, out_dir, result.metrics)
        _finish(run_id, "succeeded")
        return "succeeded"
    except (TrainingError, ArtifactError) as exc:
        _finish(run_id, "failed", str(exc))
    except torch.cuda.OutOfMemoryError:
        _finish(run_id, "failed", "The GPU ran out of memory; choose a smaller preset.")
    except Exception as exc:  # anything unexpected: keep the worker alive, tell the user
        log.exception("run %s failed", run_id)
        _finish(run_id, "failed", f"Training failed unexpectedly: {type(exc).__name__}: {exc}")
    finally:
        heartbeat.stop.set()
        heartbeat.join(timeout=10)
    shutil.rmtree(out_dir, ignore_errors=True)
    return "failed"


def run_worker(once: bool = False, poll_s: float = 1.0, idle_exit_s: float | None = None) -> int:
    """Process queued runs until stopped (or one run with `once`); returns runs processed.

    Holds a shared lock on worker.lock while alive: `jobs.ensure_worker` tests it to know
    whether a local worker is running.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    me = worker_id()
    lock = open(jobs.worker_lock_path(), "a+")  # noqa: SIM115 — held for the process lifetime
    fcntl.flock(lock, fcntl.LOCK_SH)
    processed = 0
    idle_since = time.monotonic()
    log.info("worker %s started (home %s)", me, workbench_home())
    while True:
        jobs.reap_stale_runs()
        run_id = claim_next_run(me)
        if run_id is not None:
            log.info("run %s claimed", run_id)
            status = execute_run(run_id)
            log.info("run %s %s", run_id, status)
            processed += 1
            idle_since = time.monotonic()
            if once:
                return processed
            continue
        if once or (idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s):
            return processed
        time.sleep(poll_s)
