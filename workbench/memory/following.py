"""Following a corpus' pairs from the change history, so an in-memory structure built from
them (the matches' index) takes in each save, edit and delete at once, without a rebuild.

Every write to pairs is recorded in ``changes`` in its own transaction
(``workbench.team.history``): an edit or a delete as the rows before and after, an import as
the new ids' ranges. So what changed since the change an index was built at is read from
there, in any process (the UI, the CLI and the HTTP server each hold their own index): one
indexed query per lookup when nothing changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from db.tables import Change, Pair

_IDS_PER_QUERY = 900


@dataclass
class PairDelta:
    """What became of the corpus' pairs after a change: pairs now (id -> source, target) and
    pairs gone; ``last`` is the newest change read."""

    last: int
    upserted: dict[int, tuple[str, str]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)


def last_change(s: Session, corpus_id: int) -> int:
    """The id of the corpus' newest change (0: none): what an index built now is "at"."""
    return s.scalar(select(func.max(Change.id)).where(Change.corpus_id == corpus_id)) or 0


def changes_since(s: Session, corpus_id: int, after: int) -> PairDelta | None:
    """The pairs the corpus' changes after change ``after`` touched, as they are now; None
    when the history went back (a restored backup): the caller rebuilds."""
    newest = last_change(s, corpus_id)
    if newest < after:
        return None
    delta = PairDelta(newest)
    if newest == after:
        return delta
    rows = s.execute(
        select(Change.items)
        .where(Change.corpus_id == corpus_id, Change.id > after, Change.id <= newest)
        .order_by(Change.id)
    )
    ranges: list[list[int]] = []
    for (items,) in rows:
        for item in items:
            if item.get("table") != "pairs":
                continue
            if "id_ranges" in item:
                ranges += item["id_ranges"]
            elif item.get("after") is None or item["after"].get("corpus_id") != corpus_id:
                delta.deleted.add(item["id"])
                delta.upserted.pop(item["id"], None)
            else:
                delta.upserted[item["id"]] = (item["after"]["source"], item["after"]["target"])
                delta.deleted.discard(item["id"])
    for start in range(0, len(ranges), _IDS_PER_QUERY):
        chunk = ranges[start : start + _IDS_PER_QUERY]
        found = s.execute(
            select(Pair.id, Pair.source, Pair.target).where(
                Pair.corpus_id == corpus_id, or_(*(Pair.id.between(a, b) for a, b in chunk))
            )
        )
        for pid, source, target in found:
            if pid not in delta.deleted and pid not in delta.upserted:
                delta.upserted[pid] = (source, target)
    return delta
