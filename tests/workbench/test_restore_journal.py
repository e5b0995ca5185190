"""A restore is all or nothing (issue 37): killed (SIGKILL, a real process) before each
rename, unlink and removal it makes, the next process that opens the data folder leaves
either the old data whole or the backup's whole, says which in one line, and sweeps what the
killed restore left. Also: a backup whose versions share a folder is refused, and deleting
one of two rows that share a folder keeps the folder."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from db.tables import ModelVersion
from tests.helpers import ROOT, make_toy_corpus, subprocess_env
from tests.workbench.test_backup import _let_go, _restore, _untouched_target
from workbench import settings
from workbench.backup.backup import backup
from workbench.corpus import corpora, pairs
from workbench.models import registry
from workbench.storage import engine, session_scope

# `python -m workbench restore …` that SIGKILLs itself before its (argv[1])-th file-system
# change: a rename, an unlink (shutil.rmtree's included) or a folder removal.
_DYING_RESTORE = """
import os, shutil, signal, sys
left = [int(sys.argv.pop(1))]
def dying(change):
    def changed(*args, **kwargs):
        if left[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        left[0] -= 1
        return change(*args, **kwargs)
    return changed
for name in ("replace", "rename", "unlink", "rmdir"):
    setattr(os, name, dying(getattr(os, name)))
shutil.rmtree = dying(shutil.rmtree)
from workbench.cli import main
sys.exit(main())
"""


def _with_versions(corpus: str, sentence: str, weights: bytes) -> None:
    """A corpus of one pair and a version whose folder holds ``weights``."""
    info = corpora.create_corpus(corpus, "zh", "en")
    pairs.add_pair(info.id, f"{sentence}。", sentence)
    with session_scope() as s:
        version = ModelVersion(name=corpus, artifact_path="", corpus_id=info.id)
        s.add(version)
        s.flush()
        version.artifact_path = settings.model_folder(version.id)
        folder = settings.resolve(version.artifact_path)
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "config.json").write_text(f'{{"corpus": "{corpus}"}}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "tokenizer" / "vocab.json").write_text(f'["{sentence}"]')


_Data = tuple[list[tuple], list[tuple], dict[str, str]]


def _data(home: Path) -> _Data:
    """The data folder's pairs, versions and model files (sha256 by path), read directly."""
    conn = sqlite3.connect(home / "workbench.db")
    try:
        rows = sorted(conn.execute("SELECT source, target FROM pairs"))
        versions = sorted(conn.execute("SELECT id, name, artifact_path FROM model_versions"))
    finally:
        conn.close()
    models = home / "models"
    files = {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(models.rglob("*"))
        if p.is_file()
    }
    return rows, versions, files


def _old_and_new(home: Path, tmp_path: Path) -> tuple[Path, _Data, _Data, Path]:
    """A backup (``new``), then other data in the data folder (``old``, copied to a folder
    that puts it back)."""
    _with_versions("backup's", "The backup's sentence", b"new weights")
    archive = tmp_path / "backup.tar"
    backup(archive)
    _let_go()
    new = _data(home)
    shutil.rmtree(home)
    home.mkdir()
    make_toy_corpus("old")
    _with_versions("before", "The sentence before", b"old weights")
    _let_go()
    old = _data(home)
    assert old != new
    before = tmp_path / "before"
    shutil.copytree(home, before)
    return archive, old, new, before


def _killed_restore(archive: Path, changes: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _DYING_RESTORE, str(changes), "restore", str(archive), "--force"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _leftovers(home: Path) -> list[str]:
    return sorted(
        p.name
        for p in home.iterdir()
        if p.name.startswith(".restore-")
        or p.name.startswith("restore.journal")
        or p.name.endswith((".restoring", ".pre-restore"))
    )


def test_a_restore_killed_at_any_step_leaves_old_or_new_data_never_a_mix(
    wb_home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, old, new, before = _old_and_new(wb_home, tmp_path)
    outcomes = []
    for changes in range(200):
        killed = _killed_restore(archive, changes)
        if killed.returncode == 0:  # it made fewer changes than that: it ran whole
            break
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert _leftovers(wb_home) != [] or _data(wb_home) in (old, new)
        caplog.clear()
        engine()  # the next start: what every command, worker and the app does first
        _let_go()
        now = _data(wb_home)
        assert now in (old, new), f"killed before change {changes}: a mix"
        said = [r.getMessage() for r in caplog.records if r.name == "workbench.backup"]
        if now == new and said:
            assert said == [
                f"an interrupted restore of {archive} was finished: the data folder holds "
                "the backup's data"
            ]
        elif said:
            assert said == [
                f"an interrupted restore of {archive} was rolled back: the data folder "
                "holds the data it held before"
            ]
        assert _leftovers(wb_home) == []
        outcomes.append((changes, "new" if now == new else "old", bool(said)))
        shutil.rmtree(wb_home)
        shutil.copytree(before, wb_home)
    else:
        raise AssertionError("the restore never ran to its end")
    assert _data(wb_home) == new and _leftovers(wb_home) == []
    # Every kind of outcome happened: killed before the journal (old, nothing said), rolled
    # back (old, said), and finished (new, said), where the kill fell after the commit.
    kinds = {(state, told) for _, state, told in outcomes}
    assert {("old", False), ("old", True), ("new", True)} <= kinds, outcomes
    assert len(outcomes) >= 8


def test_a_second_restore_rolls_the_killed_one_back_first(wb_home: Path, tmp_path: Path) -> None:
    """Killed with the backup's models/ in place beside the old database, then restored again
    (no other process opened the data folder in between): the new restore rolls the killed
    one back, then restores whole, and nothing of either is left over."""
    archive, old, new, before = _old_and_new(wb_home, tmp_path)
    for changes in range(50):
        assert _killed_restore(archive, changes).returncode == -signal.SIGKILL
        journal, weights = wb_home / "restore.journal", wb_home / "models/1/model.safetensors"
        if journal.exists() and weights.exists() and weights.read_bytes() == b"new weights":
            break
        shutil.rmtree(wb_home)
        shutil.copytree(before, wb_home)
    else:
        raise AssertionError("never killed between the two swaps")
    assert _data(wb_home) not in (old, new)  # the mix the journal undoes
    assert not json.loads(journal.read_text())["committed"]
    done = _restore(archive, "--force")
    assert done.returncode == 0, done.stderr
    assert "was rolled back" in done.stderr
    assert _data(wb_home) == new and _leftovers(wb_home) == []


def test_a_backup_whose_versions_share_a_folder_is_refused(wb_home: Path, tmp_path: Path) -> None:
    _with_versions("twins", "A sentence", b"weights")
    with session_scope() as s:
        s.add(ModelVersion(name="twin", artifact_path="models/1"))
    archive = tmp_path / "backup.tar"
    backup(archive)
    target = _untouched_target()
    done = _restore(archive, "--force")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: the backup's model versions 1 and 2 share one folder (models/1): each version "
        "needs its own"
    ]
    assert _untouched_target() == target


def test_deleting_a_version_keeps_a_folder_another_row_names(wb_home: Path) -> None:
    _with_versions("twins", "A sentence", b"weights")
    with session_scope() as s:
        twin = ModelVersion(name="twin", artifact_path="models/./1")
        s.add(twin)
        s.flush()
        twin_id = twin.id
    folder = wb_home / "models" / "1"
    registry.delete_version(twin_id)
    assert (folder / "model.safetensors").read_bytes() == b"weights"
    assert [v.id for v in registry.list_versions()] == [1]
    registry.delete_version(1)  # the last row naming it: now the folder goes
    assert not folder.exists()
