"""Training runs as a state machine: ``RunStatus`` and every change of a run's status.

Every transition, and the function that makes it::

    (new)                 ──enqueue_training──►  queued
    queued                ──claim_next_run────►  running     (a worker takes it)
    running               ──finish_run────────►  succeeded | failed | cancelled
    queued                ──cancel_run────────►  cancelled   (a running run is only asked:
                                                              cancel_requested; its worker
                                                              then finishes it as cancelled)
    running               ──reap_stale_runs───►  queued | failed | cancelled  (worker died)
    failed | cancelled    ──resume_run────────►  queued      (from its checkpoint)
    succeeded | failed | cancelled ──delete_run──► (gone)

The run row is the contract between the front ends and the worker process: a front end
queues it, a worker claims it, streams its progress into it (``sync_progress``, only while
the run is that worker's) and finishes it. Every UPDATE here is conditional on the status it
leaves, so two processes racing on one run (a claim and a cancel, a late write and the
reaper) never undo each other. Nothing here reads a run for display (``run_info``)
or trains (``workbench.training.worker``).

A dead worker is noticed by its stale heartbeat. ``reap_stale_runs`` is called explicitly:
by every worker as it polls, before a worker is started (``worker_process.ensure_worker``),
and by a front end that sees a run whose worker was lost (``RunInfo.worker_lost``); reading
a run never reaps.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

from sqlalchemy import Update, delete, func, select, update

from db.tables import RunMetric, RunStatus, TrainingRun, utcnow
from workbench import job_rows, settings
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.snapshots import take_snapshot
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models import registry
from workbench.storage import get_row, session_scope
from workbench.team.access import Permission, require
from workbench.training import run_folders, train_options

__all__ = [
    "ACTIVE_STATUSES",
    "MAX_STALLED_ATTEMPTS",
    "NO_SUCH_RUN",
    "RESUMABLE_STATUSES",
    "RESUME_NOTE",
    "RunStatus",
    "cancel_run",
    "claim_next_run",
    "delete_run",
    "enqueue_training",
    "finish_run",
    "reap_stale_runs",
    "record_device",
    "resume_run",
    "sync_progress",
]

ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
RESUMABLE_STATUSES = (RunStatus.FAILED, RunStatus.CANCELLED)
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
# Attempts in a row whose worker died before saving a new checkpoint: then the run is failed
# instead of re-queued (it would die the same way again, e.g. out of memory).
MAX_STALLED_ATTEMPTS = 3
RESUME_NOTE = (
    "Its worker stopped (no heartbeat): the next worker resumes it from its last checkpoint."
)
# progress_detail keys the reaper keeps across attempts (the worker writes the others)
ATTEMPT_KEYS = ("checkpoint_step", "stalled_attempts")
NO_SUCH_RUN = N_("Training run {id} does not exist.")


# ------------------------------------------------------------------------- front ends


def enqueue_training(
    corpus_id: CorpusRef,
    preset: str = train_options.DEFAULT_PRESET,
    epochs: int | None = None,
    device: str = "auto",
    init_version_id: int | None = None,
    *,
    minutes: float | None = None,
    tokens: int | None = None,
    precision: str = train_options.DEFAULT_PRECISION,
    **overrides: Any,
) -> int:
    """Queue a run: freeze its config (``train_options.training_config``: the budget in
    epochs, minutes or tokens, the precision, …) and the corpus' current train/valid pairs
    (``snapshots``); return the run id."""
    actor = require(Permission.TRAIN)
    config = train_options.training_config(
        preset, epochs, device, minutes=minutes, tokens=tokens, precision=precision, **overrides
    )
    with session_scope() as s:
        corpus = find(s, corpus_id)
        frozen = take_snapshot(s, corpus)
        if not frozen.train_ids:
            raise WorkbenchError(
                N_("Corpus {name!r} has no training pairs yet: add or import some first."),
                name=corpus.name,
            )
        if init_version_id is not None:
            version = registry.version_row(s, init_version_id)
            registry.check_direction(version, corpus)
        run = TrainingRun(
            corpus_id=corpus.id,
            config=config,
            status=RunStatus.QUEUED,
            device=device,
            snapshot_pair_ids=frozen.pair_ids,
            snapshot_hash=frozen.content_hash,
            snapshot_size=len(frozen.pair_ids),
            init_version_id=init_version_id,
            started_by=actor.email,
        )
        s.add(run)
        s.flush()
        return run.id


def cancel_run(run_id: int) -> RunStatus:
    """Ask a run to stop. A queued run is cancelled at once; a running one within seconds.

    Both are conditional UPDATEs, so a worker claiming the run at the same moment either
    never sees it or sees the cancel request. Returns the run's status after the request.
    """
    require(Permission.TRAIN)
    with session_scope() as s:
        status = job_rows.request_cancel(s, TrainingRun, run_id, error=None)
    if status is None:
        raise WorkbenchError(NO_SUCH_RUN, id=run_id)
    return status


def resume_run(run_id: int) -> int:
    """Queue a failed or cancelled run again; its worker goes on from the run's checkpoint.
    Returns the step it resumes from."""
    require(Permission.TRAIN)
    with session_scope() as s:
        run = get_row(s, TrainingRun, run_id, NO_SUCH_RUN)
        if run.status not in RESUMABLE_STATUSES:
            raise WorkbenchError(
                N_("Run {id} is {status}: only a failed or cancelled run can be resumed."),
                id=run_id,
                status=run.status,
            )
        if run.corpus_id is None:
            raise WorkbenchError(
                N_("The corpus of run {id} was deleted: it cannot be resumed."), id=run_id
            )
        step = run_folders.checkpoint_step(run_id)
        if step is None:
            raise WorkbenchError(
                N_(
                    "Run {id} has no checkpoint to resume from (it stopped before its first "
                    "epoch ended): start a new run instead."
                ),
                id=run_id,
            )
        detail = {k: v for k, v in (run.progress_detail or {}).items() if k in ATTEMPT_KEYS}
        resumed = s.execute(
            _leaving(run_id, *RESUMABLE_STATUSES).values(
                status=RunStatus.QUEUED,
                worker_id=None,
                heartbeat_at=None,
                cancel_requested=False,
                error=None,
                stop_reason=None,
                finished_at=None,
                eta_s=None,
                device=str(run.config.get("device", "auto")),
                progress_detail={**detail, "stalled_attempts": 0},
                note=f"Resumed by you from its checkpoint at step {step:,}.",
            )
        ).rowcount
    if not resumed:  # another click or process got there first
        raise WorkbenchError(N_("Run {id} was resumed or deleted meanwhile."), id=run_id)
    return step


def delete_run(run_id: int) -> None:
    """Delete a run that is not queued or running: its row, its metric rows and its folder
    (checkpoint). A model version it registered is kept (the foreign keys cascade to the
    metric rows and set the version's run to NULL)."""
    require(Permission.TRAIN)
    with session_scope() as s:
        deleted = s.execute(
            delete(TrainingRun).where(
                TrainingRun.id == run_id, TrainingRun.status.in_(FINAL_STATUSES)
            )
        ).rowcount
        status = (
            None
            if deleted
            else s.scalar(select(TrainingRun.status).where(TrainingRun.id == run_id))
        )
    if status is not None:
        raise WorkbenchError(
            N_("Run {id} is {status}: cancel it before deleting it."), id=run_id, status=status
        )
    if not deleted:
        raise WorkbenchError(NO_SUCH_RUN, id=run_id)
    shutil.rmtree(settings.run_dir(run_id), ignore_errors=True)  # its checkpoint


# ----------------------------------------------------------------------------- workers


def claim_next_run(worker: str, *, cuda: bool | None = None) -> int | None:
    """Take the oldest queued run this machine can train (``cuda``: whether it has a GPU;
    default: ask torch), atomically (``job_rows.claim_oldest``). A worker without CUDA leaves
    runs that asked for it to a GPU worker."""
    if cuda is None:
        cuda = "cuda" in train_options.available_devices()
    query = select(TrainingRun.id).where(TrainingRun.status == RunStatus.QUEUED)
    if not cuda:
        query = query.where(TrainingRun.device.not_like("cuda%"))
    with session_scope() as s:
        return job_rows.claim_oldest(
            s,
            TrainingRun,
            query,
            worker,
            attempts=TrainingRun.attempts + 1,
            note=None,  # a re-queued run's note; the card shows its attempt instead
        )


def record_device(run_id: int, worker: str, device: str) -> None:
    """The device a worker resolved the run's choice ('auto') to."""
    with session_scope() as s:
        s.execute(_owned(run_id, worker).values(device=device))


def sync_progress(
    run_id: int, worker: str, latest: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[bool, bool]:
    """One transaction: a heartbeat, the latest progress (columns of the run) and new metric
    rows, written only while the run is this worker's; returns (still this worker's, cancel
    requested). A worker the reaper took the run from must not mix its rows into the
    attempt that took it over."""
    with session_scope() as s:
        owned = s.execute(_owned(run_id, worker).values(heartbeat_at=utcnow(), **latest)).rowcount
        if owned:
            s.add_all(RunMetric(run_id=run_id, **row) for row in rows)
        requested = s.scalar(select(TrainingRun.cancel_requested).where(TrainingRun.id == run_id))
    return bool(owned), bool(requested)


def finish_run(run_id: int, worker: str, status: RunStatus, error: str | None = None) -> bool:
    """Close a running run as succeeded, failed or cancelled; False when it was no longer this
    worker's (then nothing is written)."""
    if status not in FINAL_STATUSES:
        raise ValueError(f"a run cannot finish as {status}")
    values: dict[str, Any] = dict(status=status, error=error, finished_at=utcnow(), eta_s=0.0)
    if status == RunStatus.FAILED:  # training may have ended well before registering failed
        values["stop_reason"] = None
    with session_scope() as s:
        return bool(s.execute(_owned(run_id, worker).values(**values)).rowcount)


def reap_stale_runs() -> int:
    """Take back running runs whose worker stopped sending heartbeats (killed, machine lost).

    Such a run goes back to the queue, with the device it asked for (not the one the dead
    worker resolved), and the next worker resumes it from its last epoch checkpoint. An
    attempt counts against the run only if it saved no new checkpoint (its epoch rows say):
    after MAX_STALLED_ATTEMPTS of those in a row it is failed instead, so a run that kills its
    worker every time (say, out of memory) does not loop forever, while a long run on a flaky
    machine that keeps making progress is never given up. A run whose cancel was pending is
    cancelled. Each UPDATE re-tests staleness, so a heartbeat landing meanwhile wins. Returns
    how many runs were taken back.
    """
    cutoff = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s())
    stale = (TrainingRun.status == RunStatus.RUNNING, TrainingRun.heartbeat_at < cutoff)
    taken = 0
    with session_scope() as s:
        rows = s.execute(
            select(
                TrainingRun.id,
                TrainingRun.config,
                TrainingRun.cancel_requested,
                TrainingRun.progress_detail,
            ).where(*stale)
        ).all()
        for row in rows:
            detail = dict(row.progress_detail or {})
            saved = s.scalar(
                select(func.max(RunMetric.step)).where(
                    RunMetric.run_id == row.id, RunMetric.kind == "epoch"
                )
            )
            saved = -1 if saved is None else int(saved)
            progressed = saved > int(detail.get("checkpoint_step", -1))
            stalled = 0 if progressed else int(detail.get("stalled_attempts", 0)) + 1
            detail.update(checkpoint_step=saved, stalled_attempts=stalled)
            if row.cancel_requested:
                values: dict[str, Any] = {"status": RunStatus.CANCELLED, "finished_at": utcnow()}
            elif stalled < MAX_STALLED_ATTEMPTS:
                values = {
                    "status": RunStatus.QUEUED,
                    "worker_id": None,
                    "heartbeat_at": None,
                    "eta_s": None,
                    "device": str((row.config or {}).get("device", "auto")),
                    "note": RESUME_NOTE,
                    "progress_detail": detail,
                }
            else:
                values = {
                    "status": RunStatus.FAILED,
                    "finished_at": utcnow(),
                    "progress_detail": detail,
                    "error": f"The worker stopped {MAX_STALLED_ATTEMPTS} times in a row (no "
                    "heartbeat) without saving a new checkpoint; resume it or start a new run.",
                }
            update_row = update(TrainingRun).where(TrainingRun.id == row.id, *stale)
            taken += s.execute(update_row.values(**values)).rowcount
    return taken


def _leaving(run_id: int, *statuses: RunStatus) -> Update:
    return job_rows.leaving(TrainingRun, run_id, *statuses)


def _owned(run_id: int, worker: str) -> Update:
    return job_rows.owned(TrainingRun, run_id, worker)
