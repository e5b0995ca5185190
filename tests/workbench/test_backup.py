"""Backups: ``backup`` while a real worker trains and an editor saves, wipe, ``restore``, and
everything is back byte for byte; a non-empty target and a damaged archive are refused with
nothing changed. Each test runs on a SQLite file and on a throw-away PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url

from core_model.artifact import matches_recorded_sha256, model_files, sha256_file
from db import dispose_engines
from db.tables import GlossaryTerm, ModelVersion, Pair, TrainingRun
from tests.helpers import cli, make_toy_corpus, start_worker, stop, train_version, wait_for
from workbench import database_lock, settings
from workbench.backup.archive import DATABASE_MEMBERS, MANIFEST
from workbench.backup.backup import backup
from workbench.backup.restore import restore
from workbench.corpus import glossary, pairs
from workbench.models import registry
from workbench.storage import engine
from workbench.training import run_info, runs

TERMS = [("咖啡", "coffee"), ("猫", "cat"), ("公园", "park")]
EDIT = "编辑第{}句。"  # the editor's pairs: source EDIT.format(i), saved in order i = 0, 1, …


def _state() -> dict[str, Any]:
    """Every pair, glossary term, version row and training run, and each version's files
    (sha256 by file), as plain values."""
    with engine().connect() as conn:
        tables = {
            model.__tablename__: {row.id: tuple(row) for row in conn.execute(select(model))}
            for model in (Pair, GlossaryTerm, ModelVersion, TrainingRun)
        }
    files = {}
    for version_id in tables["model_versions"]:
        folder = registry.artifact_dir(version_id)
        files[version_id] = {rel: sha256_file(folder / rel) for rel in model_files(folder)}
    return {**tables, "files": files}


def _home() -> Path:
    return Path(os.environ[settings.ENV_HOME])


def _let_go() -> None:
    """Close this process' connections and let its lock on the data folder go, as a process
    that stops does (a restore refuses while any other process has the database open)."""
    dispose_engines()
    database_lock.release()


def _wipe(db_url: str) -> None:
    """Lose everything: the data folder's contents and the database."""
    _let_go()
    home = _home()
    shutil.rmtree(home)
    home.mkdir()
    if not db_url.startswith("sqlite"):
        url = make_url(db_url)
        admin = dict(host=url.host, port=url.port, user=url.username, dbname="postgres")
        with psycopg.connect(**admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{url.database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{url.database}"')


def _untouched_target() -> tuple[list[str], list[str]]:
    """What a refused restore must leave as it was: the data folder's entries (but the lock
    file that every process takes) and, without creating anything, the database's tables."""
    dispose_engines()  # (this process' open SQLite connections keep -wal and -shm files)
    home = _home()
    lock = settings.database_lock_path()
    entries = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p != lock)
    url = make_url(settings.database_url())
    if url.get_backend_name() == "sqlite":
        return entries, []
    from db.engine import create_workbench_engine

    probe = create_workbench_engine(settings.database_url())
    try:
        with probe.connect() as conn:
            return entries, sorted(inspect(conn).get_table_names())
    finally:
        probe.dispose()


def _restore(archive: Path, *args: str) -> Any:
    _let_go()  # the restore replaces the database under this process' pool
    done = cli("restore", str(archive), *args, timeout=300)
    dispose_engines()
    return done


class _Editor(threading.Thread):
    """Saves one pair after another (each its own transaction), as a person editing does."""

    def __init__(self, corpus_id: int) -> None:
        super().__init__(daemon=True)
        self.corpus_id, self.saved, self.halt = corpus_id, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            pairs.add_pair(self.corpus_id, EDIT.format(self.saved), f"Sentence {self.saved}.")
            self.saved += 1
            self.halt.wait(0.02)


def test_backup_while_training_and_editing_then_wipe_and_restore_is_equal(
    db_url: str, tmp_path: Path
) -> None:
    corpus_id = make_toy_corpus()
    glossary.set_terms(corpus_id, TERMS)
    _, trained = train_version(corpus_id, max_steps=30)
    run_id = runs.enqueue_training(corpus_id, epochs=200, min_epoch_steps=20)  # until cancelled
    worker = start_worker("--once", log=tmp_path / "worker.log")
    editor = _Editor(corpus_id)
    archive = tmp_path / "backup.tar"
    try:
        wait_for(lambda: run_info.get_run(run_id).progress_step > 0, 180, "training progress")
        editor.start()
        wait_for(lambda: editor.saved >= 5, 30, "the editor's first saves")
        saved_before, step_before = editor.saved, run_info.get_run(run_id).progress_step
        done = cli("backup", str(archive), timeout=300)
        saved_after, run = editor.saved, run_info.get_run(run_id)
        assert done.returncode == 0, done.stderr
        assert saved_after > saved_before  # the editor's writes went on during the backup
        # and training goes on: the worker writes its progress every 2 s or at an epoch's
        # validation, so a 2-s backup on a loaded machine may see no new step (a suite on 2
        # cores once saw 20 before and after); the run is still running and steps on
        assert run.status == "running"
        wait_for(lambda: run_info.get_run(run_id).progress_step > step_before, 60, "training after")
    finally:
        editor.halt.set()
        editor.join(timeout=30)
        if run_info.get_run(run_id).status == "running":
            runs.cancel_run(run_id)
        try:
            worker.wait(timeout=60)
        finally:
            stop(worker)
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["model_versions"] == [trained] and summary["missing_model_folders"] == []
    before = _state()

    # The manifest's checksums are those of the archive's members.
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(MANIFEST))
        for name, recorded in manifest["members"].items():
            data = tar.extractfile(name).read()
            assert recorded["size"] == len(data)
            assert recorded["sha256"] == hashlib.sha256(data).hexdigest()
    assert names[-1] == MANIFEST and set(names[:-1]) == set(manifest["members"])
    assert DATABASE_MEMBERS[make_url(db_url).get_backend_name()] in names

    _wipe(db_url)
    done = _restore(archive)
    assert done.returncode == 0, done.stderr
    after = _state()

    # Pairs: everything saved before the backup began, and the editor's saves up to one
    # point in between (one snapshot: a prefix of what they saved, nothing torn).
    edits = {row[2]: pid for pid, row in after["pairs"].items() if row[2].startswith("编辑")}
    restored_edits = len(edits)
    assert saved_before <= restored_edits <= saved_after
    assert set(edits) == {EDIT.format(i) for i in range(restored_edits)}
    for pid, row in after["pairs"].items():
        assert before["pairs"][pid] == row  # every column, byte for byte
    assert set(before["pairs"]) - set(after["pairs"]) == {
        pid
        for pid, row in before["pairs"].items()
        if row[2].startswith("编辑") and row[2] not in edits
    }
    assert after["glossary_terms"] == before["glossary_terms"]
    assert glossary.list_terms(corpus_id) == sorted(TERMS)
    # Versions: the rows and every model file, equal; the registry loads each.
    assert after["model_versions"] == {trained: before["model_versions"][trained]}
    assert after["files"] == {trained: before["files"][trained]}
    info = registry.get_version(trained)
    assert matches_recorded_sha256(registry.artifact_dir(trained), info.sha256)
    assert registry.load_version(trained).model is not None
    # The run was captured mid-training.
    assert after["training_runs"][run_id][:2] == before["training_runs"][run_id][:2]
    assert run_info.get_run(run_id).status == "running"


