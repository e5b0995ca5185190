"""Migrations are history: the DDL each one writes, up and down, is pinned.

``migration_ddl.json`` holds, per backend, the schema after every step of a walk from an empty
database up to head one revision at a time, then down to nothing one revision at a time: on
SQLite the stored ``CREATE`` statements (``sqlite_master``, whitespace folded), on PostgreSQL
the catalogue's own definitions (columns, constraints, indexes). Each ``up R`` is recorded as
what it adds to and removes from the schema of the revision before, each ``down R`` as how it
differs from ``up R`` (mostly: not at all). It was recorded from the migrations as released,
so a change to a migration or to a helper of ``db/migrations/history_ops.py`` that alters any
released database fails here, step by step.

A new migration adds steps the file lacks: run this file once with ``PIN_NEW_MIGRATIONS=1``
(not under ``-n``: both backends write the one file) to record them (steps already recorded
are never rewritten), and review the diff. After an upgrade of SQLAlchemy or PostgreSQL that
prints the same schema differently, ``PIN_NEW_MIGRATIONS=all`` records every step again: its
diff must show only that printing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from db.engine import create_workbench_engine
from db.migrate import MIGRATIONS_DIR, alembic_config, upgrade
from tests.test_layers import imported_modules

PINNED = Path(__file__).with_name("migration_ddl.json")
# What may be imported where nothing may change under a released migration.
LIBRARIES = ("__future__", "collections", "json", "logging", "sqlalchemy", "alembic")
HELPERS = "db.migrations.history_ops"


_TABLE_CONSTRAINT = ("CONSTRAINT ", "PRIMARY KEY", "UNIQUE", "CHECK", "FOREIGN KEY")


def _top_level_items(body: str) -> list[str]:
    """``a INT, CHECK (x IN (1, 2))`` → its comma-separated items, commas in parentheses kept."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    return [*items, body[start:].strip()]


def _fold(sql: str) -> str:
    """White space folded; a table's constraints sorted (their order means nothing, and the
    copy a batch migration makes of a table lists them in an order that varies by run)."""
    sql = re.sub(r"\s+", " ", sql).strip()
    head, _, body = sql.partition("(")
    if not head.startswith("CREATE TABLE") or not body.endswith(")"):
        return sql
    items = _top_level_items(body[:-1])
    constraints = sorted(item for item in items if item.startswith(_TABLE_CONSTRAINT))
    columns = [item for item in items if not item.startswith(_TABLE_CONSTRAINT)]
    return f"{head}({', '.join(columns + constraints)})"


def _sqlite_ddl(conn: Connection) -> set[str]:
    """Every stored CREATE statement except the tables SQLite makes itself (FTS5's shadow
    tables, ``sqlite_sequence``)."""
    rows = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND NOT (type = 'table' AND (name LIKE 'pairs_fts_%' OR name LIKE 'sqlite_%'))"
    )
    return {f"{kind} {name}: {_fold(sql)}" for kind, name, sql in rows}


def _postgresql_ddl(conn: Connection) -> set[str]:
    """Columns with their place in the table and NULL rule, then constraints and indexes as
    PostgreSQL prints them."""
    columns = conn.exec_driver_sql(
        "SELECT c.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), "
        "a.attnotnull, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' "
        "AND a.attnum > 0 AND NOT a.attisdropped"
    )
    constraints = conn.exec_driver_sql(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = 'public'::regnamespace "
        "AND contype <> 'n'"  # NOT NULL: also a constraint since PostgreSQL 18
    )
    indexes = conn.exec_driver_sql(
        "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
    )
    return (
        {f"column {t}.{c} #{place}: {kind} not_null={not_null} default={default}"
         for t, c, place, kind, not_null, default in columns}
        | {f"constraint {t}.{name}: {definition}" for t, name, definition in constraints}
        | {f"index {t}.{name}: {definition}" for t, name, definition in indexes}
    )  # fmt: skip


