"""What a restore refuses, with one ``error:`` line, exit 2 and nothing changed: a database that
another process has open, a database member that is not a workbench database or points a
version outside the data folder, a malformed manifest, and an archive that decompresses to
more than it may (issue 30). The happy paths are in ``test_backup.py``."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.engine import make_url

from db.tables import ModelVersion, Pair
from tests.helpers import ROOT, cli, make_toy_corpus, subprocess_env
from tests.workbench.test_backup import _home, _restore, _untouched_target, _wipe
from workbench import database_lock, settings
from workbench.backup import archive as archives
from workbench.backup import backup as backups
from workbench.backup.archive import DATABASE_MEMBERS, MANIFEST
from workbench.backup.backup import backup
from workbench.backup.restore import restore
from workbench.errors import WorkbenchError
from workbench.models import registry
from workbench.storage import engine, session_scope

# A stand-in for the app: it opens the database through the services and saves one pair per
# line it reads, as a person editing does.
_APP = """
import sys
from workbench.corpus import pairs
from workbench.team import access
access.use_actor_source(access.local_admin)
for line in sys.stdin:
    pairs.add_pair(int(sys.argv[1]), f"应用保存第{line.strip()}句。", f"App save {line.strip()}.")
    print("saved", flush=True)
"""


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def _crafted(
    archive: Path,
    out: Path,
    replace: dict[str, bytes] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """A copy of ``archive`` with members replaced or added (``replace``), whose manifest
    records their true size and sha256 (then ``edit`` changes it); gzip when ``out`` ends in
    .gz."""
    members = _members(archive)
    manifest = json.loads(members.pop(MANIFEST))
    for name, data in (replace or {}).items():
        members[name] = data
        manifest["members"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if edit is not None:
        edit(manifest)
    members[MANIFEST] = json.dumps(manifest).encode()
    with tarfile.open(out, "w:gz" if out.name.endswith(".gz") else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _database_member(db_url: str) -> str:
    return DATABASE_MEMBERS[make_url(db_url).get_backend_name()]


# -------------------------------------------------------------------- 1: the database lock


def test_restore_refuses_while_another_process_has_the_database_open(
    db_url: str, tmp_path: Path, db_fingerprint
) -> None:
    """It used to replace the database under the app, whose later saves all went into the
    deleted file while reporting success."""
    corpus_id = make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    app = subprocess.Popen(
        [sys.executable, "-c", _APP, str(corpus_id)],
        cwd=ROOT,
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        app.stdin.write("1\n")
        app.stdin.flush()
        assert app.stdout.readline() == "saved\n"
        fingerprint = db_fingerprint()

        done = _restore(archive, "--force")
        assert done.returncode == 2
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(
            f"error: the database of this data folder is in use by pid {app.pid} (python"
        )
        assert line.endswith(": stop the app, the workers and the HTTP server first")
        assert db_fingerprint() == fingerprint

        app.stdin.write("2\n")
        app.stdin.flush()
        assert app.stdout.readline() == "saved\n"
    finally:
        app.stdin.close()
        app.wait(timeout=30)
    with engine().connect() as conn:
        saved = set(conn.scalars(select(Pair.target).where(Pair.target.like("App save%"))))
    assert saved == {"App save 1.", "App save 2."}  # both in the database everyone reads

    if make_url(db_url).get_backend_name() == "postgresql":
        # A client on another machine holds no lock here: PostgreSQL's own list of
        # connections says it is there.
        url = make_url(db_url)
        with psycopg.connect(host=url.host, port=url.port, user=url.username, dbname=url.database):
            done = _restore(archive, "--force")
        assert done.returncode == 2
        assert done.stderr.startswith(
            "error: the PostgreSQL database has 1 other open connection"
        ), done.stderr
    done = _restore(archive, "--force")
    assert done.returncode == 0, done.stderr
    with engine().connect() as conn:
        assert not conn.scalars(select(Pair.id).where(Pair.target.like("App save%"))).all()


def test_a_command_started_during_a_restore_is_refused(wb_home: Path) -> None:
    make_toy_corpus()
    with database_lock.exclusive():  # what a restore holds while it replaces the database
        done = cli("versions")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: a restore is replacing the database of this data folder: try again when it is done"
    ]
    assert cli("versions").returncode == 0


# ------------------------------------------------------------ 2, 3: the archive's database


def test_a_version_folder_outside_the_data_folder_is_refused(
    db_url: str, tmp_path: Path, monkeypatch
) -> None:
    """Restored, such a row had the Models page delete the folder it named."""
    monkeypatch.setattr(backups, "_FOLDER_WAIT_S", 0.1)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "thesis.txt").write_text("years of work")
    make_toy_corpus()
    with session_scope() as s:
        version = ModelVersion(artifact_path=str(outside))
        s.add(version)
        s.flush()
        version_id = version.id

    # The registry itself deletes nothing outside models/, whatever the row says.
    for stored in ("models/../../precious", str(outside)):
        with session_scope() as s:
            s.execute(
                update(ModelVersion)
                .where(ModelVersion.id == version_id)
                .values(artifact_path=stored)
            )
        with pytest.raises(WorkbenchError, match="is not inside the data folder's models/"):
            registry.delete_version(version_id)
        assert (outside / "thesis.txt").exists()
        assert registry.get_version(version_id).artifact_path == stored

    archive = tmp_path / "backup.tar"
    backup(archive)
    _wipe(db_url)
    target = _untouched_target()
    done = _restore(archive)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: the backup's model version {version_id} points at {outside}, outside the "
        "data folder's models/"
    ]
    assert _untouched_target() == target


def _dump_at_revision(db_url: str, revision: str, out: Path) -> bytes:
    """The test's database, dumped as a backup would, with its schema revision set to
    ``revision`` (SQLite: a copy; PostgreSQL: ``pg_dump``); the database itself is kept."""
    from workbench.backup import pg_tools

    if make_url(db_url).get_backend_name() == "sqlite":
        copy = sqlite3.connect(out)
        with sqlite3.connect(settings.database_url().removeprefix("sqlite:///")) as source:
            source.backup(copy)
        copy.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        copy.commit()
        copy.close()
        return out.read_bytes()
    url = make_url(db_url)
    with engine().begin() as conn:
        old = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
        tool = pg_tools.pg_tool("pg_dump", pg_tools.server_major(conn))
    try:
        conninfo, env = pg_tools.libpq(url)
        pg_tools.run_pg([tool, "--format=custom", f"--file={out}", f"--dbname={conninfo}"], env)
    finally:
        with engine().begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": old})
    return out.read_bytes()


def test_a_database_member_that_is_no_workbench_database_is_refused_even_forced(
    db_url: str, tmp_path: Path, db_fingerprint
) -> None:
    """Such an archive used to replace a good database (exit 0), and every later command
    failed."""
    make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    member = _database_member(db_url)
    not_sqlite = _crafted(archive, tmp_path / "junk.tar", {member: b"not a database " * 500})
    future = _crafted(
        archive,
        tmp_path / "future.tar",
        {member: _dump_at_revision(db_url, "9999", tmp_path / "future.db")},
    )
    fingerprint, target = db_fingerprint(), _untouched_target()
    for crafted, expected in [
        (not_sqlite, "error: the backup's database cannot be read"),
        (
            future,
            "error: the backup's database is at schema revision 9999, which this workbench "
            "does not know",
        ),
    ]:
        done = _restore(crafted, "--force")
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(expected), line
        assert _untouched_target() == target and db_fingerprint() == fingerprint
    assert cli("versions").returncode == 0


# ------------------------------------------------------------------------ 5: the manifest


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda manifest: manifest.pop(key)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda manifest: manifest.__setitem__(key, value)


@pytest.mark.parametrize(
    ("edit", "extra", "expected"),
    [
        (_drop("counts"), {}, "its 'counts' entry is missing or malformed"),
        (_drop("created_at"), {}, "its 'created_at' entry is missing or malformed"),
        (_drop("format_version"), {}, "its 'format_version' entry is missing or malformed"),
        (_set("format_version", "1"), {}, "its 'format_version' entry is missing or malformed"),
        (_set("model_versions", ["1"]), {}, "its 'model_versions' entry is missing or malformed"),
        (
            None,
            {"models/1/config.json": b"{}", "models/1/config.json/x": b"{}"},
            "holds an unexpected member 'models/1/config.json/x'",
        ),
    ],
    ids=["no-counts", "no-created_at", "no-format_version", "text-format_version", "text-ids",
         "file-folder-clash"],
)  # fmt: skip
def test_a_malformed_manifest_is_refused_before_anything_changes(
    wb_home: Path, tmp_path: Path, db_fingerprint, edit, extra, expected
) -> None:
    """It used to fail with 'internal error: KeyError' (exit 1), after the data was replaced."""
    make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    crafted = _crafted(archive, tmp_path / "crafted.tar", extra, edit)
    make_toy_corpus("after")
    fingerprint, target = db_fingerprint(), _untouched_target()
    done = _restore(crafted, "--force")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and line.endswith(expected), line
    assert _untouched_target() == target and db_fingerprint() == fingerprint


# --------------------------------------------------------------- 6: decompression bombs


def test_an_archive_over_the_size_cap_is_refused_before_it_is_written(
    wb_home: Path, tmp_path: Path, monkeypatch, db_fingerprint
) -> None:
    """A bomb: a few KB of gzip that decompress to 24 MiB (an archive whose manifest matches
    it was restored whole; one whose manifest did not was written out before the checksums
    refused it)."""
    make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    zeros = bytes(24 << 20)
    matching = _crafted(archive, tmp_path / "bomb.tar.gz", {"models/1/model.safetensors": zeros})
    lying = _crafted(
        archive,
        tmp_path / "lying.tar.gz",
        {"models/1/model.safetensors": zeros},
        lambda m: m["members"]["models/1/model.safetensors"].update(size=1),
    )
    assert matching.stat().st_size < 200_000
    staged: list[Path] = []
    staging_dir = settings.restore_staging_dir
    monkeypatch.setattr(
        settings,
        "restore_staging_dir",
        lambda token: staged.append(staging_dir(token)) or staged[-1],
    )
    fingerprint, target = db_fingerprint(), _untouched_target()

    with pytest.raises(WorkbenchError, match=r"the backup is damaged: models/1/model\.safetensors"):
        restore(lying, force=True)
    assert staged == []  # checked whole before a byte was written

    monkeypatch.setattr(archives, "MAX_RESTORE_BYTES", 16 << 20)
    with pytest.raises(WorkbenchError) as refused:
        restore(matching, force=True)
    assert str(refused.value) == (
        f"{matching} holds more than 16 MiB of data, the most a restore takes"
    )
    # The free space of the data folder's disk caps it too.
    monkeypatch.setattr(archives, "MAX_RESTORE_BYTES", 1 << 40)
    usage = shutil.disk_usage(wb_home)
    monkeypatch.setattr(archives.shutil, "disk_usage", lambda _: usage._replace(free=20 << 20))
    with pytest.raises(WorkbenchError) as refused:
        restore(matching, force=True)
    assert str(refused.value) == (
        f"{matching} holds more data than the 20 MiB free on the disk of the data folder"
    )
    assert staged == [] and _untouched_target() == target and db_fingerprint() == fingerprint


def test_a_huge_tar_header_is_refused_in_bounded_memory(wb_home: Path, tmp_path: Path) -> None:
    """A pax header that says it is 64 MiB long: tarfile would read it into memory whole."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 64 << 20
    bomb = tmp_path / "header.tar.gz"
    with gzip.open(bomb, "wb") as out:
        out.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        out.write(b"9 a=bcde\n" * ((64 << 20) // 9))
    tracemalloc.start()
    try:
        with pytest.raises(WorkbenchError, match="is not a readable backup archive"):
            restore(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MiB"
    assert [p.name for p in _home().iterdir() if p.name.startswith(".restore-")] == []
