"""The training worker: `python -m workbench worker [--once]`.

Claims queued runs one at a time (atomically, so several workers — on one machine or on
GPU machines sharing a PostgreSQL database — never train the same run), trains them with
core_model, streams progress rows and a heartbeat, honours cancel requests, and registers
a model version on success. A failure is recorded as one sentence a user can act on.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import torch
from sqlalchemy import delete, func, select, update

from core_model.artifact import ArtifactError
from core_model.training import ProgressEvent, TrainConfig, TrainingError, resolve_device, train
from core_model.training import checkpoint as ckpt
from db.engine import session_scope, workbench_home
from db.models import Corpus, RunMetric, TrainingRun, utcnow
from workbench import jobs
from workbench.corpus import snapshot_from_ids
from workbench.errors import WorkbenchError
from workbench.registry import artifact_dir, register_version

log = logging.getLogger("workbench.worker")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_next_run(worker: str) -> int | None:
    """Take the oldest queued run this machine can train. The conditional UPDATE makes the
    claim atomic on SQLite and PostgreSQL alike: of two racing workers, exactly one updates
    the row. A worker without CUDA leaves runs that asked for it to a GPU worker."""
    query = select(TrainingRun.id).where(TrainingRun.status == "queued")
    if not torch.cuda.is_available():
        query = query.where(TrainingRun.device.not_like("cuda%"))
    with session_scope() as s:
        candidates = s.scalars(query.order_by(TrainingRun.id).limit(5)).all()
    for run_id in candidates:
        now = utcnow()
        with session_scope() as s:
            claimed = s.execute(
                update(TrainingRun)
                .where(TrainingRun.id == run_id, TrainingRun.status == "queued")
                .values(
                    status="running",
                    worker_id=worker,
                    heartbeat_at=now,
                    started_at=func.coalesce(TrainingRun.started_at, now),
                    attempts=TrainingRun.attempts + 1,
                    note=None,  # a re-queued run's note; the card shows its attempt instead
                )
            ).rowcount
        if claimed == 1:
            return run_id
    return None


class Heartbeat(threading.Thread):
    """Beats every few seconds from its own thread (so a long validation never looks like a
    dead worker) and picks up cancel requests on the way."""

    def __init__(self, run_id: int, worker: str) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{run_id}")
        self.run_id = run_id
        self.worker = worker
        self.cancel = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(jobs.HEARTBEAT_INTERVAL_S):
            try:
                with session_scope() as s:
                    beat = s.execute(
                        _owned(self.run_id, self.worker).values(heartbeat_at=utcnow())
                    ).rowcount
                    requested = s.scalar(
                        select(TrainingRun.cancel_requested).where(TrainingRun.id == self.run_id)
                    )
                if requested or not beat:  # cancelled, or no longer ours (reaped as stale)
                    self.cancel.set()
            except Exception:  # a busy database must not kill training; the next beat retries
                log.exception("heartbeat failed for run %s", self.run_id)


def _owned(run_id: int, worker: str):
    """An UPDATE of the run that only applies while this worker still owns it: a run the
    reaper already failed is never brought back to life by a late write."""
    return update(TrainingRun).where(
        TrainingRun.id == run_id,
        TrainingRun.status == "running",
        TrainingRun.worker_id == worker,
    )


def _record_progress(run_id: int, worker: str, event: ProgressEvent) -> None:
    """Write a progress row, only while this worker owns the run: a worker that was paused past
    the heartbeat timeout must not mix its rows into the attempt that took the run over."""
    with session_scope() as s:
        owned = s.execute(
            _owned(run_id, worker).values(
                progress_step=event.step,
                progress_total=event.total_steps,
                eta_s=event.eta_s,
                heartbeat_at=utcnow(),
            )
        ).rowcount
        if owned:
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


def _finish(run_id: int, worker: str, status: str, error: str | None = None) -> bool:
    """Close the run; False when it was no longer ours (then nothing is written)."""
    with session_scope() as s:
        return bool(
            s.execute(
                _owned(run_id, worker).values(
                    status=status, error=error, finished_at=utcnow(), eta_s=0.0
                )
            ).rowcount
        )


def _load_run(run_id: int) -> tuple[TrainingRun, Corpus | None]:
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        corpus = s.get(Corpus, run.corpus_id) if run.corpus_id is not None else None
        s.expunge_all()
        return run, corpus


def _resume_point(run: TrainingRun, config: TrainConfig, out_dir: Path) -> Path | None:
    """The checkpoint an earlier, dead attempt of this run left in `out_dir`, if any.

    A first attempt starts from an empty folder (one left by a run of an older database with
    the same id is not ours). Metric rows a dead attempt wrote after its checkpoint are
    dropped, all of them when there is no usable checkpoint (it died before its first epoch,
    or trained on another machine's disk), so the curve continues instead of doubling back.
    """
    if run.attempts == 1:
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    found = ckpt.find_checkpoint(out_dir)
    step = -1  # no usable checkpoint: start over, dropping every row of the dead attempt
    if found is not None:
        try:
            state = ckpt.read_state(found)
            if state.get("training") == json.loads(json.dumps(config.to_dict())):
                step = int(state["step"])
        except (ArtifactError, KeyError, TypeError, ValueError):
            pass
    if step < 0:
        shutil.rmtree(out_dir, ignore_errors=True)
    with session_scope() as s:
        s.execute(delete(RunMetric).where(RunMetric.run_id == run.id, RunMetric.step > step))
    log.info("run %s: attempt %s starts at step %s", run.id, run.attempts, max(step, 0))
    return found if step >= 0 else None


def _train_run(run_id: int, worker: str, cancel: threading.Event, out_dir: Path) -> str:
    """The training itself; raises TrainingError & co. with a sentence for the user."""
    run, corpus = _load_run(run_id)
    try:
        config = TrainConfig.from_dict(run.config)
    except (TypeError, ValueError) as exc:
        raise TrainingError(f"The run's saved settings are invalid: {exc}") from None
    device = resolve_device(config.device)
    with session_scope() as s:
        s.execute(_owned(run_id, worker).values(device=str(device)))
    if corpus is None:
        raise TrainingError("The corpus of this run was deleted.")
    frozen = snapshot_from_ids(corpus.id, run.snapshot_pair_ids)
    if not frozen.train_pairs:
        raise TrainingError("The corpus snapshot has no training pairs (were they deleted?).")
    init_id = run.init_version_id
    resume = _resume_point(run, config, out_dir)
    result = train(
        frozen.train_pairs,
        frozen.valid_pairs,
        config,
        out_dir=out_dir,
        resume_from=resume,
        callback=lambda event: _record_progress(run_id, worker, event),
        should_cancel=cancel.is_set,
        init_from=artifact_dir(init_id) if init_id is not None else None,
        extra_config={
            "corpus": {
                "id": corpus.id,
                "name": corpus.name,
                "src_lang": corpus.src_lang,
                "tgt_lang": corpus.tgt_lang,
                "snapshot_hash": frozen.content_hash,
                # pairs edited or deleted between queueing and training change the hash
                "snapshot_changed": frozen.content_hash != run.snapshot_hash,
                "pairs": len(frozen.pair_ids),
            },
            "run_id": run_id,
        },
    )
    if result.cancelled:
        _finish(run_id, worker, "cancelled")
        return "cancelled"
    # A fresh heartbeat both proves the run is still ours and keeps the reaper off it for a
    # full timeout, far longer than registering takes.
    with session_scope() as s:
        if not s.execute(_owned(run_id, worker).values(heartbeat_at=utcnow())).rowcount:
            return "taken over"
    register_version(out_dir, result.metrics, run_id=run_id, corpus_id=corpus.id)
    _finish(run_id, worker, "succeeded")
    return "succeeded"


def execute_run(run_id: int, worker: str) -> str:
    """Train one claimed run to its end (heartbeat alongside); return its final status."""
    heartbeat = Heartbeat(run_id, worker)
    heartbeat.start()
    out_dir = jobs.run_dir(run_id)
    status, error = "failed", None
    try:
        status = _train_run(run_id, worker, heartbeat.cancel, out_dir)
    except (TrainingError, ArtifactError, WorkbenchError) as exc:
        error = str(exc)
    except torch.cuda.OutOfMemoryError:
        error = "The GPU ran out of memory; choose a smaller preset."
    except Exception as exc:  # anything unexpected: keep the worker alive, tell the user
        log.exception("run %s failed", run_id)
        error = f"Training failed unexpectedly: {type(exc).__name__}: {exc}"
    finally:  # on KeyboardInterrupt & co. the folder stays: the run is resumed from it
        heartbeat.stop.set()
        heartbeat.join(timeout=10)
    if error is not None:
        _finish(run_id, worker, "failed", error)
    if _closed_by(run_id, worker):  # a run taken back meanwhile keeps its checkpoint
        shutil.rmtree(out_dir, ignore_errors=True)  # a registered model was moved out already
    return status


def _closed_by(run_id: int, worker: str) -> bool:
    """Whether this worker ended the run (it was not re-queued or re-claimed meanwhile)."""
    with session_scope() as s:
        row = s.execute(
            select(TrainingRun.worker_id, TrainingRun.status).where(TrainingRun.id == run_id)
        ).first()
    return row is None or (row.worker_id == worker and row.status not in jobs.ACTIVE_STATUSES)


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
    jobs.sweep_run_folders()
    while True:
        jobs.reap_stale_runs()
        run_id = claim_next_run(me)
        if run_id is not None:
            log.info("run %s claimed", run_id)
            status = execute_run(run_id, me)
            log.info("run %s %s", run_id, status)
            processed += 1
            idle_since = time.monotonic()
            if once:
                return processed
            continue
        if once or (idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s):
            return processed
        time.sleep(poll_s)
