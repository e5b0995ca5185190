"""The model registry: versions are a DB row plus a folder `<WORKBENCH_HOME>/models/<id>/`.

The row keeps the sha256 of the weights, checked on load so a damaged file is reported,
never silently used. Loaded models are kept in a small LRU cache: translating twice with
one version reads its files once.
"""

from __future__ import annotations

import io
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import delete, select

from core_model.artifact import WEIGHTS_FILE, ArtifactError, LoadedModel, load_model, sha256_file
from db.engine import session_scope, workbench_home
from db.models import Corpus, ModelVersion
from workbench.corpus import get_corpus
from workbench.errors import WorkbenchError

IMPORT_STAGING_PREFIX = "import-"  # folders under runs/ that an import copies into


@dataclass
class VersionInfo:
    id: int
    name: str
    notes: str
    run_id: int | None
    corpus_id: int | None
    corpus_name: str | None
    src_lang: str
    tgt_lang: str
    param_count: int
    device: str
    train_pair_count: int
    train_seconds: float
    metrics: dict[str, Any]
    sha256: str
    artifact_path: str
    created_at: datetime


def _to_info(v: ModelVersion, corpus_name: str | None) -> VersionInfo:
    return VersionInfo(
        id=v.id,
        name=v.name,
        notes=v.notes,
        run_id=v.run_id,
        corpus_id=v.corpus_id,
        corpus_name=corpus_name,
        src_lang=v.src_lang,
        tgt_lang=v.tgt_lang,
        param_count=v.param_count,
        device=v.device,
        train_pair_count=v.train_pair_count,
        train_seconds=v.train_seconds,
        metrics=dict(v.metrics or {}),
        sha256=v.sha256,
        artifact_path=v.artifact_path,
        created_at=v.created_at,
    )


def _resolve(artifact_path: str) -> Path:
    """Paths are stored relative to WORKBENCH_HOME so a data folder can be moved whole."""
    path = Path(artifact_path)
    return path if path.is_absolute() else workbench_home() / path


def import_version(
    folder: Path,
    corpus: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    name: str | None = None,
) -> int:
    """Register a model folder trained outside the workbench (e.g. under torchrun); returns the id.

    The folder is loaded first, so a corrupt or mismatched one is refused before anything is
    written; it is then copied, never moved: the user's folder stays theirs. Languages are
    required: given, else the linked corpus's, else those recorded in the folder's config.json.
    """
    try:
        saved = load_model(folder).config
    except ArtifactError as exc:
        raise WorkbenchError(f"cannot import {folder}: {exc}") from exc
    corpus_info = get_corpus(corpus) if corpus else None
    recorded = saved.get("corpus") if isinstance(saved.get("corpus"), dict) else {}
    langs = vars(corpus_info) if corpus_info else recorded
    metrics = saved.get("metrics") if isinstance(saved.get("metrics"), dict) else {}
    src_lang, tgt_lang = src_lang or langs.get("src_lang"), tgt_lang or langs.get("tgt_lang")
    if not (src_lang and tgt_lang):
        raise WorkbenchError(
            f"{folder} records no languages: give --corpus, or --src-lang and --tgt-lang"
        )
    # Staged under runs/, where the worker's sweep removes what a killed import left behind.
    staging = workbench_home() / "runs" / f"{IMPORT_STAGING_PREFIX}{uuid.uuid4().hex}"
    try:
        shutil.copytree(folder, staging)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise WorkbenchError(f"cannot copy {folder} ({exc.strerror or exc})") from exc
    try:
        return register_version(
            staging,
            metrics,
            corpus_id=corpus_info.id if corpus_info else None,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            name=name,
        )
    except ArtifactError as exc:
        raise WorkbenchError(str(exc)) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already unless storing failed


def register_version(
    model_dir: Path,
    metrics: dict[str, Any],
    *,
    run_id: int | None = None,
    corpus_id: int | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    name: str | None = None,
) -> int:
    """Record a model (a finished run's, or an imported copy) and move `model_dir` into
    models/<id>/; returns the id.

    The row is committed first and removed again if the move fails, so a folder under
    models/ always has a row and a row never points at nothing.
    """
    weights = model_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"training produced no {WEIGHTS_FILE} in {model_dir}")
    digest = sha256_file(weights)
    with session_scope() as s:
        corpus = s.get(Corpus, corpus_id) if corpus_id is not None else None
        version = ModelVersion(
            run_id=run_id,
            corpus_id=corpus.id if corpus else None,
            name="",
            artifact_path="",
            sha256=digest,
            param_count=int(metrics.get("parameters", 0)),
            metrics=metrics,
            device=str(metrics.get("device", "cpu")),
            src_lang=src_lang or (corpus.src_lang if corpus else ""),
            tgt_lang=tgt_lang or (corpus.tgt_lang if corpus else ""),
            train_pair_count=int(metrics.get("train_pairs", 0)),
            train_seconds=float(metrics.get("train_time_s", 0.0)),
        )
        s.add(version)
        s.flush()
        version.artifact_path = f"models/{version.id}"
        version.name = name or f"{corpus.name if corpus else 'model'} v{version.id}"
        version_id, relative = version.id, version.artifact_path
    destination = workbench_home() / relative
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(model_dir), destination)
    except OSError as exc:
        with session_scope() as s:
            s.execute(delete(ModelVersion).where(ModelVersion.id == version_id))
        raise ArtifactError(f"could not store the model files ({exc})") from exc
    return version_id


