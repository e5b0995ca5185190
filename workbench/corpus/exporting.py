"""Exporting a corpus: every pair (id order, with split and note) as TSV, JSONL or CSV.

``EXPORT_FORMATS`` are the choices (tsv with a header, jsonl, csv); ``export_format`` picks one
from a file name, ``format_lines`` writes rows in it. A TSV export can be imported again as it
is. Rows are streamed from the database, never held whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Pair
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.text_rules import normalize_text
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope

EXPORT_FORMATS = ("tsv", "jsonl", "csv")
COLUMNS = ["source", "target", "split", "note"]


def export_pairs(corpus_id: CorpusRef, path: str | Path, fmt: str | None = None) -> int:
    """Write all pairs (id order) to ``path`` as TSV (with header), JSONL or CSV; the format
    comes from the extension when not given. Written atomically; returns the pair count."""
    fmt = export_format(path, fmt)
    path = Path(path)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        if path.is_dir():
            raise WorkbenchError(N_("{path} is a directory"), path=str(path))
        if not path.parent.exists():
            raise WorkbenchError(N_("folder does not exist: {path}"), path=str(path.parent))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        count = 0
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                for chunk in format_lines(_stored_rows(s, corpus.id), fmt):
                    fh.write(chunk)
                    count += chunk.count("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return count - (1 if fmt in ("tsv", "csv") else 0)


def export_bytes(corpus_id: CorpusRef, fmt: str = "tsv") -> bytes:
    """The export as bytes (for a download button)."""
    fmt = export_format(None, fmt)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        return "".join(format_lines(_stored_rows(s, corpus.id), fmt)).encode("utf-8")


def _stored_rows(s: Session, corpus_id: int) -> Iterator[list[str]]:
    """(source, target, split, note) of every pair, streamed in id order."""
    result = s.execute(
        select(Pair.source, Pair.target, Pair.split, Pair.note)
        .where(Pair.corpus_id == corpus_id)
        .order_by(Pair.id)
        .execution_options(yield_per=10_000)
    )
    for row in result:
        yield [_stored(v) for v in row]


def _stored(value: str | None) -> str:
    """``value`` as the text rule stores it. Text written since the rule is already in that
    form (the cheap ``isprintable`` test passes it through); older databases may hold NULs,
    controls or tabs, which would make the export impossible to import again."""
    value = value or ""
    return value if value.isprintable() else normalize_text(value)


def export_format(path: str | Path | None, fmt: str | None) -> str:
    """``fmt`` checked, or the format a file name asks for (default tsv)."""
    if fmt is None:
        if path is None:
            return "tsv"
        name = Path(path).name.lower()
        fmt = "jsonl" if name.endswith((".jsonl", ".ndjson", ".json")) else "tsv"
        fmt = "csv" if name.endswith(".csv") else fmt
    fmt = fmt.lower()
    if fmt not in EXPORT_FORMATS:
        raise WorkbenchError(
            N_("cannot export as {format!r}: use one of {formats}"),
            format=fmt,
            formats=", ".join(EXPORT_FORMATS),
        )
    return fmt


def format_lines(rows: Iterable[Iterable[str]], fmt: str) -> Iterator[str]:
    """(source, target, split, note) rows as text in an export format, in pieces of about a
    line (csv: about a megabyte); a tsv or csv starts with its header line."""
    if fmt == "tsv":
        yield "\t".join(COLUMNS) + "\n"
        for row in rows:
            yield "\t".join(row) + "\n"
    elif fmt == "jsonl":
        for row in rows:
            yield json.dumps(dict(zip(COLUMNS, row, strict=True)), ensure_ascii=False) + "\n"
    else:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(list(row))
            if buf.tell() > 1 << 20:
                yield buf.getvalue()
                buf.seek(0)
                buf.truncate()
        yield buf.getvalue()
