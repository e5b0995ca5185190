"""A run whose worker may not write in ``runs/`` (issue 37) failed as "Training failed
unexpectedly: PermissionError …"; it now says which folder and what to do."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import make_toy_corpus, start_worker, stop
from workbench import settings
from workbench.training import run_info, runs


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """``folder`` refuses new entries, also to root (which ignores modes): immutable."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a folder read-only for root here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_read_only_runs_folder_fails_the_run_naming_it(wb_home: Path, tmp_path: Path) -> None:
    run_id = runs.enqueue_training(make_toy_corpus(), max_steps=5)
    folder = settings.runs_dir()
    folder.mkdir()
    with _read_only(folder):
        proc = start_worker("--once", log=tmp_path / "worker.log")
        try:
            assert proc.wait(timeout=300) == 0, (tmp_path / "worker.log").read_text()[-2000:]
        finally:
            stop(proc)
    run = run_info.get_run(run_id)
    assert run.status == "failed"
    reason = "permission denied" if os.geteuid() != 0 else "operation not permitted"
    assert run.error == (
        f"The worker cannot write in {folder} ({reason}): make that folder writable for the "
        "worker's user (or free some space), then resume the run."
    )
