"""The training worker: `python -m workbench worker [--once]`.

Claims queued runs one at a time (atomically, so several workers — on one machine or on
GPU machines sharing a PostgreSQL database — never train the same run), trains them with
core_model, streams progress rows and a heartbeat, honours cancel requests, and registers
a model version on success. A failure is recorded as one sentence a user can act on. The
status changes themselves are ``workbench.training.runs``'s; starting a worker process and its lock
are ``workbench.training.worker_process``'s. When no run waits, the worker does the second kind of
job: translating a corpus' pool (``curation.pool_jobs``, ``curation.pool_translation``).

A busy database (a big import holding SQLite's write lock for longer than its busy timeout)
delays what the worker writes, it never fails a run: progress is buffered and written later,
and the other writes are retried until the lock is free.

(Over 450 lines on purpose: a run's whole stay in the worker — claim, heartbeat, progress
buffer, cancel, failure sentence, registration — shares its per-run state and its retrying
writes; apart, each part would reach into the others.)
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from sqlalchemy import delete
from sqlalchemy.exc import OperationalError

from core_model.artifact import ArtifactError
from core_model.distributed import train_data_parallel
from core_model.training import ProgressEvent, TrainConfig, TrainingError, parallel, resolve_device
from core_model.training import checkpoint as ckpt
from core_model.training.layout import LayoutChoice, choose_layout
from db.tables import Corpus, RunMetric, RunStatus, TrainingRun
from workbench import settings
from workbench.corpus.snapshots import snapshot_from_ids
from workbench.curation import pool_jobs, pool_translation
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models.registry import artifact_dir, register_version
from workbench.storage import session_scope
from workbench.team import trash
from workbench.training import run_folders, runs
from workbench.worker_lock import hold_worker_lock

log = logging.getLogger("workbench.training.worker")
T = TypeVar("T")
RETRY_PAUSE_S = 1.0
HEARTBEAT_INTERVAL_S = 2.0
# A worker process runs this much nicer than the app (`python -m workbench worker`): training
# takes every core the app leaves idle, and the app's pages and translations come first.
WORKER_NICENESS = 10


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _is_busy(exc: BaseException) -> bool:
    """SQLite's 'database is locked': another process held the write lock past the busy
    timeout. Waiting longer is the cure."""
    return isinstance(exc, OperationalError) and "locked" in str(exc).lower()


def _until_written(write: Callable[[], T], what: str) -> T:
    """Run a database write, retrying for as long as the database is locked."""
    while True:
        try:
            return write()
        except OperationalError as exc:
            if not _is_busy(exc):
                raise
            log.warning("%s: the database is locked; retrying", what)
            time.sleep(RETRY_PAUSE_S)


class RunSync(threading.Thread):
    """The link between a training run and its row, in a thread of its own.

    Training only hands it progress events (`report`, no database access). Every couple of
    seconds, and soon after an event other than a loss-curve point, it writes in one
    transaction the heartbeat, the latest progress (step, expected final step, ETA,
    `progress_detail`, the stop reason at the end) and the buffered metric rows, then reads
    the cancel flag. A write the database refuses
    (locked by a long import, say) leaves everything buffered for the next try, so neither a
    long validation nor a busy database stalls training, looks like a dead worker or fails
    the run. Writes apply only while this worker owns the run: a worker that was paused past
    the heartbeat timeout must not mix its rows into the attempt that took the run over.
    """

    def __init__(self, run_id: int, worker: str, kept_detail: dict[str, Any]) -> None:
        super().__init__(daemon=True, name=f"run-sync-{run_id}")
        self.run_id = run_id
        self.worker = worker
        self.cancel = threading.Event()  # cancel requested, or the run is no longer ours
        self.owned = True
        self.last_error: BaseException | None = None
        # the reaper's bookkeeping of earlier attempts, and this attempt's layout
        self._kept_detail = kept_detail
        self._closing = threading.Event()
        self._wake = threading.Event()
        self._buffer_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one write at a time: this thread or `flush`
        self._rows: list[dict[str, Any]] = []
        self._latest: dict[str, Any] = {}

    def report(self, event: ProgressEvent) -> None:
        """Buffer one event (called by training; never waits for the database)."""
        row = {
            "kind": event.kind,
            "step": event.step,
            "epoch": event.epoch,
            "train_loss": event.train_loss,
            "valid_loss": event.valid_loss,
            "lr": event.lr,
            "tokens_per_s": event.tokens_per_s,
            "bleu": event.bleu,
            "chrf": event.chrf,
        }
        latest = {
            "progress_step": event.step,
            "progress_total": event.total_steps,
            "eta_s": event.eta_s,
            "progress_detail": {
                **self._kept_detail,
                "fraction": event.fraction,
                "limit": event.limit,
                "watch": event.watch,
                "elapsed_s": event.elapsed_s,
                # planned against real speed, re-plans, thread changes (`training.pace`)
                "pace": event.pace,
            },
        }
        if event.stop_reason is not None:
            latest["stop_reason"] = event.stop_reason
        with self._buffer_lock:
            self._rows.append(row)
            self._latest.update(latest)
        if event.kind != "loss":  # loss rows (as often as every step) wait for the next beat
            self._wake.set()

    def preparing(self, phase: str) -> None:
        """What the run does before its first step (a message id), written at once: the
        Train page names it while the run has no progress yet (the first report replaces
        it)."""
        with self._buffer_lock:
            self._latest["progress_detail"] = {**self._kept_detail, "preparing": phase}
        self._wake.set()

    def keep(self, **detail: Any) -> None:
        """Facts of this attempt that every progress write carries (its layout)."""
        with self._buffer_lock:
            self._kept_detail.update(detail)

    def run(self) -> None:
        pause = HEARTBEAT_INTERVAL_S
        while not self._closing.is_set():
            self._wake.wait(pause)
            self._wake.clear()
            if self._closing.is_set():
                return
            # After a refused write, try again soon: waiting inside the busy handler is how
            # this worker gets the lock the moment the import lets go of it.
            pause = HEARTBEAT_INTERVAL_S if self.write() else RETRY_PAUSE_S / 2

    def write(self) -> bool:
        """One transaction with everything buffered; False when the database refused it (all
        of it stays buffered)."""
        with self._write_lock:
            with self._buffer_lock:
                rows, latest = list(self._rows), dict(self._latest)
            try:
                owned, requested = runs.sync_progress(self.run_id, self.worker, latest, rows)
            except Exception as exc:  # a busy database, say: everything stays buffered
                self.last_error = exc
                first_line = next(iter(str(exc).splitlines()), type(exc).__name__)
                log.warning("run %s: progress kept for a later write: %s", self.run_id, first_line)
                return False
            with self._buffer_lock:
                del self._rows[: len(rows)]
            if not owned:  # reaped as stale (re-queued or failed): nothing more is ours
                self.owned = False
            if requested or not owned:
                self.cancel.set()
            return True

    def flush(self) -> bool:
        """Write everything buffered now, waiting for a locked database as long as it takes;
        returns whether the run is still this worker's."""
        while not self.write():
            if not _is_busy(self.last_error):
                log.error("run %s: progress rows dropped: %s", self.run_id, self.last_error)
                with self._buffer_lock:
                    self._rows.clear()
                break
            time.sleep(RETRY_PAUSE_S)
        return self.owned

    def close(self) -> None:
        self._closing.set()
        self._wake.set()
        self.join(timeout=10)


