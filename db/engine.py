"""Engine and session setup: one cached engine per database URL, migrated on first use.

``WORKBENCH_HOME`` (default ``./workbench_data``) holds the SQLite file and model artifacts;
``WORKBENCH_DB_URL`` (any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db``)
overrides the database. A URL that cannot be used (malformed, unknown backend, missing
driver, a SQLite file in a folder that does not exist) raises ``DatabaseConfigError`` with a
one-line message; no folder is ever created for a URL given explicitly.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

ENV_HOME = "WORKBENCH_HOME"
ENV_DB_URL = "WORKBENCH_DB_URL"
DEFAULT_HOME = "./workbench_data"
# Writers wait this long for the lock (a million-pair import holds it for about a minute).
SQLITE_BUSY_TIMEOUT_MS = 60_000
ENV_SQLITE_BUSY_TIMEOUT = "WORKBENCH_SQLITE_BUSY_TIMEOUT_MS"  # overrides it (tests shrink it)

# Ids are INTEGER columns: 32-bit on PostgreSQL, so no row id is ever larger than this.
MAX_ID = 2**31 - 1

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


class DatabaseConfigError(ValueError):
    """The configured database URL cannot be used; the message is one line for the user."""


def workbench_home() -> Path:
    """The data folder (created if missing): SQLite file, ``models/`` artifacts, logs."""
    home = Path(os.environ.get(ENV_HOME) or DEFAULT_HOME).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def database_url() -> str:
    """``WORKBENCH_DB_URL`` if set, else the SQLite file ``<WORKBENCH_HOME>/workbench.db``."""
    url = os.environ.get(ENV_DB_URL, "").strip()
    if url:
        return url
    return f"sqlite:///{workbench_home() / 'workbench.db'}"


def sqlite_busy_timeout_ms() -> int:
    """How long a SQLite writer waits for the lock before 'database is locked'."""
    return int(os.environ.get(ENV_SQLITE_BUSY_TIMEOUT) or SQLITE_BUSY_TIMEOUT_MS)


def _set_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Per-connection SQLite settings: WAL lets readers run beside one writer; the busy
    timeout makes concurrent writers (UI, worker heartbeats) wait instead of failing."""
    cur = dbapi_connection.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {sqlite_busy_timeout_ms()}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
    finally:
        cur.close()


def create_workbench_engine(url: str) -> Engine:
    """A new engine for ``url`` with the workbench's connection settings (not migrated)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise DatabaseConfigError(
            f"{ENV_DB_URL} is not a database URL (expected e.g. sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host/db)"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        if parsed.get_backend_name() == "sqlite":
            kwargs: dict[str, Any] = {"connect_args": {"timeout": sqlite_busy_timeout_ms() / 1000}}
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
            event.listen(engine, "connect", _set_sqlite_pragmas)
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


def get_engine(url: str | None = None) -> Engine:
    """The cached engine for ``url`` (default: ``database_url()``); the schema is upgraded to
    the newest Alembic revision the first time a URL is used in this process."""
    url = url or database_url()
    engine = _engines.get(url)
    if engine is not None:
        return engine
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            from db.migrate import upgrade

            engine = create_workbench_engine(url)
            try:
                upgrade(engine)
            except BaseException:
                engine.dispose()
                raise
            _engines[url] = engine
    return engine


def dispose_engines() -> None:
    """Close every cached engine (tests call this between temporary databases)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A short unit of work: commits on success, rolls back on any exception.

    Objects stay readable after the block (``expire_on_commit=False``), but services should
    still return plain dataclasses rather than ORM objects.
    """
    with Session(get_engine(url), expire_on_commit=False) as session, session.begin():
        yield session
