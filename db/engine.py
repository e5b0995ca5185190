"""Engine and session setup: one cached engine per database URL, migrated on first use.

``WORKBENCH_HOME`` (default ``./workbench_data``) holds the SQLite file and model artifacts;
``WORKBENCH_DB_URL`` (any SQLAlchemy URL, e.g. ``postgresql+psycopg://user@host/db``)
overrides the database.
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
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

ENV_HOME = "WORKBENCH_HOME"
ENV_DB_URL = "WORKBENCH_DB_URL"
DEFAULT_HOME = "./workbench_data"
# Writers wait this long for the lock (a million-pair import holds it for about a minute).
SQLITE_BUSY_TIMEOUT_MS = 60_000
ENV_SQLITE_BUSY_TIMEOUT = "WORKBENCH_SQLITE_BUSY_TIMEOUT_MS"  # overrides it (tests shrink it)

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


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
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs: dict[str, Any] = {"connect_args": {"timeout": sqlite_busy_timeout_ms() / 1000}}
        if parsed.database in (None, "", ":memory:"):
            # One shared connection, otherwise every session would see its own empty DB.
            kwargs["poolclass"] = StaticPool
            kwargs["connect_args"]["check_same_thread"] = False
        else:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _set_sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


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