def list_versions() -> list[VersionInfo]:
    """Newest first."""
    with session_scope() as s:
        rows = s.execute(
            select(ModelVersion, Corpus.name)
            .outerjoin(Corpus, Corpus.id == ModelVersion.corpus_id)
            .order_by(ModelVersion.id.desc())
        ).all()
        return [_to_info(v, name) for v, name in rows]


def versions_table() -> pd.DataFrame:
    """The versions as a table for display (one row per version)."""
    rows = [
        {
            "id": v.id,
            "name": v.name,
            "created": v.created_at,
            "corpus": v.corpus_name,
            "pairs": v.train_pair_count,
            "parameters": v.param_count,
            "device": v.device,
            "train time (s)": round(v.train_seconds, 1),
            "valid loss": v.metrics.get("valid_loss"),
            "BLEU": v.metrics.get("bleu"),
            "chrF": v.metrics.get("chrf"),
            "notes": v.notes,
        }
        for v in list_versions()
    ]
    return pd.DataFrame(rows)


def get_version(version_id: int) -> VersionInfo:
    with session_scope() as s:
        row = s.execute(
            select(ModelVersion, Corpus.name)
            .outerjoin(Corpus, Corpus.id == ModelVersion.corpus_id)
            .where(ModelVersion.id == version_id)
        ).first()
        if row is None:
            raise WorkbenchError(f"Model version {version_id} does not exist.")
        return _to_info(*row)


def artifact_dir(version_id: int) -> Path:
    return _resolve(get_version(version_id).artifact_path)


def rename_version(version_id: int, name: str) -> None:
    name = " ".join(name.split())
    if not name:
        raise WorkbenchError("A version name cannot be empty.")
    if len(name) > 200:
        raise WorkbenchError("A version name is at most 200 characters.")
    with session_scope() as s:
        version = s.get(ModelVersion, version_id)
        if version is None:
            raise WorkbenchError(f"Model version {version_id} does not exist.")
        version.name = name


def set_notes(version_id: int, notes: str) -> None:
    with session_scope() as s:
        version = s.get(ModelVersion, version_id)
        if version is None:
            raise WorkbenchError(f"Model version {version_id} does not exist.")
        version.notes = notes.strip()


def delete_version(version_id: int) -> None:
    """Delete the row and its files (the row first: a half-deleted folder is never listed)."""
    with session_scope() as s:
        version = s.get(ModelVersion, version_id)
        if version is None:
            raise WorkbenchError(f"Model version {version_id} does not exist.")
        folder = _resolve(version.artifact_path)
        s.delete(version)
    shutil.rmtree(folder, ignore_errors=True)
    _load_cached.cache_clear()


@lru_cache(maxsize=4)
def _load_cached(folder: str, sha256: str, device: str) -> LoadedModel:
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"the files of this version are missing ({weights})")
    if sha256 and sha256_file(weights) != sha256:
        raise ArtifactError("its weights do not match the recorded sha256 (the file is corrupt)")
    return load_model(folder, device=device, verify=False)


def load_version(version_id: int, device: str = "cpu") -> LoadedModel:
    """The version's model and tokenizers, verified against the registry and cached."""
    info = get_version(version_id)
    try:
        return _load_cached(str(_resolve(info.artifact_path)), info.sha256, device)
    except ArtifactError as exc:
        reason = str(exc).rstrip(".")
        raise WorkbenchError(f"Model version {version_id} cannot be loaded: {reason}.") from None


def version_zip(version_id: int) -> bytes:
    """The version folder as a zip (config.json, model.safetensors, tokenizer/)."""
    folder = artifact_dir(version_id)
    if not folder.is_dir():
        raise WorkbenchError(f"The files of model version {version_id} are missing.")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, Path(f"version-{version_id}") / path.relative_to(folder))
    return buffer.getvalue()
