"""Substring search over pairs: every piece of backend-specific search SQL lives here.

The search objects are created by migration 0001 outside the models' metadata:

* **SQLite** — an external-content FTS5 table ``pairs_fts`` with the trigram tokenizer
  (substring search that works for unsegmented Chinese), ``detail='none'``, kept in sync by
  the triggers ``pairs_fts_ai`` / ``pairs_fts_ad`` / ``pairs_fts_au``. Queries of at least
  ``FTS_MIN_QUERY`` characters use it; shorter ones scan with LIKE.
* **PostgreSQL** — ``pg_trgm`` GIN indexes ``ix_pairs_source_trgm`` / ``ix_pairs_target_trgm``
  that answer ``ILIKE '%q%'``.

Both are optional (SQLite older than 3.34, no permission to create pg_trgm): search then scans.
Matching is case-insensitive for ASCII letters on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, case, func, select, text

from db.tables import Pair

# Objects the migrations create but the models do not describe (autogenerate ignores them).
SEARCH_OBJECT_PREFIXES = ("pairs_fts", "ix_pairs_source_trgm", "ix_pairs_target_trgm")
FTS_MIN_QUERY = 3  # the trigram index needs at least 3 characters
_FTS_INSERT_TRIGGER = "pairs_fts_ai"

Rows = list[Any]  # (id, source, target, split, note) rows in id order


@dataclass(frozen=True)
class _Query:
    corpus_id: int
    q: str  # normalised; empty: every pair
    split: str | None
    limit: int
    offset: int
    count_cap: int
    scan_cap: int


def has_fts(conn: Connection) -> bool:
    """Whether this SQLite database has the FTS5 trigram index (never true on PostgreSQL)."""
    if conn.dialect.name != "sqlite":
        return False
    row = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pairs_fts'"
    ).first()
    return row is not None


def find_pairs(
    conn: Connection,
    corpus_id: int,
    q: str,
    split: str | None,
    limit: int,
    offset: int,
    *,
    count_cap: int,
    scan_cap: int,
) -> tuple[Rows, int, bool]:
    """(one page of rows, total, whether the total is exact) of the pairs of a corpus that
    contain ``q`` in their source or target (all pairs when ``q`` is empty).

    The total counts at most ``count_cap`` matches; a query no index can answer counts
    matches among the first ``scan_cap`` pairs only. Either way it is then a lower bound.
    """
    query = _Query(corpus_id, q, split, limit, offset, count_cap, scan_cap)
    if q and len(q) >= FTS_MIN_QUERY and has_fts(conn):
        return _search_fts(conn, query)
    return _search_like(conn, query)


def fts_query(q: str, max_terms: int = 12) -> str:
    """An FTS5 MATCH expression ANDing the trigrams of ``q`` (len >= 3).

    The index is built with ``detail='none'`` (no positions, so no phrase queries): any row
    containing all trigrams is a candidate, and the caller confirms the substring with
    LIKE. Long queries use an evenly spread subset of their trigrams.
    """
    grams = list(dict.fromkeys(q[i : i + 3] for i in range(len(q) - 2)))
    if len(grams) > max_terms:
        step = (len(grams) - 1) / (max_terms - 1)
        grams = [grams[round(i * step)] for i in range(max_terms)]
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _search_fts(conn: Connection, query: _Query) -> tuple[Rows, int, bool]:
    q, split, count_cap = query.q, query.split, query.count_cap
    where = (
        "pairs_fts MATCH :m AND p.corpus_id = :c"
        + (" AND p.split = :s" if split else "")
        + " AND (p.source LIKE :pat ESCAPE '\\' OR p.target LIKE :pat ESCAPE '\\')"
    )
    params = {"m": fts_query(q), "c": query.corpus_id, "s": split, "pat": _like_pattern(q)}
    # CROSS JOIN pins the FTS table as the outer loop (else SQLite may probe it per row).
    base = f"FROM pairs_fts CROSS JOIN pairs p ON p.id = pairs_fts.rowid WHERE {where}"
    # ORDER BY the FTS rowid lets SQLite stream matches in id order and stop at LIMIT.
    rows = conn.execute(
        text(
            f"SELECT p.id, p.source, p.target, p.split, p.note {base} "
            "ORDER BY pairs_fts.rowid LIMIT :lim OFFSET :off"
        ),
        {**params, "lim": query.limit, "off": query.offset},
    ).all()
    n = conn.execute(
        text(f"SELECT count(*) FROM (SELECT 1 {base} LIMIT :cap)"), {**params, "cap": count_cap + 1}
    ).scalar_one()
    return rows, min(n, count_cap), n <= count_cap


def _search_like(conn: Connection, query: _Query) -> tuple[Rows, int, bool]:
    q, split, offset = query.q, query.split, query.offset
    count_cap, scan_cap = query.count_cap, query.scan_cap
    t = Pair.__table__
    conds = [t.c.corpus_id == query.corpus_id]
    if split:
        conds.append(t.c.split == split)

    def matches(cols: Any) -> Any:
        pat = _like_pattern(q)
        if conn.dialect.name == "postgresql":
            return cols.source.ilike(pat, escape="\\") | cols.target.ilike(pat, escape="\\")
        return cols.source.like(pat, escape="\\") | cols.target.like(pat, escape="\\")

    text_conds = [matches(t.c)] if q else []
    stmt = (
        select(t.c.id, t.c.source, t.c.target, t.c.split, t.c.note)
        .where(*conds, *text_conds)
        .order_by(t.c.id)
        .limit(query.limit)
        .offset(offset)
    )
    rows = conn.execute(stmt).all()
    if not q:
        total = conn.execute(select(func.count()).select_from(t).where(*conds)).scalar_one()
        return rows, int(total), True
    if conn.dialect.name == "postgresql" and len(q) >= FTS_MIN_QUERY:
        # pg_trgm answers this from the GIN indexes; only the number of matches is capped.
        capped = select(t.c.id).where(*conds, *text_conds).limit(count_cap + 1).subquery()
        n = conn.execute(select(func.count()).select_from(capped)).scalar_one()
        return rows, min(n, count_cap), n <= count_cap
    # No index can answer this (short query, or no FTS): count within the first scan_cap
    # pairs only, so the count never scans a million rows. Beyond that it is a lower bound.
    window = (
        select(t.c.source, t.c.target).where(*conds).order_by(t.c.id).limit(scan_cap)
    ).subquery()
    scanned, hits = conn.execute(
        select(func.count(), func.coalesce(func.sum(case((matches(window.c), 1), else_=0)), 0))
    ).one()
    exact = scanned < scan_cap and hits <= count_cap
    total = min(int(hits), count_cap)
    if not exact:
        total = max(total, offset + len(rows))
    return rows, total, exact


# ------------------------------------------------------------------ bulk inserts (SQLite)


def suspend_fts_insert_trigger(conn: Connection) -> str | None:
    """Drop the per-row FTS insert trigger inside the caller's transaction and return its SQL
    (None when there is none). A bulk insert then indexes its rows set-based with
    ``index_rows_after`` (about twice as fast) and puts the trigger back with
    ``restore_trigger`` before commit. DDL is transactional in SQLite: a rollback restores the
    trigger too, and no other connection ever sees it missing."""
    if not has_fts(conn):
        return None
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
        (_FTS_INSERT_TRIGGER,),
    ).scalar()
    if sql:
        conn.exec_driver_sql(f"DROP TRIGGER {_FTS_INSERT_TRIGGER}")
    return sql


def index_rows_after(conn: Connection, last_id: int) -> None:
    """Add the pairs with an id above ``last_id`` to the FTS index in one statement."""
    conn.exec_driver_sql(
        "INSERT INTO pairs_fts (rowid, source, target) "
        f"SELECT id, source, target FROM pairs WHERE id > {int(last_id)}"
    )


def restore_trigger(conn: Connection, sql: str) -> None:
    """Recreate a trigger that ``suspend_fts_insert_trigger`` dropped."""
    conn.exec_driver_sql(sql)


def refresh_statistics(conn: Connection) -> None:
    """After a large insert on PostgreSQL: fresh statistics, so the planner uses the trigram
    indexes for rare terms right away instead of after autovacuum's next visit."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("ANALYZE pairs")
