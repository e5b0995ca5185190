"""The local worker process: start one on demand when none is alive (its lock:
``workbench.worker_lock``).

``ensure_worker`` starts a detached ``python -m workbench worker`` when none is alive. The
training loop itself is ``workbench.training.worker``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from workbench import settings
from workbench.curation import pool_jobs
from workbench.training import runs
from workbench.worker_lock import worker_alive

ROOT = Path(__file__).resolve().parents[2]  # the repository: the worker runs from it


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