def test_restore_refuses_a_target_that_holds_data_unless_forced(
    db_url: str, tmp_path: Path, db_fingerprint
) -> None:
    corpus_id = make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    later = pairs.add_pair(corpus_id, "这是备份以后的句子。", "This came after the backup.")
    fingerprint, target = db_fingerprint(), _untouched_target()

    done = _restore(archive)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: the database is not empty (changes, corpora, pairs hold rows): restore into an "
        "empty one, or force it to replace what is there (--force)"
    ]
    assert _untouched_target() == target and db_fingerprint() == fingerprint

    # --force replaces the database and the model folders, whatever they held.
    stray = _home() / "models" / "7" / "config.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    done = _restore(archive, "--force")
    assert done.returncode == 0, done.stderr
    assert not stray.exists() and not any((_home() / "models").iterdir())
    with engine().connect() as conn:
        ids = set(conn.scalars(select(Pair.id)))
    assert len(ids) == 12 and later not in ids

    # A data folder with model folders is not empty either, even with an empty database.
    _wipe(db_url)
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    target = _untouched_target()
    done = _restore(archive)
    assert done.returncode == 2
    assert done.stderr.startswith("error: the data folder is not empty (")
    assert _untouched_target() == target

    # A database with the schema but no rows (the app was opened once) counts as empty.
    shutil.rmtree(_home() / "models")
    engine()
    dispose_engines()
    restore(archive)
    with engine().connect() as conn:
        assert len(conn.scalars(select(Pair.id)).all()) == 12


