"""Alembic environment: runs on the connection passed in ``config.attributes`` (see
``db.migrate.upgrade``), or on ``sqlalchemy.url`` when run standalone (``db.migrate.main``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from db.engine import create_workbench_engine
from db.migrate import include_name
from db.tables import Base

config = context.config
target_metadata = Base.metadata


def _configure_kwargs(connection: Connection) -> dict:
    return {
        "connection": connection,
        "target_metadata": target_metadata,
        "include_name": include_name,
        "compare_type": True,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
        "render_as_batch": connection.dialect.name == "sqlite",
    }


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(**_configure_kwargs(connection))
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_workbench_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        context.configure(**_configure_kwargs(conn))
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
