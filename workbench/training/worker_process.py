"""The local worker process: start one on demand when none is alive (its lock:
``workbench.worker_lock``).

``ensure_worker`` starts a detached ``python -m workbench worker`` when none is alive. The
training loop itself is ``workbench.training.worker``.
"""

from __future__ import annotations

import fcntl

from workbench import settings
from workbench.curation import pool_jobs
from workbench.training import runs
from workbench.worker_lock import spawn_holding, worker_alive


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
    with open(settings.spawn_lock_path(), "a+") as spawn_lock:
        fcntl.flock(spawn_lock, fcntl.LOCK_EX)
        if worker_alive():
            return None
        return spawn_holding(
            settings.worker_lock_path(),
            settings.worker_log_path(),
            "worker",
            "--idle-exit",
            str(idle_exit_s),
        )
