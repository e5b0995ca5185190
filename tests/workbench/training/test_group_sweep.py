"""The shared memory of a 2-process run whose worker was killed -9 (issue 37): its rank
group's folder in /dev/shm (``ranks-<PID of rank 0>-…``) outlived it, taking memory until the
machine restarted. A worker's start sweeps the folders of groups whose process is gone, and
keeps a live one's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core_model.training import parallel
from tests.helpers import start_worker


@pytest.fixture
def group_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int, str], Path]]:
    """Makes a group's folder as rank ``pid`` would where /dev/shm is not writable: in the
    temp folder, here one of this test's own (``TMPDIR``, which the worker started here
    inherits), so that no other test's worker sweeps them first."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    made: list[Path] = []

    def make(pid: int, tag: str) -> Path:
        folder = root / f"{parallel.GROUP_PREFIX}{pid}-{tag}"
        folder.mkdir()
        (folder / "gradients").write_bytes(b"\0" * 4096)
        made.append(folder)
        return folder

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_worker_start_sweeps_the_groups_of_dead_runs_only(
    wb_home: Path, group_folder: Callable[[int, str], Path]
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # ran and reaped
    dead = group_folder(gone.pid, "test-dead")
    live = group_folder(os.getpid(), "test-live")  # this test's process
    unreaped = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while parallel._alive(unreaped.pid):  # exited, not reaped yet: a zombie is gone too
            pass
        zombie = group_folder(unreaped.pid, "test-zombie")
        worker = start_worker("--once", log=wb_home / "worker.log")
        assert worker.wait(timeout=120) == 0, (wb_home / "worker.log").read_text()
    finally:
        unreaped.wait()
    assert not dead.exists() and not zombie.exists()
    assert (live / "gradients").exists()
    said = (wb_home / "worker.log").read_text()
    assert f"removed {dead}, left by a training process that is gone" in said
    assert str(live) not in said
