"""Training jobs: queue a run with a frozen config and corpus snapshot, watch it, cancel,
resume or delete it.

The run row is the contract between the UI/CLI and the worker process: the UI inserts it
(`queued`), a worker claims it, streams metrics and a heartbeat into it, and finishes it.
Nothing here trains; see `workbench.worker`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import defer

from core_model.artifact import ArtifactError
from core_model.training import StopReason, TrainConfig, TrainingError
from core_model.training import checkpoint as ckpt
from core_model.training import config as training_config
from db.engine import database_url, session_scope, workbench_home
from db.models import Corpus, ModelVersion, RunMetric, TrainingRun, utcnow
from workbench import corpus, registry
from workbench.errors import WorkbenchError

HEARTBEAT_INTERVAL_S = 2.0
# Attempts in a row whose worker died before saving a new checkpoint: then the run is failed
# instead of re-queued (it would die the same way again, e.g. out of memory).
MAX_STALLED_ATTEMPTS = 3
RESUME_NOTE = (
    "Its worker stopped (no heartbeat): the next worker resumes it from its last checkpoint."
)
ACTIVE_STATUSES = ("queued", "running")
RESUMABLE_STATUSES = ("failed", "cancelled")
DEFAULT_PRESET: str = TrainConfig.preset  # what a run trains when no preset is given
MAX_TRAIN_MINUTES = 7 * 24 * 60  # a week: longer is a typo, not a plan
# progress_detail keys the reaper keeps across attempts (the worker writes the others)
ATTEMPT_KEYS = ("checkpoint_step", "stalled_attempts")


def heartbeat_timeout_s() -> float:
    """Seconds without a heartbeat after which a running run's worker is taken for dead.

    Longer than SQLite's busy timeout: a heartbeat may wait that long behind a big import.
    """
    return float(os.environ.get("WORKBENCH_HEARTBEAT_TIMEOUT", "90"))


def presets() -> dict[str, str]:
    """The model sizes a run can use, each with its one-line description. core_model's preset
    choices are the one source: a preset added there appears on the page and in the CLI."""
    descriptions = training_config.PRESET_DESCRIPTIONS
    return {name: descriptions.get(name, "") for name in training_config.PRESET_CHOICES}


def is_local_database() -> bool:
    """SQLite means one machine: no GPU worker elsewhere can pick up a CUDA run."""
    return database_url().startswith("sqlite")


def available_devices() -> list[str]:
    """The devices this machine can train on, best first."""
    return (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]


@dataclass
class RunInfo:
    id: int
    corpus_id: int | None
    corpus_name: str | None
    status: str
    device: str
    config: dict[str, Any]
    snapshot_size: int
    snapshot_hash: str
    progress_step: int
    progress_total: int
    eta_s: float | None
    error: str | None
    note: str | None
    stop_reason: str | None
    progress_detail: dict[str, Any]
    cancel_requested: bool
    attempts: int
    init_version_id: int | None
    version_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def fraction_done(self) -> float:
        """Share of the binding budget used (steps, or the clock under a time budget)."""
        if self.status == "succeeded":
            return 1.0
        fraction = self.progress_detail.get("fraction")
        if fraction is not None:
            return min(1.0, max(0.0, float(fraction)))
        return min(1.0, self.progress_step / self.progress_total) if self.progress_total else 0.0

    @property
    def time_limited(self) -> bool:
        """Whether the clock, not the step budget, is expected to end the run."""
        return self.progress_detail.get("limit") == "time"

    @property
    def time_budget_s(self) -> float | None:
        """The wall-clock budget: the one asked for, else (the automatic budget has a ceiling
        that core_model sets from the corpus) the one the progress shows binding."""
        asked = self.config.get("time_budget_s")
        if asked:
            return float(asked)
        detail = self.progress_detail
        elapsed, fraction = detail.get("elapsed_s"), detail.get("fraction")
        if self.time_limited and elapsed and fraction:  # the clock binds: fraction = t / budget
            return float(elapsed) / float(fraction)
        return None

    @property
    def budget(self) -> str:
        """What the run was asked to train for: 'automatic', '3 epochs' or '5 min'."""
        minutes = (self.config.get("time_budget_s") or 0) / 60
        if minutes:
            return f"{minutes:g} min"
        epochs = self.config.get("epochs")
        return f"{epochs} epoch{'s' if epochs != 1 else ''}" if epochs else "automatic"

    @property
    def stopped_because(self) -> str | None:
        """Why the run ended, in words ('learned every training pair'); None while it runs or
        when it failed (see `error`)."""
        try:
            reason = StopReason(self.stop_reason)
        except ValueError:
            return self.stop_reason
        return reason.describe(self.config.get("patience"))

    @property
    def early_stop_rule(self) -> str | None:
        """What may end the run before its budget, in words, with how close it is now."""
        return describe_watch(self.progress_detail.get("watch") or {})


def describe_watch(watch: dict[str, Any]) -> str | None:
    """A progress event's `watch` (what may stop the run early) as one sentence."""
    if watch.get("rule") == "memorise":
        share, pairs = watch.get("reproduced"), watch.get("pairs")
        now = f": {share:.0%} of {pairs:,} now" if share is not None and pairs else ""
        return f"Stops early once it reproduces every training pair{now}."
    if watch.get("rule") == "patience":
        metric = {"bleu": "BLEU", "loss": "loss"}.get(watch.get("metric"), "score")
        return (
            f"Stops early if validation {metric} does not improve for {watch.get('patience')} "
            f"epochs: {watch.get('bad_epochs', 0)} without improvement so far."
        )
    return None


