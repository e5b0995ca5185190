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

Files are read as a stream, in blocks: memory does not grow with the file. A file may
decompress to at most ``MAX_INPUT_BYTES`` and no line may be longer than ``MAX_LINE_BYTES``
(a gzip "bomb" or a binary file is refused early, by name, instead of exhausting memory).

Two kinds of problems:

* **Malformed file** (bad encoding, wrong column count, bad JSON, aligned files of different
  length, not gzip although named ``.gz``, over the limits): ``WorkbenchError`` naming the
  line, and nothing is written.
* **Row issues**, collected in a report the UI can preview before writing. Errors (empty
  side, over-long side, invalid split) skip the row; duplicates (within the file or already
  in the corpus) are skipped and counted; warnings (extreme length ratio, source identical
  to target, control or invisible characters removed by ``workbench.text_rules``) are
  imported.

An import is all-or-nothing: either every accepted row is written or none is. On SQLite,
whose write lock is one for the whole database, an import larger than one chunk
(``IMPORT_CHUNK`` pairs) does not hold that lock throughout, which would stall every other
writer (a training run's progress, edits in the UI) for a minute or more. Each chunk is
written in its own short transaction into a hidden *staging* corpus (``corpora.import_token``
set: no listing, search or lookup shows it), and one short transaction publishes it:

* into a corpus that does not exist yet (``create_langs``), the staging corpus gets its name;
* into an empty corpus, the pairs are staged under that corpus's own id while it is hidden
  (anyone else touching it is told it is receiving an import), and publishing un-hides it;
* into a non-empty corpus, the pairs are moved over, skipping pairs added there meanwhile
  (reported as duplicates); only this case takes time in proportion to the pairs (about a
  tenth of the import's).

A failed import removes what it staged; a killed one leaves it behind, hidden, and the next
import sweeps it (a live import holds a lock file next to the database, a dead one does not).
A failed or killed import into a new corpus leaves no empty corpus behind. PostgreSQL locks
rows, not the database: there an import is one transaction.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import gzip
import io
import json
import os
import queue
import re
import sqlite3
import stat
import tempfile
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from db.engine import get_engine, session_scope
from db.models import Corpus, Pair, utcnow
from workbench.corpus import (
    MAX_CHARS,
    STAGING_NAME,
    CorpusRef,
    _by_id,
    _existing_hashes,
    _has_fts,
    _resolve,
    _validate_lang,
    _visible,
    default_split,
    rough_token_count,
    validate_split,
)
from workbench.errors import WorkbenchError
from workbench.text_rules import (
    clean_text,
    hash_encoded,
    looks_like_id,
    normalize_text,
    removed_characters,
    validate_name,
)

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("tsv", "csv", "jsonl", "aligned", "tatoeba")
EXPORT_FORMATS = ("tsv", "jsonl", "csv")
MAX_RATIO = 9.0  # token-length ratio above which a pair is flagged (warning)
MAX_REPORT = 5_000  # issues kept verbatim; ParsedImport.issue_counts counts all of them
MAX_INPUT_BYTES = 1 << 30  # decompressed size of one file (a million pairs is ~150 MB)
MAX_LINE_BYTES = 1 << 20  # one line; a pair's sides are at most MAX_CHARS characters each
PREVIEW_SAMPLE = 20  # pairs a preview keeps (it counts all of them)
ENGLISH = {"en", "eng"}
_HEADER = ["source", "target", "split", "note"]
_BLOCK = 1 << 20  # bytes read at a time

Severity = Literal["error", "warning", "duplicate"]
Data = bytes | str | Path | IO[bytes]  # content, a path, or an open binary file (an upload)


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
    """What a file would import: the ``accepted`` count of pairs to add (``pairs`` holds all of
    them for ``parse_pairs``, only the first few for ``preview_import``) plus the row-issue
    ``report`` (at most ``MAX_REPORT`` entries; ``issue_counts`` counts every issue)."""

    pairs: list[ParsedPair]
    report: list[ValidationIssue]
    issue_counts: Counter = field(default_factory=Counter)  # kind -> count (never truncated)
    rows: int = 0  # data rows read (blank lines and header excluded)
    accepted: int = 0  # pairs that would be added

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
        first = _head_text(head).split("\n", 1)[0]
        cols = first.split("\t")
        if len(cols) == 3 and ("tatoeba" in cols[2].lower() or "cc-by" in cols[2].lower()):
            return "tatoeba"
        return "tsv"
    raise WorkbenchError(
        f"cannot tell the format of {Path(path).name!r}: pass --format ({'|'.join(FORMATS)})"
    )


def _head_text(head: bytes) -> str:
    """The readable start of a (possibly gzip-compressed) file, for sniffing only."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 65536)
        except zlib.error as exc:
            raise WorkbenchError(f"not a valid gzip file ({exc})") from None
    return head.decode("utf-8", "replace")


@contextlib.contextmanager
def _opened(data: Data, what: str) -> Iterator[tuple[IO[bytes], str | None]]:
    """(binary stream at its start, file name or None). ``str`` means a path."""
    if isinstance(data, bytes | bytearray | memoryview):
        yield io.BytesIO(data), None
        return
    if not isinstance(data, str | Path):  # an open file, e.g. Streamlit's UploadedFile
        data.seek(0)
        name = getattr(data, "name", None)
        yield data, name if isinstance(name, str) else None
        return
    path = Path(data)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise WorkbenchError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise WorkbenchError(f"{what} is a directory: {path}") from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise WorkbenchError(f"{what} is not a regular file: {path}")
        yield fh, path.name


def _blocks(stream: IO[bytes], name: str | None, what: str) -> Iterator[bytes]:
    """The decompressed bytes of ``stream`` in blocks, at most ``MAX_INPUT_BYTES`` in all."""
    magic = stream.read(2)
    stream.seek(0)
    compressed = magic == b"\x1f\x8b"
    if not compressed and name and name.lower().endswith(".gz"):
        raise WorkbenchError(f"{what} {name!r} is not a gzip file, although its name ends in .gz")
    source: IO[bytes] = gzip.GzipFile(fileobj=stream, mode="rb") if compressed else stream
    total = 0
    size = min(_BLOCK, MAX_LINE_BYTES)  # so a line inside a block is never over the limit
    while True:
        try:
            block = source.read(size)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise WorkbenchError(f"{what} is not a valid gzip file ({exc})") from None
        except OSError as exc:
            raise WorkbenchError(f"cannot read {what}: {exc.strerror or exc}") from None
        if not block:
            return
        total += len(block)
        if total > MAX_INPUT_BYTES:
            raise WorkbenchError(
                f"{what} is larger than {_size(MAX_INPUT_BYTES)}"
                f"{' uncompressed' if compressed else ''}: split it into smaller files"
            )
        yield block


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n:,} bytes"


_NONBLANK = re.compile(r"[^\n]+")


def _lines(data: Data, what: str = "file", skip_blank: bool = True) -> Iterator[tuple[int, str]]:
    """(line number, line without its ``\\n`` / ``\\r\\n``) of a UTF-8 file, read as a stream.

    Lines are split on ``\\n`` only (other Unicode line breaks may be part of a sentence).
    ``skip_blank`` leaves out empty lines at C speed (a file of a billion newlines is read
    in seconds, not minutes). Raises ``WorkbenchError`` naming the line for invalid UTF-8,
    a NUL byte (a binary file) or a line over ``MAX_LINE_BYTES``.
    """
    with _opened(data, what) as (stream, name):
        pending = b""  # the unfinished last line of the bytes read so far
        done = 0  # lines yielded or skipped so far
        first = True
        for block in _blocks(stream, name, what):
            buf = pending + block if pending else block
            cut = buf.rfind(b"\n")
            head_end = buf.find(b"\n") if cut >= 0 else len(buf)
            if head_end > MAX_LINE_BYTES:
                raise WorkbenchError(
                    f"{what} line {done + 1}: longer than {_size(MAX_LINE_BYTES)} "
                    "(is this a text file?)"
                )
            if cut < 0:
                pending = buf
                continue
            pending = buf[cut + 1 :]
            chunk = _decode(buf[: cut + 1], done, what, first)
            first = False
            yield from _split(chunk, done, skip_blank)
            done += chunk.count("\n")
        if pending:
            chunk = _decode(pending, done, what, first)
            yield from _split(chunk + "\n", done, skip_blank)


def _decode(data: bytes, lines_before: int, what: str, first: bool) -> str:
    try:
        text = data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before + data.count(b"\n", 0, exc.start) + 1
        raise WorkbenchError(
            f"{what} line {line}: not valid UTF-8 (byte 0x{data[exc.start]:02x}); "
            "save the file as UTF-8"
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = lines_before + text.count("\n", 0, nul) + 1
        raise WorkbenchError(f"{what} line {line}: contains a NUL byte (is this a text file?)")
    return text


def _split(text: str, lines_before: int, skip_blank: bool) -> Iterator[tuple[int, str]]:
    """The lines of ``text`` (which ends with ``\\n``) numbered from ``lines_before + 1``."""
    if skip_blank:
        n, pos = lines_before + 1, 0  # n: the number of the line at pos
        for m in _NONBLANK.finditer(text):
            n += text.count("\n", pos, m.start())
            pos = m.start()
            line = m.group()
            yield n, line[:-1] if line.endswith("\r") else line
        return
    for n, line in enumerate(text.split("\n")[:-1], start=lines_before + 1):
        yield n, line[:-1] if line.endswith("\r") else line


def _is_header(cols: list[str]) -> bool:
    return [c.strip().lower() for c in cols[:2]] == ["source", "target"]


RawRow = tuple[int, str, str, Any, Any]  # (line, source, target, split, note)


def _rows_tsv(lines: Iterator[tuple[int, str]]) -> Iterator[RawRow]:
    for n, line in lines:
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


def _rows_csv(lines: Iterator[tuple[int, str]]) -> Iterator[RawRow]:
    where = [0]  # the number of the line the reader took last: a record's last line

    def feed() -> Iterator[str]:
        for n, line in lines:
            where[0] = n
            yield line + "\n"

    reader = csv.reader(feed(), strict=True)
    first = True
    try:
        for cols in reader:
            n = where[0]
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
        raise WorkbenchError(f"line {where[0]}: malformed CSV ({exc})") from None


def _rows_jsonl(lines: Iterator[tuple[int, str]]) -> Iterator[RawRow]:
    for n, line in lines:
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


def _rows_aligned(src: Data, tgt: Data) -> Iterator[RawRow]:
    src_lines = _lines(src, "source file", skip_blank=False)
    tgt_lines = _lines(tgt, "target file", skip_blank=False)
    n = 0
    while True:
        a, b = next(src_lines, None), next(tgt_lines, None)
        if a is None or b is None:
            break
        n = a[0]
        if a[1].strip() or b[1].strip():
            yield n, a[1], b[1], None, None
    if a is not None or b is not None:  # one file ended first: count the rest of the other
        src_total = n + (a is not None) + sum(1 for _ in src_lines)
        tgt_total = n + (b is not None) + sum(1 for _ in tgt_lines)
        raise WorkbenchError(
            f"line {n + 1}: aligned files differ in length "
            f"(source has {src_total} lines, target has {tgt_total})"
        )


def _rows_tatoeba(
    lines: Iterator[tuple[int, str]], src_lang: str | None, tgt_lang: str | None
) -> Iterator[RawRow]:
    src_is_en = (src_lang or "en").lower() in ENGLISH
    tgt_is_en = (tgt_lang or "").lower() in ENGLISH
    if not src_is_en and not tgt_is_en:
        raise WorkbenchError(
            f"Tatoeba files pair English (column 1) with another language (column 2), "
            f"but the corpus is {src_lang}→{tgt_lang}"
        )
    for n, line in lines:
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
        self.seen: dict[str, int] = {}  # content hash -> first line

    def check(self, raw: RawRow) -> ParsedPair | None:
        """The validated pair, or None (and a report entry) for a skipped row.

        The hot path of million-row imports: text goes through the one text rule
        (``text_rules.clean_text``), so imported pairs are stored exactly as edited ones.
        """
        n, source, target, split, note = raw
        parsed = self.parsed
        parsed.rows += 1
        src, removed_src = clean_text(source)
        tgt, removed_tgt = clean_text(target)
        if not src or not tgt:
            side = "source" if not src else "target"
            removed = removed_src if not src else removed_tgt
            why = f" (after removing {removed} invisible characters)" if removed else ""
            parsed._add(ValidationIssue(n, "empty", f"{side} is empty{why}", "error"))
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
        h = hash_encoded(sb, tb)
        first = self.seen.get(h)
        if first is not None:
            msg = f"duplicate of line {first}"
            parsed._add(ValidationIssue(n, "duplicate_in_file", msg, "duplicate"))
            return None
        self.seen[h] = n
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
        note_text, removed_note = clean_text(note) if note and isinstance(note, str) else ("", 0)
        removed = removed_src + removed_tgt + removed_note
        if removed:
            names = removed_characters(f"{source}{target}{note if removed_note else ''}")
            shown = ", ".join(dict.fromkeys(names[:8]))
            msg = f"removed {removed} control or invisible character(s): {shown}"
            parsed._add(ValidationIssue(n, "control_chars", msg))
        return ParsedPair(n, src, tgt, split, note_text, h)


def _raw_rows(
    data: Data,
    fmt: str | None,
    tgt_data: Data | None,
    src_lang: str | None,
    tgt_lang: str | None,
) -> Iterator[RawRow]:
    """The rows of a file, parsed lazily as it is read: a problem raises ``WorkbenchError``
    when its line is reached (the format is decided up front)."""
    fmt = _format_of(data, fmt, tgt_data)
    if fmt == "aligned":
        if tgt_data is None:
            raise WorkbenchError("the aligned format needs a target file (--tgt-file)")
        return _rows_aligned(data, tgt_data)
    if tgt_data is not None:
        raise WorkbenchError(f"a target file only makes sense with --format aligned, not {fmt}")
    lines = _lines(data)
    if fmt == "tsv":
        return _rows_tsv(lines)
    if fmt == "csv":
        return _rows_csv(lines)
    if fmt == "jsonl":
        return _rows_jsonl(lines)
    return _rows_tatoeba(lines, src_lang, tgt_lang)


def _format_of(data: Data, fmt: str | None, tgt_data: Data | None) -> str:
    if fmt is None:
        if tgt_data is not None:
            return "aligned"
        with _opened(data, "file") as (stream, name):
            if name is None:
                raise WorkbenchError(f"format is required for uploaded data ({'|'.join(FORMATS)})")
            fmt = infer_format(name, stream.read(65536))
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise WorkbenchError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return fmt


def parse_pairs(
    data: Data,
    fmt: str | None = None,
    tgt_data: Data | None = None,
    *,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> ParsedImport:
    """Parse and validate a file without touching the database; ``pairs`` holds every
    accepted pair (use ``preview_import`` for a bounded look at a big file).

    ``data``/``tgt_data`` are bytes, a path or an open binary file; ``fmt`` is inferred from
    the file name when None (``aligned`` when ``tgt_data`` is given). ``src_lang``/``tgt_lang``
    orient Tatoeba files. Raises ``WorkbenchError`` (naming the line) for a malformed file.
    """
    validator = _Validator()
    pairs = validator.parsed.pairs
    for raw in _raw_rows(data, fmt, tgt_data, src_lang, tgt_lang):
        pair = validator.check(raw)
        if pair is not None:
            pairs.append(pair)
    validator.parsed.accepted = len(pairs)
    return validator.parsed


def preview_import(
    corpus_id: CorpusRef,
    data: Data,
    fmt: str | None = None,
    tgt: Data | None = None,
    *,
    sample: int = PREVIEW_SAMPLE,
) -> ParsedImport:
    """What importing would do, in bounded memory: the whole file is read and validated, and
    pairs the corpus already holds are reported (``duplicate_in_corpus``), but only the first
    ``sample`` pairs to add are kept in ``pairs``; ``accepted`` counts all of them. Writes
    nothing. Oriented by the corpus languages (Tatoeba)."""
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        cid, src_lang, tgt_lang = corpus.id, corpus.src_lang, corpus.tgt_lang
    validator = _Validator()
    parsed = validator.parsed
    chunk: list[ParsedPair] = []

    def flush() -> None:
        with session_scope() as s:
            kept = _drop_existing(s.connection(), cid, chunk, parsed)
        parsed.accepted += len(kept)
        parsed.pairs.extend(kept[: max(0, sample - len(parsed.pairs))])
        chunk.clear()

    for raw in _raw_rows(data, fmt, tgt, src_lang, tgt_lang):
        pair = validator.check(raw)
        if pair is not None:
            chunk.append(pair)
            if len(chunk) >= IMPORT_CHUNK:
                flush()
    flush()
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
            parsed._add(_in_corpus(p.line, existing[p.content_hash]))
        else:
            kept.append(p)
    return kept


def _in_corpus(line: int, pair_id: int | None) -> ValidationIssue:
    message = "already in the corpus" + (f" (pair {pair_id})" if pair_id is not None else "")
    return ValidationIssue(line, "duplicate_in_corpus", message, "duplicate")


# ------------------------------------------------------------------------------ writing

IMPORT_CHUNK = 20_000  # pairs per write transaction (about a second of the SQLite write lock)
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
    """Parse + validate on a helper thread while the caller writes the previous chunk;
    yields non-empty chunks of at most ``IMPORT_CHUNK`` pairs.

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


@dataclass(frozen=True)
class _Target:
    """Where an import goes: an existing corpus (``id``) or one to create on success."""

    id: int | None
    name: str
    src_lang: str
    tgt_lang: str


def _target(corpus: CorpusRef, create_langs: tuple[str, str] | None) -> _Target:
    creating = create_langs is not None and isinstance(corpus, str) and not looks_like_id(corpus)
    with session_scope() as s:
        if creating:
            name = validate_name(corpus)
            found = _visible(s.scalar(select(Corpus).where(Corpus.name == name)))
        else:
            try:
                found = _resolve(s, corpus)
            except WorkbenchError as exc:
                if create_langs is None:
                    raise
                raise WorkbenchError(f"{exc}; a new corpus name cannot be a number") from None
        if found is None:
            assert create_langs is not None
            src = _validate_lang(create_langs[0], "source")
            tgt = _validate_lang(create_langs[1], "target")
            return _Target(None, name, src, tgt)
        target = _Target(found.id, found.name, found.src_lang, found.tgt_lang)
    if create_langs is not None and tuple(create_langs) != (target.src_lang, target.tgt_lang):
        src, tgt = create_langs
        raise WorkbenchError(
            f"corpus {target.name!r} is {target.src_lang}→{target.tgt_lang}, not {src}→{tgt}"
        )
    return target


def import_file(
    corpus_id: CorpusRef,
    path_or_bytes: Data,
    fmt: str | None = None,
    tgt: Data | None = None,
    *,
    strict: bool = False,
    create_langs: tuple[str, str] | None = None,
) -> ImportResult:
    """Import a file into a corpus, all-or-nothing (see the module docstring).

    ``path_or_bytes``/``tgt`` are bytes, a path or an open binary file (re-read from its
    start). A malformed file raises ``WorkbenchError`` and nothing is written. Row errors
    (empty or over-long side, bad split) are skipped and reported, or with ``strict=True``
    abort the import. Pairs already in the corpus or repeated in the file are skipped as
    duplicates. With ``create_langs=(src_lang, tgt_lang)``, a corpus name that does not
    exist yet is created with those languages together with the pairs (an existing one must
    have them).
    """
    target = _target(corpus_id, create_langs)
    engine = get_engine()
    sweep_import_staging()
    rows = _raw_rows(path_or_bytes, fmt, tgt, target.src_lang, target.tgt_lang)
    validator = _Validator()
    gate = _ParserGate()
    chunks = _validated_chunks(rows, validator, strict, gate)
    try:
        try:
            first = next(chunks, None)
            second = next(chunks, None) if first is not None else None
            ahead = [c for c in (first, second) if c is not None]
            if second is not None and _can_stage(engine):
                cid, added = _import_staged(target, ahead, chunks, validator, gate)
            else:
                cid, added = _import_at_once(target, ahead, chunks, validator, gate)
        finally:
            chunks.close()
    except IntegrityError as exc:
        raise WorkbenchError(f"import conflicts with a concurrent change: {exc.orig}") from None
    parsed = validator.parsed
    return ImportResult(
        added=added,
        duplicates=parsed.duplicates,
        skipped=parsed.skipped,
        report=parsed.report,
        corpus_id=cid,
        rows=parsed.rows,
        issue_counts=dict(parsed.issue_counts),
    )


def _writer(conn: Connection, gate: _ParserGate) -> _SqliteWriter | _CoreWriter:
    return _SqliteWriter(conn, gate) if conn.dialect.name == "sqlite" else _CoreWriter(conn)


def _import_at_once(
    target: _Target,
    ahead: list[list[ParsedPair]],
    chunks: Iterator[list[ParsedPair]],
    validator: _Validator,
    gate: _ParserGate,
) -> tuple[int, int]:
    """One transaction for everything (small files; every file on PostgreSQL)."""
    parsed, added = validator.parsed, 0
    with session_scope() as s:
        conn = s.connection()
        writer = _writer(conn, gate)
        try:
            cid = _publish_target(s, target)  # still there, now that we hold the write lock?
            if cid is None:
                corpus = Corpus(
                    name=target.name, src_lang=target.src_lang, tgt_lang=target.tgt_lang
                )
                s.add(corpus)
                s.flush()
                cid = corpus.id
            existing = s.scalar(select(func.count()).where(Pair.corpus_id == cid)) or 0
            for chunk in _chain(ahead, chunks):
                if existing:  # (in-file duplicates are already gone)
                    chunk = _drop_existing(conn, cid, chunk, parsed)
                # The first chunk is written once IMPORT_CHUNK pairs or EOF are seen, so the
                # tiny-corpus rule (size after the write < 20) is decided correctly.
                writer.insert(cid, chunk, existing + added + len(chunk))
                added += len(chunk)
        except BaseException:
            writer.abort()
            raise
        writer.finish()
    return cid, added


def _chain(
    ahead: list[list[ParsedPair]], chunks: Iterator[list[ParsedPair]]
) -> Iterator[list[ParsedPair]]:
    yield from ahead
    yield from chunks


def _publish_target(s: Any, target: _Target) -> int | None:
    """The target corpus's id now (None: to be created); raises if it went away or if a
    corpus of that name but other languages appeared meanwhile."""
    if target.id is not None:
        if _by_id(s, target.id) is None:
            raise WorkbenchError(f"corpus {target.name!r} was deleted during the import")
        return target.id
    found = s.scalar(
        select(Corpus).where(Corpus.name == target.name, Corpus.import_token.is_(None))
    )
    if found is None:
        return None
    if (found.src_lang, found.tgt_lang) != (target.src_lang, target.tgt_lang):
        raise WorkbenchError(
            f"a corpus named {target.name!r} ({found.src_lang}→{found.tgt_lang}) was created "
            "during the import"
        )
    return found.id


# ----------------------------------------------------------------------- staged imports


@dataclass(frozen=True)
class _Staging:
    """Where a staged import writes: a hidden staging corpus of its own, or, when the target
    corpus is empty, that corpus itself, hidden meanwhile (``adopted``); publishing is then
    un-hiding it, whatever the number of pairs."""

    id: int
    token: str
    adopted: bool


def _can_stage(engine: Engine) -> bool:
    """Staging is for SQLite files (an in-memory database imports in one transaction)."""
    database = engine.url.database
    return engine.dialect.name == "sqlite" and bool(database) and database != ":memory:"


def _staging_lock_path(engine: Engine, token: str) -> Path:
    """The lock file a live staged import holds, next to the SQLite file."""
    return Path(f"{engine.url.database}.import-{token}.lock")


def _import_staged(
    target: _Target,
    ahead: list[list[ParsedPair]],
    chunks: Iterator[list[ParsedPair]],
    validator: _Validator,
    gate: _ParserGate,
) -> tuple[int, int]:
    """Stage chunk by chunk (short transactions), then publish in one short transaction."""
    token = uuid.uuid4().hex
    lock_path = _staging_lock_path(get_engine(), token)
    parsed, added = validator.parsed, 0
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until we are done: we are alive
        staging: _Staging | None = None
        try:
            staging, existing = _begin_staging(target, token)
            moving = not staging.adopted and target.id is not None
            for chunk in _chain(ahead, chunks):
                with session_scope() as s:
                    conn = s.connection()
                    writer = _SqliteWriter(conn, gate)
                    try:
                        _check_staging(s, staging, target)
                        if moving:
                            chunk = _drop_existing(conn, target.id, chunk, parsed)
                        writer.insert(staging.id, chunk, existing + added + len(chunk))
                    except BaseException:
                        writer.abort()
                        raise
                    writer.finish()
                added += len(chunk)
            with session_scope() as s:
                cid, added = _publish(s, target, staging, added, validator)
            staging = None
            return cid, added
        except BaseException:
            if staging is not None:
                with contextlib.suppress(Exception):  # else the next import sweeps it
                    _drop_staging(staging)
            raise
        finally:
            lock_path.unlink(missing_ok=True)


def _begin_staging(target: _Target, token: str) -> tuple[_Staging, int]:
    """(where to stage, pairs the target holds now) — one short transaction."""
    with session_scope() as s:
        conn = s.connection()
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the emptiness check holds until commit
        if target.id is not None:
            corpus = s.get(Corpus, target.id)
            if corpus is None or corpus.import_token is not None:
                raise WorkbenchError(f"corpus {target.name!r} was deleted during the import")
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


def _check_staging(s: Any, staging: _Staging, target: _Target) -> Corpus:
    row = s.get(Corpus, staging.id)
    if row is None or row.import_token != staging.token:
        if staging.adopted:
            raise WorkbenchError(f"corpus {target.name!r} was deleted during the import")
        raise WorkbenchError("the import's staging area was removed; run the import again")
    return row


def _publish(
    s: Any, target: _Target, staging: _Staging, added: int, validator: _Validator
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
        return row.id, added
    cid = _publish_target(s, target)
    if cid is None:  # a new corpus: the staging corpus becomes it, pairs stay where they are
        row.name, row.import_token = target.name, None
        s.flush()
        return row.id, added
    cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
    conn.exec_driver_sql(f"PRAGMA cache_size = -{_SqliteWriter.CACHE_KIB}")  # 4x faster move
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
        validator.parsed._add(_in_corpus(validator.seen.get(content_hash, 0), pair_id))
    ids = [sid for sid, _h, _p in clashes]
    for start in range(0, len(ids), 900):
        conn.execute(delete(Pair).where(Pair.id.in_(ids[start : start + 900])))
    conn.execute(update(Pair).where(Pair.corpus_id == staging.id).values(corpus_id=cid))
    conn.execute(delete(Corpus).where(Corpus.id == staging.id))
    conn.exec_driver_sql(f"PRAGMA cache_size = {int(cache)}")
    return cid, added - len(ids)


def _drop_staging(staging: _Staging, batch: int | None = None) -> None:
    """Delete what an import staged, in short transactions (a million rows in one would hold
    the write lock as long as the import itself); then delete its staging corpus, or un-hide
    the corpus it adopted (all of whose pairs were staged: it was empty, and hidden since)."""
    batch = batch or IMPORT_CHUNK
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
    engine = get_engine()
    if not _can_stage(engine):
        return 0
    with session_scope() as s:
        staged = s.execute(
            select(Corpus.id, Corpus.name, Corpus.import_token).where(
                Corpus.import_token.is_not(None)
            )
        ).all()
    swept = 0
    for staging_id, name, token in staged:
        path = _staging_lock_path(engine, token)
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
    rows, the index entries and the trigger change together, and no other connection ever
    sees the trigger missing.
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
                yield "\t".join(_stored(v) for v in row) + "\n"
        elif fmt == "jsonl":
            for row in result:
                obj = dict(zip(_HEADER, (_stored(v) for v in row), strict=True))
                yield json.dumps(obj, ensure_ascii=False) + "\n"
        else:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(_HEADER)
            for row in result:
                writer.writerow([_stored(v) for v in row])
                if buf.tell() > 1 << 20:
                    yield buf.getvalue()
                    buf.seek(0)
                    buf.truncate()
            yield buf.getvalue()


def _stored(value: str | None) -> str:
    """``value`` as the text rule stores it. Text written since the rule is already in that
    form (the cheap ``isprintable`` test passes it through); older databases may hold NULs,
    controls or tabs, which would make the export impossible to import again."""
    value = value or ""
    return value if value.isprintable() else normalize_text(value)


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
