"""Backups: the data folder's database and model folders in one checksummed archive, and
their restore.

* ``backup``: ``backup(FILE)`` writes one archive; ``restore(FILE)`` puts one in place.
* ``restore_checks``: the archive's database is a workbench database this code can open.
* ``pg_tools``: ``pg_dump``/``pg_restore`` for PostgreSQL.

Modules here import only ``db``, ``core_model.artifact`` and the top-level modules
(``settings``, ``storage``, ``database_lock``, ``errors``, ``messages``): no other package
imports them, only the CLI (``backup``, ``restore``).
"""
