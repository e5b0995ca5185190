"""DDP: the training entry point under torchrun with 2 CPU processes (Gloo) ends with identical
weights on both ranks, rank 0 writes the model folder, and `workbench register` adds that
folder as a version."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from core_model.artifact import WEIGHTS_FILE, load_model
from tests.helpers import ROOT, TOY, cli, toy_pairs
from workbench.models import registry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_end_with_identical_weights_and_register_as_a_version(
    tmp_path: Path, wb_home: Path, db_fingerprint
) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", "2", "--nnodes", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "core_model.distributed",
        "--train", str(TOY), "--valid", str(TOY),
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

    # A damaged copy is refused with one line, and nothing is written.
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "model", broken)
    (broken / WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    before = db_fingerprint()
    refused = cli("register", str(broken), "--src-lang", "zh", "--tgt-lang", "en")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: cannot import")
    # torchrun's folder records no languages: they must be given.
    unnamed = cli("register", str(tmp_path / "model"))
    assert unnamed.returncode != 0 and "records no languages" in unnamed.stderr
    assert db_fingerprint() == before
    assert not list(wb_home.glob("runs/import-*"))  # no half-copied folder left behind

    done = cli("register", str(tmp_path / "model"), "--src-lang", "zh", "--tgt-lang", "en",
               "--name", "ddp run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    version_id = json.loads(done.stdout.strip().splitlines()[-1])["version_id"]
    info = registry.get_version(version_id)
    assert (info.name, info.src_lang, info.tgt_lang, info.run_id) == ("ddp run", "zh", "en", None)
    assert info.metrics["world_size"] == 2 and info.param_count > 0
    assert (tmp_path / "model" / WEIGHTS_FILE).is_file()  # copied, the user's folder is kept
    sources = [s for s, _ in toy_pairs()[:3]]
    translated = cli("translate", "--version", str(version_id), *sources)
    assert translated.returncode == 0, translated.stderr
    assert len(translated.stdout.splitlines()) == len(sources)
