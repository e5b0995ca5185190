"""The history of every change to pairs, glossary terms, corpora and versions: recording and
reading it (its undo is ``undo``).

* **Recording** (building blocks, inside the writer's own transaction): a service takes
  ``capture`` of the rows it is about to change, writes, then calls ``record`` with
  ``diff(model, before, capture(...after))``. The ``changes`` row is written in the same
  transaction as the write, so a write that fails records nothing, and one that commits is
  always recorded. Values are the exact stored values (datetimes as ISO text), so an undo
  puts rows back byte for byte, ids included (``stored_values``).
* **Imports** are recorded as one change listing the new pairs' ids as ranges
  (``record_import``), not their text: the text is in the pairs table, and a million-pair
  import stays a small row.
* **Reading**: ``list_changes`` (filter by actor and time), ``actors``.

Append-only: nothing updates or deletes a ``changes`` row. A change names who made it
(``actor_name``: the e-mail of ``access.current_actor()``, else ``LOCAL_ACTOR``).

Imports only ``db`` and the top-level ``settings``/``storage``/``errors``/``messages``
modules: the corpus services call into this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, select
from sqlalchemy.orm import Session

from db.tables import Base, Change, Corpus, GlossaryTerm, ModelVersion, Pair, UTCDateTime
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import access

LOCAL_ACTOR = "local"  # who acts when nobody signs in (one person on their own machine)
SYSTEM_ACTOR = "system"  # housekeeping, e.g. emptying the trash
LIST_LIMIT = 500
_IDS_PER_QUERY = 900  # ids per IN (...) (SQLite's bound-parameter limit)

# The tables whose writes are recorded, in the order rows are inserted (deleted: reverse).
RECORDED_TABLES: dict[str, type[Base]] = {
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
# Columns that are not part of a row's record: what the latest regrouping of a corpus' splits
# moved is a note any write of pairs rewrites; undoing a rename must neither restore it nor
# be refused because it changed. (Older records may hold it: an undo ignores it there too.)
_UNRECORDED = {"corpora": frozenset({"split_note"})}
# A row's revision (``db.tables.Pair.revision``) is recorded but never compared or put back:
# every write raises it, an undo's too, so an edit based on the row before is a conflict.
REVISION = "revision"


def actor_name() -> str:
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


def table_of(model: type[Base]) -> Table:
    return model.__table__  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def recorded_values(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values as an undo compares and puts them back: without the columns that are
    not recorded (``_UNRECORDED``) nor its revision (``REVISION``)."""
    unrecorded = _UNRECORDED.get(table.name, frozenset()) | {REVISION}
    return {k: v for k, v in values.items() if k not in unrecorded}


