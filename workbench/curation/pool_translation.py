"""The worker's second kind of job: translate a corpus' pool and rank it by uncertainty.

``execute_job`` translates the sentences waiting for review, ``CHUNK`` at a time (greedy
decoding), and writes each chunk's outputs and uncertainties in one transaction together with
the job's progress and heartbeat (``pool_jobs.report_progress``); between chunks it honours
a cancel request. A job taken over after its worker died goes on after the sentences it had
already written.

How unsure the model is (higher: review first):

* one version — the negative **length-normalised log-probability** of its output: the mean,
  over the output's tokens and its end marker, of −log p(token). A sentence the model
  translates with confident steps scores near 0; one it guesses its way through scores high.
* two versions — their **disagreement**: 1 − chrF(output A, output B) / 100. Where two
  models trained differently translate alike, a correction teaches little; where they
  disagree, at least one of them is wrong. Ties are broken by version A's log-probability.
"""

from __future__ import annotations

import logging

import sacrebleu
from sqlalchemy import bindparam, func, select

from core_model.artifact import ArtifactError
from core_model.translator import TranslationResult
from db.tables import PoolSentence, PoolStatus, RunStatus
from workbench.curation import pool_jobs
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models import translation
from workbench.storage import session_scope

log = logging.getLogger("workbench.curation.pool")
CHUNK = 256  # sentences per translation batch and per write
# The log-probability breaks ties of disagreement without ever outranking it.
_TIE_BREAK = 1e-3


def uncertainty(result: TranslationResult) -> float:
    """−(log-probability of the output) / (its tokens + the end marker), from greedy
    decoding's summed log-probability."""
    return -float(result.score) / max(1, len(result.out_pieces))


def disagreement(output_a: str, output_b: str) -> float:
    """1 − chrF of one output against the other, in [0, 1]."""
    if not output_a and not output_b:
        return 0.0
    return 1.0 - sacrebleu.sentence_chrf(output_a, [output_b]).score / 100.0


def execute_job(job_id: int, worker: str) -> str:
    """Translate and rank a claimed job's sentences; returns its final status (or "taken
    over" when the reaper gave it to another worker)."""
    info = pool_jobs.job_info(job_id)
    try:
        return _translate_pool(info, worker)
    except (WorkbenchError, ArtifactError) as exc:
        error = str(exc)
    except Exception as exc:  # keep the worker alive; tell the user
        log.exception("pool job %s failed", job_id)
        error = f"Translating the pool failed unexpectedly: {type(exc).__name__}: {exc}"
    pool_jobs.finish_job(job_id, worker, RunStatus.FAILED, error)
    return RunStatus.FAILED


def _translate_pool(info: pool_jobs.JobInfo, worker: str) -> str:
    if info.version_id is None:
        raise WorkbenchError(N_("The version chosen for this job was deleted."))
    done = _already_done(info)
    last_id = 0
    while True:
        chunk = _next_chunk(info, last_id)
        if not chunk:
            break
        last_id = chunk[-1][0]
        sources = [text for _, text in chunk]
        first = translation.translate(info.version_id, sources)
        second = (
            translation.translate(info.second_version_id, sources)
            if info.second_version_id is not None
            else None
        )
        rows = []
        for i, (sentence_id, _source) in enumerate(chunk):
            score = uncertainty(first[i])
            other = second[i].text if second is not None else None
            if other is not None:
                score = disagreement(first[i].text, other) + _TIE_BREAK * min(score, 1.0)
            rows.append(
                {
                    "b_id": sentence_id,
                    "output": first[i].text,
                    "second_output": other,
                    "uncertainty": round(score, 6),
                    "job_id": info.id,
                }
            )
        _write(rows)
        done += len(rows)
        owned, cancel = pool_jobs.report_progress(info.id, worker, done)
        if not owned:
            return "taken over"
        if cancel:
            pool_jobs.finish_job(info.id, worker, RunStatus.CANCELLED)
            return RunStatus.CANCELLED
    pool_jobs.finish_job(info.id, worker, RunStatus.SUCCEEDED)
    return RunStatus.SUCCEEDED


def _already_done(info: pool_jobs.JobInfo) -> int:
    """Sentences an earlier attempt of this job translated (a resumed job)."""
    with session_scope() as s:
        return int(s.scalar(select(func.count()).where(PoolSentence.job_id == info.id)) or 0)


def _next_chunk(info: pool_jobs.JobInfo, after_id: int) -> list[tuple[int, str]]:
    """The next sentences (in id order) still waiting for review that this job has not
    translated yet."""
    with session_scope() as s:
        rows = s.execute(
            select(PoolSentence.id, PoolSentence.source)
            .where(
                PoolSentence.corpus_id == info.corpus_id,
                PoolSentence.id > after_id,
                PoolSentence.status == PoolStatus.NEW,
                (PoolSentence.job_id.is_(None)) | (PoolSentence.job_id != info.id),
            )
            .order_by(PoolSentence.id)
            .limit(CHUNK)
        ).all()
    return [(int(r.id), r.source) for r in rows]


def _write(rows: list[dict]) -> None:
    """One chunk's outputs and uncertainties (a sentence reviewed meanwhile is left alone)."""
    table = PoolSentence.__table__
    statement = (
        table.update()
        .where(table.c.id == bindparam("b_id"), table.c.status == PoolStatus.NEW.value)
        .values(
            output=bindparam("output"),
            second_output=bindparam("second_output"),
            uncertainty=bindparam("uncertainty"),
            job_id=bindparam("job_id"),
        )
    )
    with session_scope() as s:
        s.connection().execute(statement, rows)
