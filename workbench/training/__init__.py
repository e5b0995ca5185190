"""Training runs, from the click to the registered version.

- ``train_options``: the choices a run offers (presets, budgets, devices), one source for
  every front end; ``runs``: the run state machine (queue, claim, cancel, resume, finish).
- ``run_info``: runs and their metric rows for display; ``run_folders``: checkpoints on disk.
- ``worker``: ``python -m workbench worker`` trains queued runs with ``core_model`` and
  registers versions (and runs the pool's translation jobs); ``worker_process``: start one on
  demand, and the lock it holds.

Imports ``corpus``, ``models`` and ``curation``; nothing above.
"""
