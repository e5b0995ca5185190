"""A run's folder under ``<WORKBENCH_HOME>/runs/``: its checkpoint, and the sweep of folders
no run needs any more.

A worker trains in the run's folder (``settings.run_dir``): its epoch checkpoint, then the
model before registration moves it to ``models/``. A failed or cancelled run keeps its
folder, and so its checkpoint, to be resumed until the run is deleted.
"""

from __future__ import annotations

import shutil

from sqlalchemy import select

from core_model.artifact import ArtifactError
from core_model.training import checkpoint as ckpt
from db.tables import RunStatus, TrainingRun
from workbench import settings
from workbench.models import staging
from workbench.storage import session_scope


def checkpoint_step(run_id: int) -> int | None:
    """The step of the checkpoint a stopped run left on this machine (None: it has none, e.g.
    it stopped before its first epoch ended, or trained on another machine's disk)."""
    found = ckpt.find_checkpoint(settings.run_dir(run_id))
    if found is None:
        return None
    try:
        return int(ckpt.read_state(found)["step"])
    except (ArtifactError, KeyError, TypeError, ValueError):
        return None


def sweep_run_folders() -> int:
    """Delete what runs/ no longer needs: folders of runs that succeeded (the model moved to
    models/) or no longer exist, and the staging folders of imports that no longer run (a
    killed `register`: ``workbench.models.staging``). A failed or cancelled run keeps its
    folder (its checkpoint, to resume from) until the run is deleted. Returns how many were
    removed."""
    root = settings.runs_dir()
    found = {int(p.name): p for p in root.glob("*") if p.is_dir() and p.name.isdigit()}
    kept: set[int] = set()
    if found:
        with session_scope() as s:
            kept = set(
                s.scalars(
                    select(TrainingRun.id).where(
                        TrainingRun.id.in_(found), TrainingRun.status != RunStatus.SUCCEEDED
                    )
                )
            )
    done = [path for run_id, path in found.items() if run_id not in kept]
    for path in done:
        shutil.rmtree(path, ignore_errors=True)
    return len(done) + staging.sweep()
