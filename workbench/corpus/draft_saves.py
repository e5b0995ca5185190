"""Saving a grid's draft (``workbench.corpus.drafts``), and the edit conflicts a save holds back.

``apply_pairs`` and ``apply_glossary`` write the edits and forget the draft in one
transaction, so a refused save keeps the draft whole.

Edit conflicts, as a shared document has them: a draft keeps the revision each edited or
deleted row had when it was edited (``Draft.bases``; ``db.tables.Pair.revision``, raised by
every write). A save writes the edits whose rows are unchanged since and holds back the others
(``Conflict``: the row now, who changed it and when, and the draft's version), which stay in
the draft until the user keeps theirs, keeps their own or merges (``resolve``): the rest of a
save goes through, as in a shared document, and nothing typed is lost on either side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.tables import Corpus, GlossaryTerm, Pair, TableDraft
from workbench.corpus import glossary, pairs
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.drafts import (
    COLUMNS,
    Draft,
    blank,
    check,
    filled_cells,
    forget_stored,
    new_browser_key,
    refuse_incomplete,
    save,
    stored_key,
    stored_row,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history
from workbench.team.access import Permission, require


@dataclass(frozen=True)
class Conflict:
    """An edit or deletion of a draft whose row was changed since it was made (its revision
    differs, or the row is gone): held back, never written over the other change."""

    row_id: Any
    theirs: dict[str, Any] | None  # the row now, in the grid's columns (None: deleted)
    yours: dict[str, Any] | None  # the row as the draft would write it (None: it deletes it)
    by: str | None  # who changed it since (the history's actor), when recorded
    at: datetime | None
    revision: int | None  # the row's revision now (None: deleted)


def _stored(s: Session, corpus: Corpus, table: str, ids: Sequence[Any]) -> dict[Any, tuple]:
    """row id -> (revision, cells in the grid's columns) of the rows ``ids`` that exist."""
    out: dict[Any, tuple] = {}
    for start in range(0, len(ids), 900):
        chunk = list(ids[start : start + 900])
        if table == "pairs":
            rows = s.execute(
                select(
                    Pair.id, Pair.revision, Pair.source, Pair.target, Pair.split, Pair.note
                ).where(Pair.corpus_id == corpus.id, Pair.id.in_([int(i) for i in chunk]))
            )
            out |= {r[0]: (r[1], dict(zip(COLUMNS["pairs"], r[2:], strict=True))) for r in rows}
        else:
            rows = s.execute(
                select(
                    GlossaryTerm.source_term, GlossaryTerm.revision, GlossaryTerm.target_term
                ).where(GlossaryTerm.corpus_id == corpus.id, GlossaryTerm.source_term.in_(chunk))
            )
            out |= {
                r[0]: (r[1], dict(zip(COLUMNS["glossary"], (r[0], r[2]), strict=True)))
                for r in rows
            }
    return out


def revisions(corpus_id: CorpusRef, table: str, ids: Sequence[Any]) -> dict[Any, int]:
    """row id -> revision of the rows a grid shows: what an edit made in it is based on."""
    check(new_browser_key(), table)
    with session_scope() as s:
        stored = _stored(s, find(s, corpus_id), table, list(ids))
    return {rid: rev for rid, (rev, _cells) in stored.items()}


def _cells_of(table: str, values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A recorded row (``history``) in the grid's columns."""
    if not values:
        return None
    if table == "pairs":
        return {c: values.get(c) for c in COLUMNS["pairs"]}
    src, tgt = COLUMNS["glossary"]
    return {src: values.get("source_term"), tgt: values.get("target_term")}


def _find_conflicts(
    s: Session, corpus: Corpus, table: str, draft: Draft
) -> tuple[list[Conflict], set[Any]]:
    """The draft's conflicts, and the rows it deletes that are gone already (nothing to do)."""
    based = [rid for rid in draft.bases if rid in draft.edited or rid in draft.deleted]
    now = _stored(s, corpus, table, based)
    stale = [rid for rid in based if rid not in now or now[rid][0] != draft.bases[rid]]
    gone = {rid for rid in stale if rid not in now and rid in draft.deleted}
    stale = [rid for rid in stale if rid not in gone]
    if not stale:
        return [], gone
    key = "id" if table == "pairs" else "source_term"
    history_table = "pairs" if table == "pairs" else "glossary_terms"
    writes = history.last_writes(s, corpus.id, history_table, stale, key=key)
    out = []
    for rid in stale:
        write = writes.get(rid)
        theirs = now[rid][1] if rid in now else None
        before = theirs or _cells_of(table, write.was if write else None) or {}
        yours = None if rid in draft.deleted else {**before, **draft.edited[rid]}
        out.append(
            Conflict(
                rid,
                theirs,
                yours,
                write.actor if write else None,
                write.at if write else None,
                now[rid][0] if rid in now else None,
            )
        )
    return out, gone


def conflicts(browser_key: str, corpus_id: CorpusRef, table: str) -> list[Conflict]:
    """The edits of a grid's draft whose rows were changed since (by another tab, another
    person, an undo …): what the page asks the user to resolve."""
    check(browser_key, table)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        row = stored_row(s, browser_key, corpus.id, table)
        return _find_conflicts(s, corpus, table, Draft.from_payload(row.payload if row else None))[
            0
        ]


KEEP = ("theirs", "mine", "merged")  # how a conflict is resolved


def resolve(
    browser_key: str,
    corpus_id: CorpusRef,
    table: str,
    row_id: Any,
    keep: str,
    cells: Mapping[str, Any] | None = None,
) -> None:
    """Resolve one conflict of a grid's draft: keep ``theirs`` (the draft forgets its edit),
    keep ``mine`` or a ``merged`` row (``cells``): the draft's edit is then based on the row
    as it is now, and the next save writes it; a row deleted since comes back as a new row.
    Nothing is written to the row itself here: the user saves the draft."""
    check(browser_key, table)
    require(Permission.EDIT)
    if keep not in KEEP:
        raise WorkbenchError(
            N_("keep one of {choices}, not {keep!r}"), choices=", ".join(KEEP), keep=keep
        )
    with session_scope() as s:
        corpus = find(s, corpus_id)
        row = stored_row(s, browser_key, corpus.id, table)
        draft = Draft.from_payload(row.payload if row else None)
        found = {c.row_id: c for c in _find_conflicts(s, corpus, table, draft)[0]}
        conflict = found.get(row_id)
        if conflict is None:
            raise WorkbenchError(N_("no conflict on row {id} to resolve"), id=row_id)
        rest = draft.without({row_id})
        final = conflict.yours if keep == "mine" else dict(cells or {})
        if keep == "merged" and not any(not blank(v) for v in final.values()):
            raise WorkbenchError(N_("a merged row needs its text"))
        if keep == "theirs":
            draft = rest
        elif conflict.theirs is None:  # deleted since: yours comes back as a new row
            draft = replace(rest, added=(*rest.added, dict(final or {}))) if final else rest
        elif final is None:  # you deleted it: delete it as it is now
            draft = replace(
                rest,
                deleted=(*rest.deleted, row_id),
                bases={**rest.bases, row_id: conflict.revision},
            )
        else:
            changed = {k: v for k, v in final.items() if k in COLUMNS[table]}
            draft = replace(
                rest,
                edited={**rest.edited, row_id: changed},
                bases={**rest.bases, row_id: conflict.revision},
            )
    save(browser_key, corpus.id, table, draft)


@dataclass(frozen=True)
class Saved:
    """What a save did: the write's result (the pairs: ``pairs.EditResult``; the glossary: how
    many terms it holds) and the edits it held back (they stay in the draft)."""

    result: Any
    conflicts: tuple[Conflict, ...] = ()


def _keep_only(
    s: Session, browser_key: str, corpus: Corpus, table: str, draft: Draft, held: list[Conflict]
) -> None:
    """After a save: the draft keeps the held-back edits alone, or is forgotten."""
    forget_stored(s, browser_key, corpus, table)
    if held:
        s.add(
            TableDraft(
                browser_key=stored_key(browser_key),
                corpus_id=corpus.id,
                table_kind=table,
                payload=draft.only({c.row_id for c in held}).payload(),
            )
        )


def _to_write(
    s: Session, browser_key: str, corpus: Corpus, table: str
) -> tuple[Draft, list[Conflict], Draft]:
    """The stored draft, its edits held back (conflicts) and what a save writes now; a draft
    with a half-filled new row is refused whole."""
    row = stored_row(s, browser_key, corpus.id, table)
    draft = Draft.from_payload(row.payload if row else None)
    refuse_incomplete(draft, table, corpus)
    held, gone = _find_conflicts(s, corpus, table, draft)
    return draft, held, draft.without({c.row_id for c in held} | gone)


def apply_pairs(browser_key: str, corpus_id: CorpusRef) -> Saved:
    """Write the pairs table's draft (``pairs.edit_pairs``: validated whole) and forget it,
    in one transaction; on any refusal nothing is written and the draft stays. Edits of
    pairs changed since are held back (``Saved.conflicts``) and stay in the draft."""
    check(browser_key, "pairs")
    require(Permission.EDIT)  # the write itself is a building block that checks nothing
    try:
        with session_scope() as s:
            corpus = find(s, corpus_id)
            draft, held, write = _to_write(s, browser_key, corpus, "pairs")
            result = pairs.edit_pairs(
                s,
                corpus,
                added=[f for f in map(filled_cells, write.added) if f],
                edited={int(k): v for k, v in write.edited.items()},
                deleted=[int(i) for i in write.deleted],
            )
            _keep_only(s, browser_key, corpus, "pairs", draft, held)
            return Saved(result, tuple(held))
    except IntegrityError as exc:  # a concurrent writer created the same pair meanwhile
        raise WorkbenchError(
            N_("the edit conflicts with a concurrent change: {error}"), error=str(exc.orig)
        ) from None


def apply_glossary(browser_key: str, corpus_id: CorpusRef) -> Saved:
    """Write the glossary's draft over its terms and forget it, in one transaction
    (``Saved.result``: how many terms the glossary holds). On any refusal nothing changes and
    the draft stays. Edits of terms changed since are held back and stay in the draft."""
    check(browser_key, "glossary")
    require(Permission.EDIT)  # the write itself is a building block that checks nothing
    src, tgt = COLUMNS["glossary"]
    with session_scope() as s:
        corpus = find(s, corpus_id)
        draft, held, write = _to_write(s, browser_key, corpus, "glossary")
        stored = [(a, {src: a, tgt: b}) for a, b in glossary.terms_of(s, corpus)]
        terms = [(cells.get(src), cells.get(tgt)) for _, cells in write.shown(stored)]
        n = glossary.replace_terms(s, corpus, terms)
        _keep_only(s, browser_key, corpus, "glossary", draft, held)
        return Saved(n, tuple(held))
