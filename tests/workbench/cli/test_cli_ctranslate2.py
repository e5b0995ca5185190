"""A stored version through CTranslate2 on the command line (its ``main``, in the test's
process: the CLI's process itself is tested in test_cli_training): `export-version` writes the
export (or refuses in one line, writing nothing), `translate --engine ctranslate2` decodes
with it, and the heat-map stays our model's."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_model.artifact import model_files
from tests.helpers import (
    cli_in_process,
    module_home,
    toy_pairs,
    trained_home,
    training,
)
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.models import registry, translation
from workbench.models.ctranslate2_export import export_version_zip, zip_name
from workbench.models.engines import ENGINE_QUANTIZATION, QUANTIZATIONS


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A tiny version trained through the services on the toy corpus (it learns it)."""
    built = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    with module_home(built.home):
        yield built.version_ids[0]


def test_export_version_writes_the_engine_folder(version: int, tmp_path: Path) -> None:
    out = tmp_path / "exported"
    done = cli_in_process(
        "export-version",
        str(version),
        "--format",
        "ctranslate2",
        "--quantization",
        "int8",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "version_id": version,
        "format": "ctranslate2",
        "quantization": "int8",
        "folder": str(out),
    }
    assert {"model.bin", "config.json", "source.spm", "target.spm", "tokenizer"} <= {
        p.name for p in out.iterdir()
    }
    meta = json.loads((out / "workbench.json").read_text(encoding="utf-8"))
    assert (meta["version_id"], meta["quantization"]) == (version, "int8")
    assert meta["source_sha256"] == registry.get_version(version).sha256

    again = cli_in_process("export-version", str(version), "--format", "ctranslate2", str(out))
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: {out} already exists and is not an empty folder."
    missing = cli_in_process(
        "export-version", "999", "--format", "ctranslate2", str(tmp_path / "none")
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert not (tmp_path / "none").exists()
    wrong = cli_in_process(
        "export-version", str(version), "--format", "onnx", str(tmp_path / "onnx")
    )
    assert wrong.returncode == 2 and "invalid choice: 'onnx'" in wrong.stderr
    assert not (tmp_path / "onnx").exists()


def test_translate_with_either_engine(version: int) -> None:
    pairs = toy_pairs()
    sources = [s for s, _ in pairs]
    ours = cli_in_process("translate", "--version", str(version), *sources)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines() == [t for _, t in pairs]  # the version learnt them
    # float32 decodes exactly as ours; the engine's default int8 nearly (here: as)
    for quantization in ("float32", ENGINE_QUANTIZATION):
        theirs = cli_in_process(
            "translate", "--version", str(version), "--engine", "ctranslate2",
            "--quantization", quantization, *sources,
        )  # fmt: skip
        assert theirs.returncode == 0, theirs.stderr
        assert theirs.stdout.splitlines() == ours.stdout.splitlines(), quantization
    beam4 = ["translate", "--version", str(version), "--beam", "4"]
    beams = [
        cli_in_process(*beam4, *engine, *sources)
        for engine in (
            ["--engine", "handwritten"],
            ["--engine", "ctranslate2", "--quantization", "float32"],
        )
    ]
    assert beams[0].returncode == beams[1].returncode == 0
    assert beams[1].stdout.splitlines() == beams[0].stdout.splitlines()
    # exported once, into the version's own folder, outside its model files
    folder = settings.ctranslate2_folder(registry.get_version(version).artifact_path, "float32")
    assert (folder / "model.bin").is_file()
    assert not any(f.startswith("ctranslate2") for f in model_files(registry.artifact_dir(version)))
    registry.load_version(version)  # its recorded digest still matches

    unknown = cli_in_process("translate", "--version", str(version), "--engine", "marian", "x")
    assert unknown.returncode == 2 and "invalid choice: 'marian'" in unknown.stderr
    # the handwritten decoder has no quantization: asking for one is refused, not ignored
    ignored = cli_in_process("translate", "--version", str(version), "--quantization", "int8", "x")
    assert ignored.returncode == 2
    assert ignored.stderr == "error: --quantization needs --engine ctranslate2\n"


def test_heat_map_stays_ours_and_refusals(version: int) -> None:
    source = toy_pairs()[0][0]
    (ours,) = translation.translate(version, [source], with_attention=True)
    (theirs,) = translation.translate(
        version, [source], with_attention=True, engine="ctranslate2", quantization="float32"
    )
    assert theirs.out_pieces == ours.out_pieces
    assert theirs.attention is not None and theirs.attention.shape == ours.attention.shape
    assert (theirs.attention - ours.attention).abs().max() < 1e-5
    with pytest.raises(WorkbenchError, match="Unknown engine"):
        translation.translate(version, [source], engine="marian")
    with pytest.raises(WorkbenchError, match="Unknown quantization"):
        translation.translate(version, [source], engine="ctranslate2", quantization="int4")


def test_download_zip_holds_one_export_folder(version: int) -> None:
    data = export_version_zip(version, QUANTIZATIONS[0])
    root = zip_name(version, QUANTIZATIONS[0]).removesuffix(".zip")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
    assert all(n.startswith(f"{root}/") for n in names)
    assert {f"{root}/model.bin", f"{root}/workbench.json", f"{root}/source.spm"} <= set(names)
