"""Writing validated pairs into a corpus in bulk (the write side of an import).

* ``ImportTarget`` — where an import goes: an existing corpus, or one to create with the
  pairs; ``target_id_now`` checks it again once the writer holds the write lock.
  ``ImportJob`` — that target with its chunks and checks: what either way of writing
  (in one transaction, or staged) is handed.
* ``drop_existing`` — the pairs of a chunk that the corpus does not hold yet (the others are
  reported as ``duplicate_in_corpus``); ``sift_conflicts`` — those whose source the corpus
  or an earlier row of the import translates differently (``source_conflicts.SourceConflicts``,
  read by ``source_conflicts``) reported, or left out.
* Writers, inside the caller's transaction: ``CoreWriter`` (batched SQLAlchemy Core inserts,
  PostgreSQL and other servers) and ``SqliteWriter`` (``executemany`` with the FTS index
  filled set-based, see ``db.search``); ``new_writer`` picks one.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db import search
from db.tables import Corpus, Pair, utcnow
from workbench.corpus.corpora import find_by_id
from workbench.corpus.import_checks import ParsedImport, ParsedPair, Validator, in_corpus
from workbench.corpus.pairs import existing_hashes
from workbench.corpus.source_conflicts import SourceConflicts
from workbench.corpus.text_rules import default_split
from workbench.errors import WorkbenchError
from workbench.messages import N_

_COLUMNS = ("corpus_id", "source", "target", "split", "note", "content_hash")
_COLUMNS += ("created_at", "updated_at")


@dataclass(frozen=True)
class ImportTarget:
    """Where an import goes: an existing corpus (``id``) or one to create on success."""

    id: int | None
    name: str
    src_lang: str
    tgt_lang: str


@dataclass(frozen=True)
class ImportJob:
    """One import as either way of writing it takes it: the target, the validated chunks
    (read once), the checks that count what they drop, and the user's choice on conflicts."""

    target: ImportTarget
    chunks: Iterable[list[ParsedPair]]
    validator: Validator
    gate: ParserGate
    skip_conflicts: bool


def target_id_now(s: Session, target: ImportTarget) -> int | None:
    """The target corpus's id now (None: to be created); raises if it went away or if a
    corpus of that name but other languages appeared meanwhile."""
    if target.id is not None:
        if find_by_id(s, target.id) is None:
            raise WorkbenchError(
                N_("corpus {name!r} was deleted during the import"), name=target.name
            )
        return target.id
    found = s.scalar(
        select(Corpus).where(Corpus.name == target.name, Corpus.import_token.is_(None))
    )
    if found is None:
        return None
    if (found.src_lang, found.tgt_lang) != (target.src_lang, target.tgt_lang):
        raise WorkbenchError(
            N_("a corpus named {name!r} ({src}→{tgt}) was created during the import"),
            name=target.name,
            src=found.src_lang,
            tgt=found.tgt_lang,
        )
    return found.id


def drop_existing(
    conn: Connection | Session, corpus_id: int, pairs: list[ParsedPair], parsed: ParsedImport
) -> list[ParsedPair]:
    """``pairs`` minus those the corpus already holds (reported as duplicate_in_corpus)."""
    if not pairs:
        return pairs
    if conn.execute(select(Pair.id).where(Pair.corpus_id == corpus_id).limit(1)).first() is None:
        return pairs
    existing = existing_hashes(conn, corpus_id, (p.content_hash for p in pairs))
    kept = []
    for p in pairs:
        if p.content_hash in existing:
            parsed.add(in_corpus(p.line, existing[p.content_hash]))
        else:
            kept.append(p)
    return kept


def sift_conflicts(
    conn: Connection | Session,
    conflicts: SourceConflicts,
    pairs: list[ParsedPair],
    parsed: ParsedImport,
) -> list[ParsedPair]:
    """``pairs`` (none in the corpus as they are) with the rows whose source the corpus or an
    earlier row translates differently reported, and left out if the user chose so."""

    def pair_of(pair_id: int) -> tuple[str, str] | None:
        found = conn.execute(select(Pair.source, Pair.target).where(Pair.id == pair_id)).first()
        return (found[0], found[1]) if found is not None else None

    return conflicts.sift(pairs, parsed, pair_of)


