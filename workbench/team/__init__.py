"""Team mode: the services that let several people share one workbench.

* ``access``: roles (viewer, editor, admin) and what each allows, who is acting now (set by
  each front end), the ``require`` check every write service starts with, and the team's
  members by e-mail.
* ``history``: the append-only record of every change to pairs, glossary terms, corpora and
  versions (who, when, before/after), and reading it.
* ``undo``: undo of one change or of everything since a moment, refused while a later change
  that still holds touched its rows.
* ``trash``: a deleted corpus waits in the trash (``TRASH_DAYS``) before it is really
  removed, and can be restored until then.

Modules here import only ``db`` and the top-level ``settings``/``storage``/``errors``/
``messages`` modules: the corpus services call into them.
"""
