"""Importing and exporting sentence pairs.

Formats (UTF-8, optional BOM, optionally gzip-compressed):

* ``tsv``      ``source<TAB>target[<TAB>split[<TAB>note]]``; a ``source<TAB>target…`` header
               line is recognised and skipped. This is also the export format.
* ``csv``      same columns, RFC 4180 quoting, optional header.
* ``jsonl``    one object per line: ``{"source": …, "target": …, "split"?: …, "note"?: …}``.
* ``aligned``  two plain-text files, line N of one is the translation of line N of the other.
* ``tatoeba``  the Tatoeba/ManyThings export ``english<TAB>other<TAB>attribution``: column 1
               is always English, column 2 the other language. Which column becomes the
               source follows the corpus languages (for a zh→en corpus: source = column 2,
               target = column 1); the attribution (CC-BY) is kept as the pair's note.

Two kinds of problems:

* **Malformed file** (bad encoding, wrong column count, bad JSON, aligned files of different
  length): ``parse_pairs`` raises ``WorkbenchError`` naming the line, and nothing is written.
* **Row issues**, collected in a report the UI can preview before writing. Errors (empty
  side, over-long side, invalid split) skip the row; duplicates (within the file or already
  in the corpus) are skipped and counted; warnings (extreme length ratio, source identical
  to target) are imported.

An import is one transaction: either every accepted row is written or none is.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import queue
import sqlite3
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from hashlib import blake2b as _blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from unicodedata import normalize as _nfc

from sqlalchemy import Connection, func, insert, select
from sqlalchemy.exc import IntegrityError

from db.engine import session_scope
from db.models import Pair, utcnow
from workbench.corpus import (
    MAX_CHARS,
    CorpusRef,
    _existing_hashes,
    _has_fts,
    _resolve,
    default_split,
    normalize_text,
    rough_token_count,
    validate_split,
)
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("tsv", "csv", "jsonl", "aligned", "tatoeba")
EXPORT_FORMATS = ("tsv", "jsonl", "csv")
MAX_RATIO = 9.0  # token-length ratio above which a pair is flagged (warning)
MAX_REPORT = 5_000  # issues kept verbatim; ParsedImport.issue_counts counts all of them
ENGLISH = {"en", "eng"}
_HEADER = ["source", "target", "split", "note"]

Severity = Literal["error", "warning", "duplicate"]


@dataclass(frozen=True)
class ValidationIssue:
    line: int  # 1-based line (record) number in the file
    kind: str  # empty | too_long | bad_split | ratio | identical | duplicate_in_file | …
    message: str
    severity: Severity = "warning"


class ParsedPair(NamedTuple):
    """A validated row, ready to insert (a tuple: a million of them must be cheap)."""

    line: int
    source: str  # normalised
    target: str  # normalised
    split: str | None
    note: str
    content_hash: str


@dataclass
class ParsedImport:
    """What a file would import: accepted ``pairs`` plus the row-issue ``report``."""

    pairs: list[ParsedPair]
    report: list[ValidationIssue]
    issue_counts: Counter = field(default_factory=Counter)  # kind -> count (never truncated)
    rows: int = 0  # data rows read (blank lines and header excluded)

    @property
    def errors(self) -> list[ValidationIssue]:
        """Rows that will be skipped because they are invalid."""
        return [i for i in self.report if i.severity == "error"]

    @property
    def warnings(self) -> list[ValidationIssue]:
        return [i for i in self.report if i.severity == "warning"]

    @property
    def duplicates(self) -> int:
        return self.issue_counts["duplicate_in_file"] + self.issue_counts["duplicate_in_corpus"]

    @property
    def skipped(self) -> int:
        """Rows skipped for errors (duplicates are counted separately)."""
        return sum(n for k, n in self.issue_counts.items() if k in _ERROR_KINDS)

    def report_frame(self) -> pd.DataFrame:
        """The report as a table for previews: line, severity, kind, message."""
        import pandas as pd

        return pd.DataFrame(
            [(i.line, i.severity, i.kind, i.message) for i in self.report],
            columns=["line", "severity", "kind", "message"],
        )

    def _add(self, issue: ValidationIssue) -> None:
        self.issue_counts[issue.kind] += 1
        if len(self.report) < MAX_REPORT:
            self.report.append(issue)


_ERROR_KINDS = {"empty", "too_long", "bad_split"}


@dataclass(frozen=True)
class ImportResult:
    added: int
    duplicates: int
    skipped: int
    report: list[ValidationIssue]
    corpus_id: int = 0
    rows: int = 0
    issue_counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "corpus_id": self.corpus_id,
            "rows": self.rows,
            "added": self.added,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "issues": dict(self.issue_counts),
        }


# ----------------------------------------------------------------------------- reading


def infer_format(path: str | Path, head: bytes = b"") -> str:
    """Format from the file name (``.tsv``, ``.csv``, ``.jsonl``/``.ndjson``, ``.txt``; a
    ``.gz`` suffix is looked through); a 3-column TSV whose third column is a Tatoeba
    attribution is ``tatoeba``."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    if ext in ("jsonl", "ndjson", "json"):
        return "jsonl"
    if ext == "csv":
        return "csv"
    if ext in ("tsv", "tab", "txt"):
        first = _decompress(head, partial=True).split(b"\n", 1)[0].decode("utf-8", "replace")
        cols = first.split("\t")
        if len(cols) == 3 and ("tatoeba" in cols[2].lower() or "cc-by" in cols[2].lower()):
            return "tatoeba"
        return "tsv"
    raise WorkbenchError(
        f"cannot tell the format of {Path(path).name!r}: pass --format ({'|'.join(FORMATS)})"
    )


