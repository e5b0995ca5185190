"""``python -m workbench …``: see ``workbench.cli``."""

import os

# OpenMP threads that wait by sleeping, not spinning: with another program on one of two
# cores, one process's two spinning threads trained 120-316 tokens/s, sleeping ones 926-1,776
# (bench/busy_core.py, docs/TRAINING.md "A busy core"). Read once, when torch loads its
# OpenMP runtime, so before any import of it; rank processes get it from
# `core_model.training.parallel.RankGroup`.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from workbench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
