"""Large imports into a SQLite file: staged in short transactions, published in one.

SQLite's write lock is one for the whole database: an import larger than one chunk that held
it throughout would stall every other writer (a training run's progress, edits in the UI)
for a minute or more. So ``import_staged`` deliberately uses several short transactions:
each chunk is written in its own into a hidden *staging* corpus (``corpora.import_token``
set: no listing, search or lookup shows it), and one short transaction publishes it:

* into a corpus that does not exist yet, the staging corpus gets its name;
* into an empty corpus, the pairs are staged under that corpus's own id while it is hidden
  (anyone else touching it is told it is receiving an import), and publishing un-hides it;
* into a non-empty corpus, the pairs are moved over, skipping pairs added there meanwhile
  (reported as duplicates); only this case takes time in proportion to the pairs (about a
  tenth of the import's).

A failed import removes what it staged; a killed one leaves it behind, hidden, and the next
import sweeps it (``sweep_import_staging``: a live import holds a lock file next to the
database, a dead one does not). A failed or killed import into a new corpus leaves no empty
corpus behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.orm import Session

from db.tables import Corpus, Pair
from workbench import settings, storage
from workbench.corpus.corpora import STAGING_NAME
from workbench.corpus.import_checks import (
    Validator,
    in_corpus,
    refuse_empty_import,
)
from workbench.corpus.pair_writer import (
    ImportJob,
    ImportTarget,
    SqliteWriter,
    drop_existing,
    sift_conflicts,
    source_conflicts,
    target_id_now,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history

DROP_BATCH = 20_000  # staged pairs deleted per transaction when an import is undone


@dataclass(frozen=True)
class _Staging:
    """Where a staged import writes: a hidden staging corpus of its own, or, when the target
    corpus is empty, that corpus itself, hidden meanwhile (``adopted``); publishing is then
    un-hiding it, whatever the number of pairs."""

    id: int
    token: str
    adopted: bool


def can_stage(engine: Engine) -> bool:
    """Staging is for SQLite files (an in-memory database imports in one transaction)."""
    database = engine.url.database
    return engine.dialect.name == "sqlite" and bool(database) and database != ":memory:"


def _lock_path(engine: Engine, token: str) -> Path:
    return settings.sqlite_import_lock_path(str(engine.url.database), token)


def import_staged(job: ImportJob) -> tuple[int, int]:
    """Stage chunk by chunk (short transactions), then publish in one short transaction;
    returns (corpus id, pairs added). On failure what was staged is removed. Into a
    non-empty corpus, rows whose source it translates differently are reported (and left
    out with ``skip_conflicts``)."""
    target, validator = job.target, job.validator
    token = uuid.uuid4().hex
    lock_path = _lock_path(storage.engine(), token)
    parsed, added = validator.parsed, 0
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until we are done: we are alive
        staging: _Staging | None = None
        try:
            staging, existing = _begin_staging(target, token)
            moving = not staging.adopted and target.id is not None
            with session_scope() as s:  # a read: no write lock held
                conflicts = source_conflicts(s, target.id if moving else None, job.skip_conflicts)
            for chunk in job.chunks:
                with session_scope() as s:
                    conn = s.connection()
                    writer = SqliteWriter(conn, job.gate)
                    try:
                        _check_staging(s, staging, target)
                        if moving:
                            chunk = drop_existing(conn, target.id, chunk, parsed)
                        chunk = sift_conflicts(conn, conflicts, chunk, parsed)
                        writer.insert(staging.id, chunk, existing + added + len(chunk))
                    except BaseException:
                        writer.abort()
                        raise
                    writer.finish()
                added += len(chunk)
            with session_scope() as s:
                cid, added = _publish(s, target, staging, added, validator)
                refuse_empty_import(added, parsed, cid)  # every staged pair was there already
            staging = None
            return cid, added
        except BaseException:
            if staging is not None:
                with contextlib.suppress(Exception):  # else the next import sweeps it
                    _drop_staging(staging)
            raise
        finally:
            lock_path.unlink(missing_ok=True)


def _begin_staging(target: ImportTarget, token: str) -> tuple[_Staging, int]:
    """(where to stage, pairs the target holds now) — one short transaction."""
    with session_scope() as s:
        conn = s.connection()
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the emptiness check holds until commit
        if target.id is not None:
            corpus = s.get(Corpus, target.id)
            if corpus is None or corpus.import_token is not None:
                raise WorkbenchError(
                    N_("corpus {name!r} was deleted during the import"), name=target.name
                )
            existing = s.scalar(select(func.count()).where(Pair.corpus_id == corpus.id)) or 0
            if not existing:  # stage in place: nobody can write to it while it is hidden
                corpus.import_token = token
                return _Staging(corpus.id, token, adopted=True), 0
        else:
            existing = 0
        staging = Corpus(
            name=STAGING_NAME.format(token=token),
            src_lang=target.src_lang,
            tgt_lang=target.tgt_lang,
            import_token=token,
        )
        s.add(staging)
        s.flush()
        return _Staging(staging.id, token, adopted=False), existing


def _check_staging(s: Session, staging: _Staging, target: ImportTarget) -> Corpus:
    row = s.get(Corpus, staging.id)
    if row is None or row.import_token != staging.token:
        if staging.adopted:
            raise WorkbenchError(
                N_("corpus {name!r} was deleted during the import"), name=target.name
            )
        raise WorkbenchError(N_("the import's staging area was removed; run the import again"))
    return row


def _publish(
    s: Session, target: ImportTarget, staging: _Staging, added: int, validator: Validator
) -> tuple[int, int]:
    """Make the staged pairs part of the target corpus in the caller's transaction: un-hide
    an adopted corpus, name a new one, or move the pairs into a non-empty one (the only
    case whose time grows with the pairs); returns (corpus id, pairs added)."""
    conn = s.connection()
    if not conn.connection.driver_connection.in_transaction:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the checks below hold until commit
    row = _check_staging(s, staging, target)
    if staging.adopted:
        row.import_token = None
        _record(s, row.id, staging.id, {}, added)
        return row.id, added
    cid = target_id_now(s, target)
    if cid is None:  # a new corpus: the staging corpus becomes it, pairs stay where they are
        row.name, row.import_token = target.name, None
        s.flush()
        _record(s, row.id, staging.id, history.capture(s, Corpus, [row.id]), added)
        return row.id, added
    cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
    conn.exec_driver_sql(f"PRAGMA cache_size = -{SqliteWriter.CACHE_KIB}")  # 4x faster move
    staged, kept = Pair.__table__.alias("staged"), Pair.__table__.alias("kept")
    clashes = conn.execute(
        select(staged.c.id, staged.c.content_hash, kept.c.id)
        .join(
            kept,
            (kept.c.corpus_id == cid) & (kept.c.content_hash == staged.c.content_hash),
        )
        .where(staged.c.corpus_id == staging.id)
    ).all()
    for _sid, content_hash, pair_id in clashes:  # added to the corpus during the import
        validator.parsed.add(in_corpus(validator.first_line(content_hash), pair_id))
    ids = [sid for sid, _h, _p in clashes]
    for start in range(0, len(ids), 900):
        conn.execute(delete(Pair).where(Pair.id.in_(ids[start : start + 900])))
    _record(s, cid, staging.id, {}, added - len(ids))
    conn.execute(update(Pair).where(Pair.corpus_id == staging.id).values(corpus_id=cid))
    conn.execute(delete(Corpus).where(Corpus.id == staging.id))
    conn.exec_driver_sql(f"PRAGMA cache_size = {int(cache)}")
    return cid, added - len(ids)


def _record(
    s: Session, cid: int, staging_id: int, created: dict[int, dict[str, Any]], added: int
) -> None:
    """Record the import (``history.record_import``): the staged pairs are all its own."""
    staged = select(Pair.id).where(Pair.corpus_id == staging_id).order_by(Pair.id)
    ids = s.scalars(staged.execution_options(yield_per=10_000))  # streamed: a million ids
    summary = f"imported {added:,} pairs"
    history.record_import(s, cid, ids, created_corpus=created, summary=summary)


def _drop_staging(staging: _Staging, batch: int = DROP_BATCH) -> None:
    """Delete what an import staged, in short transactions (a million rows in one would hold
    the write lock as long as the import itself); then delete its staging corpus, or un-hide
    the corpus it adopted (all of whose pairs were staged: it was empty, and hidden since)."""
    while True:
        with session_scope() as s:
            doomed = select(Pair.id).where(Pair.corpus_id == staging.id).limit(batch)
            if s.execute(delete(Pair).where(Pair.id.in_(doomed))).rowcount:
                continue
            mine = (Corpus.id == staging.id) & (Corpus.import_token == staging.token)
            if staging.adopted:
                s.execute(update(Corpus).where(mine).values(import_token=None))
            else:
                s.execute(delete(Corpus).where(mine))
            return


def sweep_import_staging() -> int:
    """Undo the staging of imports that are no longer running (killed: their lock file is
    not held); returns how many. Every SQLite import calls it first."""
    engine = storage.engine()
    if not can_stage(engine):
        return 0
    with session_scope() as s:
        staged = s.execute(
            select(Corpus.id, Corpus.name, Corpus.import_token).where(
                Corpus.import_token.is_not(None)
            )
        ).all()
    swept = 0
    for staging_id, name, token in staged:
        path = _lock_path(engine, token)
        with open(path, "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live import
            adopted = name != STAGING_NAME.format(token=token)
            _drop_staging(_Staging(staging_id, token, adopted))
            path.unlink(missing_ok=True)
            swept += 1
    return swept