def _decompress(data: bytes, partial: bool = False) -> bytes:
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        if partial:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                try:
                    return fh.read(65536)
                except EOFError:
                    return b""
        return gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise WorkbenchError(f"not a valid gzip file ({exc})") from None


def _read_bytes(data: bytes | str | Path, what: str = "file") -> tuple[bytes, str | None]:
    """(raw bytes, file name or None). ``str`` means a path; text content must be bytes."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), None
    path = Path(data)
    try:
        return path.read_bytes(), path.name
    except FileNotFoundError:
        raise WorkbenchError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise WorkbenchError(f"{what} is a directory: {path}") from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read {path}: {exc.strerror}") from None


def _decode(data: bytes, what: str = "file") -> str:
    data = _decompress(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise WorkbenchError(
            f"{what} line {line}: not valid UTF-8 (byte 0x{data[exc.start]:02x}); "
            "save the file as UTF-8"
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise WorkbenchError(f"{what} line {line}: contains a NUL byte (is this a text file?)")
    return text


def _lines(text: str) -> list[str]:
    """Split on \\n only (other Unicode line breaks may be part of a sentence)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _is_header(cols: list[str]) -> bool:
    return [c.strip().lower() for c in cols[:2]] == ["source", "target"]


RawRow = tuple[int, str, str, Any, Any]  # (line, source, target, split, note)


def _rows_tsv(text: str) -> Iterator[RawRow]:
    for n, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if n == 1 and _is_header(cols):
            continue
        if not 2 <= len(cols) <= 4:
            raise WorkbenchError(
                f"line {n}: expected 2 to 4 tab-separated columns "
                f"(source, target, split, note), found {len(cols)}"
            )
        cols += [""] * (4 - len(cols))
        yield n, cols[0], cols[1], cols[2], cols[3]


def _rows_csv(text: str) -> Iterator[RawRow]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    first = True
    try:
        for cols in reader:
            n = reader.line_num
            if not cols or all(not c.strip() for c in cols):
                first = False
                continue
            if first and _is_header(cols):
                first = False
                continue
            first = False
            if not 2 <= len(cols) <= 4:
                raise WorkbenchError(
                    f"line {n}: expected 2 to 4 comma-separated columns "
                    f"(source, target, split, note), found {len(cols)}"
                )
            cols += [""] * (4 - len(cols))
            yield n, cols[0], cols[1], cols[2], cols[3]
    except csv.Error as exc:
        raise WorkbenchError(f"line {reader.line_num}: malformed CSV ({exc})") from None


