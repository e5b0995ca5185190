"""The format of a backup archive, which ``backup`` writes and ``restore`` reads: its members,
the manifest, and reading an archive through under the caps a restore needs.

An archive is a tar written as one stream, gzip-compressed when its name asks for it (a
restore reads either, whatever the name)::

    database/workbench.sqlite   SQLite: a copy made with sqlite3's online backup API
    database/workbench.pgdump   PostgreSQL: ``pg_dump -Fc``
    models/<version id>/…       each version's model files (``core_model.artifact.model_files``)
    manifest.json               last: what the archive holds, and every member's size and sha256

Reading one through (``verified_manifest``) writes nothing: every member must have a name a
backup writes (no two alike, no file where another's folder goes), and its size and sha256
those of the manifest, which is checked entry by entry. Decompression is capped as it goes
(``each_member``): the members' sizes, read from their headers before their contents, may add
up to ``MAX_RESTORE_BYTES`` and the free space of the data folder's disk, no more.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy.engine import URL

from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_

FORMAT = "translation-workbench/backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE_MEMBERS = {
    "sqlite": "database/workbench.sqlite",
    "postgresql": "database/workbench.pgdump",
}
MODELS_PREFIX = "models"
CHUNK = 1 << 20  # bytes read and written at a time
_MAX_MANIFEST_BYTES = 64 << 20
# What a restore reads at most: the members' sizes added up (a "bomb" of a few MB of gzip may
# claim terabytes; the free space of the data folder's disk caps it too), their number, and
# the bytes of one tar header.
MAX_RESTORE_BYTES = 1 << 40
MAX_MEMBERS = 100_000
_HEADER_ROOM = 1 << 20
_MODEL_MEMBER = re.compile(r"models/([1-9][0-9]{0,9})/(.+)")


def sqlite_file(url: URL) -> Path:
    path = settings.sqlite_path(url)
    if path is None:
        raise WorkbenchError(N_("backups and restores need the database in a SQLite file"))
    return path


@dataclass(frozen=True)
class ArchiveContents:
    """What an archive holds, as its manifest records it and a backup or a restore reports
    it."""

    database: str  # a key of DATABASE_MEMBERS
    counts: dict[str, int]  # rows by table
    model_versions: list[int]  # the versions whose model folders it holds


@dataclass(frozen=True)
class Manifest(ArchiveContents):
    """A manifest whose every entry a restore uses was checked (``_read_manifest``)."""

    created_at: str
    members: dict[str, tuple[int, str]]  # name -> (size, sha256)


@dataclass(frozen=True)
class ArchiveSummary(ArchiveContents):
    """What a backup wrote or a restore put in place: its command prints ``as_dict``."""

    file: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, **asdict(self)}  # the archive first, then what it holds


def verified_manifest(path: Path) -> Manifest:
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
        while block := source.read(CHUNK):
            digest.update(block)
        found[name] = (size, digest.hexdigest())

    each_member(path, check, free=shutil.disk_usage(settings.home()).free)
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


def _read_manifest(data: bytes, path: Path) -> Manifest:
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
    return Manifest(
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


def each_member(
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
            block = self._source.read(size if size >= 0 else CHUNK)
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
