"""Engines with the workbench's connection settings; nothing else (no migration, no cache).

A URL that cannot be used (malformed, unknown backend, missing driver, a SQLite file in a
folder that does not exist) raises ``DatabaseConfigError`` with a one-line message; no folder
is ever created for a URL given explicitly. Which URL to use is the application's choice
(``workbench.settings``); ``db.init`` opens and migrates it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

# Writers wait this long for the lock (a million-pair import holds it for about a minute).
SQLITE_BUSY_TIMEOUT_MS = 60_000
# The name under which users set the URL, for the messages of DatabaseConfigError.
URL_SETTING = "WORKBENCH_DB_URL"

# Ids are INTEGER columns: 32-bit on PostgreSQL, so no row id is ever larger than this.
MAX_ID = 2**31 - 1


class DatabaseConfigError(ValueError):
    """The configured database URL cannot be used; the message is one line for the user."""


def _sqlite_pragmas(busy_timeout_ms: int) -> Any:
    def set_pragmas(dbapi_connection: Any, _record: Any) -> None:
        """Per-connection SQLite settings: WAL lets readers run beside one writer; the busy
        timeout makes concurrent writers (UI, worker heartbeats) wait instead of failing."""
        cur = dbapi_connection.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    return set_pragmas


def create_workbench_engine(
    url: str, *, sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS
) -> Engine:
    """A new engine for ``url`` with the workbench's connection settings (not migrated)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise DatabaseConfigError(
            f"{URL_SETTING} is not a database URL (expected e.g. sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host/db)"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        if parsed.get_backend_name() == "sqlite":
            kwargs: dict[str, Any] = {"connect_args": {"timeout": sqlite_busy_timeout_ms / 1000}}
            if parsed.database in (None, "", ":memory:"):
                # One shared connection, otherwise every session would see its own empty DB.
                kwargs["poolclass"] = StaticPool
                kwargs["connect_args"]["check_same_thread"] = False
            elif not parsed.database.startswith("file:"):
                folder = Path(parsed.database).expanduser().parent
                if not folder.is_dir():
                    raise DatabaseConfigError(
                        f"the folder of the SQLite database {shown} does not exist: {folder}"
                    )
            engine = create_engine(parsed, **kwargs)
            event.listen(engine, "connect", _sqlite_pragmas(sqlite_busy_timeout_ms))
            return engine
        return create_engine(parsed, pool_pre_ping=True)
    except NoSuchModuleError:
        raise DatabaseConfigError(
            f"unknown database backend in {shown} (use sqlite:/// or postgresql+psycopg://)"
        ) from None
    except ImportError as exc:
        raise DatabaseConfigError(
            f"the database driver for {shown} is not installed ({exc.name or exc})"
        ) from None
