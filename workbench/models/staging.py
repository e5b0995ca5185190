"""A model import's staging folder, ``runs/import-<hex>/`` (``settings.new_import_staging_dir``):
an upload is written, a zip unpacked and a model copied and checked there before the registry
changes, and the folder is removed when the import ends, however it ends.

A killed import (kill -9, a power cut) cannot remove it, so a live import holds a lock on
the folder's ``.lock`` file for as long as it runs, and ``sweep`` removes every staging
folder whose lock nobody holds: the next import does it before it starts, and so do the
app's start and a worker's (``ui.startup``, ``run_folders.sweep_run_folders``). A folder
with no lock file yet is one being made this instant (or one an older version left): it is
swept once it is older than ``UNLOCKED_GRACE_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from workbench import settings

LOCK_FILE = ".lock"
UNLOCKED_GRACE_S = 60.0


@contextlib.contextmanager
def staging_folder() -> Iterator[Path]:
    """A new staging folder, locked while the `with` block runs, removed after it."""
    path = settings.new_import_staging_dir(uuid.uuid4().hex)
    path.mkdir(parents=True)
    try:
        with open(path / LOCK_FILE, "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep() -> int:
    """Remove the staging folders of imports that no longer run; returns how many."""
    swept = 0
    for path in settings.import_staging_dirs():
        with contextlib.suppress(OSError):  # (another sweep may be removing it right now)
            if _abandoned(path):
                shutil.rmtree(path, ignore_errors=True)
                swept += 1
    return swept


def _abandoned(path: Path) -> bool:
    try:
        lock = open(path / LOCK_FILE, "rb")  # noqa: SIM115 — closed below
    except FileNotFoundError:
        return time.time() - path.stat().st_mtime > UNLOCKED_GRACE_S
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live import
        return True
