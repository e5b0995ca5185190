"""A run's metric rows (loss, validation, speed by step) as a table, for the curves: read only,
so a page may follow a run as often as it refreshes."""

from __future__ import annotations

from typing import Any

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.tables import RunMetric
from workbench.storage import session_scope

METRIC_COLUMNS = [
    "id", "run_id", "kind", "step", "epoch", "train_loss", "valid_loss", "lr", "tokens_per_s",
    "bleu", "chrf",
]  # fmt: skip


def _metric_rows(s: Session, *where: Any) -> pd.DataFrame:
    rows = s.execute(
        select(*(getattr(RunMetric, c) for c in METRIC_COLUMNS))
        .where(*where)
        .order_by(RunMetric.run_id, RunMetric.step, RunMetric.id)
    ).all()
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def run_metrics(run_ids: list[int] | int) -> pd.DataFrame:
    """Metric rows of one or more runs, ordered by step (for loss/lr curves). `kind` is
    'start' | 'step' (progress by the clock) | 'loss' (the loss curve's points) | 'epoch'
    (after validation) | 'done' (core_model's ProgressEvent)."""
    ids = [run_ids] if isinstance(run_ids, int) else list(run_ids)
    with session_scope() as s:
        return _metric_rows(s, RunMetric.run_id.in_(ids))


def follow_metrics(run_id: int, known: pd.DataFrame | None = None) -> pd.DataFrame:
    """`known` (an earlier result for this run) brought up to date by reading only the rows
    written since. When rows it holds are gone (a resumed attempt drops those its dead
    predecessor wrote after the checkpoint), the run is read whole again."""
    with session_scope() as s:
        if known is None or known.empty:
            return _metric_rows(s, RunMetric.run_id == run_id)
        last = int(known["id"].max())
        kept = s.scalar(
            select(func.count()).where(RunMetric.run_id == run_id, RunMetric.id <= last)
        )
        if kept != len(known):
            return _metric_rows(s, RunMetric.run_id == run_id)
        new = _metric_rows(s, RunMetric.run_id == run_id, RunMetric.id > last)
    if new.empty:
        return known
    return pd.concat([known, new], ignore_index=True)
