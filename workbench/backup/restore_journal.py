"""The journal that makes a restore all or nothing, and what the next start does with it.

Putting a restore in place takes several renames: ``models/`` out and the staged one in, then
the database (SQLite: the old file out and the checked copy in; PostgreSQL: one ``pg_restore``
transaction). A process killed between two of them would leave the new model folders beside
the old database. So before the first rename the restore writes ``restore.journal`` (JSON,
fsynced: what it is about to move, and where each old thing goes), and after the last one it
marks the journal committed. Every rename moves a thing to a place that says what it is, so
which steps happened is read from the folder itself:

* a journal not committed is rolled back: the staged folder and the copied database go back
  to staging, the old ones back in place (PostgreSQL: unless the dump's transaction
  committed, seen by ``alembic_version`` being another table than before; then it is
  finished);
* a committed journal is finished (its old data removed);
* then the journal goes, and what a killed restore left (``.restore-<hex>`` folders, the
  SQLite file's ``.restoring`` / ``.pre-restore`` copies) is swept.

Each step can itself be killed and run again. It runs with the data folder's lock held alone
(``database_lock``): by the restore itself first, and by the first process that opens the
database afterwards (``storage.engine``), which says what it did in one line (logged, and
shown by the app: ``untold_recoveries``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from db.engine import create_workbench_engine
from workbench import database_lock, settings
from workbench.backup.archive import MODELS_PREFIX, sqlite_file
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.output_files import fsync_folder

log = logging.getLogger("workbench.backup")

OLD_MODELS = "models-old"  # in staging: the models/ that was there before
_RESTORING, _PRE_RESTORE = ".restoring", ".pre-restore"  # beside the SQLite file
_ALEMBIC_OID = text("SELECT to_regclass('alembic_version')::oid")

_recovered: list[Message] = []  # what this process' start finished or rolled back, untold


@dataclass
class Journal:
    """What a restore is about to put in place (written before its first rename)."""

    file: str  # the backup, for the message
    staging: str  # the restore's staging folder
    had_models: bool  # whether models/ existed (it went to staging/models-old)
    sqlite: str | None  # SQLite: the database file (the old one goes to <file>.pre-restore)
    had_database: bool
    alembic_oid: int | None = None  # PostgreSQL: alembic_version's table before the restore
    committed: bool = False

    @property
    def staged_models(self) -> Path:
        return Path(self.staging) / MODELS_PREFIX

    @property
    def old_models(self) -> Path:
        return Path(self.staging) / OLD_MODELS


def incoming_sqlite(target: Path) -> Path:
    """Where the checked copy of a SQLite database waits beside the file it will replace."""
    return target.with_name(target.name + _RESTORING)


def swap(journal: Journal, restore_database: Callable[[], None] | None = None) -> None:
    """Put the staged models and database in place, journaled, then sweep what is left.
    ``restore_database``: PostgreSQL's ``pg_restore``; a SQLite copy waiting at
    ``incoming_sqlite`` is renamed in here. Any exception rolls everything back before it
    propagates; a kill is finished or rolled back by the next start."""
    _write(journal)
    models = settings.models_dir()
    try:
        if journal.had_models:
            os.replace(models, journal.old_models)
        os.replace(journal.staged_models, models)
        if journal.sqlite is not None:
            target = Path(journal.sqlite)
            if journal.had_database:
                os.replace(target, target.with_name(target.name + _PRE_RESTORE))
            os.replace(incoming_sqlite(target), target)
            fsync_folder(target.parent)
        elif restore_database is not None:
            restore_database()
        fsync_folder(models.parent)
    except BaseException:
        _roll_back(journal)
        _forget()
        _sweep(journal)
        raise
    journal.committed = True
    _write(journal)
    _forget()
    _sweep(journal)


def finish_interrupted() -> Message | None:
    """At a process' first opening of the database: finish or roll back a restore that was
    killed, and sweep what it left, when no other process holds the data folder (a restore
    in progress does; then nothing is touched)."""
    if not _leftovers():
        return None
    try:
        with database_lock.exclusive():
            return recover()
    except WorkbenchError:  # a restore (or another process' start) holds it: theirs to do
        return None


def untold_recoveries() -> list[Message]:
    """What ``finish_interrupted`` did in this process that no page has shown yet (each
    returned once)."""
    told = list(_recovered)
    _recovered.clear()
    return told


def recover() -> Message | None:
    """Finish or roll back an interrupted restore's journal and sweep its leftovers; the
    caller holds the data folder's lock alone. Returns (and logs) what it did."""
    outcome = None
    journal = _read()
    if journal is not None:
        if not journal.committed and _postgres_restored(journal):
            journal.committed = True  # killed after pg_restore's commit, before the mark
        if journal.committed:
            outcome = Message(
                N_(
                    "an interrupted restore of {file} was finished: the data folder holds the "
                    "backup's data"
                ),
                file=journal.file,
            )
        else:
            _roll_back(journal)
            outcome = Message(
                N_(
                    "an interrupted restore of {file} was rolled back: the data folder holds "
                    "the data it held before"
                ),
                file=journal.file,
            )
        _forget()
        log.warning("%s", outcome)
        _recovered.append(outcome)
    _sweep(journal)
    return outcome


