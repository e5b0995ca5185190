"""Large imports stage their pairs in a hidden corpus and publish them in one short step.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

- ``corpora.import_token``: set while a large SQLite import fills a hidden corpus (its own
  staging corpus, or an empty corpus receiving pairs in place); the token names the
  import's lock file, so a killed import's leftovers can be told from a live one's and
  swept. NULL for every visible corpus, including all existing ones.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"


def upgrade() -> None:
    op.add_column("corpora", sa.Column("import_token", sa.String(length=32), nullable=True))


def downgrade() -> None:
    # Unfinished imports are dropped with the column: staging corpora (named "(import …)")
    # go with their pairs; a corpus that was being filled in place keeps its row, empty.
    op.execute(
        "DELETE FROM pairs WHERE corpus_id IN "
        "(SELECT id FROM corpora WHERE import_token IS NOT NULL)"
    )
    op.execute("DELETE FROM corpora WHERE import_token IS NOT NULL AND name LIKE '(import %'")
    with op.batch_alter_table("corpora") as batch:
        batch.drop_column("import_token")