def _finish(run_id: int, worker: str, status: RunStatus, error: str | None = None) -> bool:
    """Close the run (``runs.finish_run``), waiting for a locked database as long as it
    takes; False when it was no longer ours."""
    return _until_written(
        lambda: runs.finish_run(run_id, worker, status, error),
        f"run {run_id}: closing it as {status}",
    )


def _load_run(run_id: int) -> tuple[TrainingRun, Corpus | None]:
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        corpus = s.get(Corpus, run.corpus_id) if run.corpus_id is not None else None
        s.expunge_all()
        return run, corpus


def _resume_point(run: TrainingRun, config: TrainConfig, out_dir: Path) -> Path | None:
    """The checkpoint an earlier attempt of this run left in `out_dir`, if any (its worker
    died, or the user resumed a failed or cancelled run).

    A first attempt starts from an empty folder (one left by a run of an older database with
    the same id is not ours). Metric rows an earlier attempt wrote after its checkpoint are
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

    def drop_later_rows() -> None:
        with session_scope() as s:
            s.execute(delete(RunMetric).where(RunMetric.run_id == run.id, RunMetric.step > step))

    _until_written(drop_later_rows, f"run {run.id}: dropping the rows after its checkpoint")
    log.info("run %s: attempt %s starts at step %s", run.id, run.attempts, max(step, 0))
    return found if step >= 0 else None


def _train_run(
    run: TrainingRun, corpus: Corpus | None, worker: str, sync: RunSync, out_dir: Path
) -> str:
    """The training itself; raises TrainingError & co. with a sentence for the user."""
    try:
        config = TrainConfig.from_dict(run.config)
    except (TypeError, ValueError) as exc:
        raise TrainingError(f"The run's saved settings are invalid: {exc}") from None
    device = resolve_device(config.device)

    _until_written(
        lambda: runs.record_device(run.id, worker, str(device)),
        f"run {run.id}: recording its device",
    )
    if corpus is None:
        raise TrainingError("The corpus of this run was deleted.")
    sync.preparing(N_("reading the corpus snapshot"))
    frozen = snapshot_from_ids(corpus.id, run.snapshot_pair_ids)
    if not frozen.train_pairs:
        raise TrainingError("The corpus snapshot has no training pairs (were they deleted?).")
    init_id = run.init_version_id
    resume = _resume_point(run, config, out_dir)
    # how the run spreads over the cores: timed on this machine unless the user said
    init_from = artifact_dir(init_id) if init_id is not None else None
    sync.preparing(N_("timing how to spread the run over the cores"))
    choice = choose_layout(config, frozen.train_pairs, frozen.valid_pairs, init_from)
    log.info("run %s: %s", run.id, _layout_words(choice))
    sync.keep(layout=choice.metrics())
    sync.preparing(N_("training the tokenizers and building the model"))
    result = train_data_parallel(
        choice.layout,
        frozen.train_pairs,
        frozen.valid_pairs,
        config,
        speed=choice.speed,
        out_dir=out_dir,
        resume_from=resume,
        callback=sync.report,
        should_cancel=sync.cancel.is_set,
        init_from=init_from,
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
            "run_id": run.id,
            "layout": choice.metrics(),
        },
    )
    # Every progress row is in before the run closes. The write is also a fresh heartbeat:
    # it proves the run is still ours and keeps the reaper off it for a full timeout, far
    # longer than registering takes (and the sync thread goes on beating meanwhile).
    if not sync.flush():
        return "taken over"
    if result.cancelled:
        _finish(run.id, worker, RunStatus.CANCELLED)
        return RunStatus.CANCELLED
    _until_written(
        lambda: register_version(
            out_dir,
            {**result.metrics, **choice.metrics()},
            run_id=run.id,
            corpus_id=corpus.id,
            parent_version_id=init_id,
        ),
        f"run {run.id}: registering its model",
    )
    _finish(run.id, worker, RunStatus.SUCCEEDED)
    return RunStatus.SUCCEEDED


def _layout_words(choice: LayoutChoice) -> str:
    """'2 processes × 1 thread (the fastest when timed: 1×2 3,100 tokens/s, 2×1 5,200)'."""
    layout = choice.layout
    threads = f" × {layout.threads} thread(s)" if layout.threads else ""
    timed = ", ".join(f"{t.processes}×{t.threads} {t.tokens_per_s:,.0f}" for t in choice.timings)
    return f"{layout.processes} process(es){threads} ({choice.reason}" + (
        f": {timed} tokens/s)" if timed else ")"
    )


def execute_run(run_id: int, worker: str) -> str:
    """Train one claimed run to its end (progress and heartbeat alongside); return its final
    status. A failed or cancelled run keeps its folder, and so its checkpoint, to be resumed
    (`runs.resume_run`) until the run is deleted; a succeeded one's model moved to models/."""
    run, corpus = _load_run(run_id)
    kept = {k: v for k, v in (run.progress_detail or {}).items() if k in runs.ATTEMPT_KEYS}
    sync = RunSync(run_id, worker, kept)
    sync.start()
    status: str = RunStatus.FAILED
    error = None
    try:
        try:
            status = _train_run(run, corpus, worker, sync, settings.run_dir(run_id))
        except (TrainingError, ArtifactError, WorkbenchError) as exc:
            error = str(exc)
        except torch.cuda.OutOfMemoryError:
            error = "The GPU ran out of memory; choose a smaller preset."
        except OSError as exc:
            error = _unwritable(exc)
            if error is None:
                log.exception("run %s failed", run_id)
                error = f"Training failed unexpectedly: {type(exc).__name__}: {exc}"
        except Exception as exc:  # anything unexpected: keep the worker alive, tell the user
            log.exception("run %s failed", run_id)
            error = f"Training failed unexpectedly: {type(exc).__name__}: {exc}"
        if error is not None:
            sync.flush()  # the rows up to the failure, then the verdict
            _finish(run_id, worker, RunStatus.FAILED, error)
    finally:
        sync.close()
    return status


def _unwritable(exc: OSError) -> str | None:
    """What a run says when the worker may not write where it trains (a read-only ``runs/``,
    a full or read-only disk): the folder, and what to do; None for any other error."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC):
        return None
    where = Path(exc.filename) if exc.filename else settings.runs_dir()
    folder = where if where.is_dir() else where.parent
    why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or "").lower()
    return (
        f"The worker cannot write in {folder} ({why}): make that folder writable for the "
        "worker's user (or free some space), then resume the run."
    )


def _next_pool_job(worker: str) -> bool:
    """Claim and do the oldest queued pool translation job, if any (training runs come
    first: this is asked only when none waits). Returns whether there was one."""
    try:
        pool_jobs.reap_stale_jobs()
        job_id = pool_jobs.claim_next_job(worker)
    except OperationalError as exc:
        if not _is_busy(exc):
            raise
        return False
    if job_id is None:
        return False
    log.info("pool job %s claimed", job_id)
    log.info("pool job %s %s", job_id, pool_translation.execute_job(job_id, worker))
    return True


def run_worker(once: bool = False, poll_s: float = 1.0, idle_exit_s: float | None = None) -> int:
    """Process queued runs, then queued pool translation jobs, until stopped (or one of them
    with `once`); returns how many were processed.

    Holds the worker lock while alive (`worker_lock.hold_worker_lock`): that is how
    `worker_process.ensure_worker` knows a local worker is running. Each poll first takes back
    the runs of dead workers (`runs.reap_stale_runs`).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    me = worker_id()
    lock = hold_worker_lock()  # noqa: F841 — released when the process ends
    processed = 0
    idle_since = time.monotonic()
    log.info("worker %s started (home %s)", me, settings.home())
    run_folders.sweep_run_folders()
    for folder in parallel.sweep_dead_groups():  # a killed worker's ranks' shared memory
        log.info("removed %s, left by a training process that is gone", folder)
    trash.sweep_trash()  # corpora deleted more than trash.TRASH_DAYS ago
    cuda = torch.cuda.is_available()
    while True:
        try:
            runs.reap_stale_runs()
            run_id = runs.claim_next_run(me, cuda=cuda)
        except OperationalError as exc:
            if not _is_busy(exc):
                raise
            log.warning("the database is locked; looking for runs again shortly")
            time.sleep(poll_s)
            continue
        if run_id is not None:
            log.info("run %s claimed", run_id)
            status = execute_run(run_id, me)
            log.info("run %s %s", run_id, status)
            processed += 1
            idle_since = time.monotonic()
            if once:
                return processed
            continue
        if _next_pool_job(
            me
        ):  # no run waits: translate a pool (workbench.curation.pool_translation)
            processed += 1
            idle_since = time.monotonic()
            if once:
                return processed
            continue
        if once or (idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s):
            return processed
        time.sleep(poll_s)
