"""Version lineage, and valid/test splits grouped by sentence.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

- ``model_versions.parent_version_id``: the version a run continued (warm start), backfilled
  from the run's ``init_version_id``; ``train_tokens`` (its own run's, from its metrics) and
  ``cumulative_tokens`` / ``cumulative_seconds`` (its own plus every ancestor's).
- ``corpora.splits_grouped``: false for every corpus that exists now. Regrouping their pairs
  needs the application's split rule, which ``db`` must not import, so the data step runs
  right after migrating (``workbench.corpus.splits.group_old_corpora``, called when the application
  opens the database): it moves the pairs whose sentence also sits in another split, sets the
  flag and writes what moved into ``corpora.split_note``.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"


def upgrade() -> None:
    # Plain ADD COLUMNs (no table copy on SQLite: the corpora table is referenced by most).
    op.add_column(
        "corpora",
        sa.Column("splits_grouped", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("corpora", sa.Column("split_note", sa.Text(), nullable=False, server_default=""))
    # No foreign key: SQLite can add one only by copying the table, and dropping the old
    # model_versions would cascade into every row that refers to it. Deleting a version
    # clears its children's parent (workbench.models.registry.delete_version).
    op.add_column("model_versions", sa.Column("parent_version_id", sa.Integer()))
    for name, kind in (
        ("train_tokens", sa.BigInteger()),
        ("cumulative_tokens", sa.BigInteger()),
        ("cumulative_seconds", sa.Float()),
    ):
        op.add_column("model_versions", sa.Column(name, kind, nullable=False, server_default="0"))
    _backfill_lineage()


def _backfill_lineage() -> None:
    """Parents from the runs that fine-tuned a version; cumulative sums in id order (a parent
    is always older than its child)."""
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT v.id, v.metrics, v.train_seconds, r.init_version_id FROM model_versions v "
            "LEFT JOIN training_runs r ON r.id = v.run_id ORDER BY v.id"
        )
    ).all()
    totals: dict[int, tuple[int, float]] = {}
    for vid, metrics, seconds, parent in rows:
        if isinstance(metrics, str):
            metrics = json.loads(metrics or "{}")
        tokens = int((metrics or {}).get("tokens_trained") or 0)
        parent = parent if parent in totals else None
        before = totals.get(parent, (0, 0.0)) if parent is not None else (0, 0.0)
        totals[vid] = (before[0] + tokens, before[1] + float(seconds or 0.0))
        conn.execute(
            sa.text(
                "UPDATE model_versions SET parent_version_id = :p, train_tokens = :t, "
                "cumulative_tokens = :ct, cumulative_seconds = :cs WHERE id = :id"
            ),
            {"p": parent, "t": tokens, "ct": totals[vid][0], "cs": totals[vid][1], "id": vid},
        )


def downgrade() -> None:
    # Plain DROP COLUMNs (SQLite >= 3.35): a batch copy would drop and re-create corpora and
    # model_versions, and dropping them cascades into every row that refers to them.
    for table, column in (
        ("model_versions", "cumulative_seconds"),
        ("model_versions", "cumulative_tokens"),
        ("model_versions", "train_tokens"),
        ("model_versions", "parent_version_id"),
        ("corpora", "split_note"),
        ("corpora", "splits_grouped"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
