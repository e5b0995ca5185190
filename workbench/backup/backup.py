"""Taking a backup: the database and every version's model folder in one archive (its format:
``archive``).

The archive is streamed (nothing is held in memory) into a temporary file beside FILE, which
is renamed onto FILE only once complete; gzip-compressed (level 1: fast, and most of what
compresses is the database's text) when FILE ends in ``.gz`` or ``.tgz``.

A backup may run while the app edits and a worker trains. The database copy is one snapshot:
SQLite's backup API copies in one step, which in WAL mode reads one snapshot while writers go
on; on PostgreSQL we export the snapshot of a REPEATABLE READ transaction, ``pg_dump`` dumps
it (``--snapshot``) and we read the version list in it. The model folders are those of the
versions in that snapshot: a version's row is committed before its folder is moved into
place (``registry.register_version``), so a folder not there yet is waited for a little, and
each version's files are opened before any is written, so one deleted meanwhile is still
copied whole. Model files never change after registration.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Connection, Engine, func, select, text

from core_model.artifact import ArtifactError, model_files
from db.engine import create_workbench_engine
from db.migrate import current_revision
from db.tables import Corpus, GlossaryTerm, ModelVersion, Pair, TrainingRun, utcnow
from workbench import output_files, settings
from workbench.backup import pg_tools
from workbench.backup.archive import (
    CHUNK,
    DATABASE_MEMBERS,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MODELS_PREFIX,
    ArchiveSummary,
    sqlite_file,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import engine as workbench_engine

# What a backup counts (and a restore reports): the user's data, by table.
COUNTED = (Corpus, Pair, GlossaryTerm, ModelVersion, TrainingRun)
COMPRESSED_SUFFIXES = (".gz", ".tgz")
GZIP_LEVEL = 1  # the fastest: 1M pairs 608 -> 327 MiB in 1.8x the plain time (bench/backup_scale)
_FOLDER_WAIT_S = 5.0  # a registering version's folder lands right after its row commits


@dataclass(frozen=True)
class BackupSummary(ArchiveSummary):
    """What a backup wrote: the file, its database kind, row counts and model folders."""

    missing_model_folders: list[int]  # versions whose folder was gone (recorded, not copied)
    archive_bytes: int
    seconds: float


@dataclass(frozen=True)
class _Snapshot:
    """The database copied at one instant, and what that instant held."""

    kind: str  # "sqlite" or "postgresql"
    file: Path  # the copy on disk
    revision: str | None
    counts: dict[str, int]
    versions: list[tuple[int, str]]  # (id, stored artifact path)


def backup(path: Path) -> BackupSummary:
    """Write the database and every version's model files into the archive ``path``
    (replaced atomically when it exists; its folder must exist)."""
    started = time.monotonic()
    path = Path(path).expanduser().absolute()
    target = output_files.checked_target(path)  # refused before the database is copied
    engine = workbench_engine()  # opens (and, like every command, migrates) the database
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".wb-backup-") as work:
        snapshot = _take_snapshot(engine, Path(work))
        missing = _write_archive(path, snapshot)
    return BackupSummary(
        file=str(path),
        database=engine.dialect.name,
        counts=snapshot.counts,
        model_versions=[v for v, _ in snapshot.versions if v not in missing],
        missing_model_folders=missing,
        archive_bytes=target.stat().st_size,
        seconds=round(time.monotonic() - started, 3),
    )


def _take_snapshot(engine: Engine, work: Path) -> _Snapshot:
    if engine.dialect.name == "sqlite":
        return _sqlite_snapshot(engine, work)
    if engine.dialect.name == "postgresql":
        return _postgres_snapshot(engine, work)
    raise WorkbenchError(
        N_("backups support SQLite and PostgreSQL, not {kind}"), kind=engine.dialect.name
    )


def _sqlite_snapshot(engine: Engine, work: Path) -> _Snapshot:
    copy = work / "workbench.sqlite"
    source = sqlite3.connect(
        sqlite_file(engine.url), timeout=settings.sqlite_busy_timeout_ms() / 1000
    )
    target = sqlite3.connect(copy)
    try:
        # pages=-1: one step, so one read snapshot; in WAL mode writers are never blocked
        # (a stepwise copy would restart at every write of another connection).
        source.backup(target, pages=-1)
    finally:
        target.close()
        source.close()
    reader = create_workbench_engine(f"sqlite:///{copy}")
    try:
        with reader.connect() as conn:
            revision, counts, versions = _read_snapshot(conn)
    finally:
        reader.dispose()
    return _Snapshot("sqlite", copy, revision, counts, versions)


def _postgres_snapshot(engine: Engine, work: Path) -> _Snapshot:
    dump = work / "workbench.pgdump"
    snapshot_conn = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with snapshot_conn as conn, conn.begin():
        snapshot_id = conn.execute(text("SELECT pg_export_snapshot()")).scalar_one()
        pg_dump = pg_tools.pg_tool("pg_dump", pg_tools.server_major(conn))
        conninfo, env = pg_tools.libpq(engine.url)
        pg_tools.run_pg(
            [pg_dump, "--format=custom", f"--snapshot={snapshot_id}", f"--file={dump}",
             f"--dbname={conninfo}"],
            env,
        )  # fmt: skip
        revision, counts, versions = _read_snapshot(conn)  # the same snapshot
    return _Snapshot("postgresql", dump, revision, counts, versions)


def _read_snapshot(
    conn: Connection,
) -> tuple[str | None, dict[str, int], list[tuple[int, str]]]:
    counts = {
        model.__tablename__: conn.execute(select(func.count()).select_from(model)).scalar_one()
        for model in COUNTED
    }
    rows = conn.execute(
        select(ModelVersion.id, ModelVersion.artifact_path).order_by(ModelVersion.id)
    ).all()
    return current_revision(conn), counts, [(r[0], r[1]) for r in rows]


def _write_archive(path: Path, snapshot: _Snapshot) -> list[int]:
    """Stream the archive into a temporary file beside ``path``, then rename it onto
    ``path``; returns the versions whose folder was missing."""
    members: dict[str, dict[str, Any]] = {}
    missing: list[int] = []
    with (
        output_files.replacing(path) as out,
        _compressing(out, path) as stream,
        tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.copybufsize = CHUNK
        with open(snapshot.file, "rb") as f:
            _add_member(tar, DATABASE_MEMBERS[snapshot.kind], f, members)
        for version_id, stored in snapshot.versions:
            with ExitStack() as stack:
                opened = _open_model_files(version_id, stored, stack)
                if opened is None:
                    missing.append(version_id)
                for rel, handle in opened or []:
                    _add_member(tar, f"{MODELS_PREFIX}/{version_id}/{rel}", handle, members)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created_at": utcnow().isoformat(),
            "database": snapshot.kind,
            "alembic_revision": snapshot.revision,
            "counts": snapshot.counts,
            "model_versions": [v for v, _ in snapshot.versions if v not in missing],
            "missing_model_folders": missing,
            "members": members,
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
    return missing


def _compressing(out: IO[bytes], path: Path) -> Any:
    """``out`` itself, or a gzip stream into it when ``path`` names a compressed archive
    (closing it writes gzip's trailer and leaves ``out`` open)."""
    if not path.name.lower().endswith(COMPRESSED_SUFFIXES):
        return nullcontext(out)
    return gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0)


def _open_model_files(
    version_id: int, stored: str, stack: ExitStack
) -> list[tuple[str, IO[bytes]]] | None:
    """Every model file of a version, opened (an open file survives its folder's deletion);
    None when the folder is not there (after waiting a moment for one being registered)."""
    folder = settings.resolve(stored)
    deadline = time.monotonic() + _FOLDER_WAIT_S
    while True:
        try:
            opened = []
            for rel in model_files(folder):
                fd = os.open(folder / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                opened.append((rel, stack.enter_context(os.fdopen(fd, "rb"))))
            return opened
        except (ArtifactError, FileNotFoundError):
            stack.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


def _add_member(
    tar: tarfile.TarFile, name: str, handle: IO[bytes], members: dict[str, dict[str, Any]]
) -> None:
    """Append one file to the stream, hashing it as it is read."""
    size = os.fstat(handle.fileno()).st_size
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(time.time()), 0o644
    hashing = _HashingReader(handle)
    tar.addfile(info, hashing)
    members[name] = {"size": size, "sha256": hashing.hexdigest()}


class _HashingReader:
    """A read-only file wrapper that hashes what passes through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        self._hash.update(block)
        return block

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
