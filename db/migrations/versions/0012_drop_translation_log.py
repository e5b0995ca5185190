"""Drop ``translation_log``: a table nothing ever wrote or read.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

The initial schema kept an "optional history" of the UI's translations; no code path ever
filled it, and the history of corrections lives in ``changes`` (0010). A downgrade
recreates it empty, as 0001 made it.
"""

from __future__ import annotations

from alembic import op

from db.migrations.history_ops import create_translation_log

revision: str = "0012"
down_revision: str | None = "0011"


def upgrade() -> None:
    op.drop_index("ix_translation_log_version_id", "translation_log")
    op.drop_table("translation_log")


def downgrade() -> None:
    create_translation_log()