def enqueue_training(
    corpus_id: int | str,
    preset: str = DEFAULT_PRESET,
    epochs: int | None = None,
    device: str = "auto",
    init_version_id: int | None = None,
    *,
    minutes: float | None = None,
    **overrides: Any,
) -> int:
    """Freeze a training config and the corpus' current train/valid pairs; return the run id.

    Train for `epochs`, or for `minutes` of wall-clock time, or (neither) core_model's
    automatic budget (a small corpus is repeated until learned). Extra keyword arguments are
    TrainConfig fields.
    """
    if preset not in presets():
        raise WorkbenchError(f"Unknown preset {preset!r}; choose one of {', '.join(presets())}.")
    if epochs is not None and minutes is not None:
        raise WorkbenchError("Train for a number of epochs or of minutes, not both.")
    if epochs is not None and epochs < 1:
        raise WorkbenchError("Epochs must be at least 1 (or empty for the automatic budget).")
    if minutes is not None:
        if not 0 < minutes <= MAX_TRAIN_MINUTES:  # also rejects NaN
            raise WorkbenchError(
                f"Minutes must be more than 0 and at most {MAX_TRAIN_MINUTES:,} (a week)."
            )
        overrides["time_budget_s"] = float(minutes) * 60
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise WorkbenchError(f"Unknown device {device!r}; use auto, cpu or cuda.")
    if device.startswith("cuda") and "cuda" not in available_devices() and is_local_database():
        raise WorkbenchError("No CUDA GPU on this machine: train on cpu (or auto).")
    try:
        config = TrainConfig(preset=preset, epochs=epochs, device=device, **overrides).to_dict()
    except (TypeError, TrainingError) as exc:
        raise WorkbenchError(f"Invalid training option: {exc}") from None
    frozen = corpus.snapshot(corpus_id)
    info = corpus.get_corpus(corpus_id)
    if not frozen.train_ids:
        raise WorkbenchError(
            f"Corpus {info.name!r} has no training pairs yet: add or import some first."
        )
    with session_scope() as s:
        if init_version_id is not None:
            version = s.get(ModelVersion, init_version_id)
            if version is None:
                raise WorkbenchError(f"Model version {init_version_id} does not exist.")
            if (version.src_lang, version.tgt_lang) != (info.src_lang, info.tgt_lang):
                raise WorkbenchError(
                    f"Version {init_version_id} translates {version.src_lang}→{version.tgt_lang}"
                    f" but corpus {info.name!r} is {info.src_lang}→{info.tgt_lang}."
                )
        run = TrainingRun(
            corpus_id=info.id,
            config=config,
            status="queued",
            device=device,
            snapshot_pair_ids=frozen.pair_ids,
            snapshot_hash=frozen.content_hash,
            snapshot_size=len(frozen.pair_ids),
            init_version_id=init_version_id,
        )
        s.add(run)
        s.flush()
        return run.id


def cancel_run(run_id: int) -> str:
    """Ask a run to stop. A queued run is cancelled at once; a running one within seconds.

    Both are conditional UPDATEs, so a worker claiming the run at the same moment either
    never sees it or sees the cancel request. Returns the run's status after the request.
    """
    with session_scope() as s:
        cancelled = s.execute(
            update(TrainingRun)
            .where(TrainingRun.id == run_id, TrainingRun.status == "queued")
            .values(status="cancelled", finished_at=utcnow(), error=None)
        ).rowcount
        if not cancelled:
            s.execute(
                update(TrainingRun)
                .where(TrainingRun.id == run_id, TrainingRun.status == "running")
                .values(cancel_requested=True)
            )
        status = s.scalar(select(TrainingRun.status).where(TrainingRun.id == run_id))
    if status is None:
        raise WorkbenchError(f"Training run {run_id} does not exist.")
    return status


def checkpoint_step(run_id: int) -> int | None:
    """The step of the checkpoint a stopped run left on this machine (None: it has none, e.g.
    it stopped before its first epoch ended, or trained on another machine's disk)."""
    found = ckpt.find_checkpoint(run_dir(run_id))
    if found is None:
        return None
    try:
        return int(ckpt.read_state(found)["step"])
    except (ArtifactError, KeyError, TypeError, ValueError):
        return None


