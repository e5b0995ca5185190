"""The pool, "what to correct next": monolingual source sentences of a corpus, translated in the
background and ranked by the model's uncertainty, so a person reviews the most useful first.

- ``pool``: add, list, accept or reject pool sentences; ``pool_jobs``: the translation jobs as
  a state machine; ``pool_translation``: the worker's job that translates and ranks a pool.

Imports ``corpus`` and ``models``; the training worker (``training``) runs its jobs.
"""
