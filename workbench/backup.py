"""Backups: one archive holding the database and the model folders, and its restore.

An archive is a tar written as one stream (nothing is held in memory) into a temporary file
beside FILE, which is renamed onto FILE only once complete; gzip-compressed (level 1: fast, and
most of what compresses is the database's text) when FILE ends in ``.gz`` or ``.tgz``::

    database/workbench.sqlite   SQLite: a copy made with sqlite3's online backup API
    database/workbench.pgdump   PostgreSQL: ``pg_dump -Fc``
    models/<version id>/…       each version's model files (``core_model.artifact.model_files``)
    manifest.json               last: what the archive holds, and every member's size and sha256

A backup may run while the app edits and a worker trains. The database copy is one snapshot:
SQLite's backup API copies in one step, which in WAL mode reads one snapshot while writers go
on; on PostgreSQL we export the snapshot of a REPEATABLE READ transaction, ``pg_dump`` dumps
it (``--snapshot``) and we read the version list in it. The model folders are those of the
versions in that snapshot: a version's row is committed before its folder is moved into
place (``registry.register_version``), so a folder not there yet is waited for a little, and
each version's files are opened before any is written, so one deleted meanwhile is still
copied whole. Model files never change after registration.

A restore unpacks the archive into a staging folder inside the data folder and checks every
member against the manifest before anything in the data folder or the database changes; a
data folder whose ``models/`` holds anything, or a database holding any row, is refused
unless ``force``. A live worker on the data folder is always refused.

(Near 600 lines on purpose: backup and restore are one format, read and written here for both
databases, with the checks a restore makes before it touches anything.)
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Connection, Engine, func, inspect, select, text
from sqlalchemy.engine import URL, make_url

import db
from core_model.artifact import ArtifactError, model_files
from db.engine import create_workbench_engine
from db.migrate import current_revision
from db.models import Base, Corpus, GlossaryTerm, ModelVersion, Pair, TrainingRun, utcnow
from workbench import settings, worker_lock
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import engine as workbench_engine

FORMAT = "translation-workbench/backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE_MEMBERS = {
    "sqlite": "database/workbench.sqlite",
    "postgresql": "database/workbench.pgdump",
}
MODELS_PREFIX = "models"
# What a backup counts (and a restore reports): the user's data, by table.
COUNTED = (Corpus, Pair, GlossaryTerm, ModelVersion, TrainingRun)

COMPRESSED_SUFFIXES = (".gz", ".tgz")
GZIP_LEVEL = 1  # the fastest: 1M pairs 608 -> 327 MiB in 1.8x the plain time (bench/backup_scale)
_CHUNK = 1 << 20
_MAX_MANIFEST_BYTES = 64 << 20
_FOLDER_WAIT_S = 5.0  # a registering version's folder lands right after its row commits
_MODEL_MEMBER = re.compile(r"models/([1-9][0-9]{0,9})/(.+)")
_PG_VERSION = re.compile(r"\(PostgreSQL\)\s+(\d+)")


@dataclass(frozen=True)
class BackupSummary:
    """What a backup wrote: the file, its database kind, row counts and model folders."""

    file: str
    database: str
    counts: dict[str, int]
    model_versions: list[int]
    missing_model_folders: list[int]  # versions whose folder was gone (recorded, not copied)
    archive_bytes: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreSummary:
    """What a restore put in place (as the backup's manifest counted it)."""

    file: str
    database: str
    counts: dict[str, int]
    model_versions: list[int]
    created_at: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Snapshot:
    """The database copied at one instant, and what that instant held."""

    kind: str  # "sqlite" or "postgresql"
    file: Path  # the copy on disk
    revision: str | None
    counts: dict[str, int]
    versions: list[tuple[int, str]]  # (id, stored artifact path)


# ------------------------------------------------------------------------------ backup


def backup(path: Path) -> BackupSummary:
    """Write the database and every version's model files into the archive ``path``
    (replaced atomically when it exists; its folder must exist)."""
    started = time.monotonic()
    path = Path(path).expanduser().absolute()
    if not path.parent.is_dir():
        raise WorkbenchError(N_("the folder of {path} does not exist"), path=path)
    if path.is_dir():
        raise WorkbenchError(N_("{path} is a folder; name the archive file to write"), path=path)
    engine = workbench_engine()  # opens (and, like every command, migrates) the database
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".wb-backup-") as work:
        snapshot = _take_snapshot(engine, Path(work))
        missing = _write_archive(path, snapshot)
    return BackupSummary(
        file=str(path),
        database=engine.dialect.name,
        counts=snapshot.counts,
        model_versions=[v for v, _ in snapshot.versions if v not in missing],
        missing_model_folders=missing,
        archive_bytes=path.stat().st_size,
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


def _sqlite_file(url: URL) -> Path:
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise WorkbenchError(N_("backups and restores need the database in a SQLite file"))
    return Path(database).expanduser().absolute()


def _sqlite_snapshot(engine: Engine, work: Path) -> _Snapshot:
    copy = work / "workbench.sqlite"
    source = sqlite3.connect(
        _sqlite_file(engine.url), timeout=settings.sqlite_busy_timeout_ms() / 1000
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
        pg_dump = _pg_tool("pg_dump", _server_major(conn))
        conninfo, env = _libpq(engine.url)
        _run_pg(
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
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as out:
            with (
                _compressing(out, path) as stream,
                tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            ):
                tar.copybufsize = _CHUNK
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
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
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


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- restore


def restore(path: Path, *, force: bool = False) -> RestoreSummary:
    """Put the database and model folders of the archive ``path`` in place.

    Refuses (``WorkbenchError``, nothing changed) a target holding data unless ``force``, a
    live worker, an archive of the other database kind, and an archive whose members do not
    match its manifest, all before touching the data folder or the database.
    """
    started = time.monotonic()
    path = Path(path).expanduser().absolute()
    if not path.is_file():
        raise WorkbenchError(N_("no such backup file: {path}"), path=path)
    url = make_url(settings.database_url())
    kind = url.get_backend_name()
    if kind not in DATABASE_MEMBERS:
        raise WorkbenchError(N_("backups support SQLite and PostgreSQL, not {kind}"), kind=kind)
    if settings.worker_lock_path().exists() and worker_lock.worker_alive():
        raise WorkbenchError(N_("a worker is running on this data folder: stop it (and the app)"))
    if not force:
        _refuse_unless_empty(url)
    staging = settings.restore_staging_dir(uuid.uuid4().hex[:12])
    staging.mkdir()
    try:
        manifest = _unpack_verified(path, staging)
        if manifest["database"] != kind:
            raise WorkbenchError(
                N_("this backup holds a {found} database, but the configured database is {kind}"),
                found=manifest["database"],
                kind=kind,
            )
        db.dispose_engines()  # no pooled connection may outlive the database it was opened on
        database_file = staging / DATABASE_MEMBERS[kind]
        with _models_swapped(staging):
            if kind == "sqlite":
                _restore_sqlite(database_file, _sqlite_file(url))
            else:
                _restore_postgres(database_file, url)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RestoreSummary(
        file=str(path),
        database=kind,
        counts=manifest["counts"],
        model_versions=manifest["model_versions"],
        created_at=manifest["created_at"],
        seconds=round(time.monotonic() - started, 3),
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
        file = _sqlite_file(url)
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


def _unpack_verified(path: Path, staging: Path) -> dict[str, Any]:
    """Unpack the archive into ``staging`` and check it whole against its manifest; returns
    the manifest. Any damage raises ``WorkbenchError`` (only ``staging`` was written)."""
    found: dict[str, dict[str, Any]] = {}
    manifest_data: bytes | None = None
    try:
        with tarfile.open(path, mode="r|*") as tar:  # plain or compressed, whatever the name
            for member in tar:
                if not member.isfile():
                    raise WorkbenchError(
                        N_("{path} holds {member!r}, which is not a file"),
                        path=path,
                        member=member.name,
                    )
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has contents
                if member.name == MANIFEST and member.size <= _MAX_MANIFEST_BYTES:
                    manifest_data = source.read()
                    continue
                if member.name in found or not _allowed_member(member.name):
                    raise WorkbenchError(
                        N_("{path} holds an unexpected member {member!r}"),
                        path=path,
                        member=member.name,
                    )
                target = staging / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with open(target, "xb") as out:
                    while block := source.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                found[member.name] = {"size": member.size, "sha256": digest.hexdigest()}
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise WorkbenchError(
            N_("{path} is not a readable backup archive ({reason})"), path=path, reason=exc
        ) from None
    if manifest_data is None:
        raise WorkbenchError(
            N_("{path} has no manifest: not a workbench backup, or cut short"), path=path
        )
    try:
        manifest = json.loads(manifest_data)
        valid = manifest["format"] == FORMAT and isinstance(manifest["members"], dict)
    except (ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        raise WorkbenchError(
            N_("{path} is not a workbench backup (its manifest is not ours)"), path=path
        )
    if manifest["format_version"] > FORMAT_VERSION:
        raise WorkbenchError(
            N_("{path} was written by a newer workbench; update this one"), path=path
        )
    expected: dict[str, Any] = manifest["members"]
    absent = sorted(set(expected) - set(found)) + sorted(set(found) - set(expected))
    if absent:
        raise WorkbenchError(
            N_("the backup is damaged: {member} is missing or unexpected"), member=absent[0]
        )
    for name, seen in found.items():
        if expected[name] != seen:
            raise WorkbenchError(
                N_("the backup is damaged: {member} does not match its sha256 in the manifest"),
                member=name,
            )
    if DATABASE_MEMBERS.get(manifest.get("database")) not in found:
        raise WorkbenchError(
            N_("the backup is damaged: it holds no {kind} database"), kind=manifest.get("database")
        )
    return manifest


def _allowed_member(name: str) -> bool:
    """Only the names a backup writes; none can leave the staging folder."""
    if name in DATABASE_MEMBERS.values():
        return True
    match = _MODEL_MEMBER.fullmatch(name)
    if match is None or "\\" in name or "\x00" in name:
        return False
    return all(part not in ("", ".", "..") for part in match.group(2).split("/"))


@contextmanager
def _models_swapped(staging: Path) -> Iterator[None]:
    """The staged model folders become ``models/`` (the old one is kept in staging, and put
    back if the database cannot be restored)."""
    models, staged, old = settings.models_dir(), staging / MODELS_PREFIX, staging / "models-old"
    staged.mkdir(exist_ok=True)  # a backup with no version
    had_models = models.exists()
    if had_models:
        os.replace(models, old)
    os.replace(staged, models)
    try:
        yield
    except BaseException:
        os.replace(models, staged)
        if had_models:
            os.replace(old, models)
        raise


def _restore_sqlite(copy: Path, target: Path) -> None:
    """Rename the checked copy onto the database file. The old file's WAL is checkpointed
    and emptied first: a stale ``-wal`` beside the new file would be replayed into it."""
    if target.exists() and target.stat().st_size > 0:
        conn = sqlite3.connect(target, timeout=settings.sqlite_busy_timeout_ms() / 1000)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    incoming = target.with_name(f"{target.name}.restoring")
    shutil.move(copy, incoming)  # a rename unless the database lives on another disk
    os.replace(incoming, target)
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    _fsync_folder(target.parent)


def _restore_postgres(dump: Path, url: URL) -> None:
    """``pg_restore`` in one transaction: the workbench's objects are dropped (when there)
    and recreated; any failure leaves the database as it was."""
    engine = create_workbench_engine(url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            pg_restore = _pg_tool("pg_restore", _server_major(conn))
    finally:
        engine.dispose()
    conninfo, env = _libpq(url)
    listing = _run_pg([pg_restore, "--list", str(dump)], env)
    # COMMENT ON EXTENSION needs the extension's owner (a superuser): leave the comment out.
    kept = [line for line in listing.splitlines() if " COMMENT - EXTENSION " not in line]
    contents = dump.with_suffix(".list")
    contents.write_text("\n".join(kept) + "\n", encoding="utf-8")
    _run_pg(
        [pg_restore, "--clean", "--if-exists", "--no-owner", "--no-privileges",
         "--single-transaction", "--exit-on-error", f"--use-list={contents}",
         f"--dbname={conninfo}", str(dump)],
        env,
    )  # fmt: skip


# -------------------------------------------------------------------- PostgreSQL tools


def _server_major(conn: Connection) -> int:
    return int(conn.execute(text("SHOW server_version_num")).scalar_one()) // 10000


def _libpq(url: URL) -> tuple[str, dict[str, str]]:
    """A libpq connection URI for the tools (the password goes in the environment, never
    on a command line that ``ps`` shows)."""
    conninfo = url.set(drivername="postgresql", password=None)
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    return conninfo.render_as_string(hide_password=False), env


def _pg_tool(name: str, server_major: int) -> str:
    """``pg_dump`` / ``pg_restore`` at least as new as the server: from WORKBENCH_PG_BINDIR,
    the server version's own bin folder, PATH, or any installed version."""
    candidates: list[Path] = []
    configured = settings.pg_bindir()
    if configured:
        candidates.append(configured / name)
    candidates.append(Path(f"/usr/lib/postgresql/{server_major}/bin/{name}"))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    candidates += sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            version = _tool_major(candidate)
            if version is not None and version >= server_major:
                return str(candidate)
    raise WorkbenchError(
        N_(
            "{tool} {major} or newer is needed for this PostgreSQL server: install the "
            "PostgreSQL {major} client tools or set {variable}"
        ),
        tool=name,
        major=server_major,
        variable=settings.ENV_PG_BINDIR,
    )


def _tool_major(tool: Path) -> int | None:
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _PG_VERSION.search(out.stdout)
    return int(match.group(1)) if match else None


def _run_pg(command: list[str], env: dict[str, str]) -> str:
    """Run a PostgreSQL tool; its first error line becomes a ``WorkbenchError``."""
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = next(
            (line for line in lines if "error" in line.lower()), lines[0] if lines else ""
        )
        raise WorkbenchError(
            N_("{tool} failed: {reason}"), tool=Path(command[0]).name, reason=reason.strip()
        )
    return done.stdout
