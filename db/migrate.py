"""Programmatic Alembic: no alembic.ini is needed at runtime.

``upgrade(engine)`` is safe when several processes start at once: on PostgreSQL the
migration runs under a transaction-scoped advisory lock, on SQLite under an exclusive
``flock`` on ``<db file>.migrate.lock``; the loser then finds the schema already at head.

Developers add a revision with
``python -m db.migrate --url sqlite:///workbench_data/workbench.db revision -m "what changed"``
(it upgrades that database, then autogenerates the difference to the models), then record
the DDL it writes with ``PIN_NEW_MIGRATIONS=1 pytest tests/db/test_migration_history.py``.
Migrations share code only through the frozen ``migrations/history_ops.py``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from db.engine import create_workbench_engine
from db.search import SEARCH_OBJECT_PREFIXES

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x5742_4442  # "WBDB": any constant shared by all workbench processes


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate filter: ignore the search objects that live outside the models
    (``db.search``)."""
    return not (name or "").startswith(SEARCH_OBJECT_PREFIXES)


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this code's migrations (a database at another was
    written by a newer workbench, or is no workbench's)."""
    script = ScriptDirectory.from_config(alembic_config())
    return revision in {s.revision for s in script.walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


@contextlib.contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database
    if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
        yield
        return
    try:
        import fcntl
    except ImportError:  # Windows: no flock; concurrent first starts are then unguarded
        yield
        return
    with open(f"{database}.migrate.lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database behind ``engine`` to ``revision`` (default: newest)."""
    head = head_revision()
    with _sqlite_file_lock(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        if revision == "head" and current_revision(conn) == head:
            return
        command.upgrade(alembic_config(conn), revision)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m db.migrate")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("upgrade", help="upgrade the database to head")
    sub.add_parser("current", help="print the database's revision")
    rev = sub.add_parser("revision", help="autogenerate a new revision from the models")
    rev.add_argument("-m", "--message", required=True)
    parser.add_argument("--url", required=True, help="the database's SQLAlchemy URL")
    args = parser.parse_args(argv)
    url = args.url
    engine = create_workbench_engine(url)
    if args.cmd == "upgrade":
        upgrade(engine)
    elif args.cmd == "current":
        with engine.connect() as conn:
            print(current_revision(conn))
    else:
        upgrade(engine)
        command.revision(alembic_config(url=url), message=args.message, autogenerate=True)


if __name__ == "__main__":
    main()
