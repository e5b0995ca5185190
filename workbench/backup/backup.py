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

A restore changes nothing until it has checked everything (each refusal is one
``WorkbenchError``):

* it holds the data folder's lock alone (``database_lock``): no other process on this machine
  has the database open, and none opens it until the restore is done; on PostgreSQL no other
  client may be connected either, from any machine;
* a data folder whose ``models/`` holds anything, or a database holding any row, is refused
  unless ``force``;
* the archive is read through once without writing anything: every member must have a name
  a backup writes (no two alike, no file where another's folder goes), and its size and
  sha256 those of the manifest, which is checked entry by entry. Decompression is capped as
  it goes: the members' sizes, read from their headers before their contents, may add up to
  ``MAX_RESTORE_BYTES`` and the free space of the data folder's disk, no more;
* then it is unpacked into a staging folder inside the data folder (checked again as it is
  written), and its database is opened and checked (``restore_checks``: a workbench database
  at a schema revision this code knows, whose model versions' folders all lie in
  ``models/``);
* only then do the model folders and the database replace the old ones.

(Near 800 lines on purpose: backup and restore are one format, read and written here for both
databases, with the checks a restore makes before it touches anything; the checks of the
restored database are ``restore_checks``, the PostgreSQL tools ``pg_tools``.)
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
import tarfile
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
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
from workbench import database_lock, settings
from workbench.backup import pg_tools, restore_checks
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
# What a restore reads at most: the members' sizes added up (a "bomb" of a few MB of gzip may
# claim terabytes; the free space of the data folder's disk caps it too), their number, and
# the bytes of one tar header.
MAX_RESTORE_BYTES = 1 << 40
MAX_MEMBERS = 100_000
_HEADER_ROOM = 1 << 20
_FOLDER_WAIT_S = 5.0  # a registering version's folder lands right after its row commits
_MODEL_MEMBER = re.compile(r"models/([1-9][0-9]{0,9})/(.+)")


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
        manifest = _verified_manifest(path)  # read whole before a byte is written
        if manifest.database != kind:
            raise WorkbenchError(
                N_("this backup holds a {found} database, but the configured database is {kind}"),
                found=manifest.database,
                kind=kind,
            )
        staging = settings.restore_staging_dir(uuid.uuid4().hex[:12])
        staging.mkdir()
        try:
            _stage(path, staging, manifest)
            database_file = staging / DATABASE_MEMBERS[kind]
            if kind == "sqlite":
                restore_checks.check_sqlite(database_file)
                with _models_swapped(staging):
                    _restore_sqlite(database_file, _sqlite_file(url))
            else:
                tool, env = _pg_restore_tool(url)
                restore_checks.check_postgres_dump(database_file, tool, env)
                with _models_swapped(staging):
                    _restore_postgres(database_file, url, tool, env)
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


@dataclass(frozen=True)
class _Manifest:
    """A manifest whose every entry a restore uses was checked (``_read_manifest``)."""

    database: str
    created_at: str
    counts: dict[str, int]
    model_versions: list[int]
    members: dict[str, tuple[int, str]]  # name -> (size, sha256)


def _verified_manifest(path: Path) -> _Manifest:
    """Read the archive through without writing anything, and check every member's name,
    size and sha256 against its manifest, itself checked entry by entry; returns it."""
    found: dict[str, tuple[int, str]] = {}
    folders: set[str] = set()  # the folders the members found so far lie in
    manifest_data: list[bytes] = []

    def check(name: str, size: int, source: IO[bytes]) -> None:
        if name == MANIFEST and size <= _MAX_MANIFEST_BYTES and not manifest_data:
            manifest_data.append(source.read())
            return
        parents = {name[:i] for i, c in enumerate(name) if c == "/"}
        if name in found or name in folders or parents & found.keys() or not _allowed(name):
            raise WorkbenchError(
                N_("{path} holds an unexpected member {member!r}"), path=path, member=name
            )
        folders.update(parents)
        digest = hashlib.sha256()
        while block := source.read(_CHUNK):
            digest.update(block)
        found[name] = (size, digest.hexdigest())

    _each_member(path, check, free=shutil.disk_usage(settings.home()).free)
    if not manifest_data:
        raise WorkbenchError(
            N_("{path} has no manifest: not a workbench backup, or cut short"), path=path
        )
    manifest = _read_manifest(manifest_data[0], path)
    absent = sorted(set(manifest.members) ^ set(found))
    if absent:
        raise WorkbenchError(
            N_("the backup is damaged: {member} is missing or unexpected"), member=absent[0]
        )
    for name, seen in found.items():
        if manifest.members[name] != seen:
            raise WorkbenchError(
                N_("the backup is damaged: {member} does not match its sha256 in the manifest"),
                member=name,
            )
    if DATABASE_MEMBERS[manifest.database] not in found:
        raise WorkbenchError(
            N_("the backup is damaged: it holds no {kind} database"), kind=manifest.database
        )
    return manifest


def _read_manifest(data: bytes, path: Path) -> _Manifest:
    """The manifest, each entry a restore uses checked: a refusal names the first entry
    that is missing or malformed."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise WorkbenchError(
            N_("{path} is not a workbench backup (its manifest is not ours)"), path=path
        )
    version = manifest.get("format_version")
    if _is_count(version) and version > FORMAT_VERSION:
        raise WorkbenchError(
            N_("{path} was written by a newer workbench; update this one"), path=path
        )
    entries: dict[str, Callable[[Any], bool]] = {
        "format_version": lambda v: _is_count(v) and v >= 1,
        "database": lambda v: isinstance(v, str) and v in DATABASE_MEMBERS,
        "created_at": lambda v: isinstance(v, str),
        "counts": lambda v: isinstance(v, dict) and all(map(_is_count, v.values())),
        "model_versions": lambda v: isinstance(v, list) and all(map(_is_count, v)),
        "members": lambda v: isinstance(v, dict) and all(map(_is_member_entry, v.values())),
    }
    for entry, valid in entries.items():
        if not valid(manifest.get(entry)):
            raise WorkbenchError(
                N_("{path} has an invalid manifest: its {entry!r} entry is missing or malformed"),
                path=path,
                entry=entry,
            )
    return _Manifest(
        database=manifest["database"],
        created_at=manifest["created_at"],
        counts=manifest["counts"],
        model_versions=manifest["model_versions"],
        members={name: (e["size"], e["sha256"]) for name, e in manifest["members"].items()},
    )


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0  # (a JSON true is no number)


def _is_member_entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_count(value.get("size"))
        and isinstance(value.get("sha256"), str)
    )


def _stage(path: Path, staging: Path, manifest: _Manifest) -> None:
    """Unpack the archive, read through already by ``_verified_manifest``, into ``staging``;
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
            while block := source.read(_CHUNK):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != expected[1]:
            raise _changed(path)
        written.add(name)

    _each_member(path, write)
    if written != set(manifest.members):
        raise _changed(path)


def _changed(path: Path) -> WorkbenchError:
    return WorkbenchError(
        N_("{path} changed while it was restored; nothing was restored"), path=path
    )


def _each_member(
    path: Path, consume: Callable[[str, int, IO[bytes]], None], free: int | None = None
) -> None:
    """Hand each member of the archive (plain or gzip-compressed, whatever its name) to
    ``consume``: its name, size and contents, as the archive streams by.

    Refused before a member is read: a member that is not a regular file, more than
    ``MAX_MEMBERS``, and members whose sizes (each in its header) add up to more than
    ``MAX_RESTORE_BYTES`` or the ``free`` bytes of the data folder's disk; ``_Metered`` keeps
    the headers themselves small. So decompression stops at those caps, whatever the data.
    """
    declared = 0
    try:
        with open(path, "rb") as raw:
            stream = _Metered(raw)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for count, member in enumerate(tar, start=1):
                    if not member.isfile() or member.issparse():
                        raise WorkbenchError(
                            N_("{path} holds {member!r}, which is not a file"),
                            path=path,
                            member=member.name,
                        )
                    declared += member.size
                    if count > MAX_MEMBERS:
                        raise WorkbenchError(
                            N_("{path} holds more than {n} members: not a workbench backup"),
                            path=path,
                            n=f"{MAX_MEMBERS:,}",
                        )
                    if declared > MAX_RESTORE_BYTES:
                        raise WorkbenchError(
                            N_("{path} holds more than {size} of data, the most a restore takes"),
                            path=path,
                            size=_mib(MAX_RESTORE_BYTES),
                        )
                    if free is not None and declared > free:
                        raise WorkbenchError(
                            N_(
                                "{path} holds more data than the {free} free on the disk of "
                                "the data folder"
                            ),
                            path=path,
                            free=_mib(free),
                        )
                    stream.allow(member.size)
                    source = tar.extractfile(member)
                    assert source is not None  # a regular file always has contents
                    consume(member.name, member.size, source)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise WorkbenchError(
            N_("{path} is not a readable backup archive ({reason})"), path=path, reason=exc
        ) from None


def _mib(n: int) -> str:
    return f"{n >> 20:,} MiB"


class _Metered:
    """The archive's bytes as ``tarfile`` reads them, decompressed if they are gzip: never
    more than the sizes of the members handed out so far, plus ``_HEADER_ROOM`` for the next
    header (``tarfile`` reads a header whole into memory, whatever size it claims)."""

    def __init__(self, raw: IO[bytes]) -> None:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        self._source = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        self._read = 0
        self._allowed = _HEADER_ROOM

    def allow(self, size: int) -> None:
        """The next ``size`` bytes (a member's contents) and the header after them."""
        self._allowed = self._read + size + _HEADER_ROOM

    def read(self, size: int = -1) -> bytes:
        try:
            block = self._source.read(size if size >= 0 else _CHUNK)
        except (OSError, EOFError, zlib.error) as exc:  # not gzip, or damaged
            raise tarfile.ReadError(str(exc)) from None
        self._read += len(block)
        if self._read > self._allowed:
            raise tarfile.ReadError(f"a header larger than {_mib(_HEADER_ROOM)}")
        return block


def _allowed(name: str) -> bool:
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
