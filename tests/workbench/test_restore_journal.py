"""A restore is all or nothing (issue 37): killed (SIGKILL, a real process) before each
rename, unlink and removal it makes, the next process that opens the data folder leaves
either the old data whole or the backup's whole, says which in one line, and sweeps what the
killed restore left. Also: a backup whose versions share a folder is refused, and deleting
one of two rows that share a folder keeps the folder."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
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

# A Python that imports the command line once, then forks one child per line of its stdin
# (N): the child, a real process, runs `restore ARGV…` and SIGKILLs itself before its N-th
# file-system change (a rename, an unlink, shutil.rmtree's included, or a folder removal);
# its stdout and stderr go to argv[1].N; the parent answers each line with the child's exit
# status. A fresh Python per kill cost ~1.5 s, 20 s for the ~15 kills of a walk.
_DYING_RESTORES = """
import os, shutil, signal, sys
from workbench.cli import main
import workbench.backup.restore  # what each child runs, imported once
for line in sys.stdin:
    left = [int(line)]
    pid = os.fork()
    if pid == 0:
        out = os.open(f"{sys.argv[1]}.{left[0]}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
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
        code = main(sys.argv[2:])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
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


@contextlib.contextmanager
def _killed_restores(archive: Path, logs: Path) -> Iterator[Callable[[int], tuple[int, str]]]:
    """``killed(n)``: a `restore ARCHIVE --force` in a process of its own, SIGKILLed before
    its n-th file-system change; returns its exit status and its output."""
    forker = subprocess.Popen(
        [sys.executable, "-c", _DYING_RESTORES, str(logs), "restore", str(archive), "--force"],
        cwd=ROOT,
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert forker.stdin is not None and forker.stdout is not None

    def killed(changes: int) -> tuple[int, str]:
        forker.stdin.write(f"{changes}\n")
        forker.stdin.flush()
        status = forker.stdout.readline()
        assert status, f"the forking restorer ended: {forker.wait()}"
        return int(status), Path(f"{logs}.{changes}").read_text(errors="replace")

    try:
        yield killed
    finally:
        forker.stdin.close()
        try:
            forker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            forker.kill()
            forker.wait()


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
    with _killed_restores(archive, tmp_path / "restore.log") as killed_restore:
        for changes in range(200):
            status, output = killed_restore(changes)
            if status == 0:  # it made fewer changes than that: it ran whole
                break
            assert status == -signal.SIGKILL, output[-2000:]
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
    with _killed_restores(archive, tmp_path / "restore.log") as killed_restore:
        for changes in range(50):
            assert killed_restore(changes)[0] == -signal.SIGKILL
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
