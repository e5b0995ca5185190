"""Pool translation jobs as a state machine: every change of a job's status.

A pool job translates the sentences of a corpus' pool that wait for review with a version (or
two) in the background, so that they can be ranked. It lives next to the training runs and
goes through the same statuses (``RunStatus``)::

    (new)                 ──enqueue_translation──►  queued
    queued                ──claim_next_job───────►  running     (a worker takes it)
    running               ──finish_job───────────►  succeeded | failed | cancelled
    queued                ──cancel_job───────────►  cancelled   (a running one is asked:
                                                                 cancel_requested)
    running               ──reap_stale_jobs──────►  queued      (its worker died; the next
                                                                 one goes on where it stopped)

Every UPDATE is conditional on the status it leaves (and, for a worker's writes, on the job
still being that worker's): ``workbench.job_rows``, shared with the training runs. The
translating itself is ``workbench.curation.pool_translation``; reading a job for display is
``job_info`` here (no side effects).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Update, func, select, update
from sqlalchemy.orm import Session

from db.tables import PoolJob, PoolSentence, PoolStatus, RunStatus, utcnow
from workbench import job_rows, settings
from workbench.corpus.corpora import CorpusRef, find
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models import registry
from workbench.storage import get_row, session_scope
from workbench.team.access import Permission, require

ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
NO_SUCH_JOB = N_("Pool job {id} does not exist.")
FINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True)
class JobInfo:
    id: int
    corpus_id: int
    version_id: int | None
    second_version_id: int | None
    status: RunStatus
    done: int
    total: int
    error: str | None
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None
    worker_lost: bool  # running, but no heartbeat for longer than the timeout

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


# ------------------------------------------------------------------------- front ends


def enqueue_translation(
    corpus_id: CorpusRef, version_id: int, second_version_id: int | None = None
) -> int:
    """Queue the translation of a corpus' pool (the sentences waiting for review) by a
    version; with a second version, their disagreement ranks the sentences. Returns the job
    id. Refused while another job of the corpus is queued or running."""
    require(Permission.REVIEW)
    if second_version_id == version_id:
        raise WorkbenchError(N_("Pick two different versions to rank by their disagreement."))
    with session_scope() as s:
        corpus = find(s, corpus_id)
        for vid in filter(None, (version_id, second_version_id)):
            version = registry.version_row(s, vid)
            registry.check_direction(version, corpus)
        busy = s.scalar(
            select(PoolJob.id).where(PoolJob.corpus_id == corpus.id, PoolJob.status.in_(ACTIVE))
        )
        if busy is not None:
            raise WorkbenchError(
                N_(
                    "The pool of {name!r} is being translated already (job {job}): wait for it "
                    "or cancel it."
                ),
                name=corpus.name,
                job=busy,
            )
        waiting = _waiting(s, corpus.id)
        if not waiting:
            raise WorkbenchError(
                N_("The pool of {name!r} has no sentences waiting for review: upload some."),
                name=corpus.name,
            )
        job = PoolJob(
            corpus_id=corpus.id,
            version_id=version_id,
            second_version_id=second_version_id,
            status=RunStatus.QUEUED,
            total=waiting,
        )
        s.add(job)
        s.flush()
        return job.id


def cancel_job(job_id: int) -> RunStatus:
    """Cancel a queued job at once, ask a running one to stop; returns its status after."""
    require(Permission.REVIEW)
    with session_scope() as s:
        status = job_rows.request_cancel(s, PoolJob, job_id)
    if status is None:
        raise WorkbenchError(NO_SUCH_JOB, id=job_id)
    return status


def job_info(job_id: int) -> JobInfo:
    with session_scope() as s:
        job = get_row(s, PoolJob, job_id, NO_SUCH_JOB)
        return _info(job)


def latest_job(corpus_id: CorpusRef) -> JobInfo | None:
    """The corpus' newest pool job, if any (what its Review page shows)."""
    with session_scope() as s:
        corpus = find(s, corpus_id)
        job = s.scalars(
            select(PoolJob).where(PoolJob.corpus_id == corpus.id).order_by(PoolJob.id.desc())
        ).first()
        return None if job is None else _info(job)


# ----------------------------------------------------------------------------- workers


def claim_next_job(worker: str) -> int | None:
    """Take the oldest queued job (atomically: ``job_rows.claim_oldest``)."""
    queued = select(PoolJob.id).where(PoolJob.status == RunStatus.QUEUED)
    with session_scope() as s:
        return job_rows.claim_oldest(s, PoolJob, queued, worker)


def report_progress(job_id: int, worker: str, done: int) -> tuple[bool, bool]:
    """A heartbeat with the number of sentences done; returns (still this worker's, cancel
    requested)."""
    with session_scope() as s:
        owned = s.execute(_owned(job_id, worker).values(heartbeat_at=utcnow(), done=done))
        requested = s.scalar(select(PoolJob.cancel_requested).where(PoolJob.id == job_id))
    return bool(owned.rowcount), bool(requested)


def finish_job(job_id: int, worker: str, status: RunStatus, error: str | None = None) -> bool:
    if status not in FINAL:
        raise ValueError(f"a job cannot finish as {status}")
    with session_scope() as s:
        values = {"status": status, "error": error, "finished_at": utcnow()}
        return bool(s.execute(_owned(job_id, worker).values(**values)).rowcount)


def reap_stale_jobs() -> int:
    """Put the running jobs whose worker stopped beating back in the queue (a pending cancel
    cancels them); the next worker goes on with the sentences not translated yet."""
    cutoff = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s())
    stale = (PoolJob.status == RunStatus.RUNNING, PoolJob.heartbeat_at < cutoff)
    with session_scope() as s:
        cancelled = s.execute(
            update(PoolJob)
            .where(*stale, PoolJob.cancel_requested.is_(True))
            .values(status=RunStatus.CANCELLED, finished_at=utcnow())
        ).rowcount
        queued = s.execute(
            update(PoolJob)
            .where(*stale)
            .values(status=RunStatus.QUEUED, worker_id=None, heartbeat_at=None)
        ).rowcount
    return cancelled + queued


# ----------------------------------------------------------------------------- helpers


def _waiting(s: Session, corpus_id: int) -> int:
    return (
        s.scalar(
            select(func.count()).where(
                PoolSentence.corpus_id == corpus_id, PoolSentence.status == PoolStatus.NEW
            )
        )
        or 0
    )


def _info(job: PoolJob) -> JobInfo:
    lost = (
        job.status == RunStatus.RUNNING
        and job.heartbeat_at is not None
        and job.heartbeat_at < utcnow() - timedelta(seconds=settings.heartbeat_timeout_s())
    )
    return JobInfo(
        job.id,
        job.corpus_id,
        job.version_id,
        job.second_version_id,
        RunStatus(job.status),
        job.done,
        job.total,
        job.error,
        job.cancel_requested,
        job.created_at,
        job.finished_at,
        lost,
    )


def _owned(job_id: int, worker: str) -> Update:
    return job_rows.owned(PoolJob, job_id, worker)
