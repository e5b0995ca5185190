"""Restoring a backup: an archive's database and model folders put in place, after every check
passed.

A restore changes nothing until it has checked everything (each refusal is one
``WorkbenchError``):

* it holds the data folder's lock alone (``database_lock``): no other process on this machine
  has the database open, and none opens it until the restore is done; on PostgreSQL no other
  client may be connected either, from any machine;
* a data folder whose ``models/`` holds anything, or a database holding any row, is refused
  unless ``force``;
* the archive is read through once without writing anything, every member checked against
  its manifest under the caps of ``archive.each_member`` (``archive.verified_manifest``);
* then it is unpacked into a staging folder inside the data folder (checked again as it is
  written), and its database is opened and checked (``restore_checks``: a workbench database
  at a schema revision this code knows, whose model versions' folders all lie in
  ``models/``);
* only then do the model folders and the database replace the old ones, journaled
  (``restore_journal``): a restore killed at any point leaves the old data or the new, never
  a mix, once the next process has opened the data folder.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlalchemy import inspect, select, text
from sqlalchemy.engine import URL, make_url

import db
from db.engine import create_workbench_engine
from db.tables import Base
from workbench import database_lock, settings
from workbench.backup import pg_tools, restore_checks, restore_journal
from workbench.backup.archive import (
    CHUNK,
    DATABASE_MEMBERS,
    MANIFEST,
    MODELS_PREFIX,
    ArchiveSummary,
    Manifest,
    each_member,
    sqlite_file,
    verified_manifest,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_


@dataclass(frozen=True)
class RestoreSummary(ArchiveSummary):
    """What a restore put in place (as the backup's manifest counted it)."""

    created_at: str
    seconds: float


def restore(path: Path, *, force: bool = False) -> RestoreSummary:
    """Put the database and model folders of the archive ``path`` in place.

    Refuses (``WorkbenchError``, nothing changed), before touching the data folder or the
    database: while another process has the database open, a target holding data unless
    ``force``, an archive that is damaged, too large or of the other database kind, a
    malformed manifest, and a database that is not a workbench database this workbench can
    open (see the module docstring).
    """
    started = time.monotonic()
    path = Path(path).expanduser().absolute()
    if not path.is_file():
        raise WorkbenchError(N_("no such backup file: {path}"), path=path)
    url = make_url(settings.database_url())
    kind = url.get_backend_name()
    if kind not in DATABASE_MEMBERS:
        raise WorkbenchError(N_("backups support SQLite and PostgreSQL, not {kind}"), kind=kind)
    with database_lock.exclusive():  # no process (this one neither) has the database open
        db.dispose_engines()
        if kind == "postgresql":
            _refuse_other_clients(url)
        if not force:
            _refuse_unless_empty(url)
        manifest = verified_manifest(path)  # read whole before a byte is written
        if manifest.database != kind:
            raise WorkbenchError(
                N_("this backup holds a {found} database, but the configured database is {kind}"),
                found=manifest.database,
                kind=kind,
            )
        restore_journal.recover()  # a restore killed before this one is finished first
        staging = settings.restore_staging_dir(uuid.uuid4().hex[:12])
        staging.mkdir()
        try:
            _stage(path, staging, manifest)
            (staging / MODELS_PREFIX).mkdir(exist_ok=True)  # a backup with no version
            database_file = staging / DATABASE_MEMBERS[kind]
            journal = restore_journal.Journal(
                file=str(path),
                staging=str(staging),
                had_models=settings.models_dir().exists(),
                sqlite=None,
                had_database=False,
            )
            if kind == "sqlite":
                restore_checks.check_sqlite(database_file)
                target = sqlite_file(url)
                journal.sqlite, journal.had_database = str(target), _sqlite_set_aside(target)
                shutil.move(database_file, restore_journal.incoming_sqlite(target))
                restore_journal.swap(journal)
            else:
                tool, env = _pg_restore_tool(url)
                restore_checks.check_postgres_dump(database_file, tool, env)
                journal.alembic_oid = restore_journal.postgres_marker(
                    url.render_as_string(hide_password=False)
                )
                restore_journal.swap(
                    journal, lambda: _restore_postgres(database_file, url, tool, env)
                )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return RestoreSummary(
        file=str(path),
        database=kind,
        counts=manifest.counts,
        model_versions=manifest.model_versions,
        created_at=manifest.created_at,
        seconds=round(time.monotonic() - started, 3),
    )


def _refuse_other_clients(url: URL) -> None:
    """PostgreSQL: refuse while any other client is connected to the database, from this
    machine or another (their connections are what the data folder's lock cannot see). A
    connection this process just closed may linger a moment: asked again for a little while."""
    engine = create_workbench_engine(url.render_as_string(hide_password=False))
    deadline = time.monotonic() + _CLOSING_CONNECTIONS_S
    try:
        while True:
            with engine.connect() as conn:
                clients = conn.execute(_OTHER_CLIENTS).scalars().all()
            if not clients or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        engine.dispose()
    if clients:
        raise WorkbenchError(
            N_(
                "the PostgreSQL database has {n} other open connection(s) (from {hosts}): stop "
                "every workbench process that uses it, on every machine, then restore"
            ),
            n=len(clients),
            hosts=", ".join(sorted(set(clients))),
        )


_CLOSING_CONNECTIONS_S = 3.0
# Every other client's connection to this database (background processes are not clients).
_OTHER_CLIENTS = text(
    "SELECT coalesce(host(client_addr), 'local') FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend'"
)


def _refuse_unless_empty(url: URL) -> None:
    models = settings.models_dir()
    if models.is_dir() and any(models.iterdir()):
        raise WorkbenchError(
            N_(
                "the data folder is not empty ({folder} holds model folders): restore into an "
                "empty one, or force it to replace what is there (--force)"
            ),
            folder=models,
        )
    rows = _tables_with_rows(url)
    if rows:
        raise WorkbenchError(
            N_(
                "the database is not empty ({tables} hold rows): restore into an empty one, "
                "or force it to replace what is there (--force)"
            ),
            tables=", ".join(rows),
        )


def _tables_with_rows(url: URL) -> list[str]:
    """The workbench tables that hold a row, read without creating or migrating anything."""
    if url.get_backend_name() == "sqlite":
        file = sqlite_file(url)
        if not file.exists() or file.stat().st_size == 0:
            return []
    engine = create_workbench_engine(url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            present = set(inspect(conn).get_table_names())
            return [
                table.name
                for table in Base.metadata.sorted_tables
                if table.name in present
                and conn.execute(select(table).limit(1)).first() is not None
            ]
    finally:
        engine.dispose()


def _stage(path: Path, staging: Path, manifest: Manifest) -> None:
    """Unpack the archive, read through already by ``verified_manifest``, into ``staging``;
    each member is checked again as it is written, in case the file changed meanwhile."""
    written: set[str] = set()

    def write(name: str, size: int, source: IO[bytes]) -> None:
        if name == MANIFEST:
            return
        expected = manifest.members.get(name)
        if expected is None or expected[0] != size or name in written:
            raise _changed(path)
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(target, "xb") as out:
            while block := source.read(CHUNK):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != expected[1]:
            raise _changed(path)
        written.add(name)

    each_member(path, write)
    if written != set(manifest.members):
        raise _changed(path)


def _changed(path: Path) -> WorkbenchError:
    return WorkbenchError(
        N_("{path} changed while it was restored; nothing was restored"), path=path
    )


def _sqlite_set_aside(target: Path) -> bool:
    """Make the old SQLite database one file that a rename moves whole: its WAL checkpointed
    into it and removed (a stale ``-wal`` beside the new file would be replayed into it).
    Whether there is an old database."""
    if not target.exists() or target.stat().st_size == 0:
        return target.exists()
    conn = sqlite3.connect(target, timeout=settings.sqlite_busy_timeout_ms() / 1000)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    return True


def _pg_restore_tool(url: URL) -> tuple[str, dict[str, str]]:
    """``pg_restore`` for this server, and the environment it runs in."""
    engine = create_workbench_engine(url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            tool = pg_tools.pg_tool("pg_restore", pg_tools.server_major(conn))
    finally:
        engine.dispose()
    return tool, pg_tools.libpq(url)[1]


def _restore_postgres(dump: Path, url: URL, pg_restore: str, env: dict[str, str]) -> None:
    """``pg_restore`` in one transaction: the workbench's objects are dropped (when there)
    and recreated; any failure leaves the database as it was."""
    listing = pg_tools.run_pg([pg_restore, "--list", str(dump)], env)
    # COMMENT ON EXTENSION needs the extension's owner (a superuser): leave the comment out.
    kept = [line for line in listing.splitlines() if " COMMENT - EXTENSION " not in line]
    contents = dump.with_suffix(".list")
    contents.write_text("\n".join(kept) + "\n", encoding="utf-8")
    pg_tools.run_pg(
        [pg_restore, "--clean", "--if-exists", "--no-owner", "--no-privileges",
         "--single-transaction", "--exit-on-error", f"--use-list={contents}",
         f"--dbname={pg_tools.libpq(url)[0]}", str(dump)],
        env,
    )  # fmt: skip
