"""Corpora and their sentence pairs: everything a person curates.

- ``corpora``: create, rename, delete a corpus (one language direction); ``pairs``: search,
  edit, describe; ``snapshots``: the pairs a run learns from, frozen when it is queued.
- ``text_rules``: the one rule for stored text, pair identity and splits.
- Imports: ``text_files`` (a file read as numbered lines, within limits) → ``formats`` (the
  registry of file formats: each one's reader and writer) → ``import_checks`` (row checks,
  the report) → ``importing`` (preview, then import) → ``pair_writer`` / ``import_staging``
  (the writes). ``exporting`` writes a corpus back out in an exported format.
- ``cleaning`` (filters and script normalisation) and ``cleanups`` (applied on demand, with
  undo); ``glossary`` (terms a translation must use); ``demo`` (the built-in demo corpus).

Imports only the top of ``workbench`` (settings, storage, errors) and ``db``.
"""
