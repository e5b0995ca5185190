"""The history of every change to pairs, glossary terms, corpora and versions, and its undo.

* **Recording** (building blocks, inside the writer's own transaction): a service takes
  ``capture`` of the rows it is about to change, writes, then calls ``record`` with
  ``diff(model, before, capture(...after))``. The ``changes`` row is written in the same
  transaction as the write, so a write that fails records nothing, and one that commits is
  always recorded. Values are the exact stored values (datetimes as ISO text), so an undo
  puts rows back byte for byte, ids included.
* **Imports** are recorded as one change listing the new pairs' ids as ranges
  (``record_import``), not their text: the text is in the pairs table, and a million-pair
  import stays a small row. Undoing an import deletes those pairs and records their full
  rows, so the undo itself can be undone.
* **Reading**: ``list_changes`` (filter by actor and time), ``actors``, ``changes_since``.
* **Undo**: ``undo_change`` (one change) and ``undo_since`` (every change of a corpus since a
  moment, newest first, in one transaction). An undo is a new change (``undoes`` names the
  one it reversed), itself undoable. Undo never removes a corpus row (that would take its
  pairs by cascade, and its History tab with it): the corpus an import created stays, empty;
  deleting a corpus is Delete's job, which goes through the trash. An undo is refused,
  changing nothing, when a later change whose effect still holds touched one of its rows,
  whatever kind that change is (a delete, an import, a change of split, a clean-up, an
  undo …), naming the row and that change; and when a row is not as the change left it
  (a write that was not recorded). So undos in any order never bring back what a later
  change removed, nor throw away what it made.

Append-only: nothing updates or deletes a ``changes`` row. Who acts comes from
``current_actor`` (the one seam for sign-in to fill in).

Imports only ``db`` and the top-level ``settings``/``storage``/``errors``/``messages``
modules: the corpus services call into this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import Base, Change, Corpus, GlossaryTerm, ModelVersion, Pair, UTCDateTime
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import access
from workbench.team.access import Permission, require

LOCAL_ACTOR = "local"  # who acts when nobody signs in (one person on their own machine)
SYSTEM_ACTOR = "system"  # housekeeping, e.g. emptying the trash
LIST_LIMIT = 500
_CHUNK = 900  # ids per IN (...) (SQLite's bound-parameter limit)

# The tables whose writes are recorded, in the order rows are inserted (deleted: reverse).
_TABLES: dict[str, type[Base]] = {
    "corpora": Corpus,
    "model_versions": ModelVersion,
    "glossary_terms": GlossaryTerm,
    "pairs": Pair,
}
ENTITIES = {"corpora": "corpus", "model_versions": "version", "glossary_terms": "term"}
ENTITIES["pairs"] = "pair"
# How a page names a change's entity and action (message ids, translated where shown; the
# stored values stay English, as does each change's summary: it is a record, written once).
ENTITY_LABELS = {
    "corpus": N_("corpus"),
    "version": N_("version"),
    "term": N_("term"),
    "pair": N_("pair"),
}
ACTION_LABELS = {
    "create": N_("create"),
    "rename": N_("rename"),
    "import": N_("import"),
    "edit": N_("edit"),
    "split": N_("split"),
    "dedupe": N_("dedupe"),
    "cleanup": N_("cleanup"),
    "cleanup undo": N_("cleanup undo"),
    "glossary": N_("glossary"),
    "delete": N_("delete"),
    "restore": N_("restore"),
    "purge": N_("purge"),
    "undo": N_("undo"),
    "register": N_("register"),
    "notes": N_("notes"),
}
# An undo refused because a row moved on since, per table (whole sentences: message ids).
_CHANGED_SINCE = {
    "corpora": N_("corpus {row} was changed after change #{id}; undo the later changes first"),
    "model_versions": N_(
        "version {row} was changed after change #{id}; undo the later changes first"
    ),
    "glossary_terms": N_("term {row} was changed after change #{id}; undo the later changes first"),
    "pairs": N_("pair {row} was changed after change #{id}; undo the later changes first"),
}
# An undo refused because a later change that still holds touched a row, per table.
_CHANGED_LATER = {
    "corpora": N_(
        "corpus {row} was changed by change #{later} after change #{id}; undo change #{later} first"
    ),
    "model_versions": N_(
        "version {row} was changed by change #{later} after change #{id}; "
        "undo change #{later} first"
    ),
    "glossary_terms": N_(
        "term {row} was changed by change #{later} after change #{id}; undo change #{later} first"
    ),
    "pairs": N_(
        "pair {row} was changed by change #{later} after change #{id}; undo change #{later} first"
    ),
}
# A unique text column per table: an undo parks it on a placeholder first, so rows may swap.
_UNIQUE_TEXT = {"pairs": "content_hash", "glossary_terms": "source_term", "corpora": "name"}
# Columns that are not part of a row's record: what the latest regrouping of a corpus' splits
# moved is a note any write of pairs rewrites; undoing a rename must neither restore it nor
# be refused because it changed. (Older records may hold it: an undo ignores it there too.)
_UNRECORDED = {"corpora": frozenset({"split_note"})}


def current_actor() -> str:
    """Who is making the change now: the acting user of ``workbench.team.access`` (its
    e-mail, or the local admin's name); ``LOCAL_ACTOR`` for the workbench's own upkeep."""
    actor = access.current_actor()
    return actor.email if actor is not None else LOCAL_ACTOR


@dataclass(frozen=True)
class ChangeInfo:
    """A change as the History tab lists it."""

    id: int
    at: datetime
    actor: str
    corpus_id: int | None
    entity: str
    entity_id: int | None
    action: str
    summary: str
    rows: int  # rows the change touched
    reversible: bool
    undoes: int | None  # the change this one undid
    undone_by: int | None  # the change that undid this one


# --------------------------------------------------------------------------- recording


def _table(model: type[Base]) -> Table:
    return model.__table__  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _recorded(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values without the columns that are not recorded (``_UNRECORDED``)."""
    unrecorded = _UNRECORDED.get(table.name, frozenset())
    return {k: v for k, v in values.items() if k not in unrecorded}


def _stored(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON values back as column values (ISO text → aware datetime)."""
    out = _recorded(table, values)
    for col in table.columns:
        if isinstance(col.type, UTCDateTime) and isinstance(out.get(col.name), str):
            out[col.name] = datetime.fromisoformat(out[col.name])
    return out


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def capture(
    session: Session,
    model: type[Base],
    ids: Iterable[int] | None = None,
    where: ColumnElement[bool] | None = None,
) -> dict[int, dict[str, Any]]:
    """id -> the row's stored values as JSON, for the rows ``ids`` or ``where`` select
    (the recorded columns: ``_UNRECORDED``)."""
    table = _table(model)
    unrecorded = _UNRECORDED.get(table.name, frozenset())
    columns = select(*(c for c in table.columns if c.name not in unrecorded))
    rows: dict[int, dict[str, Any]] = {}

    def add(stmt: Any) -> None:
        for row in session.execute(stmt).mappings():
            rows[row["id"]] = {k: _plain(v) for k, v in row.items()}

    if where is not None:
        add(columns.where(where))
    if ids is not None:
        for chunk in _chunks(sorted({int(i) for i in ids})):
            add(columns.where(table.c.id.in_(chunk)))
    return rows


def diff(
    model: type[Base], before: Mapping[int, dict[str, Any]], after: Mapping[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The items of a change: every row whose values differ between ``before`` and ``after``
    (a row missing on one side did not exist then)."""
    name = _table(model).name
    return [
        {"table": name, "id": i, "before": before.get(i), "after": after.get(i)}
        for i in sorted(set(before) | set(after))
        if before.get(i) != after.get(i)
    ]


def record(
    session: Session,
    action: str,
    items: list[dict[str, Any]],
    *,
    corpus_id: int | None,
    summary: str = "",
    reversible: bool = True,
    undoes: int | None = None,
    actor: str | None = None,
) -> int | None:
    """Add the change to the caller's transaction; returns its id (None: nothing changed).
    An undo is recorded even when it found nothing left to restore."""
    if not items and undoes is None:
        return None
    tables = {item["table"] for item in items} or {"pairs"}
    entity = ENTITIES[next(t for t in _TABLES if t in tables)]
    ids = {item.get("id") for item in items}
    change = Change(
        actor=actor or current_actor(),
        corpus_id=corpus_id,
        entity=entity,
        entity_id=next(iter(ids)) if len(ids) == 1 else None,
        action=action,
        summary=summary,
        items=items,
        reversible=reversible,
        undoes=undoes,
    )
    session.add(change)
    session.flush()
    return change.id


def id_ranges(ids: Iterable[int]) -> list[list[int]]:
    """Sorted ids as inclusive [first, last] runs: an import's ids are mostly one run."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return runs


def record_import(
    session: Session,
    corpus_id: int,
    pair_ids: Iterable[int],
    *,
    created_corpus: Mapping[int, dict[str, Any]] | None = None,
    summary: str = "",
) -> int | None:
    """Record an import (see the module docstring): the new pairs' ids as ranges, plus the
    corpus row when the import created it (``capture`` of it)."""
    ranges = id_ranges(pair_ids)
    items = diff(Corpus, {}, created_corpus or {})
    if ranges:
        items.append({"table": "pairs", "id_ranges": ranges})
    return record(session, "import", items, corpus_id=corpus_id, summary=summary)


# ----------------------------------------------------------------------------- reading


def _info(c: Change, undone_by: int | None) -> ChangeInfo:
    rows = sum(
        sum(b - a + 1 for a, b in item["id_ranges"]) if "id_ranges" in item else 1
        for item in c.items
    )
    return ChangeInfo(
        c.id,
        c.at,
        c.actor,
        c.corpus_id,
        c.entity,
        c.entity_id,
        c.action,
        c.summary,
        rows,
        c.reversible,
        c.undoes,
        undone_by,
    )


def list_changes(
    corpus_id: int,
    *,
    actor: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = LIST_LIMIT,
) -> list[ChangeInfo]:
    """A corpus' changes, newest first, optionally by one actor and within [since, until)."""
    stmt = select(Change).where(Change.corpus_id == corpus_id)
    if actor:
        stmt = stmt.where(Change.actor == actor)
    if since is not None:
        stmt = stmt.where(Change.at >= since)
    if until is not None:
        stmt = stmt.where(Change.at < until)
    with session_scope() as s:
        found = s.scalars(stmt.order_by(Change.id.desc()).limit(limit)).all()
        undone = _undone_by(s, [c.id for c in found])
        return [_info(c, undone.get(c.id)) for c in found]


def _undone_by(s: Session, ids: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for chunk in _chunks(list(ids)):
        rows = s.execute(select(Change.undoes, Change.id).where(Change.undoes.in_(chunk)))
        out.update({undone: undo for undone, undo in rows})
    return out


def actors(corpus_id: int) -> list[str]:
    """Everyone who changed the corpus, for the History tab's filter."""
    with session_scope() as s:
        stmt = select(Change.actor).where(Change.corpus_id == corpus_id).distinct()
        return sorted(s.scalars(stmt))


def changes_since(corpus_id: int, since: datetime) -> int:
    """How many changes ``undo_since`` would undo (the number its confirmation names)."""
    with session_scope() as s:
        return len(_to_undo_since(s, corpus_id, since))


# -------------------------------------------------------------------------------- undo


def undo_change(change_id: int) -> int:
    """Undo one change (a new change that restores the rows); returns the new change's id."""
    require(Permission.EDIT)
    return _undoing(lambda s: [_undo(s, _get(s, change_id))])[0]


def undo_since(corpus_id: int, since: datetime) -> list[int]:
    """Undo every change to the corpus made at or after ``since``, newest first, in one
    transaction: all or nothing. A change and its undo inside the window cancel out and are
    left alone, as are changes that cannot be undone (a version's files).
    Returns the new changes' ids."""
    require(Permission.EDIT)
    return _undoing(lambda s: [_undo(s, c) for c in _to_undo_since(s, corpus_id, since)])


def _undoing(work: Any) -> list[int]:
    try:
        with session_scope() as s:
            return work(s)
    except IntegrityError as exc:
        raise WorkbenchError(
            N_("the undo conflicts with the data as it is now: {reason}"), reason=exc.orig
        ) from None


def _get(s: Session, change_id: int) -> Change:
    change = s.get(Change, int(change_id))
    if change is None:
        raise WorkbenchError(N_("change #{id} does not exist"), id=change_id)
    return change


def _to_undo_since(s: Session, corpus_id: int, since: datetime) -> list[Change]:
    """The changes whose undo returns the corpus to its state at ``since``, newest first:
    those of the window whose effect still holds (``_standing``), but for the ones that
    cannot be undone."""
    window = s.execute(
        select(Change.id, Change.undoes)
        .where(Change.corpus_id == corpus_id, Change.at >= since)
        .order_by(Change.id.desc())
    ).all()
    return [c for c in _changes(s, _standing(window)) if c.reversible]


def _standing(window: Sequence[tuple[int, int | None]]) -> list[int]:
    """Of a window of changes (id, the change it undoes; newest first), the ones whose effect
    still holds at its end, newest first.

    Undos form chains (a change, its undo, the undo of that …; each change is undone at
    most once, and always later). Within the window only the newest link of a chain counts:
    its effect holds when the chain has an odd number of links in the window, and cancels
    out when even."""
    in_window = dict(window)
    undone = {undoes for undoes in in_window.values() if undoes is not None}
    standing = []
    for newest, _ in window:
        if newest in undone:
            continue
        links, link = 1, newest
        while in_window.get(link) in in_window:
            link = in_window[link]  # type: ignore[assignment]
            links += 1
        if links % 2:
            standing.append(newest)
    return standing


def _changes(s: Session, ids: Sequence[int]) -> list[Change]:
    """The changes ``ids``, in that order."""
    found: dict[int, Change] = {}
    for chunk in _chunks(list(ids)):
        found.update((c.id, c) for c in s.scalars(select(Change).where(Change.id.in_(chunk))))
    return [found[i] for i in ids]


def _rows_of(change: Change, undone: bool = False) -> dict[str, list[list[int]]]:
    """The rows a change recorded, per table, as merged [first, last] id ranges. ``undone``:
    only those its undo would put back (a corpus the change created stays, see ``_undo``)."""
    ranges: dict[str, list[list[int]]] = {}
    for item in change.items:
        if "id_ranges" in item:
            ranges.setdefault("pairs", []).extend(item["id_ranges"])
        elif not (undone and item["table"] == "corpora" and item["before"] is None):
            ranges.setdefault(item["table"], []).append([item["id"], item["id"]])
    merged: dict[str, list[list[int]]] = {}
    for table, runs in ranges.items():
        out = merged[table] = []
        for first, last in sorted(runs):
            if out and first <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], last)
            else:
                out.append([first, last])
    return merged


def _first_shared(a: list[list[int]], b: list[list[int]]) -> int | None:
    """The smallest id in both lists of merged ranges (None: none)."""
    i = j = 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if low <= high:
            return low
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return None


def _refuse_if_touched_later(s: Session, change: Change) -> None:
    """Refuse (a ``WorkbenchError`` naming the row and the later change) when a later change
    of the corpus whose effect still holds touched a row that undoing ``change`` would put
    back, whatever kind it is: undoing ``change`` would throw that change's effect away on
    the row, and undoing that change afterwards would bring back what ``change`` made (an
    import's pairs that a later delete removed). A later change and its undo cancel out."""
    mine = _rows_of(change, undone=True)
    later = s.execute(
        select(Change.id, Change.undoes)
        .where(Change.corpus_id == change.corpus_id, Change.id > change.id)
        .order_by(Change.id.desc())
    ).all()
    for other in _changes(s, _standing(later)):  # the newest first: the one to undo first
        theirs = _rows_of(other)
        for table in _TABLES:
            row = _first_shared(mine.get(table, []), theirs.get(table, []))
            if row is not None:
                raise WorkbenchError(_CHANGED_LATER[table], row=row, id=change.id, later=other.id)


def _undo(s: Session, change: Change) -> int:
    if not change.reversible:
        raise WorkbenchError(
            N_("change #{id} ({what}) cannot be undone"),
            id=change.id,
            what=change.summary or change.action,
        )
    later = s.scalar(select(Change.id).where(Change.undoes == change.id).limit(1))
    if later is not None:
        raise WorkbenchError(
            N_("change #{id} was already undone (change #{undo})"), id=change.id, undo=later
        )
    _refuse_if_touched_later(s, change)
    items: list[dict[str, Any]] = []
    for item in change.items:
        if item.get("table") == "corpora" and item["before"] is None:
            continue  # a corpus made by the change stays (empty): deleting one is Delete's job
        if "id_ranges" in item:
            items += _import_undo_items(s, change, item["id_ranges"])
        else:
            items.append(
                {"table": item["table"], "id": item["id"], "before": item["after"]}
                | {"after": item["before"]}
            )
    _apply(s, change.id, items)
    what = change.summary or f"{change.action} {change.entity}"
    summary = f"undo #{change.id}: {what}"
    new_id = record(s, "undo", items, corpus_id=change.corpus_id, summary=summary, undoes=change.id)
    assert new_id is not None  # an undo is always recorded
    return new_id


def _import_undo_items(s: Session, change: Change, ranges: list[list[int]]) -> list[dict[str, Any]]:
    """Deleting an import's pairs (nothing later touched them: ``_refuse_if_touched_later``)."""
    pairs = _table(Pair)
    current = capture(
        s, Pair, where=(pairs.c.corpus_id == change.corpus_id) & _in_ranges(pairs.c.id, ranges)
    )
    return diff(Pair, current, {})


def _in_ranges(column: Any, ranges: list[list[int]]) -> ColumnElement[bool]:
    return or_(*(column.between(a, b) for a, b in ranges))


def _apply(s: Session, change_id: int, items: list[dict[str, Any]]) -> None:
    """Move each row from its ``before`` state to its ``after`` state; first check that every
    row is in its ``before`` state now, else raise (nothing is written)."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_table.setdefault(item["table"], []).append(item)
    for name, group in by_table.items():
        table = _table(_TABLES[name])
        current = capture(s, _TABLES[name], (item["id"] for item in group))
        for item in group:
            was = item["before"] and _recorded(table, item["before"])
            if current.get(item["id"]) != was:
                raise WorkbenchError(_CHANGED_SINCE[name], row=item["id"], id=change_id)
    for name in reversed(_TABLES):  # deletes: pairs and terms before their corpus
        doomed = [item["id"] for item in by_table.get(name, []) if item["after"] is None]
        table = _table(_TABLES[name])
        for chunk in _chunks(doomed):
            s.execute(delete(table).where(table.c.id.in_(chunk)))
    for name in _TABLES:  # updates, then inserts: corpora first
        group = by_table.get(name, [])
        table = _table(_TABLES[name])
        moved = [item for item in group if item["before"] and item["after"]]
        unique = _UNIQUE_TEXT.get(name)
        if unique and moved:
            for item in moved:
                s.execute(
                    update(table).where(table.c.id == item["id"]).values({unique: f"~{item['id']}"})
                )
        for item in moved:
            s.execute(
                update(table).where(table.c.id == item["id"]).values(_stored(table, item["after"]))
            )
        added = [_stored(table, item["after"]) for item in group if item["before"] is None]
        if added:
            s.execute(insert(table), added)
    s.flush()
