"""The workbench's database: the one place the application opens it and starts a session.

``engine()`` is the engine for ``settings.database_url()``, migrated to the newest revision
the first time this process opens that database (``db.init``); from then on the process
holds the data folder's shared lock (``database_lock``), so that no restore replaces the
database under it. Before that, a restore that was killed is finished or rolled back
(``restore_journal``). ``session_scope()`` is the unit of work a service opens: one per public
function, handed to its private helpers (functions that take a ``session`` argument never
open one of their own).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

import db
from workbench import database_lock, settings
from workbench.backup import restore_journal
from workbench.corpus import splits
from workbench.errors import WorkbenchError
from workbench.messages import MessageId

Row = TypeVar("Row")
Record = TypeVar("Record")


def engine() -> Engine:
    """The engine of the configured database (opened and migrated on first use)."""
    return db.init(
        settings.database_url(),
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms(),
        after_upgrade=splits.group_old_corpora,  # the data step of migration 0008
        before_open=_open_data_folder,
    )


def _open_data_folder() -> None:
    restore_journal.finish_interrupted()
    database_lock.hold_shared()


@contextmanager
def session_scope() -> Iterator[Session]:
    """A short unit of work: commits on success, rolls back on any exception.

    Objects stay readable after the block (``expire_on_commit=False``), but services still
    return plain dataclasses rather than ORM objects.
    """
    with Session(engine(), expire_on_commit=False) as session, session.begin():
        yield session


def get_row(session: Session, table: type[Row], row_id: int, missing: MessageId) -> Row:
    """The row ``row_id`` of ``table``, or a ``WorkbenchError`` of ``missing`` (given ``id``):
    a service names an id that is not there in one line, never a ``None`` further on."""
    row = session.get(table, row_id)
    if row is None:
        raise WorkbenchError(missing, id=row_id)
    return row


def record_of(record: type[Record], row: object, /, **given: Any) -> Record:
    """The plain dataclass ``record`` of the ORM ``row`` (services return these, never rows):
    every field the row's table has a column of the same name for is copied; ``given`` holds
    the rest and the columns that are converted (a JSON column copied, a NULL read as 0). A
    field that is neither (a new field nobody fills, or one named like a relationship) is a
    ``TypeError`` here, never a value copied by accident."""
    columns = _mapped_columns(type(row))
    names = [f.name for f in fields(record) if f.name not in given]
    if unknown := [name for name in names if name not in columns]:
        raise TypeError(f"{record.__name__}: no column for {', '.join(unknown)}")
    return record(**{name: getattr(row, name) for name in names}, **given)


@cache
def _mapped_columns(table: type) -> frozenset[str]:
    """The attribute names of an ORM class's columns (a listing asks for each of its rows)."""
    return frozenset(attr.key for attr in sa_inspect(table).column_attrs)