def _ddl(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            return _sqlite_ddl(conn)
        return _postgresql_ddl(conn)


def _downgrade(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def walk_up_and_down(engine: Engine) -> tuple[list[str], dict[str, set[str]]]:
    """The revisions in order, and the schema after each step: ``up R`` for every revision R
    from the first, then ``down R`` for each revision a downgrade lands on, ``down base``."""
    script = ScriptDirectory.from_config(alembic_config())
    revisions = [s.revision for s in reversed(list(script.walk_revisions()))]
    steps: dict[str, set[str]] = {}
    for revision in revisions:
        upgrade(engine, revision)
        steps[f"up {revision}"] = _ddl(engine)
    for revision in [*reversed(revisions[:-1]), "base"]:
        _downgrade(engine, revision)
        steps[f"down {revision}"] = _ddl(engine)
    return revisions, steps


def _recorded_against(step: str, revisions: list[str]) -> str | None:
    """``up R`` is recorded as a change of ``up`` the revision before (None: the empty
    database); ``down R`` as a change of ``up R``, where a downgrade should land."""
    direction, revision = step.split()
    if direction == "down":
        return None if revision == "base" else f"up {revision}"
    before = revisions.index(revision) - 1
    return f"up {revisions[before]}" if before >= 0 else None


def _expected(
    step: str, revisions: list[str], recorded: dict[str, dict[str, list[str]]]
) -> set[str]:
    against = _recorded_against(step, revisions)
    start = _expected(against, revisions, recorded) if against else set()
    return (start - set(recorded[step]["removed"])) | set(recorded[step]["added"])


def _pin_steps(dialect: str, revisions: list[str], steps: dict[str, set[str]], every: bool) -> None:
    """Record the steps a new migration adds (a recorded step is kept as it is), or with
    ``every`` all of them again."""
    pinned = json.loads(PINNED.read_text("utf-8")) if PINNED.exists() else {}
    recorded = {} if every else pinned.get(dialect, {})
    for step, ddl in steps.items():
        against = _recorded_against(step, revisions)
        start = steps[against] if against else set()
        recorded.setdefault(step, {"added": sorted(ddl - start), "removed": sorted(start - ddl)})
    pinned[dialect] = recorded
    PINNED.write_text(json.dumps(pinned, indent=1, ensure_ascii=False) + "\n", "utf-8")


def _has_search_support(engine: Engine) -> bool:
    """Whether this database can hold the pairs' search index at all: 0001 skips it, on
    purpose, where SQLite lacks FTS5's trigram tokenizer or PostgreSQL lacks pg_trgm."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            try:
                conn.exec_driver_sql(
                    "CREATE VIRTUAL TABLE temp.probe USING fts5(x, tokenize='trigram')"
                )
            except OperationalError:
                return False
            conn.exec_driver_sql("DROP TABLE temp.probe")
            return True
        query = "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"
        return conn.exec_driver_sql(query).first() is not None


def _search(line: str) -> bool:
    return "pairs_fts" in line or "trgm" in line


def test_every_step_up_and_down_writes_the_pinned_ddl(db_url: str) -> None:
    engine = create_workbench_engine(db_url)
    dialect = engine.dialect.name
    revisions, steps = walk_up_and_down(engine)
    searchable = _has_search_support(engine)
    engine.dispose()
    if (pin := os.environ.get("PIN_NEW_MIGRATIONS")) in ("1", "all"):
        _pin_steps(dialect, revisions, steps, every=pin == "all")
    recorded = json.loads(PINNED.read_text("utf-8"))[dialect]
    assert sorted(steps) == sorted(recorded), "a migration's steps are not pinned (see the top)"
    for step, ddl in steps.items():
        expected = _expected(step, revisions, recorded)
        if not searchable:  # where the index cannot be, only the rest is compared
            expected = {line for line in expected if not _search(line)}
        assert ddl == expected, (
            f"{dialect}, after '{step}': new {sorted(ddl - expected)}, "
            f"gone {sorted(expected - ddl)}"
        )


def test_a_downgrade_to_nothing_then_up_again_gives_the_fresh_schema(db_url: str) -> None:
    """Every downgrade removes what its upgrade made (and re-creates what it dropped), so
    the schema after a full round trip is the one a fresh database gets."""
    engine = create_workbench_engine(db_url)
    upgrade(engine)
    fresh = _ddl(engine)
    _downgrade(engine, "base")
    assert {line for line in _ddl(engine) if "alembic_version" not in line} == set()
    upgrade(engine)
    assert _ddl(engine) == fresh
    engine.dispose()


def _outside(modules: set[str], allowed: tuple[str, ...]) -> set[str]:
    return {m for m in modules if not any(m == a or m.startswith(f"{a}.") for a in allowed)}


def test_migrations_import_only_libraries_and_the_frozen_helpers() -> None:
    """Not ``db.tables`` nor anything else of today's code, which may change under them."""
    assert _outside(imported_modules(MIGRATIONS_DIR / "history_ops.py"), LIBRARIES) == set()
    versions = sorted((MIGRATIONS_DIR / "versions").glob("*.py"))
    assert len(versions) >= 12
    for path in versions:
        assert _outside(imported_modules(path), (*LIBRARIES, HELPERS)) == set(), path.name
