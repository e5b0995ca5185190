"""The lock a live worker holds on ``<WORKBENCH_HOME>/worker.lock``: whether a worker runs on
this data folder, asked by the pages and the worker's own starter (a restore asks
``database_lock``, which every process holds).

A live worker holds a shared lock on the file (``hold_worker_lock``) for as long as it runs;
the OS drops the lock when the process dies, so ``worker_alive`` needs no PID file. Top-level,
beside ``settings``, because services of several packages ask it and none may import the
training package for it.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

from workbench import settings


def worker_alive() -> bool:
    """Whether a worker runs on this machine (it holds a shared lock on worker.lock)."""
    return lock_held(settings.worker_lock_path())


def lock_held(path: Path) -> bool:
    """Whether a live process holds a shared lock on ``path`` (a worker on worker.lock, the
    app's HTTP server on server.lock)."""
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def hold_worker_lock() -> IO[str]:
    """Take the shared lock a live worker holds; keep the returned file open for the life of
    the process."""
    lock = open(settings.worker_lock_path(), "a+")  # noqa: SIM115 — held for the process lifetime
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock
