"""The local worker process: is one alive, start one on demand, and the lock it holds.

A live worker holds a shared lock on ``worker.lock`` (``hold_worker_lock``) for as long as it
runs; the OS drops the lock when the process dies, so ``worker_alive`` needs no PID file.
``ensure_worker`` starts a detached ``python -m workbench worker`` when none is alive. The
training loop itself is ``workbench.worker``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from workbench import pool_jobs, runs, settings

ROOT = Path(__file__).resolve().parents[1]  # the repository: the worker runs from it


def worker_alive() -> bool:
    """Whether a worker runs on this machine (it holds a shared lock on worker.lock)."""
    with open(settings.worker_lock_path(), "a+") as f:
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


def ensure_worker(idle_exit_s: float = 600.0) -> int | None:
    """Start a detached worker if none is alive on this machine; return its PID (or None).

    Runs and pool jobs whose worker died are taken back first (``runs.reap_stale_runs``,
    ``pool_jobs.reap_stale_jobs``), so the new or living worker finds them queued. The
    worker outlives the page and the Streamlit server, and exits after `idle_exit_s` seconds
    with nothing to do. Callers are serialised by spawn.lock, and the new worker inherits a
    shared lock on worker.lock from the start (not only once it has imported torch), so two
    quick clicks never start two workers.
    """
    runs.reap_stale_runs()
    pool_jobs.reap_stale_jobs()
    home = settings.home()
    with open(settings.spawn_lock_path(), "a+") as spawn_lock:
        fcntl.flock(spawn_lock, fcntl.LOCK_EX)
        if worker_alive():
            return None
        python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, settings.ENV_HOME: str(home), "PYTHONPATH": python_path}
        with (
            open(settings.worker_lock_path(), "a+") as held,
            open(settings.worker_log_path(), "ab") as log,
        ):
            fcntl.flock(held, fcntl.LOCK_SH)
            proc = subprocess.Popen(
                [sys.executable, "-m", "workbench", "worker", "--idle-exit", str(idle_exit_s)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(held.fileno(),),  # the child keeps the shared lock alive
                start_new_session=True,  # not killed with the UI's process group
            )
        return proc.pid
