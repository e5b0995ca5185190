"""What a restore checks in the archive's database before it replaces anything: that it is a
workbench database at a schema revision this code knows (an older one is migrated when first
opened), and that every model version's folder lies inside the data folder's ``models/`` (a
row that named another folder would have the Models page delete that folder), each its own
(deleting one of two versions that share a folder would delete the other's files).

SQLite: the copy is opened and must pass ``PRAGMA integrity_check``; its revision and version
rows are read from it. PostgreSQL: a dump cannot be opened without restoring it, so
``pg_restore`` reads its table of contents (a damaged dump fails there) and writes out the
rows of ``alembic_version`` and ``model_versions``, read here from their COPY text. (Either
file is byte for byte the one the backup wrote: its sha256 was checked first.)
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from db.migrate import known_revision
from workbench import settings
from workbench.backup import pg_tools
from workbench.errors import WorkbenchError
from workbench.messages import N_

_COPY_START = re.compile(r"COPY \S+ \((?P<columns>[^)]*)\) FROM stdin;")
_COPY_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{1,2})|([0-7]{1,3})|(.))")
_COPY_CHARACTERS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def check_sqlite(copy: Path) -> None:
    """Refuse (``WorkbenchError``) a SQLite file that is not a sound workbench database."""
    try:
        conn = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise WorkbenchError(
                    N_("the backup's database is damaged (SQLite's integrity check: {problem})"),
                    problem=problems[0],
                )
            revisions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
            versions = conn.execute("SELECT id, artifact_path FROM model_versions").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise _unreadable(exc) from None
    _check(revisions, versions)


def check_postgres_dump(dump: Path, pg_restore: str, env: dict[str, str]) -> None:
    """Refuse (``WorkbenchError``) a ``pg_dump`` file that is not a workbench database's."""
    try:
        pg_tools.run_pg([pg_restore, "--list", str(dump)], env)
        revisions = [row[0] for row in _copy_rows(dump, "alembic_version", pg_restore, env)]
        versions = [
            (int(row[0] or ""), row[1])
            for row in _copy_rows(dump, "model_versions", pg_restore, env)
        ]
    except (WorkbenchError, ValueError) as exc:  # ValueError: not the workbench's tables
        raise _unreadable(exc) from None
    _check(revisions, versions)


def _unreadable(reason: Exception) -> WorkbenchError:
    return WorkbenchError(
        N_("the backup's database cannot be read as a workbench database ({reason})"),
        reason=str(reason),
    )


def _check(revisions: list[str | None], versions: list[tuple[int, str | None]]) -> None:
    if len(revisions) != 1 or not isinstance(revisions[0], str):
        raise _unreadable(ValueError(f"{len(revisions)} rows in alembic_version"))
    if not known_revision(revisions[0]):
        raise WorkbenchError(
            N_(
                "the backup's database is at schema revision {revision}, which this workbench "
                "does not know: was it written by a newer one?"
            ),
            revision=revisions[0],
        )
    owners: dict[Path, int] = {}
    for version_id, stored in versions:
        folder = settings.version_folder(stored or "")
        if folder is None:
            raise WorkbenchError(
                N_(
                    "the backup's model version {id} points at {path}, outside the data "
                    "folder's models/"
                ),
                id=version_id,
                path=stored,
            )
        if folder in owners:  # deleting one of the two would delete the other's files
            raise WorkbenchError(
                N_(
                    "the backup's model versions {first} and {second} share one folder "
                    "({path}): each version needs its own"
                ),
                first=owners[folder],
                second=version_id,
                path=stored,
            )
        owners[folder] = version_id


def _copy_rows(
    dump: Path, table: str, pg_restore: str, env: dict[str, str]
) -> list[tuple[str | None, ...]]:
    """The rows of ``table`` in the dump, as text, in the order (id, …) of the columns the
    workbench reads: ``alembic_version``'s version_num, ``model_versions``' id and
    artifact_path."""
    wanted = {"alembic_version": ("version_num",), "model_versions": ("id", "artifact_path")}
    script = pg_tools.run_pg(
        [pg_restore, "--data-only", f"--table={table}", "--file=-", str(dump)], env
    )
    lines = iter(script.split("\n"))
    for line in lines:
        start = _COPY_START.fullmatch(line)
        if start is None:
            continue
        columns = [c.strip().strip('"') for c in start.group("columns").split(",")]
        at = [columns.index(name) for name in wanted[table]]  # ValueError: not ours
        rows = []
        for row in lines:
            if row == "\\.":
                break
            fields = [_copy_field(f) for f in row.split("\t")]
            rows.append(tuple(fields[i] for i in at))
        return rows
    return []


def _copy_field(raw: str) -> str | None:
    """A field of COPY's text format: ``\\N`` is NULL, backslash escapes are undone."""
    if raw == "\\N":
        return None
    return _COPY_ESCAPE.sub(_unescape, raw)


def _unescape(match: re.Match[str]) -> str:
    hexadecimal, octal, other = match.groups()
    if hexadecimal:
        return chr(int(hexadecimal, 16))
    if octal:
        return chr(int(octal, 8))
    return _COPY_CHARACTERS.get(other, other)
