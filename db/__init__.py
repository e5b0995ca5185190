"""Storage layer: SQLAlchemy models, engine/session setup and Alembic migrations.

Imports nothing from ``workbench`` or the UI.
"""

from db.engine import database_url, dispose_engines, get_engine, session_scope, workbench_home

__all__ = ["database_url", "dispose_engines", "get_engine", "session_scope", "workbench_home"]
