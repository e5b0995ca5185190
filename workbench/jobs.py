"""Training jobs: queue a run with a frozen config and corpus snapshot, watch it, cancel it.

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
from sqlalchemy import select, update
from sqlalchemy.orm import defer

from core_model.training import TrainConfig
from core_model.transformer.config import PRESETS
from db.engine import database_url, session_scope, workbench_home
from db.models import Corpus, ModelVersion, RunMetric, TrainingRun, utcnow
from workbench import corpus, registry
from workbench.errors import WorkbenchError

HEARTBEAT_INTERVAL_S = 2.0
MAX_ATTEMPTS = 3  # claims of one run before a dead worker fails it instead of re-queueing
RESUME_NOTE = (
    "Its worker stopped (no heartbeat): the next worker resumes it from its last checkpoint."
)
ACTIVE_STATUSES = ("queued", "running")


def heartbeat_timeout_s() -> float:
    """Seconds without a heartbeat after which a running run's worker is taken for dead.

    Longer than SQLite's busy timeout: a heartbeat may wait that long behind a big import.
    """
    return float(os.environ.get("WORKBENCH_HEARTBEAT_TIMEOUT", "90"))


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
        return min(1.0, self.progress_step / self.progress_total) if self.progress_total else 0.0


def enqueue_training(
    corpus_id: int | str,
    preset: str = "tiny",
    epochs: int | None = None,
    device: str = "auto",
    init_version_id: int | None = None,
    **overrides: Any,
) -> int:
    """Freeze a training config and the corpus' current train/valid pairs; return the run id.

    `epochs=None` leaves the budget to core_model's adaptive rule (a small corpus is
    repeated until learned). Extra keyword arguments are TrainConfig fields.
    """
    if preset not in PRESETS:
        raise WorkbenchError(f"Unknown preset {preset!r}; choose one of {', '.join(PRESETS)}.")
    if epochs is not None and epochs < 1:
        raise WorkbenchError("Epochs must be at least 1 (or empty for the automatic budget).")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise WorkbenchError(f"Unknown device {device!r}; use auto, cpu or cuda.")
    if device.startswith("cuda") and "cuda" not in available_devices() and is_local_database():
        raise WorkbenchError("No CUDA GPU on this machine: train on cpu (or auto).")
    try:
        config = TrainConfig(preset=preset, epochs=epochs, device=device, **overrides).to_dict()
    except TypeError as exc:
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


def runs_table(corpus_id: int | None = None) -> pd.DataFrame:
    """The run history as a table for display."""
    rows = [
        {
            "run": r.id,
            "corpus": r.corpus_name,
            "status": r.status,
            "preset": r.config.get("preset"),
            "epochs": r.config.get("epochs") or "auto",
            "device": r.device,
            "pairs": r.snapshot_size,
            "progress": f"{r.progress_step}/{r.progress_total}" if r.progress_total else "",
            "version": r.version_id,
            "created": r.created_at,
            "error": r.error or "",
        }
        for r in list_runs(corpus_id)
    ]
    table = pd.DataFrame(rows)
    if not table.empty:  # runs without a version hold None: keep the ids integers
        table["version"] = table["version"].astype("Int64")
    return table


METRIC_COLUMNS = ["run_id", "step", "epoch", "train_loss", "valid_loss", "lr", "tokens_per_s"]


def run_metrics(run_ids: list[int] | int) -> pd.DataFrame:
    """Metric rows of one or more runs, ordered by step (for loss/lr curves)."""
    ids = [run_ids] if isinstance(run_ids, int) else list(run_ids)
    columns = [*METRIC_COLUMNS, "bleu", "chrf"]
    with session_scope() as s:
        rows = s.execute(
            select(*(getattr(RunMetric, c) for c in columns))
            .where(RunMetric.run_id.in_(ids))
            .order_by(RunMetric.run_id, RunMetric.step, RunMetric.id)
        ).all()
    return pd.DataFrame(rows, columns=columns)


def reap_stale_runs() -> int:
    """Take back running runs whose worker stopped sending heartbeats (killed, machine lost).

    Such a run goes back to the queue, with the device it asked for (not the one the dead
    worker resolved), and the next worker resumes it from its last epoch checkpoint. After
    MAX_ATTEMPTS claims it is failed instead, so a run that kills its worker every time (say,
    out of memory) does not loop forever; a run whose cancel was pending is cancelled. Each
    UPDATE re-tests staleness, so a heartbeat landing meanwhile wins. Returns how many runs
    were taken back.
    """
    cutoff = utcnow() - timedelta(seconds=heartbeat_timeout_s())
    stale = (TrainingRun.status == "running", TrainingRun.heartbeat_at < cutoff)
    taken = 0
    with session_scope() as s:
        rows = s.execute(
            select(
                TrainingRun.id,
                TrainingRun.config,
                TrainingRun.attempts,
                TrainingRun.cancel_requested,
            ).where(*stale)
        ).all()
        for row in rows:
            if row.cancel_requested:
                values: dict[str, Any] = {"status": "cancelled", "finished_at": utcnow()}
            elif row.attempts < MAX_ATTEMPTS:
                values = {
                    "status": "queued",
                    "worker_id": None,
                    "heartbeat_at": None,
                    "eta_s": None,
                    "device": str((row.config or {}).get("device", "auto")),
                    "note": RESUME_NOTE,
                }
            else:
                values = {
                    "status": "failed",
                    "finished_at": utcnow(),
                    "error": f"The worker stopped {MAX_ATTEMPTS} times (no heartbeat); "
                    "start the run again.",
                }
            update_row = update(TrainingRun).where(TrainingRun.id == row.id, *stale)
            taken += s.execute(update_row.values(**values)).rowcount
    return taken


def run_dir(run_id: int) -> Path:
    """Where a run's worker trains: its epoch checkpoint, then the model before registration."""
    return workbench_home() / "runs" / str(run_id)


def sweep_run_folders(import_max_age_s: float = 86400.0) -> int:
    """Delete what runs/ no longer needs: folders of runs that are not queued or running
    (cancelled while re-queued, failed by the reaper) and import staging copies older than
    `import_max_age_s` (left by a killed `register`). Returns how many were removed."""
    root = workbench_home() / "runs"
    found = {int(p.name): p for p in root.glob("*") if p.is_dir() and p.name.isdigit()}
    active: set[int] = set()
    if found:
        with session_scope() as s:
            active = set(
                s.scalars(
                    select(TrainingRun.id).where(
                        TrainingRun.id.in_(found), TrainingRun.status.in_(ACTIVE_STATUSES)
                    )
                )
            )
    done = [path for run_id, path in found.items() if run_id not in active]
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
