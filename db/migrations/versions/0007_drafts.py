"""Drafts: the unsaved edits of a grid, kept per browser and corpus outside the widget.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

- ``table_drafts``: per browser key (kept in the page's address), corpus and grid (pairs or
  glossary), the pending edits as JSON, so that a corpus switch, another page or a reload
  loses none of them (``workbench.corpus.drafts``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import corpus_id, create_id_table, one_of, timestamp

revision: str = "0007"
down_revision: str | None = "0006"

DRAFT_TABLES = ("pairs", "glossary")  # db.tables.DRAFT_TABLES as of this revision


def upgrade() -> None:
    create_id_table(
        "table_drafts",
        sa.Column("browser_key", sa.String(length=64), nullable=False),
        corpus_id(),
        sa.Column("table_kind", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        timestamp("updated_at", nullable=False),
        sa.UniqueConstraint("browser_key", "corpus_id", "table_kind"),
        sa.CheckConstraint(one_of("table_kind", DRAFT_TABLES), name="table_kind"),
    )
    op.create_index("ix_table_drafts_corpus_id", "table_drafts", ["corpus_id"])


def downgrade() -> None:
    op.drop_table("table_drafts")
