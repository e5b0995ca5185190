"""The pieces the migrations share: frozen, like the migrations themselves.

A released migration must write the same DDL forever, or databases migrated before and after
an edit would differ; these helpers are part of that history. So:

- import only ``sqlalchemy`` and ``alembic``, never ``db.tables`` or other code of today;
- never change a helper that a released migration calls: a new need gets a new function;
- ``tests/db/test_migration_history.py`` pins the DDL of every step up and down on SQLite
  and PostgreSQL, and fails on an edit here that changes any of it.

(The naming convention of ``op.create_table``'s unnamed constraints comes from the models'
metadata, which ``db/migrations/env.py`` hands to Alembic; that test pins it too.)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def timestamp(name: str, *, nullable: bool = True, server_now: bool = False) -> sa.Column:
    """A timezone-aware moment; ``server_now``: the database fills in the current time."""
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        server_default=sa.func.now() if server_now else None,
        nullable=nullable,
    )


def created_at() -> sa.Column:
    """When the row was written, by the database's clock."""
    return timestamp("created_at", nullable=False, server_now=True)


def language_pair() -> tuple[sa.Column, sa.Column]:
    """``src_lang`` and ``tgt_lang``: what a corpus, a version or a served route translates."""
    return (
        sa.Column("src_lang", sa.String(length=32), nullable=False),
        sa.Column("tgt_lang", sa.String(length=32), nullable=False),
    )


def one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK that keeps ``column`` within the values a revision knew (its own copy of
    them: today's enum may have grown since)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def foreign_key(table: str, column: str, referred: str, *, ondelete: str) -> sa.Constraint:
    """``table.column`` → ``referred.id`` as a table constraint with its name spelled out,
    the form 0001 wrote."""
    return sa.ForeignKeyConstraint(
        [column],
        [f"{referred}.id"],
        name=op.f(f"fk_{table}_{column}_{referred}"),
        ondelete=ondelete,
    )


def reference(name: str, referred: str, *, ondelete: str, nullable: bool = True) -> sa.Column:
    """An integer column that refers to ``referred.id``, the form later revisions wrote."""
    return sa.Column(
        name, sa.Integer(), sa.ForeignKey(f"{referred}.id", ondelete=ondelete), nullable=nullable
    )


def corpus_id() -> sa.Column:
    """The corpus a row belongs to: deleting the corpus deletes the row."""
    return reference("corpus_id", "corpora", ondelete="CASCADE", nullable=False)


def create_id_table(name: str, *columns_and_constraints: sa.SchemaItem) -> None:
    """A table whose rows are numbered by ``id``, never reused (runs, snapshots and
    ``models/<id>/`` folders name rows by it)."""
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), nullable=False),
        *columns_and_constraints,
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
        sqlite_autoincrement=True,
    )


def create_translation_log() -> None:
    """``translation_log`` as 0001 made it; 0012 drops it and its downgrade re-creates it."""
    create_id_table(
        "translation_log",
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("corrected", sa.Text(), nullable=True),
        created_at(),
        foreign_key("translation_log", "version_id", "model_versions", ondelete="SET NULL"),
    )
    op.create_index("ix_translation_log_version_id", "translation_log", ["version_id"])