def source_conflicts(
    conn: Connection | Session, corpus_id: int | None, skip: bool
) -> SourceConflicts:
    """The conflict check of an import into the corpus (None: a corpus to create, whose rows
    can only conflict with each other); its (id, source) rows are read once, streamed,
    through Core (the ORM's row objects cost twice the time)."""
    if corpus_id is None:
        return SourceConflicts((), skip)
    if isinstance(conn, Session):
        conn = conn.connection()
    rows = conn.execute(
        select(Pair.id, Pair.source)
        .where(Pair.corpus_id == corpus_id)
        .execution_options(yield_per=20_000)
    )
    return SourceConflicts(rows, skip)  # its Rows unpack as (id, source)


class ParserGate:
    """Lets the writer pause the parser thread while the writer itself needs the GIL.

    ``executemany`` releases and re-takes the GIL for every row; with a busy parser thread
    each re-take can wait a full switch interval (a "convoy"), which made threaded imports
    slower than serial ones. So the parser runs only while SQLite works without the GIL
    (the set-based FTS indexing step), and is paused during ``executemany``.
    """

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    def wait(self) -> None:
        self._open.wait()

    @contextlib.contextmanager
    def writer_busy(self) -> Iterator[None]:
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()


def _row_values(corpus_id: int, p: ParsedPair, size_after: int, stamp: Any) -> tuple:
    split = p.split or default_split(p.source, size_after)
    return (corpus_id, p.source, p.target, split, p.note, p.content_hash, stamp, stamp)


class CoreWriter:
    """Batched SQLAlchemy Core inserts (PostgreSQL and other servers)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.now = utcnow()
        self.rows = 0

    def insert(self, corpus_id: int, pairs: list[ParsedPair], size_after: int) -> None:
        table = Pair.__table__
        for start in range(0, len(pairs), 5000):
            batch = [
                dict(zip(_COLUMNS, _row_values(corpus_id, p, size_after, self.now), strict=True))
                for p in pairs[start : start + 5000]
            ]
            self.conn.execute(insert(table), batch)
        self.rows += len(pairs)

    def finish(self) -> None:
        if self.rows >= 10_000:
            search.refresh_statistics(self.conn)

    def abort(self) -> None:
        pass


class SqliteWriter:
    """Fast SQLite bulk insert inside the caller's transaction.

    Takes the write lock up front (BEGIN IMMEDIATE), so the duplicate check and the insert
    see the same corpus. The per-row FTS trigger is suspended for the duration and each chunk
    is indexed with one set-based statement (``db.search``, about twice as fast); the trigger
    is recreated before commit, and a failure rolls back the rows, the index entries and the
    trigger change together.
    """

    CACHE_KIB = 256 * 1024  # a big page cache for the random-order unique-hash index

    def __init__(self, conn: Connection, gate: ParserGate | None = None) -> None:
        self.conn = conn
        self.gate = gate or ParserGate()
        dbapi = conn.connection.driver_connection
        if not dbapi.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        self.cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
        conn.exec_driver_sql(f"PRAGMA cache_size = -{self.CACHE_KIB}")
        self.stamp = utcnow().replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
        self.trigger: str | None = None  # the suspended FTS insert trigger's SQL
        self.suspended = False

    def insert(self, corpus_id: int, pairs: list[ParsedPair], size_after: int) -> None:
        if not pairs:
            return
        if not self.suspended:
            self.trigger = search.suspend_fts_insert_trigger(self.conn)
            self.suspended = True
        before = self.conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM pairs").scalar()
        sql = f"INSERT INTO pairs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * 8)})"
        cursor = self.conn.connection.driver_connection.cursor()
        try:
            with self.gate.writer_busy():
                cursor.executemany(
                    sql, (_row_values(corpus_id, p, size_after, self.stamp) for p in pairs)
                )
        except sqlite3.IntegrityError as exc:
            raise IntegrityError(sql, None, exc) from exc
        finally:
            cursor.close()
        if self.trigger:
            search.index_rows_after(self.conn, int(before))

    def finish(self) -> None:
        """Restore the trigger and the cache size before commit."""
        if self.trigger:
            search.restore_trigger(self.conn, self.trigger)
        self.conn.exec_driver_sql(f"PRAGMA cache_size = {int(self.cache)}")

    def abort(self) -> None:
        """Before rollback (which restores the trigger): only reset the cache size."""
        with contextlib.suppress(Exception):
            self.conn.exec_driver_sql(f"PRAGMA cache_size = {int(self.cache)}")


def new_writer(conn: Connection, gate: ParserGate) -> SqliteWriter | CoreWriter:
    """The fastest writer for this connection's database."""
    return SqliteWriter(conn, gate) if conn.dialect.name == "sqlite" else CoreWriter(conn)
