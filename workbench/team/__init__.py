"""Team mode: what several people sharing one workbench need.

* ``history`` — the append-only record of every change to pairs, glossary terms, corpora and
  versions (who, when, before/after), and undo of one change or of everything since a moment.
* ``trash`` — a deleted corpus waits in the trash (``TRASH_DAYS``) before it is really
  removed, and can be restored until then.

These modules import only ``db`` and the top-level ``settings``/``storage``/``errors``
modules: the corpus services call into them.
"""
