"""File formats of sentence pairs: the one registry (``FORMATS``) that the import (its readers),
the export (its writers), the CLI's ``--format`` choices, the import page and the help texts
all read.

Text in, text out: no database, no validation of the pairs themselves
(``workbench.corpus.import_checks`` does that). Files are read as text by ``text_files``
(UTF-8, optional BOM, optionally gzip-compressed, streamed, within its limits). Formats:

* ``tsv``      ``source<TAB>target[<TAB>split[<TAB>note]]``; a ``source<TAB>target…`` header
               line is recognised and skipped. This is also the export format.
* ``csv``      same columns, RFC 4180 quoting, optional header.
* ``jsonl``    one object per line: ``{"source": …, "target": …, "split"?: …, "note"?: …}``.
* ``aligned``  two plain-text files, line N of one is the translation of line N of the other.
* ``tatoeba``  the Tatoeba/ManyThings export ``english<TAB>other<TAB>attribution``: column 1
               is always English, column 2 the other language. Which column becomes the
               source follows the corpus languages (for a zh→en corpus: source = column 2,
               target = column 1); the attribution (CC-BY) is kept as the pair's note.
* ``tmx``      TMX 1.4b, the CAT tools' translation memories (read and written by
               ``workbench.corpus.tmx``): languages by ``xml:lang`` (zh-CN gives zh), inline
               codes dropped, their marked-up text kept; a record is a ``<tu>``, numbered by
               its line. The export carries who made each pair and when.
* ``xliff``    XLIFF 1.2 or 2.x, the CAT tools' bilingual files (``workbench.corpus.xliff``):
               the units with a source and a target (read only; ``xliff.fill_targets``
               translates such a file).

The XML formats are parsed safely (``xml_files``: lxml with translate-toolkit's settings,
a file declaring entities refused), and imported only on first use.

Adding a format is adding one ``Format`` to ``FORMATS``; a format the registry does not name
is refused (``format_named``), never read as another. (Over 450 lines on purpose: each
format's reader and writer sit here beside the registry entry that names them, so that one
file says all a format is; reading bytes as text lines is ``text_files``'.)

Two kinds of problems, in every format alike:

* **A malformed record** (a line with the wrong number of columns, invalid JSON or a JSON
  value that is not a pair, broken CSV quoting) is yielded as ``Malformed(line, reason)``:
  the import skips it and lists it in its report with the other invalid rows
  (``workbench.corpus.import_checks``), so one bad line never rejects the whole file.
* **A file that cannot be read as pairs at all** (one ``text_files`` refuses, aligned files
  of different length — every line after the missing one would be misaligned) raises
  ``WorkbenchError`` naming the line, when that line is reached.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from workbench.corpus.text_files import (
    SNIFF_BYTES,
    Data,
    file_role,
    head_text,
    numbered_lines,
    opened,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message, MessageId

COLUMNS = ("source", "target", "split", "note")  # of a row, and of an export's header
ENGLISH = {"en", "eng"}

RawRow = tuple[int, str, str, Any, Any]  # (line, source, target, split, note)


class ExportRow(NamedTuple):
    """A pair as an export writes it: its ``COLUMNS``, then who made and changed it, and when
    (filled for a format that asks, ``Format.provenance``)."""

    source: str
    target: str
    split: str
    note: str
    created: datetime | None = None
    created_by: str = ""
    changed: datetime | None = None
    changed_by: str = ""


class ExportInfo(NamedTuple):
    """What an export says of the corpus besides its pairs."""

    src_lang: str
    tgt_lang: str


Writer = Callable[[Iterable[ExportRow], ExportInfo], Iterator[str]]  # rows -> text chunks


class Malformed(NamedTuple):
    """A record that does not fit its format: skipped and reported, like an invalid row."""

    line: int  # the record's (first) line
    reason: str  # a Message, e.g. "expected 2 to 4 tab-separated columns (…), found 1"


Record = RawRow | Malformed
Columns = tuple[int, list[str]]  # (line, the record's columns) of a tsv or csv file


class Files(NamedTuple):
    """What a reader reads: the file, a two-file format's target file, the corpus' languages
    and what the messages call the file (``text_files.FILE_ROLES``)."""

    data: Data
    target: Data | None
    src_lang: str | None
    tgt_lang: str | None
    what: str = "file"

    def lines(self) -> Iterator[tuple[int, str]]:
        return numbered_lines(self.data, self.what)


@dataclass(frozen=True)
class Format:
    """One file format of sentence pairs, with everything the front ends and services need."""

    name: str
    description: MessageId  # one line, for the import page and help texts
    read: Callable[[Files], Iterator[Record]]
    # The file name endings that name it (``infer_format``; a ``.gz`` after them is looked
    # through). Two formats may share endings when ``recognise`` tells one by its first line.
    extensions: tuple[str, ...] = ()
    recognise: Callable[[str], bool] | None = None
    two_files: bool = False  # a source file and a target file (else one file of records)
    # A format of columns (tsv, csv): its records as (line, columns), header left out; what a
    # glossary file is read with (``read_columns``).
    columns: Callable[[Files], Iterator[Columns | Malformed]] | None = None
    # Exported formats: (source, target, split, note) rows as text, in pieces of about a line.
    write: Writer | None = None
    media_type: str | None = None  # of an export, for a download
    provenance: bool = False  # its writer wants each pair's authors and dates (ExportRow)


# -------------------------------------------------------------------------- readers


def _is_header(cols: list[str]) -> bool:
    return [c.strip().lower() for c in cols[:2]] == list(COLUMNS[:2])


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


def _tsv_columns(files: Files) -> Iterator[Columns]:
    for n, line in files.lines():
        if not line.strip():
            continue
        cols = line.split("\t")
        if n == 1 and _is_header(cols):
            continue
        yield n, cols


def _rows_tsv(files: Files) -> Iterator[Record]:
    for n, cols in _tsv_columns(files):
        yield _row(n, cols, tabs=True)


def _csv_columns(files: Files) -> Iterator[Columns | Malformed]:
    where = {"start": 0, "last": 0}  # the first and the last line of the record being read

    def feed() -> Iterator[str]:
        for n, line in files.lines():
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
        yield n, cols


def _rows_csv(files: Files) -> Iterator[Record]:
    for record in _csv_columns(files):
        yield record if isinstance(record, Malformed) else _row(*record, tabs=False)


def _rows_jsonl(files: Files) -> Iterator[Record]:
    for n, line in files.lines():
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


def _rows_aligned(files: Files) -> Iterator[Record]:
    assert files.target is not None  # (``read_rows`` checks it)
    src_lines = numbered_lines(files.data, "source file", skip_blank=False)
    tgt_lines = numbered_lines(files.target, "target file", skip_blank=False)
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


def _is_tatoeba(first_line: str) -> bool:
    """A Tatoeba export's first line: three columns, the third an attribution."""
    cols = first_line.split("\t")
    return len(cols) == 3 and ("tatoeba" in cols[2].lower() or "cc-by" in cols[2].lower())


