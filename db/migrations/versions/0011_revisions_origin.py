"""Revisions for optimistic concurrency, and the origin of a version nobody here trained.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

- ``pairs.revision`` / ``glossary_terms.revision``: raised by one on every write; a save
  names the revision its edit was based on, and a row changed since is a conflict the user
  resolves instead of a silent overwrite (``workbench.corpus.pairs``, ``.glossary``).
- ``model_versions.origin``: where a registered public model came from (file, format,
  model type, languages, hub id, licence); NULL for a version trained here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"


def upgrade() -> None:
    # Plain ALTER TABLE ADD COLUMN (no batch copy: on SQLite a copy of a table with
    # ON DELETE CASCADE children would delete them).
    op.add_column("pairs", sa.Column("revision", sa.Integer(), server_default="1", nullable=False))
    op.add_column(
        "glossary_terms", sa.Column("revision", sa.Integer(), server_default="1", nullable=False)
    )
    op.add_column("model_versions", sa.Column("origin", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("model_versions", "origin")
    op.drop_column("glossary_terms", "revision")
    op.drop_column("pairs", "revision")
