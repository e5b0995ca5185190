"""Serving over HTTP: the version that answers for each language pair, and API keys.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

- ``served_versions``: one row per language pair (src_lang, tgt_lang) naming the version that
  ``workbench serve`` answers with; deleting the version deletes its row.
- ``api_keys``: keys for the HTTP API, stored as a sha256 digest (never the key) with the
  key's first characters for display, per-key limits (NULL: the server's default) and the
  time the key was revoked.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import create_id_table, created_at, language_pair, timestamp

revision: str = "0005"
down_revision: str | None = "0004"


def upgrade() -> None:
    op.create_table(
        "served_versions",
        *language_pair(),
        sa.Column("version_id", sa.Integer(), nullable=False),
        timestamp("since", nullable=False, server_now=True),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_served_versions_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("src_lang", "tgt_lang", name=op.f("pk_served_versions")),
        sa.UniqueConstraint("version_id", name=op.f("uq_served_versions_version_id")),
    )
    create_id_table(
        "api_keys",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("requests_per_minute", sa.Integer(), nullable=True),
        sa.Column("chars_per_request", sa.Integer(), nullable=True),
        created_at(),
        timestamp("revoked_at"),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_table("served_versions")
