"""DDP: the training entry point under torchrun with 2 CPU processes (Gloo) ends with identical
weights on both ranks, and rank 0 writes the model folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from core_model.artifact import load_model

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "toy_zh_en.tsv"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_end_with_identical_weights(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", "2", "--nnodes", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "core_model.distributed",
        "--train", str(FIXTURE), "--valid", str(FIXTURE),
        "--preset", "tiny", "--max-steps", "8", "--device", "cpu", "--precision", "fp32",
        "--max-tokens", "150",  # several batches, so the ranks see different data
        "--out", str(tmp_path / "model"), "--hash-dir", str(tmp_path / "hashes"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = [(tmp_path / "hashes" / f"rank{r}.sha256").read_text().strip() for r in (0, 1)]
    assert len(digests[0]) == 64 and digests[0] == digests[1]
    loaded = load_model(tmp_path / "model")
    assert loaded.config["metrics"]["world_size"] == 2
    assert loaded.config["metrics"]["steps"] == 8
