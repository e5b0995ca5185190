"""The lock a live worker holds on ``<WORKBENCH_HOME>/worker.lock``: whether a worker runs on
this data folder, asked by the pages and the worker's own starter (a restore asks
``database_lock``, which every process holds); and how the app starts such a background
process (the worker, its HTTP server) holding its lock from its first instant.

A live worker holds a shared lock on the file (``hold_worker_lock``) for as long as it runs;
the OS drops the lock when the process dies, so ``worker_alive`` needs no PID file. Top-level,
beside ``settings``, because services of several packages ask it and none may import the
training package for it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from workbench import settings

ROOT = Path(__file__).resolve().parents[1]  # the repository: background processes run from it
# The processes this one started -> the thread that waits for each: a child that exits (stopped,
# idle, crashed) is reaped at once instead of staying <defunct> under the app.
_reapers: dict[int, threading.Thread] = {}


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


def spawn_holding(lock: Path, log: Path, *command: str) -> int:
    """Start ``python -m workbench *command`` detached (its own session: it outlives the app and
    is not stopped with its process group), on this data folder, writing to ``log`` and holding
    a shared lock on ``lock`` from its first instant (inherited, not only once it has imported
    torch), so that two quick clicks never start two; returns its PID. The caller holds
    spawn.lock. A thread of this process waits for the child (``wait_reaped``)."""
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, settings.ENV_HOME: str(settings.home()), "PYTHONPATH": python_path}
    with open(lock, "a+") as held, open(log, "ab") as out:
        fcntl.flock(held, fcntl.LOCK_SH)
        child = subprocess.Popen(
            [sys.executable, "-m", "workbench", *command],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(held.fileno(),),  # the child keeps the shared lock alive
            start_new_session=True,
        )
    for pid in [pid for pid, reaper in _reapers.items() if not reaper.is_alive()]:
        del _reapers[pid]
    reaper = threading.Thread(target=child.wait, name=f"reap-{child.pid}", daemon=True)
    reaper.start()
    _reapers[child.pid] = reaper
    return child.pid


def wait_reaped(pid: int, timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) until the process ``pid`` that this process started has
    exited and been reaped. One started by an earlier run of the app is no child of this one
    (its parent is gone, the system reaps it): nothing to wait for."""
    reaper = _reapers.get(pid)
    if reaper is not None:
        reaper.join(timeout_s)


def hold_worker_lock() -> IO[str]:
    """Take the shared lock a live worker holds; keep the returned file open for the life of
    the process."""
    lock = open(settings.worker_lock_path(), "a+")  # noqa: SIM115 — held for the process lifetime
    fcntl.flock(lock, fcntl.LOCK_SH)
    return lock