def resume_run(run_id: int) -> int:
    """Queue a failed or cancelled run again; its worker goes on from the run's checkpoint.
    Returns the step it resumes from."""
    run = get_run(run_id)
    if run.status not in RESUMABLE_STATUSES:
        raise WorkbenchError(
            f"Run {run_id} is {run.status}: only a failed or cancelled run can be resumed."
        )
    if run.corpus_id is None:
        raise WorkbenchError(f"The corpus of run {run_id} was deleted: it cannot be resumed.")
    step = checkpoint_step(run_id)
    if step is None:
        raise WorkbenchError(
            f"Run {run_id} has no checkpoint to resume from (it stopped before its first "
            "epoch ended): start a new run instead."
        )
    detail = {k: v for k, v in run.progress_detail.items() if k in ATTEMPT_KEYS}
    with session_scope() as s:
        resumed = s.execute(
            update(TrainingRun)
            .where(TrainingRun.id == run_id, TrainingRun.status.in_(RESUMABLE_STATUSES))
            .values(
                status="queued",
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
        raise WorkbenchError(f"Run {run_id} was resumed or deleted meanwhile.")
    return step


def delete_run(run_id: int) -> None:
    """Delete a run that is not queued or running: its row, its metric rows and its folder
    (checkpoint). A model version it registered is kept (the foreign keys cascade to the
    metric rows and set the version's run to NULL)."""
    with session_scope() as s:
        deleted = s.execute(
            delete(TrainingRun).where(
                TrainingRun.id == run_id, TrainingRun.status.not_in(ACTIVE_STATUSES)
            )
        ).rowcount
        status = (
            None
            if deleted
            else s.scalar(select(TrainingRun.status).where(TrainingRun.id == run_id))
        )
    if status is not None:
        raise WorkbenchError(f"Run {run_id} is {status}: cancel it before deleting it.")
    if not deleted:
        raise WorkbenchError(f"Training run {run_id} does not exist.")
    shutil.rmtree(run_dir(run_id), ignore_errors=True)


def _version_ids(s, run_ids: list[int]) -> dict[int, int]:
    rows = s.execute(
        select(ModelVersion.run_id, ModelVersion.id).where(ModelVersion.run_id.in_(run_ids))
    ).all()
    return {run_id: version_id for run_id, version_id in rows}


def _info(run: TrainingRun, corpus_name: str | None, version_id: int | None) -> RunInfo:
    return RunInfo(
        id=run.id,
        corpus_id=run.corpus_id,
        corpus_name=corpus_name,
        status=run.status,
        device=run.device,
        config=dict(run.config),
        snapshot_size=run.snapshot_size,
        snapshot_hash=run.snapshot_hash,
        progress_step=run.progress_step,
        progress_total=run.progress_total,
        eta_s=run.eta_s,
        error=run.error,
        note=run.note,
        stop_reason=run.stop_reason,
        progress_detail=dict(run.progress_detail or {}),
        cancel_requested=run.cancel_requested,
        attempts=run.attempts,
        init_version_id=run.init_version_id,
        version_id=version_id,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


def get_run(run_id: int) -> RunInfo:
    reap_stale_runs()
    with session_scope() as s:
        row = s.execute(
            select(TrainingRun, Corpus.name)
            .options(defer(TrainingRun.snapshot_pair_ids))
            .outerjoin(Corpus, Corpus.id == TrainingRun.corpus_id)
            .where(TrainingRun.id == run_id)
        ).first()
        if row is None:
            raise WorkbenchError(f"Training run {run_id} does not exist.")
        return _info(row[0], row[1], _version_ids(s, [run_id]).get(run_id))


def list_runs(corpus_id: int | None = None, limit: int = 200) -> list[RunInfo]:
    """Newest first. Runs whose worker died are marked failed before listing."""
    reap_stale_runs()
    query = (
        select(TrainingRun, Corpus.name)
        .options(defer(TrainingRun.snapshot_pair_ids))  # up to 1M ids: never for a listing
        .outerjoin(Corpus, Corpus.id == TrainingRun.corpus_id)
        .order_by(TrainingRun.id.desc())
        .limit(limit)
    )
    if corpus_id is not None:
        query = query.where(TrainingRun.corpus_id == corpus_id)
    with session_scope() as s:
        rows = s.execute(query).all()
        versions = _version_ids(s, [run.id for run, _ in rows])
        return [_info(run, name, versions.get(run.id)) for run, name in rows]


def runs_table(corpus_id: int | None = None, runs: list[RunInfo] | None = None) -> pd.DataFrame:
    """The run history (or the given `runs`) as a table for display: one type per column
    (text where a value may be missing), so it converts to Arrow as it is."""
    rows = [
        {
            "run": r.id,
            "corpus": r.corpus_name or "",
            "status": r.status,
            "preset": str(r.config.get("preset", "")),
            "trained for": r.budget,
            "device": r.device,
            "pairs": r.snapshot_size,
            "steps": r.progress_step,
            "stopped because": r.stopped_because or "",
            "version": f"#{r.version_id}" if r.version_id is not None else "",
            "created": r.created_at,
            "error": r.error or "",
        }
        for r in (list_runs(corpus_id) if runs is None else runs)
    ]
    return pd.DataFrame(rows)


METRIC_COLUMNS = [
    "id", "run_id", "kind", "step", "epoch", "train_loss", "valid_loss", "lr", "tokens_per_s",
    "bleu", "chrf",
]  # fmt: skip


def _metric_rows(s, *where: Any) -> pd.DataFrame:
    rows = s.execute(
        select(*(getattr(RunMetric, c) for c in METRIC_COLUMNS))
        .where(*where)
        .order_by(RunMetric.run_id, RunMetric.step, RunMetric.id)
    ).all()
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def run_metrics(run_ids: list[int] | int) -> pd.DataFrame:
    """Metric rows of one or more runs, ordered by step (for loss/lr curves). `kind` is
    'start' | 'step' | 'epoch' (after validation) | 'done'."""
    ids = [run_ids] if isinstance(run_ids, int) else list(run_ids)
    with session_scope() as s:
        return _metric_rows(s, RunMetric.run_id.in_(ids))


def follow_metrics(run_id: int, known: pd.DataFrame | None = None) -> pd.DataFrame:
    """`known` (an earlier result for this run) brought up to date by reading only the rows
    written since. When rows it holds are gone (a resumed attempt drops those its dead
    predecessor wrote after the checkpoint), the run is read whole again."""
    with session_scope() as s:
        if known is None or known.empty:
            return _metric_rows(s, RunMetric.run_id == run_id)
        last = int(known["id"].max())
        kept = s.scalar(
            select(func.count()).where(RunMetric.run_id == run_id, RunMetric.id <= last)
        )
        if kept != len(known):
            return _metric_rows(s, RunMetric.run_id == run_id)
        new = _metric_rows(s, RunMetric.run_id == run_id, RunMetric.id > last)
    if new.empty:
        return known
    return pd.concat([known, new], ignore_index=True)


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
    cutoff = utcnow() - timedelta(seconds=heartbeat_timeout_s())
    stale = (TrainingRun.status == "running", TrainingRun.heartbeat_at < cutoff)
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
                values: dict[str, Any] = {"status": "cancelled", "finished_at": utcnow()}
            elif stalled < MAX_STALLED_ATTEMPTS:
                values = {
                    "status": "queued",
                    "worker_id": None,
                    "heartbeat_at": None,
                    "eta_s": None,
                    "device": str((row.config or {}).get("device", "auto")),
                    "note": RESUME_NOTE,
                    "progress_detail": detail,
                }
            else:
                values = {
                    "status": "failed",
                    "finished_at": utcnow(),
                    "progress_detail": detail,
                    "error": f"The worker stopped {MAX_STALLED_ATTEMPTS} times in a row (no "
                    "heartbeat) without saving a new checkpoint; resume it or start a new run.",
                }
            update_row = update(TrainingRun).where(TrainingRun.id == row.id, *stale)
            taken += s.execute(update_row.values(**values)).rowcount
    return taken


def run_dir(run_id: int) -> Path:
    """Where a run's worker trains: its epoch checkpoint, then the model before registration."""
    return workbench_home() / "runs" / str(run_id)


def sweep_run_folders(import_max_age_s: float = 86400.0) -> int:
    """Delete what runs/ no longer needs: folders of runs that succeeded (the model moved to
    models/) or no longer exist, and import staging copies older than `import_max_age_s`
    (left by a killed `register`). A failed or cancelled run keeps its folder (its checkpoint,
    to resume from) until the run is deleted. Returns how many were removed."""
    root = workbench_home() / "runs"
    found = {int(p.name): p for p in root.glob("*") if p.is_dir() and p.name.isdigit()}
    kept: set[int] = set()
    if found:
        with session_scope() as s:
            kept = set(
                s.scalars(
                    select(TrainingRun.id).where(
                        TrainingRun.id.in_(found), TrainingRun.status != "succeeded"
                    )
                )
            )
    done = [path for run_id, path in found.items() if run_id not in kept]
    for path in root.glob(f"{registry.IMPORT_STAGING_PREFIX}*"):
        with contextlib.suppress(OSError):  # another process may be removing it right now
            if time.time() - path.stat().st_mtime > import_max_age_s:
                done.append(path)
    for path in done:
        shutil.rmtree(path, ignore_errors=True)
    return len(done)


# -- the local worker process -------------------------------------------------------------


def worker_lock_path() -> Path:
    return workbench_home() / "worker.lock"


def worker_alive() -> bool:
    """A live worker holds a shared lock on worker.lock; the OS drops it when the process dies."""
    with open(worker_lock_path(), "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def ensure_worker(idle_exit_s: float = 600.0) -> int | None:
    """Start a detached worker if none is alive on this machine; return its PID (or None).

    The worker outlives the page and the Streamlit server, and exits after `idle_exit_s`
    seconds with nothing to do. Callers are serialised by spawn.lock, and the new worker
    inherits a shared lock on worker.lock from the start (not only once it has imported
    torch), so two quick clicks never start two workers.
    """
    reap_stale_runs()
    home = workbench_home()
    with open(home / "spawn.lock", "a+") as spawn_lock:
        fcntl.flock(spawn_lock, fcntl.LOCK_EX)
        if worker_alive():
            return None
        log_dir = home / "logs"
        log_dir.mkdir(exist_ok=True)
        root = Path(__file__).resolve().parents[1]
        python_path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "WORKBENCH_HOME": str(home), "PYTHONPATH": python_path}
        with open(worker_lock_path(), "a+") as held, open(log_dir / "worker.log", "ab") as log:
            fcntl.flock(held, fcntl.LOCK_SH)
            proc = subprocess.Popen(
                [sys.executable, "-m", "workbench", "worker", "--idle-exit", str(idle_exit_s)],
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(held.fileno(),),  # the child keeps the shared lock alive
                start_new_session=True,  # not killed with the UI's process group
            )
        return proc.pid