def test_a_damaged_or_cut_archive_is_refused_and_nothing_changes(
    db_url: str, tmp_path: Path
) -> None:
    make_toy_corpus()
    archive = tmp_path / "backup.tar"
    backup(archive)
    _wipe(db_url)
    target = _untouched_target()

    damaged = tmp_path / "damaged.tar"
    shutil.copy(archive, damaged)
    with tarfile.open(damaged) as tar:
        member = tar.getmember(DATABASE_MEMBERS[make_url(db_url).get_backend_name()])
    with open(damaged, "r+b") as f:
        f.seek(member.offset_data + member.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    done = _restore(damaged)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: the backup is damaged: {member.name} does not match its sha256 in the manifest"
    ]
    assert _untouched_target() == target

    _refuses_its_first_half(archive, target)

    # The intact archive still restores into that same untouched target.
    restore(archive)
    with engine().connect() as conn:
        assert len(conn.scalars(select(Pair.id)).all()) == 12


def _refuses_its_first_half(archive: Path, target: tuple[list[str], list[str]]) -> None:
    """An archive cut in half is refused in one error line, and ``target`` stays untouched."""
    cut = archive.with_name(f"cut-{archive.name}")
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    done = _restore(cut)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "backup" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _untouched_target() == target


def test_a_gz_name_compresses_the_archive_and_restore_reads_it(db_url: str, tmp_path: Path) -> None:
    make_toy_corpus()
    plain, compressed = tmp_path / "backup.tar", tmp_path / "backup.tar.gz"
    backup(plain)
    summary = backup(compressed)
    assert compressed.read_bytes()[:2] == b"\x1f\x8b"  # gzip's magic number
    assert summary.archive_bytes < plain.stat().st_size
    _wipe(db_url)
    target = _untouched_target()

    _refuses_its_first_half(compressed, target)

    restore(compressed)
    with engine().connect() as conn:
        assert len(conn.scalars(select(Pair.id)).all()) == 12


def test_a_version_whose_folder_is_gone_is_recorded_and_a_bad_file_name_refused(
    wb_home: Path, tmp_path: Path, monkeypatch
) -> None:
    from workbench.backup import backup as backups
    from workbench.errors import WorkbenchError
    from workbench.storage import session_scope

    monkeypatch.setattr(backups, "_FOLDER_WAIT_S", 0.2)
    with session_scope() as s:
        version = ModelVersion(artifact_path="")
        s.add(version)
        s.flush()
        version.artifact_path = settings.model_folder(version.id)
        version_id = version.id
    summary = backup(tmp_path / "backup.tar")
    assert (summary.model_versions, summary.missing_model_folders) == ([], [version_id])
    with tarfile.open(tmp_path / "backup.tar") as tar:
        manifest = json.load(tar.extractfile(MANIFEST))
        assert tar.getnames() == [DATABASE_MEMBERS["sqlite"], MANIFEST]
    assert manifest["missing_model_folders"] == [version_id]
    assert manifest["counts"]["model_versions"] == 1

    with pytest.raises(WorkbenchError, match="does not exist"):
        backup(tmp_path / "no-such-folder" / "backup.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.tar", "wb_home"]  # no leftovers


def test_a_refused_backup_or_restore_reads_chinese_on_a_page(wb_home: Path, tmp_path: Path) -> None:
    """The command line says it in English (above); a page would show the message id."""
    from tests.workbench.team.test_access import in_chinese
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError) as err:
        backup(tmp_path / "no-such-folder" / "backup.tar")
    assert in_chinese(err.value) == f"文件夹不存在：{tmp_path / 'no-such-folder'}"
    with pytest.raises(WorkbenchError) as err:
        restore(tmp_path / "missing.tar")
    assert str(err.value) == f"no such backup file: {tmp_path / 'missing.tar'}"
    assert in_chinese(err.value) == f"没有这个备份文件：{tmp_path / 'missing.tar'}"
