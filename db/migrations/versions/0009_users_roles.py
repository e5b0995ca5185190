"""Team mode: users and their roles, API keys' roles, who started a training run.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

- ``users``: a team member's role (viewer, editor, admin) by e-mail.
- ``api_keys.role``: what a request with the key may do; existing keys become viewers
  (until now a key could only translate, which a viewer may).
- ``training_runs.started_by``: who queued the run (NULL for runs queued before).
- ``model_versions.trained_by``: who trained it (its run's ``started_by``) or registered it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import create_id_table, created_at, one_of

revision: str = "0009"
down_revision: str | None = "0008"

ROLES = ("viewer", "editor", "admin")  # db.tables.Role as of this revision


def upgrade() -> None:
    create_id_table(
        "users",
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("added_by", sa.String(length=320), nullable=True),
        created_at(),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
        sa.CheckConstraint(one_of("role", ROLES), name="role"),
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("role", sa.String(length=16), server_default="viewer", nullable=False)
        )
    with op.batch_alter_table("training_runs") as batch:
        batch.add_column(sa.Column("started_by", sa.String(length=320), nullable=True))
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("trained_by", sa.String(length=320), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMNs (SQLite >= 3.35), as 0008 does: a batch copy would drop and re-create
    # model_versions and training_runs, which cascades into every row that refers to them.
    for table, column in (
        ("model_versions", "trained_by"),
        ("training_runs", "started_by"),
        ("api_keys", "role"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_table("users")
