"""Runs say why they stopped and what may stop them early; metric rows record their kind.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

- ``training_runs.stop_reason``: the core_model ``StopReason`` value of a run that ended
  (e.g. ``memorised``, ``early_stopping``, ``time_budget``), so every page can say why in words.
- ``training_runs.progress_detail``: JSON of the latest progress (the limit that binds and the
  early-stopping watch), so progress and ETA follow what will actually happen.
- ``training_runs.note``: a note for the user that is not an error (e.g. "resumed after its
  worker stopped"); ``error`` is kept for failures only.
- ``run_metrics.kind``: ``start`` | ``step`` | ``epoch`` | ``done``. Existing rows are
  backfilled with the rule the charts used to re-derive: a row where a new validation loss
  appears is an epoch end.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    with op.batch_alter_table("training_runs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("progress_detail", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
    with op.batch_alter_table("run_metrics") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=8), nullable=False, server_default="step")
        )
    _backfill_epoch_rows()
    # The resume note used to live in `error` while a run waited in the queue.
    op.execute(
        "UPDATE training_runs SET note = error, error = NULL "
        "WHERE status = 'queued' AND error IS NOT NULL"
    )


def _backfill_epoch_rows() -> None:
    conn = op.get_bind()
    metrics = sa.table(
        "run_metrics",
        sa.column("id", sa.Integer),
        sa.column("run_id", sa.Integer),
        sa.column("valid_loss", sa.Float),
        sa.column("kind", sa.String),
    )
    rows = conn.execute(
        sa.select(metrics.c.id, metrics.c.run_id, metrics.c.valid_loss).order_by(
            metrics.c.run_id, sa.text("step"), metrics.c.id
        )
    ).all()
    epoch_ids, last_run, last_valid = [], None, None
    for row in rows:
        if row.run_id != last_run:
            last_run, last_valid = row.run_id, None
        if row.valid_loss is not None and row.valid_loss != last_valid:
            epoch_ids.append(row.id)
        last_valid = row.valid_loss
    for start in range(0, len(epoch_ids), 900):
        conn.execute(
            metrics.update()
            .where(metrics.c.id.in_(epoch_ids[start : start + 900]))
            .values(kind="epoch")
        )


def downgrade() -> None:
    with op.batch_alter_table("run_metrics") as batch:
        batch.drop_column("kind")
    with op.batch_alter_table("training_runs") as batch:
        batch.drop_column("note")
        batch.drop_column("progress_detail")
        batch.drop_column("stop_reason")