def stored_values(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON values back as column values (ISO text → aware datetime)."""
    out = recorded_values(table, values)
    for col in table.columns:
        if isinstance(col.type, UTCDateTime) and isinstance(out.get(col.name), str):
            out[col.name] = datetime.fromisoformat(out[col.name])
    return out


def id_chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _IDS_PER_QUERY):
        yield ids[start : start + _IDS_PER_QUERY]


def capture(
    session: Session,
    model: type[Base],
    ids: Iterable[int] | None = None,
    where: ColumnElement[bool] | None = None,
) -> dict[int, dict[str, Any]]:
    """id -> the row's stored values as JSON, for the rows ``ids`` or ``where`` select
    (the recorded columns: ``_UNRECORDED``)."""
    table = table_of(model)
    unrecorded = _UNRECORDED.get(table.name, frozenset())
    columns = select(*(c for c in table.columns if c.name not in unrecorded))
    rows: dict[int, dict[str, Any]] = {}

    def add(stmt: Any) -> None:
        for row in session.execute(stmt).mappings():
            rows[row["id"]] = {k: _plain(v) for k, v in row.items()}

    if where is not None:
        add(columns.where(where))
    if ids is not None:
        for chunk in id_chunks(sorted({int(i) for i in ids})):
            add(columns.where(table.c.id.in_(chunk)))
    return rows


def diff(
    model: type[Base], before: Mapping[int, dict[str, Any]], after: Mapping[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The items of a change: every row whose values differ between ``before`` and ``after``
    (a row missing on one side did not exist then)."""
    name = table_of(model).name
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
    entity = ENTITIES[next(t for t in RECORDED_TABLES if t in tables)]
    ids = {item.get("id") for item in items}
    change = Change(
        actor=actor or actor_name(),
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
    corpus row when the import created it (``capture`` of it). The summary then says so: its
    rows are the pairs and the corpus ("created the corpus and imported 202 pairs", 203)."""
    ranges = id_ranges(pair_ids)
    items = diff(Corpus, {}, created_corpus or {})
    if items and summary:
        summary = f"created the corpus and {summary}"
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
    for chunk in id_chunks(list(ids)):
        rows = s.execute(select(Change.undoes, Change.id).where(Change.undoes.in_(chunk)))
        out.update({undone: undo for undone, undo in rows})
    return out


class PairAuthors:
    """Who made each pair of a corpus and who changed it last, from its changes."""

    def __init__(self) -> None:
        self.made: dict[int, str] = {}
        self.changed: dict[int, str] = {}
        self.imports: list[tuple[int, int, str]] = []  # (first id, last id, actor)

    def of(self, pair_id: int) -> tuple[str, str]:
        """(who made it, who changed it last), "" where the history does not say."""
        made = self.made.get(pair_id, "")
        if not made:
            made = next((a for lo, hi, a in self.imports if lo <= pair_id <= hi), "")
        return made, self.changed.get(pair_id, made)


def pair_authors(session: Session, corpus_id: int) -> PairAuthors:
    """The authors of a corpus' pairs (an export's ``creationid``/``changeid``), read from its
    changes in order: the change that created a pair (an import or a save) made it, the last
    one that wrote it changed it."""
    out = PairAuthors()
    rows = session.execute(
        select(Change.actor, Change.items).where(Change.corpus_id == corpus_id).order_by(Change.id)
    )
    for actor, items in rows:
        for item in items:
            if item.get("table") != "pairs":
                continue
            if "id_ranges" in item:
                out.imports += [(lo, hi, actor) for lo, hi in item["id_ranges"]]
            elif item.get("after") is not None:
                if item.get("before") is None:
                    out.made.setdefault(item["id"], actor)
                else:
                    out.changed[item["id"]] = actor
    return out


def actors(corpus_id: int) -> list[str]:
    """Everyone who changed the corpus, for the History tab's filter."""
    with session_scope() as s:
        stmt = select(Change.actor).where(Change.corpus_id == corpus_id).distinct()
        return sorted(s.scalars(stmt))


@dataclass(frozen=True)
class LastWrite:
    """Who last wrote a row and when, and the row as that write left it (None: deleted) or,
    for a deletion, as it was just before (``was``)."""

    actor: str
    at: datetime
    after: dict[str, Any] | None
    was: dict[str, Any] | None


def last_writes(
    s: Session, corpus_id: int, table: str, keys: Iterable[Any], key: str = "id"
) -> dict[Any, LastWrite]:
    """For each of ``keys`` (rows of ``table`` in a corpus, named by their column ``key``), its
    newest recorded write among the corpus' latest ``LIST_LIMIT`` changes: an edit conflict
    names who changed the row since, and when. An import's pairs are named by id range."""
    wanted = set(keys)
    found: dict[Any, LastWrite] = {}
    changes = s.scalars(
        select(Change)
        .where(Change.corpus_id == corpus_id)
        .order_by(Change.id.desc())
        .limit(LIST_LIMIT)
    )
    for c in changes:
        for item in c.items:
            if item.get("table") != table:
                continue
            if "id_ranges" in item:
                if key == "id":
                    hits = [
                        i
                        for i in wanted - set(found)
                        if any(a <= i <= b for a, b in item["id_ranges"])
                    ]
                    found |= {i: LastWrite(c.actor, c.at, None, None) for i in hits}
                continue
            row = item["after"] or item["before"] or {}
            if row.get(key) in wanted and row[key] not in found:
                found[row[key]] = LastWrite(c.actor, c.at, item["after"], item["before"])
        if len(found) == len(wanted):
            break
    return found
