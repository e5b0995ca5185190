"""An uploaded public model that is refused (issue 37): the page showed the server's staging
paths (``…/runs/import-<hex>/unpacked/config.json``); it names the user's file instead."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.models import model_import


def _zip(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (
            {"readme.txt": "x"},
            "my model.zip holds no model: config.json should be at its root or in its one folder",
        ),
        (
            {"config.json": "{}", "model.safetensors": "x"},
            "cannot import my model.zip: config.json in my model.zip has no 'model' section",
        ),
        (
            {"config.json": '{"model_type": "marian"}'},
            "cannot import my model.zip: my model.zip has no source.spm",
        ),
    ],
)
def test_a_refused_upload_names_the_users_file(
    wb_home: Path, files: dict[str, str], said: str
) -> None:
    with pytest.raises(WorkbenchError) as refused:
        model_import.import_zip_upload(_zip(files), "my model.zip", src_lang="de", tgt_lang="en")
    assert str(refused.value) == said
    assert all("import-" not in str(v) for v in refused.value.params.values())
    assert list((wb_home / "runs").iterdir()) == []  # nothing staged is left
