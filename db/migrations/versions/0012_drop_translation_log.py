"""Drop ``translation_log``: a table nothing ever wrote or read.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

The initial schema kept an "optional history" of the UI's translations; no code path ever
filled it, and the history of corrections lives in ``changes`` (0010). A downgrade
recreates it empty, as 0001 made it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"


def upgrade() -> None:
    op.drop_index("ix_translation_log_version_id", "translation_log")
    op.drop_table("translation_log")


def downgrade() -> None:
    op.create_table(
        "translation_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("corrected", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_translation_log_version_id_model_versions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_translation_log")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_translation_log_version_id", "translation_log", ["version_id"])
