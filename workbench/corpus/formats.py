"""File formats of sentence pairs, read as rows.

Pure parsing: no database, no validation of the pairs themselves (``workbench.corpus.import_checks``
does that). Formats (UTF-8, optional BOM, optionally gzip-compressed):

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
decompress to at most ``MAX_INPUT_BYTES``, checked before the first row is parsed (a gzip file
is decompressed once just to count its bytes), and no line may be longer than
``MAX_LINE_BYTES``: a gzip "bomb" or a binary file is refused early, by name, instead of
exhausting memory or spending minutes on rows.
Two kinds of problems, in every format alike:

* **A malformed record** (a line with the wrong number of columns, invalid JSON or a JSON
  value that is not a pair, broken CSV quoting) is yielded as ``Malformed(line, reason)``:
  the import skips it and lists it in its report with the other invalid rows
  (``workbench.corpus.import_checks``), so one bad line never rejects the whole file.
* **A file that cannot be read as pairs at all** (not UTF-8, a NUL byte, not gzip although
  named ``.gz``, over the limits, aligned files of different length — every line after the
  missing one would be misaligned) raises ``WorkbenchError`` naming the line, when that
  line is reached.

Writing pairs in a format is ``workbench.corpus.exporting``'s.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

FORMATS = ("tsv", "csv", "jsonl", "aligned", "tatoeba")
FORMAT_DESCRIPTIONS = {  # one line each (message ids), for the import page and help texts
    "tsv": N_("source ⇥ target [⇥ split [⇥ note]] per line; a header line is optional"),
    "csv": N_("source, target [, split [, note]] with standard quoting; a header is optional"),
    "jsonl": N_('one JSON object per line: {"source": …, "target": …, "split"?: …, "note"?: …}'),
    "aligned": N_("two plain-text files: line N of one translates line N of the other"),
    "tatoeba": N_("the Tatoeba export: English ⇥ other language ⇥ attribution"),
}
# The file name endings ``infer_format`` knows (a ``.gz`` after them is looked through).
EXTENSIONS = {"jsonl": ("jsonl", "ndjson", "json"), "csv": ("csv",), "tsv": ("tsv", "tab", "txt")}
FILE_TYPES = [ext for exts in EXTENSIONS.values() for ext in exts] + ["gz"]
MAX_INPUT_BYTES = 1 << 30  # decompressed size of one file (a million pairs is ~150 MB)
MAX_LINE_BYTES = 1 << 20  # one line; a pair's sides are at most MAX_CHARS characters each
ENGLISH = {"en", "eng"}
# What the messages call a file they read, by the ``what`` of ``sentence_lines`` (message ids).
FILE_ROLES = {
    "file": N_("file"),
    "source file": N_("source file"),
    "target file": N_("target file"),
    "glossary file": N_("glossary file"),
}
_BLOCK = 1 << 20  # bytes read at a time

Data = bytes | str | Path | IO[bytes]  # content, a path, or an open binary file (an upload)


def infer_format(path: str | Path, head: bytes = b"") -> str:
    """Format from the file name (``.tsv``, ``.csv``, ``.jsonl``/``.ndjson``, ``.txt``; a
    ``.gz`` suffix is looked through); a 3-column TSV whose third column is a Tatoeba
    attribution is ``tatoeba``."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    if ext in EXTENSIONS["jsonl"]:
        return "jsonl"
    if ext in EXTENSIONS["csv"]:
        return "csv"
    if ext in EXTENSIONS["tsv"]:
        first = _head_text(head).split("\n", 1)[0]
        cols = first.split("\t")
        if len(cols) == 3 and ("tatoeba" in cols[2].lower() or "cc-by" in cols[2].lower()):
            return "tatoeba"
        return "tsv"
    raise WorkbenchError(
        N_("cannot tell the format of {name!r}: pass --format ({formats})"),
        name=Path(path).name,
        formats="|".join(FORMATS),
    )


def _head_text(head: bytes) -> str:
    """The readable start of a (possibly gzip-compressed) file, for sniffing only."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 65536)
        except zlib.error as exc:
            raise WorkbenchError(N_("not a valid gzip file ({error})"), error=str(exc)) from None
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
    path, role = Path(data), _role(what)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise WorkbenchError(N_("{what} not found: {path}"), what=role, path=str(path)) from None
    except IsADirectoryError:
        raise WorkbenchError(
            N_("{what} is a directory: {path}"), what=role, path=str(path)
        ) from None
    except OSError as exc:
        raise WorkbenchError(
            N_("cannot read {path}: {error}"), path=str(path), error=exc.strerror
        ) from None
    with fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise WorkbenchError(
                N_("{what} is not a regular file: {path}"), what=role, path=str(path)
            )
        yield fh, path.name


def _role(what: str) -> str:
    """A file's role as a message (``FILE_ROLES``), so that a page translates it."""
    return Message(FILE_ROLES[what]) if what in FILE_ROLES else what


