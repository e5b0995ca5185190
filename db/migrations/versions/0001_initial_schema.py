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

revision: str = "0001"
down_revision: str | None = None

log = logging.getLogger(__name__)

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


def _ts(name: str, nullable: bool = False, default: bool = False) -> sa.Column:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        server_default=sa.func.now() if default else None,
        nullable=nullable,
    )


def upgrade() -> None:
    op.create_table(
        "corpora",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("src_lang", sa.String(length=32), nullable=False),
        sa.Column("tgt_lang", sa.String(length=32), nullable=False),
        _ts("created_at", default=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_corpora")),
        sa.UniqueConstraint("name", name=op.f("uq_corpora_name")),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_table(
        "pairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("split", sa.String(length=8), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("content_hash", sa.String(length=32), nullable=False),
        _ts("created_at", default=True),
        _ts("updated_at", default=True),
        sa.CheckConstraint("split IN ('train', 'valid', 'test')", name=op.f("ck_pairs_split")),
        sa.ForeignKeyConstraint(
            ["corpus_id"],
            ["corpora.id"],
            name=op.f("fk_pairs_corpus_id_corpora"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pairs")),
        sa.UniqueConstraint(
            "corpus_id", "content_hash", name=op.f("uq_pairs_corpus_id_content_hash")
        ),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_index("ix_pairs_corpus_id_id", "pairs", ["corpus_id", "id"])
    op.create_index("ix_pairs_corpus_id_split_id", "pairs", ["corpus_id", "split", "id"])

    op.create_table(
        "training_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.Column("snapshot_pair_ids", sa.JSON(), nullable=False),
        sa.Column("snapshot_hash", sa.String(length=64), nullable=False),
        sa.Column("snapshot_size", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        _ts("heartbeat_at", nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("init_version_id", sa.Integer(), nullable=True),
        sa.Column("progress_step", sa.Integer(), server_default="0", nullable=False),
        sa.Column("progress_total", sa.Integer(), server_default="0", nullable=False),
        sa.Column("eta_s", sa.Float(), nullable=True),
        _ts("created_at", default=True),
        _ts("started_at", nullable=True),
        _ts("finished_at", nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_training_runs_status"),
        ),
        sa.ForeignKeyConstraint(
            ["corpus_id"],
            ["corpora.id"],
            name=op.f("fk_training_runs_corpus_id_corpora"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_runs")),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_index("ix_training_runs_corpus_id", "training_runs", ["corpus_id"])
    op.create_index("ix_training_runs_status_id", "training_runs", ["status", "id"])

    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("corpus_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("notes", sa.Text(), server_default="", nullable=False),
        sa.Column("artifact_path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("param_count", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.Column("src_lang", sa.String(length=32), nullable=False),
        sa.Column("tgt_lang", sa.String(length=32), nullable=False),
        sa.Column("train_pair_count", sa.Integer(), nullable=False),
        sa.Column("train_seconds", sa.Float(), nullable=False),
        _ts("created_at", default=True),
        sa.ForeignKeyConstraint(
            ["corpus_id"],
            ["corpora.id"],
            name=op.f("fk_model_versions_corpus_id_corpora"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["training_runs.id"],
            name=op.f("fk_model_versions_run_id_training_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_index("ix_model_versions_corpus_id", "model_versions", ["corpus_id"])
    op.create_index("ix_model_versions_run_id", "model_versions", ["run_id"])

    op.create_table(
        "run_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Float(), nullable=True),
        sa.Column("train_loss", sa.Float(), nullable=True),
        sa.Column("valid_loss", sa.Float(), nullable=True),
        sa.Column("lr", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("bleu", sa.Float(), nullable=True),
        sa.Column("chrf", sa.Float(), nullable=True),
        _ts("created_at", default=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["training_runs.id"],
            name=op.f("fk_run_metrics_run_id_training_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_metrics")),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_index("ix_run_metrics_run_id_step", "run_metrics", ["run_id", "step"])

    op.create_table(
        "translation_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("corrected", sa.Text(), nullable=True),
        _ts("created_at", default=True),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_translation_log_version_id_model_versions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_translation_log")),
        sqlite_autoincrement=True,  # never reuse ids (snapshots, models/<id>/)
    )
    op.create_index("ix_translation_log_version_id", "translation_log", ["version_id"])

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
