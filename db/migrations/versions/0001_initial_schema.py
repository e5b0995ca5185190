"""Initial schema: corpora, pairs (+ search index), training runs, metrics, model versions.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Besides the tables of ``db.tables`` this creates the backend-specific search support:
SQLite gets an external-content FTS5 table ``pairs_fts`` with the trigram tokenizer (substring
search that works for unsegmented Chinese) kept in sync by triggers; ``detail='none'`` keeps
the index small and fast to build (a query ANDs its trigrams, then LIKE confirms the hit).
PostgreSQL gets pg_trgm GIN indexes for ``ILIKE '%q%'``. Both are optional: without
FTS5-trigram (SQLite < 3.34) or without permission to create pg_trgm, search scans.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from db.migrations.history_ops import (
    create_id_table,
    create_translation_log,
    created_at,
    foreign_key,
    language_pair,
    timestamp,
)

revision: str = "0001"
down_revision: str | None = None

log = logging.getLogger(__name__)

# What a run_metrics row may hold, each optional: a row records what its step measured.
METRICS = ("epoch", "train_loss", "valid_loss", "lr", "tokens_per_s", "bleu", "chrf")

SQLITE_FTS = [
    "CREATE VIRTUAL TABLE pairs_fts USING fts5(source, target, content='pairs', "
    "content_rowid='id', tokenize='trigram', detail='none', columnsize=0)",
    # Fewer, larger merges: bulk imports index ~2x faster; queries barely notice.
    "INSERT INTO pairs_fts (pairs_fts, rank) VALUES ('automerge', 16)",
    "CREATE TRIGGER pairs_fts_ai AFTER INSERT ON pairs BEGIN "
    "INSERT INTO pairs_fts(rowid, source, target) VALUES (new.id, new.source, new.target); "
    "END",
    "CREATE TRIGGER pairs_fts_ad AFTER DELETE ON pairs BEGIN "
    "INSERT INTO pairs_fts(pairs_fts, rowid, source, target) "
    "VALUES ('delete', old.id, old.source, old.target); "
    "END",
    "CREATE TRIGGER pairs_fts_au AFTER UPDATE OF source, target ON pairs BEGIN "
    "INSERT INTO pairs_fts(pairs_fts, rowid, source, target) "
    "VALUES ('delete', old.id, old.source, old.target); "
    "INSERT INTO pairs_fts(rowid, source, target) VALUES (new.id, new.source, new.target); "
    "END",
]
PG_TRGM = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX ix_pairs_source_trgm ON pairs USING gin (source gin_trgm_ops)",
    "CREATE INDEX ix_pairs_target_trgm ON pairs USING gin (target gin_trgm_ops)",
]


def upgrade() -> None:
    create_id_table(
        "corpora",
        sa.Column("name", sa.String(length=200), nullable=False),
        *language_pair(),
        created_at(),
        sa.UniqueConstraint("name", name=op.f("uq_corpora_name")),
    )
    create_id_table(
        "pairs",
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("split", sa.String(length=8), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("content_hash", sa.String(length=32), nullable=False),
        created_at(),
        timestamp("updated_at", nullable=False, server_now=True),
        sa.CheckConstraint("split IN ('train', 'valid', 'test')", name=op.f("ck_pairs_split")),
        foreign_key("pairs", "corpus_id", "corpora", ondelete="CASCADE"),
        sa.UniqueConstraint(
            "corpus_id", "content_hash", name=op.f("uq_pairs_corpus_id_content_hash")
        ),
    )
    op.create_index("ix_pairs_corpus_id_id", "pairs", ["corpus_id", "id"])
    op.create_index("ix_pairs_corpus_id_split_id", "pairs", ["corpus_id", "split", "id"])

    create_id_table(
        "training_runs",
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.Column("snapshot_pair_ids", sa.JSON(), nullable=False),
        sa.Column("snapshot_hash", sa.String(length=64), nullable=False),
        sa.Column("snapshot_size", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        timestamp("heartbeat_at"),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("init_version_id", sa.Integer(), nullable=True),
        sa.Column("progress_step", sa.Integer(), server_default="0", nullable=False),
        sa.Column("progress_total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("eta_s", sa.Float(), nullable=True),
        created_at(),
        timestamp("started_at"),
        timestamp("finished_at"),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_training_runs_status"),
        ),
        foreign_key("training_runs", "corpus_id", "corpora", ondelete="SET NULL"),
    )
    op.create_index("ix_training_runs_corpus_id", "training_runs", ["corpus_id"])
    op.create_index("ix_training_runs_status_id", "training_runs", ["status", "id"])

    create_id_table(
        "model_versions",
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("notes", sa.Text(), server_default="", nullable=False),
        sa.Column("artifact_path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("param_count", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        *language_pair(),
        sa.Column("train_pair_count", sa.Integer(), nullable=False),
        sa.Column("train_seconds", sa.Float(), nullable=False),
        created_at(),
        foreign_key("model_versions", "corpus_id", "corpora", ondelete="SET NULL"),
        foreign_key("model_versions", "run_id", "training_runs", ondelete="SET NULL"),
    )
    op.create_index("ix_model_versions_corpus_id", "model_versions", ["corpus_id"])
    op.create_index("ix_model_versions_run_id", "model_versions", ["run_id"])

    create_id_table(
        "run_metrics",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Float(), nullable=True) for name in METRICS),
        created_at(),
        foreign_key("run_metrics", "run_id", "training_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_run_metrics_run_id_step", "run_metrics", ["run_id", "step"])

    create_translation_log()

    _create_search_support()


def _create_search_support() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        try:
            bind.exec_driver_sql(SQLITE_FTS[0])
        except sa.exc.OperationalError as exc:  # no FTS5 or no trigram tokenizer
            log.warning("SQLite FTS5 trigram unavailable (%s); search will scan", exc)
            return
        for ddl in SQLITE_FTS[1:]:
            bind.exec_driver_sql(ddl)
    elif bind.dialect.name == "postgresql":
        try:
            with bind.begin_nested():
                for ddl in PG_TRGM:
                    bind.exec_driver_sql(ddl)
        except sa.exc.DBAPIError as exc:  # e.g. no permission to create the extension
            log.warning("pg_trgm unavailable (%s); search will scan", exc)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for name in ("pairs_fts_ai", "pairs_fts_ad", "pairs_fts_au"):
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        bind.exec_driver_sql("DROP TABLE IF EXISTS pairs_fts")
    for table in ("translation_log", "run_metrics", "model_versions", "training_runs"):
        op.drop_table(table)
    op.drop_table("pairs")
    op.drop_table("corpora")
