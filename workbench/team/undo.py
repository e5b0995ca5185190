"""Undo: one change (``undo_change``), or every change of a corpus since a moment
(``undo_since``, newest first, in one transaction), each recorded in ``history`` as a new
change (``undoes`` names the one it reversed), itself undoable.

Undo never removes a corpus row (that would take its pairs by cascade, and its History tab
with it): the corpus an import created stays, empty; deleting a corpus is Delete's job, which
goes through the trash. Undoing an import deletes its pairs and records their full rows, so
the undo itself can be undone. An undo is refused, changing nothing, when a later change whose
effect still holds touched one of its rows, whatever kind that change is (a delete, an
import, a change of split, a clean-up, an undo …), naming the row and that change; and when a
row is not as the change left it (a write that was not recorded). So undos in any order never
bring back what a later change removed, nor throw away what it made.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.tables import Change, Pair
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import get_row, session_scope
from workbench.team import history
from workbench.team.access import Permission, require

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


def changes_since(corpus_id: int, since: datetime) -> int:
    """How many changes ``undo_since`` would undo (the number its confirmation names)."""
    with session_scope() as s:
        return len(_to_undo_since(s, corpus_id, since))


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
    return get_row(s, Change, int(change_id), N_("change #{id} does not exist"))


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
    for chunk in history.id_chunks(list(ids)):
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
        for table in history.RECORDED_TABLES:
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
    new_id = history.record(
        s, "undo", items, corpus_id=change.corpus_id, summary=summary, undoes=change.id
    )
    assert new_id is not None  # an undo is always recorded
    return new_id


def _import_undo_items(s: Session, change: Change, ranges: list[list[int]]) -> list[dict[str, Any]]:
    """Deleting an import's pairs (nothing later touched them: ``_refuse_if_touched_later``)."""
    pairs = history.table_of(Pair)
    current = history.capture(
        s, Pair, where=(pairs.c.corpus_id == change.corpus_id) & _in_ranges(pairs.c.id, ranges)
    )
    return history.diff(Pair, current, {})


def _in_ranges(column: Any, ranges: list[list[int]]) -> ColumnElement[bool]:
    return or_(*(column.between(a, b) for a, b in ranges))


def _apply(s: Session, change_id: int, items: list[dict[str, Any]]) -> None:
    """Move each row from its ``before`` state to its ``after`` state; first check that every
    row is in its ``before`` state now, else raise (nothing is written)."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_table.setdefault(item["table"], []).append(item)
    for name, group in by_table.items():
        table = history.table_of(history.RECORDED_TABLES[name])
        current = history.capture(s, history.RECORDED_TABLES[name], (item["id"] for item in group))
        for item in group:
            was = item["before"] and history.recorded_values(table, item["before"])
            now = current.get(item["id"])
            if (now and history.recorded_values(table, now)) != was:
                raise WorkbenchError(_CHANGED_SINCE[name], row=item["id"], id=change_id)
    for name in reversed(history.RECORDED_TABLES):  # deletes: pairs and terms before their corpus
        doomed = [item["id"] for item in by_table.get(name, []) if item["after"] is None]
        table = history.table_of(history.RECORDED_TABLES[name])
        for chunk in history.id_chunks(doomed):
            s.execute(delete(table).where(table.c.id.in_(chunk)))
    for name in history.RECORDED_TABLES:  # updates, then inserts: corpora first
        group = by_table.get(name, [])
        table = history.table_of(history.RECORDED_TABLES[name])
        moved = [item for item in group if item["before"] and item["after"]]
        unique = _UNIQUE_TEXT.get(name)
        if unique and moved:
            for item in moved:
                held = {history.REVISION: table.c.revision} if history.REVISION in table.c else {}
                s.execute(  # a placeholder first (rows may swap text); the revision waits
                    update(table)
                    .where(table.c.id == item["id"])
                    .values({unique: f"~{item['id']}", **held})
                )
        for item in moved:
            s.execute(
                update(table)
                .where(table.c.id == item["id"])
                .values(history.stored_values(table, item["after"]))
            )
        added = [
            history.stored_values(table, item["after"]) | _next_revision(table, item["after"])
            for item in group
            if item["before"] is None
        ]
        if added:
            s.execute(insert(table), added)
    s.flush()


def _next_revision(table: Table, was: dict[str, Any]) -> dict[str, Any]:
    """A row put back gets the revision after the one it was deleted at (an edit based on it
    then is a conflict, as after any write); none for a table without revisions."""
    if history.REVISION not in table.c:
        return {}
    return {history.REVISION: int(was.get(history.REVISION) or 1) + 1}
