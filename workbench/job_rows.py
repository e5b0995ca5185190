"""The status changes that training runs (``workbench.training.runs``) and pool jobs
(``workbench.curation.pool_jobs``) share, for either table.

Every UPDATE is conditional on the status the row leaves (and, for a worker's writes, on the
row still being that worker's), so two processes racing on one job — a claim and a cancel, a
late write and the reaper — never undo each other. Each function runs inside the caller's
session: the caller's operation stays one transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, Update, func, select, update
from sqlalchemy.orm import Session

from db.tables import PoolJob, RunStatus, TrainingRun, utcnow

JobTable = type[TrainingRun] | type[PoolJob]


def leaving(table: JobTable, job_id: int, *statuses: RunStatus) -> Update:
    """An UPDATE of the job that applies only while it is in one of ``statuses``."""
    return update(table).where(table.id == job_id, table.status.in_(statuses))


def owned(table: JobTable, job_id: int, worker: str) -> Update:
    """An UPDATE of the job that applies only while this worker still runs it: a job the
    reaper already took back is never brought back to life by a late write."""
    return leaving(table, job_id, RunStatus.RUNNING).where(table.worker_id == worker)


def request_cancel(s: Session, table: JobTable, job_id: int, **cleared: Any) -> RunStatus | None:
    """Cancel a queued job at once (setting ``cleared`` too), ask a running one to stop;
    returns the job's status after, None when there is no such job."""
    cancelled = s.execute(
        leaving(table, job_id, RunStatus.QUEUED).values(
            status=RunStatus.CANCELLED, finished_at=utcnow(), **cleared
        )
    ).rowcount
    if not cancelled:
        s.execute(leaving(table, job_id, RunStatus.RUNNING).values(cancel_requested=True))
    status = s.scalar(select(table.status).where(table.id == job_id))
    return None if status is None else RunStatus(status)


def claim_oldest(
    s: Session, table: JobTable, queued: Select, worker: str, **extra: Any
) -> int | None:
    """Take the oldest of the ``queued`` job ids (a SELECT of ``table.id``) for ``worker``,
    setting ``extra`` too. The conditional UPDATE makes the claim atomic on SQLite and
    PostgreSQL alike: of two racing workers, exactly one updates the row."""
    for job_id in s.scalars(queued.order_by(table.id).limit(5)).all():
        now = utcnow()
        claimed = s.execute(
            leaving(table, job_id, RunStatus.QUEUED).values(
                status=RunStatus.RUNNING,
                worker_id=worker,
                heartbeat_at=now,
                started_at=func.coalesce(table.started_at, now),
                **extra,
            )
        ).rowcount
        if claimed == 1:
            return job_id
    return None