def _rows_tatoeba(files: Files) -> Iterator[Record]:
    src_lang, tgt_lang = files.src_lang, files.tgt_lang
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
    for n, line in files.lines():
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


# -------------------------------------------------------------------------- writers


def _write_tsv(rows: Iterable[ExportRow], _: ExportInfo) -> Iterator[str]:
    yield "\t".join(COLUMNS) + "\n"
    for row in rows:
        yield "\t".join(row[:4]) + "\n"


def _write_jsonl(rows: Iterable[ExportRow], _: ExportInfo) -> Iterator[str]:
    for row in rows:
        yield json.dumps(dict(zip(COLUMNS, row[:4], strict=True)), ensure_ascii=False) + "\n"


def _write_csv(rows: Iterable[ExportRow], _: ExportInfo) -> Iterator[str]:
    """A header, then the rows, in pieces of about a megabyte."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(row[:4])
        if buf.tell() > 1 << 20:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def _rows_tmx(files: Files) -> Iterator[Record]:
    from workbench.corpus.tmx import read_tmx  # lxml and translate-toolkit on first use

    return read_tmx(files)


def _write_tmx(rows: Iterable[ExportRow], info: ExportInfo) -> Iterator[str]:
    from workbench.corpus.tmx import write_tmx

    return write_tmx(rows, info)


def _rows_xliff(files: Files) -> Iterator[Record]:
    from workbench.corpus.xliff import read_xliff

    return read_xliff(files)


# ------------------------------------------------------------------------- registry

_TEXT_ENDINGS = ("tsv", "tab", "txt")
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "tsv",
            N_("source ⇥ target [⇥ split [⇥ note]] per line; a header line is optional"),
            _rows_tsv,
            extensions=_TEXT_ENDINGS,
            columns=_tsv_columns,
            write=_write_tsv,
            media_type="text/tab-separated-values",
        ),
        Format(
            "csv",
            N_("source, target [, split [, note]] with standard quoting; a header is optional"),
            _rows_csv,
            extensions=("csv",),
            columns=_csv_columns,
            write=_write_csv,
            media_type="text/csv",
        ),
        Format(
            "jsonl",
            N_('one JSON object per line: {"source": …, "target": …, "split"?: …, "note"?: …}'),
            _rows_jsonl,
            extensions=("jsonl", "ndjson", "json"),
            write=_write_jsonl,
            media_type="application/jsonl",
        ),
        Format(
            "aligned",
            N_("two plain-text files: line N of one translates line N of the other"),
            _rows_aligned,
            two_files=True,  # chosen by giving a target file, whatever the names
        ),
        Format(
            "tatoeba",
            N_("the Tatoeba export: English ⇥ other language ⇥ attribution"),
            _rows_tatoeba,
            extensions=_TEXT_ENDINGS,
            recognise=_is_tatoeba,
        ),
        Format(
            "tmx",
            N_("a TMX 1.4 translation memory of a CAT tool; languages by xml:lang, tags dropped"),
            _rows_tmx,
            extensions=("tmx",),
            write=_write_tmx,
            media_type="application/x-tmx+xml",
            provenance=True,
        ),
        Format(
            "xliff",
            N_("an XLIFF 1.2 or 2.x file of a CAT tool: its units with a source and a target"),
            _rows_xliff,
            extensions=("xlf", "xliff"),
        ),
    )
}  # in the order the import page lists them
COLUMN_FORMATS = tuple(name for name, f in FORMATS.items() if f.columns is not None)
TWO_FILE_FORMATS = tuple(name for name, f in FORMATS.items() if f.two_files)


def file_types(names: Iterable[str]) -> list[str]:
    """The file name endings of these formats, each once, and ``gz`` (any of them compressed):
    what an upload of them may be called."""
    return [*dict.fromkeys(ext for name in names for ext in FORMATS[name].extensions), "gz"]


FILE_TYPES = file_types(FORMATS)  # an upload of pairs


def format_named(name: str) -> Format:
    """The format called ``name`` (any case); else a one-line ``WorkbenchError`` naming the
    formats there are."""
    key = name.lower()
    if key not in FORMATS:
        raise WorkbenchError(
            N_("unknown format {format!r}: use one of {formats}"),
            format=key,
            formats=", ".join(FORMATS),
        )
    return FORMATS[key]


def file_extension(path: str | Path) -> str:
    """A file name's last ending, lower case, without its dot ("" for none)."""
    name = Path(path).name.lower()
    return name.rsplit(".", 1)[-1] if "." in name else ""