def _blocks(stream: IO[bytes], name: str | None, what: str) -> Iterator[bytes]:
    """The decompressed bytes of ``stream`` in blocks, at most ``MAX_INPUT_BYTES`` in all.

    The size is known before the first block: a plain file's from its end, a gzip file's by
    decompressing it once without parsing anything (a few seconds for the largest allowed),
    so that a file over the cap never costs the minutes that parsing and checking its rows
    would (a 4.7 MB "bomb" decompressing to 1.5 GiB took 566 s of CPU before it was refused).
    """
    role = _role(what)
    magic = stream.read(2)
    compressed = magic == b"\x1f\x8b"
    if not compressed and name and name.lower().endswith(".gz"):
        raise WorkbenchError(
            N_("{what} {name!r} is not a gzip file, although its name ends in .gz"),
            what=role,
            name=name,
        )
    if compressed:
        stream.seek(0)
        for _ in _capped(gzip.GzipFile(fileobj=stream, mode="rb"), role, compressed):
            pass
    elif stream.seek(0, os.SEEK_END) > MAX_INPUT_BYTES:
        raise _too_large(role, compressed)
    stream.seek(0)
    source: IO[bytes] = gzip.GzipFile(fileobj=stream, mode="rb") if compressed else stream
    yield from _capped(source, role, compressed)  # (a file may grow while it is read)


def _capped(source: IO[bytes], role: str, compressed: bool) -> Iterator[bytes]:
    """The blocks of ``source``; ``WorkbenchError`` past ``MAX_INPUT_BYTES`` or for a read
    that fails (gzip's errors among them)."""
    total = 0
    size = min(_BLOCK, MAX_LINE_BYTES)  # so a line inside a block is never over the limit
    while True:
        try:
            block = source.read(size)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise WorkbenchError(
                N_("{what} is not a valid gzip file ({error})"), what=role, error=str(exc)
            ) from None
        except OSError as exc:
            raise WorkbenchError(
                N_("cannot read {what}: {error}"), what=role, error=exc.strerror or str(exc)
            ) from None
        if not block:
            return
        total += len(block)
        if total > MAX_INPUT_BYTES:
            raise _too_large(role, compressed)
        yield block


def _too_large(role: str, compressed: bool) -> WorkbenchError:
    return WorkbenchError(
        N_("{what} is larger than {size} uncompressed: split it into smaller files")
        if compressed
        else N_("{what} is larger than {size}: split it into smaller files"),
        what=role,
        size=_size(MAX_INPUT_BYTES),
    )


def _size(n: int) -> Message:
    if n >= 1 << 20:
        return Message(N_("{n} MiB"), n=n >> 20)
    return Message(N_("{n} bytes"), n=f"{n:,}")


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
                    N_("{what} line {line}: longer than {size} (is this a text file?)"),
                    what=_role(what),
                    line=done + 1,
                    size=_size(MAX_LINE_BYTES),
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


