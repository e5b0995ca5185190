"""A fresh data folder for a benchmark run, so that no benchmark ever writes to a real one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fresh_home(workdir: Path | None, prefix: str) -> Path:
    """Point this process at ``<workdir>/home`` (``workdir``: a new temp folder by default)
    on SQLite, whatever ``WORKBENCH_DB_URL`` says, acting as the local admin as the command
    line does; returns ``workdir`` (made if new) for the benchmark's own files. Call it before
    the first ``workbench`` import that reads settings."""
    work = workdir or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["WORKBENCH_HOME"] = str(work / "home")
    os.environ.pop("WORKBENCH_DB_URL", None)
    from workbench.team import access

    access.use_actor_source(access.local_admin)
    return work
