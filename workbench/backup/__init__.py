"""Backups: the data folder's database and model folders in one checksummed archive, and
their restore.

* ``archive``: the archive's format (its members, the manifest), and reading one through
  under the caps a restore needs, checking every member against the manifest.
* ``backup``: ``backup(FILE)`` writes one archive while the app edits and workers train (the
  database as one snapshot, the model folders of the versions in it).
* ``restore``: ``restore(FILE)`` puts an archive's database and model folders in place, only
  after every check passed, holding the data folder's ``database_lock`` alone;
  ``restore_checks``: the archive's database is a workbench database this code can open.
* ``pg_tools``: ``pg_dump``/``pg_restore`` for PostgreSQL.

Modules here import only ``db``, ``core_model.artifact`` and the top-level modules
(``settings``, ``storage``, ``database_lock``, ``errors``, ``messages``): no other package
imports them, only the CLI (``backup``, ``restore``).
"""
