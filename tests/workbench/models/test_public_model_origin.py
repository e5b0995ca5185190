"""A public model's provenance and its hostile files (issue 37, items 2 and 7): the version
is named after the model and keeps where it came from (file, format, hub id, licence), shown
by `versions --json` instead of a corpus, pairs and a training time; every file of the model
is read as a regular, bounded file whose JSON cannot exhaust the parser, so a FIFO, a link,
a 200,000-deep JSON or an oversized file is one `error:` line, exit code 2, nothing written;
a killed import's staging folder is swept by the next import."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench.marian_checkpoint import save_random_marian
from tests.helpers import ROOT, cli_in_process, subprocess_env
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.models import model_import, registry, staging

HUB_ID = "Helsinki-NLP/opus-mt-zh-en"
CARD = "---\nlanguage:\n- zh\n- en\ntags:\n- translation\nlicense: cc-by-4.0\n---\n# opus-mt\n"
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny OPUS-MT-style folder whose card states a licence and whose config names its
    Hugging Face id (as the hub's own config.json files do)."""
    folder = save_random_marian(
        tmp_path_factory.mktemp("hf") / "opus-mt-zh-en", d_model=16, heads=2, ffn=32
    )
    (folder / "README.md").write_text(CARD, encoding="utf-8")
    (folder / "LICENSE").write_text("\nCreative Commons Attribution 4.0\n", encoding="utf-8")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["_name_or_path"] = HUB_ID
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _versions() -> list[dict]:
    done = cli_in_process("versions", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_versions_json_names_a_public_model_and_says_where_it_came_from(
    wb_home: Path, checkpoint: Path, tmp_path: Path
) -> None:
    done = cli_in_process("register", str(checkpoint))
    assert done.returncode == 0, done.stderr
    (row,) = _versions()
    assert row["name"] == "opus-mt-zh-en"  # not "model v1"
    assert row["origin"] == {
        "file": "opus-mt-zh-en",
        "format": "marian",
        "model_type": "marian",
        "src_lang": "zh",
        "tgt_lang": "en",
        "hub_id": HUB_ID,
        "licence": "cc-by-4.0",  # the card's front matter wins over the LICENSE file
        "licence_file": "LICENSE",
    }
    # nobody here trained it: no corpus, no pairs, no training time, no "trained by"
    assert (row["corpus"], row["pairs"], row["train time (s)"]) == (None, None, None)
    assert row["trained by"] is None and row["added by"] == settings.local_admin_name()

    # an upload: its file name is the origin's file and the version's name
    flat = tmp_path / "upload.zip"
    with zipfile.ZipFile(flat, "w") as zf:
        for path in sorted(checkpoint.iterdir()):
            if path.name not in ("README.md", "LICENSE"):
                zf.write(path, path.name)
    version = registry.get_version(
        model_import.import_zip_upload(flat.read_bytes(), "opus-mt-zh-en.zip")
    )
    assert version.name == "opus-mt-zh-en" and version.imported
    assert version.origin is not None
    assert (version.origin["file"], version.origin["hub_id"]) == ("opus-mt-zh-en.zip", HUB_ID)
    assert version.origin["licence"] is None and version.origin["licence_file"] is None
    # a name given wins; a trained version has no origin (tested with the pages' lineage)
    named = model_import.import_version(checkpoint, name="my zh-en base")
    assert registry.get_version(named).name == "my zh-en base"


def _hostile(checkpoint: Path, tmp_path: Path, case: str) -> Path:
    folder = tmp_path / "opus-mt-zh-en"
    shutil.copytree(checkpoint, folder)
    if case.startswith("deep "):
        (folder / case.removeprefix("deep ")).write_text(DEEP, encoding="utf-8")
    elif case.startswith("fifo "):
        name = case.removeprefix("fifo ")
        (folder / name).unlink()
        os.mkfifo(folder / name)
    elif case == "linked README.md":
        secret = tmp_path / "secret.txt"
        secret.write_text("| secret | BLEU |\n|--|--|\n| password | 1.0 |\n", encoding="utf-8")
        (folder / "README.md").unlink()
        (folder / "README.md").symlink_to(secret)
    elif case == "oversized config.json":
        with open(folder / "config.json", "r+b") as f:
            f.truncate(65 << 20)  # sparse: 65 MiB that take no disk
    return folder


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("deep config.json", "config.json nests more than 64 levels deep: refused"),
        ("deep vocab.json", "vocab.json nests more than 64 levels deep: refused"),
        ("deep tokenizer_config.json", "tokenizer_config.json nests more than 64 levels deep"),
        ("fifo tokenizer_config.json", "tokenizer_config.json is not a regular file"),
        ("fifo README.md", "README.md is not a regular file"),
        ("linked README.md", "README.md is a symbolic link: refused"),
        ("oversized config.json", "config.json is larger than 64 MiB: refused"),
    ],
)
@pytest.mark.timeout(60)  # a FIFO must not hang the import: a hang fails the test
def test_hostile_files_are_one_error_line_and_leave_nothing(
    wb_home: Path, checkpoint: Path, tmp_path: Path, case: str, message: str
) -> None:
    folder = _hostile(checkpoint, tmp_path, case)
    done = cli_in_process("register", str(folder))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot import "), done.stderr
    assert message in lines[0]
    assert "RecursionError" not in done.stderr and "secret" not in done.stderr
    assert _versions() == []
    assert not settings.import_staging_dirs()
    models = wb_home / "models"
    assert not models.exists() or not any(models.iterdir())


_HOLD_STAGING = """
import sys, time
from workbench.models import staging
with staging.staging_folder() as path:
    (path / "model").mkdir()
    print(path, flush=True)
    time.sleep(120)
"""


def test_a_killed_imports_staging_folder_is_swept_by_the_next_import(
    wb_home: Path, checkpoint: Path, tmp_path: Path
) -> None:
    """A live import's folder is kept (its lock is held), a killed one's goes at the next
    import (or the next start of the app or a worker: the same ``staging.sweep``)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_STAGING],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        left = Path(holder.stdout.readline().strip())
        assert left.parent == settings.runs_dir() and (left / "model").is_dir()
        assert staging.sweep() == 0 and left.is_dir()  # alive: kept
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert left.is_dir()  # what kill -9 leaves
    with pytest.raises(WorkbenchError, match="nests more than 64 levels"):
        model_import.import_version(_hostile(checkpoint, tmp_path, "deep config.json"))
    assert not left.exists() and not settings.import_staging_dirs()