def infer_format(path: str | Path, head: bytes = b"") -> str:
    """The format a file name names (``Format.extensions``; a ``.gz`` suffix is looked
    through); of two formats that share an ending, the one whose ``recognise`` knows the
    first line of ``head`` (a Tatoeba export is a ``.tsv`` too)."""
    name = Path(path).name
    ext = file_extension(name[:-3] if name.lower().endswith(".gz") else name)
    candidates = [f for f in FORMATS.values() if ext in f.extensions]
    if not candidates:
        raise WorkbenchError(
            N_("cannot tell the format of {name!r}: pass --format ({formats})"),
            name=name,
            formats="|".join(FORMATS),
        )
    recognisers = [f for f in candidates if f.recognise is not None]
    if recognisers:
        first_line = head_text(head).split("\n", 1)[0]
        recognised = [f for f in recognisers if f.recognise(first_line)]  # type: ignore[misc]
        if recognised:
            return recognised[0].name
    return next(f for f in candidates if f.recognise is None).name


def read_rows(
    data: Data,
    fmt: str | None,
    tgt_data: Data | None,
    src_lang: str | None,
    tgt_lang: str | None,
) -> Iterator[Record]:
    """The records of a file, parsed lazily as it is read: a pair's row, or ``Malformed``
    for a record that does not fit the format; a file that cannot be read raises
    ``WorkbenchError`` when its line is reached (the format is decided up front, and one
    the registry does not name is refused)."""
    chosen = _format_of(data, fmt, tgt_data)
    if chosen.two_files and tgt_data is None:
        raise WorkbenchError(
            N_("the {format} format needs a target file (--tgt-file)"), format=chosen.name
        )
    if not chosen.two_files and tgt_data is not None:
        raise WorkbenchError(
            N_("a target file only makes sense with --format {formats}, not {format}"),
            formats="|".join(TWO_FILE_FORMATS),
            format=chosen.name,
        )
    return chosen.read(Files(data, tgt_data, src_lang, tgt_lang))


def read_columns(data: Data, fmt: str, what: str = "file") -> Iterator[Columns | Malformed]:
    """The records of a file in a format of columns (``COLUMN_FORMATS``) as (line, columns),
    however many columns each has, its header left out: how a glossary file is read, by the
    rules of the pairs' import (``what`` names the file in messages)."""
    chosen = FORMATS.get(fmt.lower())
    if chosen is None or chosen.columns is None:
        raise WorkbenchError(
            N_("{what} {format!r}: not a format of columns, use one of {formats}"),
            what=file_role(what),
            format=fmt,
            formats=", ".join(COLUMN_FORMATS),
        )
    return chosen.columns(Files(data, None, None, None, what))


def _format_of(data: Data, fmt: str | None, tgt_data: Data | None) -> Format:
    if fmt is not None:
        return format_named(fmt)
    if tgt_data is not None:
        return FORMATS[TWO_FILE_FORMATS[0]]
    with opened(data, "file") as (stream, name):
        if name is None:
            raise WorkbenchError(
                N_("format is required for uploaded data ({formats})"),
                formats="|".join(FORMATS),
            )
        return FORMATS[infer_format(name, stream.read(SNIFF_BYTES))]
