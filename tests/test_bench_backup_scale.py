"""The backup benchmark runs end to end at a small size (it fills the database with the
app's own rules, which a rename once broke unnoticed), and says what gzip saves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_backup_scale_backs_up_and_restores_both_kinds(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/backup_scale.py", "--pairs", "3000", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pairs"] == 3000
    for kind in ("plain", "gzip"):
        assert result[kind]["restore_seconds"] > 0  # restored, and the pair count checked
    assert result["gzip_size_ratio"] < 0.9  # the database's text compresses
