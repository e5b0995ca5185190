"""A history of every change, and a trash for deleted corpora.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

- ``changes``: the append-only record of every write to pairs, glossary terms, corpora and
  versions (who, when, the rows before and after), read by ``workbench.team.history``.
- ``corpora.deleted_at`` / ``deleted_name``: a deleted corpus stays in the trash for a while
  before it is really removed (``workbench.team.trash``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import create_id_table, timestamp

revision: str = "0010"
down_revision: str | None = "0009"


def upgrade() -> None:
    create_id_table(
        "changes",
        timestamp("at", nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("entity", sa.String(length=16), nullable=False),
        sa.Column("entity_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), server_default="", nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("reversible", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("undoes", sa.Integer(), nullable=True),
    )
    op.create_index("ix_changes_corpus_id_id", "changes", ["corpus_id", "id"])
    op.create_index("ix_changes_at", "changes", ["at"])
    op.create_index("ix_changes_undoes", "changes", ["undoes"])
    # Plain ALTER TABLE ADD COLUMN: a batch copy of ``corpora`` would drop the old table,
    # and on SQLite that deletes every pair through ON DELETE CASCADE.
    op.add_column("corpora", timestamp("deleted_at"))
    op.add_column("corpora", sa.Column("deleted_name", sa.String(length=200), nullable=True))
    op.create_index("ix_corpora_deleted_at", "corpora", ["deleted_at"])


def downgrade() -> None:
    op.drop_index("ix_corpora_deleted_at", "corpora")
    op.drop_column("corpora", "deleted_name")
    op.drop_column("corpora", "deleted_at")
    op.drop_table("changes")