def _roll_back(journal: Journal) -> None:
    """Undo the renames that happened (each undone one is not undone twice: see the module
    docstring), models first, then the SQLite file."""
    models, staged, old = settings.models_dir(), journal.staged_models, journal.old_models
    if models.exists() and not staged.exists() and (old.exists() or not journal.had_models):
        os.replace(models, staged)  # the backup's models/ was put in place
    if old.exists():
        os.replace(old, models)
    if journal.sqlite is not None:
        target = Path(journal.sqlite)
        incoming, before = incoming_sqlite(target), target.with_name(target.name + _PRE_RESTORE)
        put_in = before.exists() or not journal.had_database
        if target.exists() and not incoming.exists() and put_in:
            os.replace(target, incoming)  # the backup's database was put in place
            for suffix in ("-wal", "-shm"):
                Path(f"{target}{suffix}").unlink(missing_ok=True)
        if before.exists():
            os.replace(before, target)
        fsync_folder(target.parent)
    fsync_folder(models.parent)


def _postgres_restored(journal: Journal) -> bool:
    """Whether the dump's transaction committed: ``pg_restore --clean`` recreates
    ``alembic_version``, so its table is another one than before."""
    if journal.sqlite is not None:
        return False
    engine = create_workbench_engine(settings.database_url())
    try:
        with engine.connect() as conn:
            now = conn.execute(_ALEMBIC_OID).scalar()
    finally:
        engine.dispose()
    return now is not None and now != journal.alembic_oid


def postgres_marker(url: str) -> int | None:
    """The oid of ``alembic_version`` now (None when there is none), for the journal."""
    engine = create_workbench_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(_ALEMBIC_OID).scalar()
    finally:
        engine.dispose()


def _leftovers() -> bool:
    journal = settings.restore_journal_path()
    return journal.exists() or _partial(journal).exists() or bool(settings.restore_staging_dirs())


def _partial(journal: Path) -> Path:
    return journal.with_name(journal.name + ".partial")


def _sweep(journal: Journal | None) -> None:
    """What killed restores left: every staging folder, and the copies beside the SQLite
    file (no other restore runs: the caller holds the lock alone)."""
    url = make_url(settings.database_url())
    sqlite = Path(journal.sqlite) if journal is not None and journal.sqlite else None
    if sqlite is None and url.get_backend_name() == "sqlite":
        with contextlib.suppress(WorkbenchError):  # (a database in memory has no copies)
            sqlite = sqlite_file(url)
    if sqlite is not None:
        for suffix in (_RESTORING, _PRE_RESTORE):
            sqlite.with_name(sqlite.name + suffix).unlink(missing_ok=True)
    _partial(settings.restore_journal_path()).unlink(missing_ok=True)
    for folder in settings.restore_staging_dirs():  # last: while a copy is left, so is one
        shutil.rmtree(folder, ignore_errors=True)


def _write(journal: Journal) -> None:
    """Replace the journal atomically and durably (a half-written journal is never read)."""
    path = settings.restore_journal_path()
    partial = _partial(path)
    with open(partial, "w", encoding="utf-8") as out:
        json.dump(asdict(journal), out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)
    fsync_folder(path.parent)


def _read() -> Journal | None:
    try:
        return Journal(**json.loads(settings.restore_journal_path().read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def _forget() -> None:
    settings.restore_journal_path().unlink(missing_ok=True)
    fsync_folder(settings.home())
