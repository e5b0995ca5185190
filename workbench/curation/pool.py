"""The pool: "what to correct next". Monolingual source sentences of a corpus, translated in
the background (``pool_jobs``, ``pool_translation``), ranked by how
unsure the model is, and reviewed one by one: an accepted or corrected translation becomes a
pair of the corpus, with a note of where it came from.

* ``add_to_pool`` — a file of sentences, one per line (thousands to a million), in one
  transaction; text is cleaned by the text rule, empty and over-long lines are skipped, and a
  sentence already in the pool is counted as a duplicate.
* ``review_queue`` — the sentences waiting for review, most uncertain first.
* ``review`` — accept (the machine translation as it is), edit (a corrected translation) or
  skip one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.tables import PoolJob, PoolSentence, PoolStatus, utcnow
from workbench.corpus import text_files
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.import_checks import message_of
from workbench.corpus.pairs import NEW_ROW_PROBLEM, edit_pairs
from workbench.corpus.text_rules import MAX_CHARS, hash_encoded, normalize_text
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import get_row, session_scope
from workbench.team.access import Permission, require

REVIEW_ACTIONS = ("accept", "edit", "skip")
_CHUNK = 5_000  # sentences per INSERT batch


@dataclass(frozen=True)
class PoolAddResult:
    added: int
    duplicates: int  # already in the pool, or repeated in the file
    skipped: int  # empty after cleaning, or longer than MAX_CHARS


@dataclass(frozen=True)
class PoolStats:
    total: int
    by_status: dict[str, int]  # every PoolStatus value as a key
    translated: int  # waiting sentences that have a translation and an uncertainty

    @property
    def waiting(self) -> int:
        return self.by_status[PoolStatus.NEW]


@dataclass(frozen=True)
class PoolItem:
    id: int
    source: str
    output: str | None
    second_output: str | None
    uncertainty: float | None
    job_id: int | None


def add_to_pool(corpus_id: CorpusRef, data: text_files.Data) -> PoolAddResult:
    """Add a file of source sentences (UTF-8, one per line, optionally gzip) to the corpus'
    pool, all or nothing."""
    require(Permission.REVIEW)
    added = duplicates = skipped = 0
    try:
        with session_scope() as s:
            corpus = find(s, corpus_id)
            seen: set[str] = set()
            batch: list[dict] = []

            def flush() -> None:
                nonlocal added, duplicates
                hashes = [row["content_hash"] for row in batch]
                existing = set()
                for start in range(0, len(hashes), 900):
                    existing.update(
                        s.scalars(
                            select(PoolSentence.content_hash).where(
                                PoolSentence.corpus_id == corpus.id,
                                PoolSentence.content_hash.in_(hashes[start : start + 900]),
                            )
                        )
                    )
                rows = [r for r in batch if r["content_hash"] not in existing]
                duplicates += len(batch) - len(rows)
                if rows:
                    s.execute(insert(PoolSentence), rows)
                added += len(rows)
                batch.clear()

            now = utcnow()
            for _line, text in text_files.numbered_lines(data):
                source = normalize_text(text)
                if not source or len(source) > MAX_CHARS:
                    skipped += 1
                    continue
                digest = hash_encoded(source.encode(), b"")
                if digest in seen:
                    duplicates += 1
                    continue
                seen.add(digest)
                batch.append(
                    {
                        "corpus_id": corpus.id,
                        "source": source,
                        "content_hash": digest,
                        "status": PoolStatus.NEW.value,
                        "created_at": now,
                    }
                )
                if len(batch) >= _CHUNK:
                    flush()
            if batch:
                flush()
    except IntegrityError as exc:
        raise WorkbenchError(
            N_("the pool changed meanwhile: {error}; nothing added"), error=str(exc.orig)
        ) from None
    return PoolAddResult(added, duplicates, skipped)


def pool_stats(corpus_id: CorpusRef) -> PoolStats:
    with session_scope() as s:
        corpus = find(s, corpus_id)
        counts = dict.fromkeys((v.value for v in PoolStatus), 0)
        for status, n in s.execute(
            select(PoolSentence.status, func.count())
            .where(PoolSentence.corpus_id == corpus.id)
            .group_by(PoolSentence.status)
        ):
            counts[status] = int(n)
        translated = s.scalar(
            select(func.count()).where(
                PoolSentence.corpus_id == corpus.id,
                PoolSentence.status == PoolStatus.NEW,
                PoolSentence.uncertainty.is_not(None),
            )
        )
    return PoolStats(sum(counts.values()), counts, int(translated or 0))


def review_queue(corpus_id: CorpusRef, limit: int = 20) -> list[PoolItem]:
    """The translated sentences waiting for review, most uncertain first (an index range
    scan on (corpus, status, uncertainty), fast on a million sentences)."""
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows = s.scalars(
            select(PoolSentence)
            .where(
                PoolSentence.corpus_id == corpus.id,
                PoolSentence.status == PoolStatus.NEW,
                PoolSentence.uncertainty.is_not(None),
            )
            .order_by(PoolSentence.uncertainty.desc(), PoolSentence.id)
            .limit(max(1, int(limit)))
        ).all()
        return [
            PoolItem(r.id, r.source, r.output, r.second_output, r.uncertainty, r.job_id)
            for r in rows
        ]


def review(sentence_id: int, action: str, translation: str | None = None) -> int | None:
    """Accept a sentence's machine translation, store a corrected one (``edit``), or skip it.
    Accepted and edited sentences become pairs of the corpus (one transaction) whose note says
    where they came from; returns the new pair's id (None when skipped)."""
    require(Permission.REVIEW)
    if action not in REVIEW_ACTIONS:
        raise WorkbenchError(
            N_("Unknown review action {action!r}: use {actions}."),
            action=action,
            actions=", ".join(REVIEW_ACTIONS),
        )
    with session_scope() as s:
        item = get_row(s, PoolSentence, sentence_id, N_("Pool sentence {id} does not exist."))
        if item.status != PoolStatus.NEW:
            raise WorkbenchError(
                N_("Pool sentence {id} was already reviewed ({status})."),
                id=sentence_id,
                status=str(item.status),
            )
        pair_id = None
        if action == "skip":
            status = PoolStatus.SKIPPED
        else:
            if action == "accept":
                if not item.output:
                    raise WorkbenchError(
                        N_("This sentence has no translation yet: edit it instead.")
                    )
                target, status = item.output, PoolStatus.ACCEPTED
            else:
                target, status = (translation or "").strip(), PoolStatus.EDITED
                if not target:
                    raise WorkbenchError(N_("The corrected translation is empty: type it first."))
                if target == item.output:
                    status = PoolStatus.ACCEPTED  # nothing was changed
            corpus = find(s, item.corpus_id)
            try:
                result = edit_pairs(
                    s,
                    corpus,
                    added=[
                        {"source": item.source, "target": target, "note": _note(s, item, status)}
                    ],
                )
            except WorkbenchError as exc:  # the one new row's problem, without "new row 1: "
                problem = exc.params["problem"] if exc.msgid == NEW_ROW_PROBLEM else message_of(exc)
                raise WorkbenchError(N_("Not saved: {problem}."), problem=problem) from None
            pair_id = result.added_ids[0]
        done = s.execute(
            update(PoolSentence)
            .where(PoolSentence.id == item.id, PoolSentence.status == PoolStatus.NEW)
            .values(status=status, pair_id=pair_id, reviewed_at=utcnow())
        ).rowcount
        if not done:  # reviewed by someone else meanwhile: roll the pair back too
            raise WorkbenchError(N_("Pool sentence {id} was reviewed meanwhile."), id=sentence_id)
        return pair_id


def _note(s: Session, item: PoolSentence, status: PoolStatus) -> str:
    """Where a reviewed pair came from, for the corpus table: e.g. "pool review: version #3's
    translation corrected (pool job 7, uncertainty 0.812)"."""
    how = "accepted" if status == PoolStatus.ACCEPTED else "corrected"
    job = s.get(PoolJob, item.job_id) if item.job_id is not None else None
    by = f"version #{job.version_id}'s translation" if job and job.version_id else "translation"
    where = [f"pool job {item.job_id}"] if item.job_id is not None else []
    if item.uncertainty is not None:
        where.append(f"uncertainty {item.uncertainty:.3f}")
    return f"pool review: {by} {how}" + (f" ({', '.join(where)})" if where else "")
