"""Storage layer: SQLAlchemy models, engines, Alembic migrations and the search SQL.

Imports nothing from ``workbench`` or the UI. The application opens a database with
``init(url)``: the engine for ``url``, its schema brought to the newest revision the first
time this process opens it. Modules depend one way: ``db.migrate`` uses ``db.engine`` (and
``db.search``), never the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import Engine

from db.engine import SQLITE_BUSY_TIMEOUT_MS, create_workbench_engine

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def init(
    url: str,
    *,
    sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    after_upgrade: Callable[[Engine], object] | None = None,
    before_open: Callable[[], object] | None = None,
) -> Engine:
    """The engine for ``url``, created and migrated to the newest revision once per process
    (cached afterwards: every later call is a dictionary lookup). ``after_upgrade``: the
    application's data steps, run once per process right after migrating (a migration that
    needs application rules leaves its rows flagged for them; ``db`` imports no such rule).
    ``before_open``: called first, each time the engine is created (the application takes
    its lock on the data folder there)."""
    engine = _engines.get(url)
    if engine is not None:
        return engine
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            # Imported here: a process that never opens a database (`--help`) skips Alembic.
            from db.migrate import upgrade

            if before_open is not None:
                before_open()
            engine = create_workbench_engine(url, sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
            try:
                upgrade(engine)
                if after_upgrade is not None:
                    after_upgrade(engine)
            except BaseException:
                engine.dispose()
                raise
            _engines[url] = engine
    return engine


def dispose_engines() -> None:
    """Close every engine ``init`` opened (tests call this between temporary databases)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


__all__ = ["dispose_engines", "init"]