def sentence_lines(data: Data, what: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, line) of a monolingual file: one sentence per line, blank lines left
    out (a pool of sentences to translate; the same reading rules as every import)."""
    return _lines(data, what)


def _decode(data: bytes, lines_before: int, what: str, first: bool) -> str:
    try:
        text = data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before + data.count(b"\n", 0, exc.start) + 1
        raise WorkbenchError(
            N_("{what} line {line}: not valid UTF-8 (byte 0x{byte}); save the file as UTF-8"),
            what=_role(what),
            line=line,
            byte=f"{data[exc.start]:02x}",
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = lines_before + text.count("\n", 0, nul) + 1
        raise WorkbenchError(
            N_("{what} line {line}: contains a NUL byte (is this a text file?)"),
            what=_role(what),
            line=line,
        )
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


class Malformed(NamedTuple):
    """A record that does not fit its format: skipped and reported, like an invalid row."""

    line: int  # the record's (first) line
    reason: str  # a Message, e.g. "expected 2 to 4 tab-separated columns (…), found 1"


Record = RawRow | Malformed


def _row(n: int, cols: list[str], tabs: bool) -> Record:
    """A row of the tsv (``tabs``) or csv columns (source, target[, split[, note]])."""
    if not 2 <= len(cols) <= 4:
        return Malformed(
            n,
            Message(
                N_("expected 2 to 4 tab-separated columns (source, target, split, note), found {n}")
                if tabs
                else N_(
                    "expected 2 to 4 comma-separated columns (source, target, split, note), "
                    "found {n}"
                ),
                n=len(cols),
            ),
        )
    cols += [""] * (4 - len(cols))
    return n, cols[0], cols[1], cols[2], cols[3]


def _rows_tsv(lines: Iterator[tuple[int, str]]) -> Iterator[Record]:
    for n, line in lines:
        if not line.strip():
            continue
        cols = line.split("\t")
        if n == 1 and _is_header(cols):
            continue
        yield _row(n, cols, tabs=True)


def _rows_csv(lines: Iterator[tuple[int, str]]) -> Iterator[Record]:
    where = {"start": 0, "last": 0}  # the first and the last line of the record being read

    def feed() -> Iterator[str]:
        for n, line in lines:
            where["start"] = where["start"] or n
            where["last"] = n
            yield line + "\n"

    reader = csv.reader(feed(), strict=True)
    first = True
    while True:
        where["start"] = 0
        try:
            cols = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # the reader goes on with the next record
            start, last = where["start"] or where["last"], where["last"]
            reason = (
                Message(
                    N_("malformed CSV ({error}); lines {start}–{last} were read as one record"),
                    error=str(exc),
                    start=start,
                    last=last,
                )
                if last > start
                else Message(N_("malformed CSV ({error})"), error=str(exc))
            )
            yield Malformed(start, reason)
            first = False
            continue
        n = where["last"]
        if not cols or all(not c.strip() for c in cols):
            first = False
            continue
        if first and _is_header(cols):
            first = False
            continue
        first = False
        yield _row(n, cols, tabs=False)


def _rows_jsonl(lines: Iterator[tuple[int, str]]) -> Iterator[Record]:
    for n, line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            yield Malformed(n, Message(N_("invalid JSON ({error})"), error=str(exc)))
            continue
        problem = _json_problem(obj)
        if problem:
            yield Malformed(n, problem)
            continue
        yield n, obj["source"], obj["target"], obj.get("split"), obj.get("note")


def _json_problem(obj: Any) -> Message | None:
    """Why a JSON value is not a pair record; None when it is one."""
    if not isinstance(obj, dict):
        return Message(N_("expected a JSON object with source and target"))
    for key in ("source", "target"):
        if key not in obj:
            return Message(N_("missing key {key!r}"), key=key)
        if not isinstance(obj[key], str):
            return Message(N_("{key!r} must be a string"), key=key)
    for key in ("split", "note"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            return Message(N_("{key!r} must be a string"), key=key)
    return None


def _rows_aligned(src: Data, tgt: Data) -> Iterator[Record]:
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
            N_(
                "line {line}: aligned files differ in length (source has {source} lines, "
                "target has {target})"
            ),
            line=n + 1,
            source=src_total,
            target=tgt_total,
        )


def _rows_tatoeba(
    lines: Iterator[tuple[int, str]], src_lang: str | None, tgt_lang: str | None
) -> Iterator[Record]:
    src_is_en = (src_lang or "en").lower() in ENGLISH
    tgt_is_en = (tgt_lang or "").lower() in ENGLISH
    if not src_is_en and not tgt_is_en:
        raise WorkbenchError(
            N_(
                "Tatoeba files pair English (column 1) with another language (column 2), but "
                "the corpus is {src}→{tgt}"
            ),
            src=src_lang,
            tgt=tgt_lang,
        )
    for n, line in lines:
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            yield Malformed(
                n,
                Message(
                    N_(
                        "expected 3 tab-separated columns (english, translation, attribution), "
                        "found {n}"
                    ),
                    n=len(cols),
                ),
            )
            continue
        english, other, attribution = cols
        if src_is_en:
            yield n, english, other, None, attribution
        else:
            yield n, other, english, None, attribution


def read_rows(
    data: Data,
    fmt: str | None,
    tgt_data: Data | None,
    src_lang: str | None,
    tgt_lang: str | None,
) -> Iterator[Record]:
    """The records of a file, parsed lazily as it is read: a pair's row, or ``Malformed``
    for a record that does not fit the format; a file that cannot be read raises
    ``WorkbenchError`` when its line is reached (the format is decided up front)."""
    fmt = _format_of(data, fmt, tgt_data)
    if fmt == "aligned":
        if tgt_data is None:
            raise WorkbenchError(N_("the aligned format needs a target file (--tgt-file)"))
        return _rows_aligned(data, tgt_data)
    if tgt_data is not None:
        raise WorkbenchError(
            N_("a target file only makes sense with --format aligned, not {format}"), format=fmt
        )
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
                raise WorkbenchError(
                    N_("format is required for uploaded data ({formats})"),
                    formats="|".join(FORMATS),
                )
            fmt = infer_format(name, stream.read(65536))
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise WorkbenchError(
            N_("unknown format {format!r}: use one of {formats}"),
            format=fmt,
            formats=", ".join(FORMATS),
        )
    return fmt