def _rows_jsonl(text: str) -> Iterator[RawRow]:
    for n, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise WorkbenchError(f"line {n}: invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise WorkbenchError(f"line {n}: expected a JSON object with source and target")
        for key in ("source", "target"):
            if key not in obj:
                raise WorkbenchError(f"line {n}: missing key {key!r}")
            if not isinstance(obj[key], str):
                raise WorkbenchError(f"line {n}: {key!r} must be a string")
        for key in ("split", "note"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise WorkbenchError(f"line {n}: {key!r} must be a string")
        yield n, obj["source"], obj["target"], obj.get("split"), obj.get("note")


def _rows_aligned(src_text: str, tgt_text: str) -> Iterator[RawRow]:
    src, tgt = _lines(src_text), _lines(tgt_text)
    if len(src) != len(tgt):
        first = min(len(src), len(tgt)) + 1
        raise WorkbenchError(
            f"line {first}: aligned files differ in length "
            f"(source has {len(src)} lines, target has {len(tgt)})"
        )
    for n, (a, b) in enumerate(zip(src, tgt, strict=True), start=1):
        if a.strip() or b.strip():
            yield n, a, b, None, None


def _rows_tatoeba(text: str, src_lang: str | None, tgt_lang: str | None) -> Iterator[RawRow]:
    src_is_en = (src_lang or "en").lower() in ENGLISH
    tgt_is_en = (tgt_lang or "").lower() in ENGLISH
    if not src_is_en and not tgt_is_en:
        raise WorkbenchError(
            f"Tatoeba files pair English (column 1) with another language (column 2), "
            f"but the corpus is {src_lang}→{tgt_lang}"
        )
    for n, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise WorkbenchError(
                f"line {n}: expected 3 tab-separated columns "
                f"(english, translation, attribution), found {len(cols)}"
            )
        english, other, attribution = cols
        if src_is_en:
            yield n, english, other, None, attribution
        else:
            yield n, other, english, None, attribution


# --------------------------------------------------------------------------- validation


class _Validator:
    """Row checks shared by previews and imports; accumulates the report as it goes."""

    def __init__(self) -> None:
        self.parsed = ParsedImport(pairs=[], report=[])
        self._seen: dict[str, int] = {}  # content hash -> first line

    def check(self, raw: RawRow) -> ParsedPair | None:
        """The validated pair, or None (and a report entry) for a skipped row.

        Hot path of million-row imports, hence inlined normalisation and hashing (kept
        identical to ``corpus.normalize_text`` / ``corpus.pair_hash``; tests check it).
        """
        n, source, target, split, note = raw
        parsed = self.parsed
        parsed.rows += 1
        src = " ".join((source if source.isascii() else _nfc("NFC", source)).split())
        tgt = " ".join((target if target.isascii() else _nfc("NFC", target)).split())
        if not src or not tgt:
            side = "source" if not src else "target"
            parsed._add(ValidationIssue(n, "empty", f"{side} is empty", "error"))
            return None
        if len(src) > MAX_CHARS or len(tgt) > MAX_CHARS:
            side = "source" if len(src) > MAX_CHARS else "target"
            msg = f"{side} is longer than {MAX_CHARS} characters"
            parsed._add(ValidationIssue(n, "too_long", msg, "error"))
            return None
        if split:
            try:
                split = validate_split(split)
            except WorkbenchError as exc:
                parsed._add(ValidationIssue(n, "bad_split", str(exc), "error"))
                return None
        else:
            split = None
        sb, tb = src.encode(), tgt.encode()
        h = _blake2b(sb + b"\x1f" + tb, digest_size=16).hexdigest()
        first = self._seen.get(h)
        if first is not None:
            msg = f"duplicate of line {first}"
            parsed._add(ValidationIssue(n, "duplicate_in_file", msg, "duplicate"))
            return None
        self._seen[h] = n
        if len(src) == len(tgt) and src.casefold() == tgt.casefold():
            parsed._add(ValidationIssue(n, "identical", "source and target are identical"))
        else:
            # Cheap byte-length pre-filter: a token ratio above MAX_RATIO implies a byte
            # ratio above 3 (CJK ≈ 3 bytes per token, Latin ≈ 5-6 bytes per word).
            big, small = (len(sb), len(tb)) if len(sb) >= len(tb) else (len(tb), len(sb))
            if big >= 20 and big > 3 * max(small, 1):
                a, b = rough_token_count(src), rough_token_count(tgt)
                if max(a, b) >= 10 and max(a, b) > MAX_RATIO * max(1, min(a, b)):
                    msg = f"extreme length ratio ({a} vs {b} tokens): misaligned?"
                    parsed._add(ValidationIssue(n, "ratio", msg))
        note_text = normalize_text(note) if note and isinstance(note, str) else ""
        return ParsedPair(n, src, tgt, split, note_text, h)


def _raw_rows(
    data: bytes | str | Path,
    fmt: str | None,
    tgt_data: bytes | str | Path | None,
    src_lang: str | None,
    tgt_lang: str | None,
) -> Iterator[RawRow]:
    """Read + decode now (so encoding errors surface first); rows are parsed lazily and a
    structural error raises ``WorkbenchError`` when its line is reached."""
    raw, name = _read_bytes(data, "file")
    if fmt is None:
        if tgt_data is not None:
            fmt = "aligned"
        elif name is None:
            raise WorkbenchError(f"format is required for uploaded data ({'|'.join(FORMATS)})")
        else:
            fmt = infer_format(name, raw[:65536])
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise WorkbenchError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "aligned":
        if tgt_data is None:
            raise WorkbenchError("the aligned format needs a target file (--tgt-file)")
        tgt_raw, _ = _read_bytes(tgt_data, "target file")
        return _rows_aligned(_decode(raw, "source file"), _decode(tgt_raw, "target file"))
    if tgt_data is not None:
        raise WorkbenchError(f"a target file only makes sense with --format aligned, not {fmt}")
    text = _decode(raw)
    del raw
    if fmt == "tsv":
        return _rows_tsv(text)
    if fmt == "csv":
        return _rows_csv(text)
    if fmt == "jsonl":
        return _rows_jsonl(text)
    return _rows_tatoeba(text, src_lang, tgt_lang)


def parse_pairs(
    data: bytes | str | Path,
    fmt: str | None = None,
    tgt_data: bytes | str | Path | None = None,
    *,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> ParsedImport:
    """Parse and validate a file without touching the database.

    ``data``/``tgt_data`` are bytes or a path; ``fmt`` is inferred from the path when None
    (``aligned`` when ``tgt_data`` is given). ``src_lang``/``tgt_lang`` orient Tatoeba files.
    Raises ``WorkbenchError`` (naming the line) for a malformed file.
    """
    validator = _Validator()
    pairs = validator.parsed.pairs
    for raw in _raw_rows(data, fmt, tgt_data, src_lang, tgt_lang):
        pair = validator.check(raw)
        if pair is not None:
            pairs.append(pair)
    return validator.parsed


def preview_import(
    corpus_id: CorpusRef,
    data: bytes | str | Path,
    fmt: str | None = None,
    tgt: bytes | str | Path | None = None,
) -> ParsedImport:
    """``parse_pairs`` for a corpus: oriented by its languages, and with pairs it already
    holds moved from ``pairs`` to the report (``duplicate_in_corpus``). Writes nothing."""
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        cid, src_lang, tgt_lang = corpus.id, corpus.src_lang, corpus.tgt_lang
    parsed = parse_pairs(data, fmt, tgt, src_lang=src_lang, tgt_lang=tgt_lang)
    with session_scope() as s:
        parsed.pairs = _drop_existing(s.connection(), cid, parsed.pairs, parsed)
    return parsed


def _drop_existing(
    conn: Connection, corpus_id: int, pairs: list[ParsedPair], parsed: ParsedImport
) -> list[ParsedPair]:
    """``pairs`` minus those the corpus already holds (reported as duplicate_in_corpus)."""
    if not pairs:
        return pairs
    if conn.execute(select(Pair.id).where(Pair.corpus_id == corpus_id).limit(1)).first() is None:
        return pairs
    existing = _existing_hashes(conn, corpus_id, (p.content_hash for p in pairs))
    if not existing:
        return pairs
    kept = []
    for p in pairs:
        if p.content_hash in existing:
            msg = f"already in the corpus (pair {existing[p.content_hash]})"
            parsed._add(ValidationIssue(p.line, "duplicate_in_corpus", msg, "duplicate"))
        else:
            kept.append(p)
    return kept


# ------------------------------------------------------------------------------ writing

IMPORT_CHUNK = 50_000
_DONE = object()


class _ParserGate:
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


def _validated_chunks(
    rows: Iterator[RawRow], validator: _Validator, strict: bool, gate: _ParserGate
) -> Iterator[list[ParsedPair]]:
    """Parse + validate on a helper thread while the caller writes the previous chunk.

    Any exception of the parser (a malformed line) is re-raised here, in the caller,
    which then rolls its transaction back.
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
                            f"line {issue.line}: {issue.message}; nothing imported"
                        )
                    continue
                chunk.append(pair)
                if len(chunk) >= IMPORT_CHUNK:
                    put(chunk)
                    chunk = []
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


def import_file(
    corpus_id: CorpusRef,
    path_or_bytes: bytes | str | Path,
    fmt: str | None = None,
    tgt: bytes | str | Path | None = None,
    *,
    strict: bool = False,
) -> ImportResult:
    """Import a file into a corpus in one transaction (all-or-nothing).

    A malformed file raises ``WorkbenchError`` and nothing is written. Row errors (empty or
    over-long side, bad split) are skipped and reported, or with ``strict=True`` abort the
    import. Pairs already in the corpus or repeated in the file are skipped as duplicates.
    """
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        cid, src_lang, tgt_lang = corpus.id, corpus.src_lang, corpus.tgt_lang
    rows = _raw_rows(path_or_bytes, fmt, tgt, src_lang, tgt_lang)
    validator = _Validator()
    parsed = validator.parsed
    added = 0
    try:
        with session_scope() as s:
            conn = s.connection()
            gate = _ParserGate()
            writer: _SqliteWriter | _CoreWriter
            if conn.dialect.name == "sqlite":
                writer = _SqliteWriter(conn, gate)
            else:
                writer = _CoreWriter(conn)
            try:
                _resolve(s, cid)  # still there, now that we hold the write lock?
                existing = s.scalar(select(func.count()).where(Pair.corpus_id == cid)) or 0
                for chunk in _validated_chunks(rows, validator, strict, gate):
                    if existing:  # (in-file duplicates are already gone)
                        chunk = _drop_existing(conn, cid, chunk, parsed)
                    # The first chunk is written once IMPORT_CHUNK pairs or EOF are seen, so
                    # the tiny-corpus rule (size after the write < 20) is decided correctly.
                    size_after = existing + added + len(chunk)
                    writer.insert(cid, chunk, size_after)
                    added += len(chunk)
            except BaseException:
                writer.abort()
                raise
            writer.finish()
    except IntegrityError as exc:
        raise WorkbenchError(f"import conflicts with a concurrent change: {exc.orig}") from None
    return ImportResult(
        added=added,
        duplicates=parsed.duplicates,
        skipped=parsed.skipped,
        report=parsed.report,
        corpus_id=cid,
        rows=parsed.rows,
        issue_counts=dict(parsed.issue_counts),
    )


def _row_values(corpus_id: int, p: ParsedPair, size_after: int, stamp: Any) -> tuple:
    split = p.split or default_split(p.content_hash, size_after)
    return (corpus_id, p.source, p.target, split, p.note, p.content_hash, stamp, stamp)


_COLUMNS = ("corpus_id", "source", "target", "split", "note", "content_hash")
_COLUMNS += ("created_at", "updated_at")


class _CoreWriter:
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
        if self.rows >= 10_000 and self.conn.dialect.name == "postgresql":
            # Fresh statistics, so the planner uses the trigram indexes for rare terms
            # right away instead of after autovacuum's next visit.
            self.conn.exec_driver_sql("ANALYZE pairs")

    def abort(self) -> None:
        pass


class _SqliteWriter:
    """Fast SQLite bulk insert inside the caller's transaction.

    Takes the write lock up front (BEGIN IMMEDIATE), so the duplicate check and the insert
    see the same corpus. The per-row FTS trigger is dropped for the duration and each chunk
    is indexed with one set-based ``INSERT … SELECT`` (about twice as fast); the trigger is
    recreated before commit. DDL is transactional in SQLite, so a failure rolls back the
    rows, the index entries and the trigger change together.
    """

    CACHE_KIB = 256 * 1024  # a big page cache for the random-order unique-hash index

    def __init__(self, conn: Connection, gate: _ParserGate | None = None) -> None:
        self.conn = conn
        self.gate = gate or _ParserGate()
        dbapi = conn.connection.driver_connection
        if not dbapi.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        self.cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
        conn.exec_driver_sql(f"PRAGMA cache_size = -{self.CACHE_KIB}")
        self.stamp = utcnow().replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
        self.trigger: str | None = None  # the dropped FTS insert trigger's SQL
        self.fts = _has_fts(conn)

    def insert(self, corpus_id: int, pairs: list[ParsedPair], size_after: int) -> None:
        if not pairs:
            return
        if self.fts and self.trigger is None:
            self.trigger = self.conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'pairs_fts_ai'"
            ).scalar()
            if self.trigger:
                self.conn.exec_driver_sql("DROP TRIGGER pairs_fts_ai")
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
            self.conn.exec_driver_sql(
                "INSERT INTO pairs_fts (rowid, source, target) "
                f"SELECT id, source, target FROM pairs WHERE id > {int(before)}"
            )

    def finish(self) -> None:
        """Restore the trigger and the cache size before commit."""
        if self.trigger:
            self.conn.exec_driver_sql(self.trigger)
        self.conn.exec_driver_sql(f"PRAGMA cache_size = {int(self.cache)}")

    def abort(self) -> None:
        """Before rollback (which restores the trigger): only reset the cache size."""
        with contextlib.suppress(Exception):
            self.conn.exec_driver_sql(f"PRAGMA cache_size = {int(self.cache)}")


# ------------------------------------------------------------------------------ export


def _export_lines(corpus_id: int, fmt: str) -> Iterator[str]:
    with session_scope() as s:
        result = s.execute(
            select(Pair.source, Pair.target, Pair.split, Pair.note)
            .where(Pair.corpus_id == corpus_id)
            .order_by(Pair.id)
            .execution_options(yield_per=10_000)
        )
        if fmt == "tsv":
            yield "\t".join(_HEADER) + "\n"
            for row in result:
                yield "\t".join(_one_line(v) for v in row) + "\n"
        elif fmt == "jsonl":
            for src, tgt, split, note in result:
                obj = {"source": src, "target": tgt, "split": split, "note": note}
                yield json.dumps(obj, ensure_ascii=False) + "\n"
        else:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(_HEADER)
            for row in result:
                writer.writerow(row)
                if buf.tell() > 1 << 20:
                    yield buf.getvalue()
                    buf.seek(0)
                    buf.truncate()
            yield buf.getvalue()


def _one_line(value: str | None) -> str:
    """Stored text is normalised (no tabs/newlines); guard anyway so TSV stays parseable."""
    value = value or ""
    return normalize_text(value) if ("\t" in value or "\n" in value or "\r" in value) else value


def _export_format(path: str | Path | None, fmt: str | None) -> str:
    if fmt is None:
        if path is None:
            return "tsv"
        name = Path(path).name.lower()
        fmt = "jsonl" if name.endswith((".jsonl", ".ndjson", ".json")) else "tsv"
        fmt = "csv" if name.endswith(".csv") else fmt
    fmt = fmt.lower()
    if fmt not in EXPORT_FORMATS:
        raise WorkbenchError(f"cannot export as {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    return fmt


def export_pairs(corpus_id: CorpusRef, path: str | Path, fmt: str | None = None) -> int:
    """Write all pairs (id order) to ``path`` as TSV (with header), JSONL or CSV; the format
    comes from the extension when not given. Written atomically; returns the pair count."""
    fmt = _export_format(path, fmt)
    with session_scope() as s:
        cid = _resolve(s, corpus_id).id
    path = Path(path)
    if path.is_dir():
        raise WorkbenchError(f"{path} is a directory")
    if not path.parent.exists():
        raise WorkbenchError(f"folder does not exist: {path.parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            for chunk in _export_lines(cid, fmt):
                fh.write(chunk)
                count += chunk.count("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count - (1 if fmt in ("tsv", "csv") else 0)


def export_bytes(corpus_id: CorpusRef, fmt: str = "tsv") -> bytes:
    """The export as bytes (for a download button)."""
    fmt = _export_format(None, fmt)
    with session_scope() as s:
        cid = _resolve(s, corpus_id).id
    return "".join(_export_lines(cid, fmt)).encode("utf-8")
