"""Importing sentence pairs from a file into a corpus: preview it, then import it.

``preview_import`` shows what an import would do, in bounded memory: every row is read and
checked (``import_checks``), pairs the corpus already holds are reported, and only a
sample of the pairs to add is kept. ``import_file`` writes, all-or-nothing: either every
accepted row is written or none is.

Two kinds of problems:

* **A file that cannot be read** (``workbench.corpus.text_files``: not UTF-8, not gzip, over
  the limits; ``formats``: an unknown format, aligned files of different length):
  ``WorkbenchError`` naming the line, and nothing is written.
* **Row issues**, collected in the report that the preview shows: errors (a malformed
  record such as a line without a tab, an empty or over-long side, a bad split) skip the
  row, or with ``strict`` abort the import; duplicates are skipped and counted; warnings
  are imported.

The file is parsed on a helper thread while the previous chunk is written (``IMPORT_CHUNK``
pairs at a time). A file of more than one chunk on a SQLite database is staged in several
short transactions (``workbench.corpus.import_staging``); everything else is one transaction.
PostgreSQL locks rows, not the database: there an import is always one transaction.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.tables import Corpus, Pair
from workbench import storage
from workbench.corpus import splits
from workbench.corpus.cleaning import Cleaner, CleaningOptions
from workbench.corpus.corpora import (
    CorpusRef,
    check_languages,
    find,
    find_by_name,
    validate_languages,
)
from workbench.corpus.formats import Record, read_rows
from workbench.corpus.import_checks import (
    ImportResult,
    NothingToImport,
    ParsedImport,
    ParsedPair,
    Validator,
    message_of,
    refuse_empty_import,
)
from workbench.corpus.import_staging import can_stage, import_staged, sweep_import_staging
from workbench.corpus.pair_writer import (
    CoreWriter,
    ImportJob,
    ImportTarget,
    ParserGate,
    drop_existing,
    new_writer,
    sift_conflicts,
    source_conflicts,
    target_id_now,
)
from workbench.corpus.text_files import Data
from workbench.corpus.text_rules import looks_like_id, validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history
from workbench.team.access import Permission, require

IMPORT_CHUNK = 20_000  # pairs per write transaction (about a second of the SQLite write lock)
PREVIEW_SAMPLE = 20  # pairs a preview keeps (it counts all of them)
_DONE = object()


def preview_import(
    corpus_id: CorpusRef,
    data: Data,
    *,
    sample: int = PREVIEW_SAMPLE,
    fmt: str | None = None,
    tgt: Data | None = None,
    cleaning: CleaningOptions | None = None,
    skip_conflicts: bool = False,
) -> ParsedImport:
    """What importing would do, in bounded memory: the whole file is read and validated, and
    pairs the corpus already holds are reported (``duplicate_in_corpus``), but only the first
    ``sample`` pairs to add are kept in ``pairs``; ``accepted`` counts all of them. Writes
    nothing. Oriented by the corpus languages (Tatoeba). ``cleaning``: the clean-up options
    whose rules drop (``filtered``) or convert rows (``workbench.corpus.cleaning``). Rows
    whose source the corpus translates differently are reported (``conflict``; a few in
    ``conflicts``), and with ``skip_conflicts`` not counted as accepted."""
    validator = Validator()
    parsed = validator.parsed
    chunk: list[ParsedPair] = []
    with session_scope() as s:
        corpus = find(s, corpus_id)
        validator.cleaner = _cleaner(cleaning, corpus.src_lang, corpus.tgt_lang)
        conflicts = source_conflicts(s, corpus.id, skip_conflicts)

        def flush() -> None:
            kept = drop_existing(s, corpus.id, chunk, parsed)
            kept = sift_conflicts(s, conflicts, kept, parsed)
            parsed.accepted += len(kept)
            parsed.pairs.extend(kept[: max(0, sample - len(parsed.pairs))])
            chunk.clear()

        for raw in read_rows(data, fmt, tgt, corpus.src_lang, corpus.tgt_lang):
            pair = validator.check(raw)
            if pair is not None:
                chunk.append(pair)
                if len(chunk) >= IMPORT_CHUNK:
                    flush()
        flush()
    return parsed


def import_file(
    corpus_id: CorpusRef,
    data: Data,
    *,
    fmt: str | None = None,
    tgt: Data | None = None,
    strict: bool = False,
    create_langs: tuple[str, str] | None = None,
    cleaning: CleaningOptions | None = None,
    skip_conflicts: bool = False,
) -> ImportResult:
    """Import a file into a corpus, all-or-nothing (see the module docstring).

    ``data``/``tgt`` are bytes, a path or an open binary file (re-read from its
    start). A file that cannot be read raises ``WorkbenchError`` and nothing is written. Row
    errors (a malformed record, an empty or over-long side, a bad split) are skipped and
    reported, or with ``strict=True`` abort the import. Pairs already in the corpus or
    repeated in the file are skipped as duplicates. With ``create_langs=(src_lang,
    tgt_lang)``, a corpus name that does not exist yet is created with those languages
    together with the pairs (an existing one must have them). ``cleaning``: clean-up
    options, as for ``preview_import``. Rows whose source the corpus already translates
    differently are added with a warning (``conflicts`` names a few), or left out with
    ``skip_conflicts``.

    One unit of work, with two deliberate exceptions: the leftovers of killed imports are
    swept first, and a file of more than one chunk on a SQLite database is staged, both in
    short transactions of their own (see ``workbench.corpus.import_staging``: one transaction would
    hold SQLite's only write lock for as long as the import takes).

    An import that adds no pair writes nothing (no new corpus, no change record): an empty
    file, or one whose rows are all invalid or filtered, raises ``NothingToImport``; a file
    whose valid rows are all in the corpus already (imported again) or skipped as conflicts
    (``skip_conflicts``, the user's own choice) returns 0 added, the conflicts named.
    """
    require(Permission.EDIT)
    validator = Validator()
    gate = ParserGate()
    try:
        with session_scope() as s:
            target = _target(s, corpus_id, create_langs)
            validator.cleaner = _cleaner(cleaning, target.src_lang, target.tgt_lang)
            sweep_import_staging()
            rows = read_rows(data, fmt, tgt, target.src_lang, target.tgt_lang)
            chunks = _validated_chunks(rows, validator, strict, gate)
            try:
                first = next(chunks, None)
                second = next(chunks, None) if first is not None else None
                ahead = [c for c in (first, second) if c is not None]
                every_chunk = itertools.chain(ahead, chunks)
                job = ImportJob(target, every_chunk, validator, gate, skip_conflicts)
                if second is not None and can_stage(storage.engine()):
                    cid, added = import_staged(job)
                else:
                    cid, added = _import_at_once(s, job)
            finally:
                chunks.close()
    except IntegrityError as exc:
        raise WorkbenchError(
            N_("import conflicts with a concurrent change: {error}"), error=str(exc.orig)
        ) from None
    except NothingToImport as exc:
        if not exc.nothing_new:
            raise
        # imported again (or by a concurrent import of the same file), or every new row a
        # conflict the user chose to skip: nothing written; the corpus is the one found
        # under the write lock
        cid, added = exc.corpus_id, 0
    regrouped = 0
    if added:  # a new pair may share a sentence with a pair of another split
        with session_scope() as s:
            regrouped = _settle_after_import(s, cid)
    parsed = validator.parsed
    return ImportResult(
        added=added,
        regrouped=regrouped,
        duplicates=parsed.duplicates,
        skipped=parsed.skipped,
        report=parsed.report,
        corpus_id=cid,
        rows=parsed.rows,
        issue_counts=dict(parsed.issue_counts),
        conflicts=parsed.conflicts,
        conflicts_skipped=skip_conflicts,
    )


def _settle_after_import(s: Session, corpus_id: int) -> int:
    """Move the groups an import left spanning two splits, and record the moves as a change
    of their own (the import's is committed by then): undoing it moves them back, and
    until then the import's undo is refused when it moved one of the import's pairs.
    Returns how many pairs moved."""
    moves = splits.settle_splits(s, corpus_id, why="an import")
    if moves:
        after = history.capture(s, Pair, moves)
        history.record(
            s,
            "split",
            history.diff(Pair, splits.rows_before_moves(after, moves), after),
            corpus_id=corpus_id,
            summary=splits.describe_moves(Counter(moves.values()), "an import"),
        )
    return len(moves)


def _cleaner(options: CleaningOptions | None, src_lang: str, tgt_lang: str) -> Cleaner | None:
    return Cleaner(options, src_lang, tgt_lang) if options and options.active else None


def _target(s: Session, corpus: CorpusRef, create_langs: tuple[str, str] | None) -> ImportTarget:
    """Where the import goes; a corpus to create must have a name that is not a number."""
    creating = create_langs is not None and isinstance(corpus, str) and not looks_like_id(corpus)
    if creating:
        name = validate_name(corpus)
        found = find_by_name(s, name)
    else:
        try:
            found = find(s, corpus)
        except WorkbenchError as exc:
            if create_langs is None:
                raise
            raise WorkbenchError(
                N_("{problem}; a new corpus name cannot be a number"), problem=message_of(exc)
            ) from None
    if found is None:
        assert create_langs is not None
        return ImportTarget(None, name, *validate_languages(*create_langs))
    target = ImportTarget(found.id, found.name, found.src_lang, found.tgt_lang)
    if create_langs is not None:
        check_languages(target.name, (target.src_lang, target.tgt_lang), tuple(create_langs))
    return target


def _import_at_once(s: Session, job: ImportJob) -> tuple[int, int]:
    """Everything in the caller's transaction (small files; every file on PostgreSQL);
    returns (corpus id, pairs added)."""
    target, parsed, added = job.target, job.validator.parsed, 0
    conn = s.connection()
    writer = new_writer(conn, job.gate)
    try:
        cid = target_id_now(s, target)  # still there, now that we hold the write lock?
        created: dict[int, dict[str, Any]] = {}
        if cid is None:
            corpus = Corpus(name=target.name, src_lang=target.src_lang, tgt_lang=target.tgt_lang)
            s.add(corpus)
            s.flush()
            cid = corpus.id
            created = history.capture(s, Corpus, [cid])
        last_id = s.scalar(select(func.max(Pair.id))) or 0
        existing = s.scalar(select(func.count()).where(Pair.corpus_id == cid)) or 0
        conflicts = source_conflicts(conn, cid if existing else None, job.skip_conflicts)
        for chunk in job.chunks:
            if existing:  # (in-file duplicates are already gone)
                chunk = drop_existing(conn, cid, chunk, parsed)
            chunk = sift_conflicts(conn, conflicts, chunk, parsed)
            # The first chunk is written once IMPORT_CHUNK pairs or EOF are seen, so the
            # tiny-corpus rule (size after the write < 20) is decided correctly.
            writer.insert(cid, chunk, existing + added + len(chunk))
            added += len(chunk)
        refuse_empty_import(added, parsed, cid)
    except BaseException:
        writer.abort()
        raise
    writer.finish()
    # The new pairs: ids above the largest before the import. On SQLite the write lock makes
    # that exact; elsewhere a concurrent writer's pairs are told apart by the writer's stamp.
    new = select(Pair.id).where(Pair.corpus_id == cid, Pair.id > last_id)
    if isinstance(writer, CoreWriter):
        new = new.where(Pair.created_at == writer.now)
    summary = f"imported {added:,} pairs"
    ids = s.scalars(new.order_by(Pair.id).execution_options(yield_per=10_000))  # streamed
    history.record_import(s, cid, ids, created_corpus=created, summary=summary)
    return cid, added


def _validated_chunks(
    rows: Iterator[Record], validator: Validator, strict: bool, gate: ParserGate
) -> Iterator[list[ParsedPair]]:
    """Parse + validate on a helper thread while the caller writes the previous chunk;
    yields non-empty chunks of at most ``IMPORT_CHUNK`` pairs.

    Any exception of the parser (a file that cannot be read) is re-raised here, in the
    caller, which then rolls its transaction back.
    """
    out: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def work() -> None:
        try:
            chunk: list[ParsedPair] = []
            for i, raw in enumerate(rows):
                if i % 512 == 0:
                    if stop.is_set():
                        return
                    gate.wait()
                pair = validator.check(raw)
                if pair is None:
                    if strict and validator.parsed.skipped:
                        issue = validator.parsed.errors[-1]
                        raise WorkbenchError(
                            N_("line {line}: {problem}; nothing imported"),
                            line=issue.line,
                            problem=issue.message,
                        )
                    continue
                chunk.append(pair)
                if len(chunk) >= IMPORT_CHUNK:
                    put(chunk)
                    chunk = []
            if chunk:
                put(chunk)
            put(_DONE)
        except BaseException as exc:  # handed to the consumer
            put(exc)

    thread = threading.Thread(target=work, name="import-parser", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
