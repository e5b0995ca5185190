"""How good a version is, and why.

- ``evaluation``: score versions on held-out pairs (sacreBLEU BLEU and chrF), side by side.
- ``significance``: paired bootstrap resampling, "is #3 really better than #2?".
- ``comparison_report``: a comparison to take away (CSV, self-contained HTML).
- ``inspection``: look inside a version at work on one sentence, beside the run that
  trained it (the Inspect page).

The top of the service packages: imports ``corpus``, ``models`` and ``training``.
"""
