"""Team mode: the services that let several people share one workbench.

* ``access``: roles (viewer, editor, admin) and what each allows, who is acting now (set by
  each front end), the ``require`` check every write service starts with, and the team's
  members by e-mail.
* ``history``: the append-only record of every change, with undo (issue 22).

Modules here import only the top-level ``settings``, ``storage``, ``errors`` and ``db``.
"""
