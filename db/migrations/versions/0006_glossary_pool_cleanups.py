"""Glossaries, the pool of sentences to review, and clean-ups that can be undone.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26

- ``glossary_terms``: per corpus, a source term and the target term it must translate to.
- ``pool_jobs``: background translations of a corpus' pool by one version (or two, whose
  disagreement ranks the sentences); statuses as a training run's.
- ``pool_sentences``: monolingual source sentences, their latest machine translation and
  uncertainty, and what the reviewer did with them.
- ``cleanups`` and ``cleanup_changes``: each clean-up of a corpus and the pairs as they were
  before it removed or changed them, so it can be undone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import (
    corpus_id,
    create_id_table,
    created_at,
    one_of,
    reference,
    timestamp,
)

revision: str = "0006"
down_revision: str | None = "0005"

# The values as of this revision (db.tables: RunStatus, PoolStatus, CLEANUP_ACTIONS).
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
POOL_STATUSES = ("new", "accepted", "edited", "skipped")
CLEANUP_ACTIONS = ("removed", "changed")


def upgrade() -> None:
    create_id_table(
        "glossary_terms",
        corpus_id(),
        sa.Column("source_term", sa.String(length=200), nullable=False),
        sa.Column("target_term", sa.String(length=200), nullable=False),
        created_at(),
        sa.UniqueConstraint("corpus_id", "source_term"),
    )
    create_id_table(
        "pool_jobs",
        corpus_id(),
        reference("version_id", "model_versions", ondelete="SET NULL"),
        reference("second_version_id", "model_versions", ondelete="SET NULL"),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("done", sa.Integer(), server_default="0", nullable=False),
        sa.Column("worker_id", sa.String(length=128)),
        timestamp("heartbeat_at"),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("error", sa.Text()),
        created_at(),
        timestamp("started_at"),
        timestamp("finished_at"),
        sa.CheckConstraint(one_of("status", RUN_STATUSES), name="status"),
    )
    op.create_index("ix_pool_jobs_status_id", "pool_jobs", ["status", "id"])
    op.create_index("ix_pool_jobs_corpus_id", "pool_jobs", ["corpus_id"])
    create_id_table(
        "pool_sentences",
        corpus_id(),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("output", sa.Text()),
        sa.Column("second_output", sa.Text()),
        sa.Column("uncertainty", sa.Float()),
        reference("job_id", "pool_jobs", ondelete="SET NULL"),
        sa.Column("pair_id", sa.Integer()),
        created_at(),
        timestamp("reviewed_at"),
        sa.UniqueConstraint("corpus_id", "content_hash"),
        sa.CheckConstraint(one_of("status", POOL_STATUSES), name="status"),
    )
    op.create_index(
        "ix_pool_sentences_corpus_id_status_uncertainty",
        "pool_sentences",
        ["corpus_id", "status", "uncertainty"],
    )
    op.create_index("ix_pool_sentences_job_id", "pool_sentences", ["job_id"])
    create_id_table(
        "cleanups",
        corpus_id(),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        created_at(),
        timestamp("undone_at"),
    )
    op.create_index("ix_cleanups_corpus_id", "cleanups", ["corpus_id"])
    create_id_table(
        "cleanup_changes",
        reference("cleanup_id", "cleanups", ondelete="CASCADE", nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("split", sa.String(length=8), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("content_hash", sa.String(length=32), nullable=False),
        timestamp("pair_created_at"),
        sa.Column("new_hash", sa.String(length=32)),
        sa.CheckConstraint(one_of("action", CLEANUP_ACTIONS), name="action"),
    )
    op.create_index("ix_cleanup_changes_cleanup_id", "cleanup_changes", ["cleanup_id"])


def downgrade() -> None:
    op.drop_table("cleanup_changes")
    op.drop_table("cleanups")
    op.drop_table("pool_sentences")
    op.drop_table("pool_jobs")
    op.drop_table("glossary_terms")
