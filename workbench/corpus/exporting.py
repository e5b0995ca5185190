"""Exporting a corpus: every pair (id order, with split and note) as TSV, CSV, JSONL or TMX.

``EXPORT_FORMATS`` are the choices: the formats of the registry (``formats.FORMATS``) that
have a writer (tsv and csv with a header, jsonl, tmx); ``export_format`` picks one from a file
name (an ending it does not know is refused). An export can be imported again as it is. Rows
are streamed from the database, never held whole; a TMX export also reads who made and
changed each pair from the change history (``history.pair_authors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.tables import Pair
from workbench import output_files
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.formats import FORMATS, ExportInfo, ExportRow, Format, file_extension
from workbench.corpus.text_rules import normalize_text
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history

EXPORT_FORMATS = tuple(name for name, f in FORMATS.items() if f.write is not None)


def export_pairs(corpus_id: CorpusRef, path: str | Path, fmt: str | None = None) -> int:
    """Write all pairs (id order) to ``path`` as TSV (with header), JSONL, CSV or TMX; the
    format comes from the extension when not given. Written by ``output_files.replacing``
    (whole or not at all, never over the workbench's own files); returns the pair count."""
    output_files.checked_target(path)  # refused before the corpus is read
    chosen = export_format(path, fmt)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows = _Counted(_stored_rows(s, corpus.id, chosen.provenance))
        with output_files.replacing(path, binary=False) as fh:
            for chunk in chosen.write(rows, ExportInfo(corpus.src_lang, corpus.tgt_lang)):  # type: ignore[misc]
                fh.write(chunk)
    return rows.count


def export_bytes(corpus_id: CorpusRef, fmt: str = "tsv") -> bytes:
    """The export as bytes (for a download button)."""
    chosen = export_format(None, fmt)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows = _stored_rows(s, corpus.id, chosen.provenance)
        info = ExportInfo(corpus.src_lang, corpus.tgt_lang)
        return "".join(chosen.write(rows, info)).encode("utf-8")  # type: ignore[misc]


class _Counted:
    """Rows that count themselves as they pass (a header is not a row)."""

    def __init__(self, rows: Iterable[ExportRow]) -> None:
        self.rows, self.count = rows, 0

    def __iter__(self) -> Iterator[ExportRow]:
        for row in self.rows:
            self.count += 1
            yield row


def _stored_rows(s: Session, corpus_id: int, provenance: bool) -> Iterator[ExportRow]:
    """Every pair, streamed in id order; with ``provenance``, who made and changed it, when."""
    authors = history.pair_authors(s, corpus_id) if provenance else None
    result = s.execute(
        select(Pair.source, Pair.target, Pair.split, Pair.note, Pair.id)
        .add_columns(Pair.created_at, Pair.updated_at)
        .where(Pair.corpus_id == corpus_id)
        .order_by(Pair.id)
        .execution_options(yield_per=10_000)
    )
    for source, target, split, note, pid, created, updated in result:
        columns = (_stored(source), _stored(target), _stored(split), _stored(note))
        if authors is None:
            yield ExportRow(*columns)
        else:
            made_by, changed_by = authors.of(pid)
            yield ExportRow(*columns, created, made_by, updated, changed_by)


def _stored(value: str | None) -> str:
    """``value`` as the text rule stores it. Text written since the rule is already in that
    form (the cheap ``isprintable`` test passes it through); older databases may hold NULs,
    controls or tabs, which would make the export impossible to import again."""
    value = value or ""
    return value if value.isprintable() else normalize_text(value)


def export_format(path: str | Path | None, fmt: str | None) -> Format:
    """The exported format ``fmt`` (checked), or the one a file name's ending asks for
    (``Format.extensions``); any other ending is refused rather than guessed, so ``o.xlf``
    never silently becomes a TSV file."""
    if fmt is None:
        ext = file_extension(path) if path is not None else ""
        fmt = next((n for n in EXPORT_FORMATS if ext in FORMATS[n].extensions), None)
        if fmt is None:
            raise WorkbenchError(
                N_(
                    "cannot tell the export format from the name {path}: end it in {endings} "
                    "or name the format (--format)"
                ),
                path=str(path),
                endings=", ".join(f".{FORMATS[n].extensions[0]}" for n in EXPORT_FORMATS),
            )
    chosen = FORMATS.get(fmt.lower())
    if chosen is None or chosen.write is None:
        raise WorkbenchError(
            N_("cannot export as {format!r}: use one of {formats}"),
            format=fmt.lower(),
            formats=", ".join(EXPORT_FORMATS),
        )
    return chosen
