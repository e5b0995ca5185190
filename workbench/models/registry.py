"""The model registry: versions are a DB row plus a folder `<WORKBENCH_HOME>/models/<id>/`.

The row keeps the folder's `artifact_digest` (model config + weights + tokenizer; see
core_model/artifact.py), checked on load so a damaged or hand-edited folder is reported,
never silently used. Only the model files (`model_files`) are ever copied in, loaded or
zipped: links and special files are refused, anything else in a folder is ignored. Loaded
models are kept in a small LRU cache: translating twice with one version reads its files
once. Version names follow the one name rule of `workbench.corpus.text_rules`. A model made
elsewhere (a folder of ours, a public Marian checkpoint, a zip of either) is checked and
converted by `model_import` before it reaches `register_version`.
"""

from __future__ import annotations

import io
import shutil
import zipfile
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from core_model.artifact import (
    WEIGHTS_FILE,
    ArtifactError,
    LoadedModel,
    artifact_digest,
    load_model,
    matches_recorded_sha256,
    model_files,
)
from db.engine import MAX_ID
from db.tables import Corpus, ModelVersion, TrainingRun
from workbench import settings
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.text_rules import normalize_text, strip_invisible, validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.storage import get_row, record_of, session_scope
from workbench.team import history
from workbench.team.access import Permission, require
from workbench.team.trash import real_name

NO_SUCH_VERSION = N_("Model version {id} does not exist.")


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
    # lineage: the version this one continued, and the training behind it (own + ancestors')
    parent_version_id: int | None
    train_tokens: int
    cumulative_tokens: int
    cumulative_seconds: float
    metrics: dict[str, Any]
    sha256: str
    artifact_path: str
    created_at: datetime
    trained_by: str | None = None  # who started its run (or registered its folder); None: unknown
    # where a model nobody here trained came from (model_import.ORIGIN_KEYS); None: trained here
    origin: dict[str, Any] | None = None

    @property
    def imported(self) -> bool:
        """Made elsewhere and added (a public model, a folder of ours): its corpus, pairs and
        training time are not this workbench's to show."""
        return self.origin is not None


def _to_info(v: ModelVersion, corpus_name: str | None) -> VersionInfo:
    return record_of(
        VersionInfo,
        v,
        corpus_name=corpus_name,
        train_tokens=v.train_tokens or 0,
        cumulative_tokens=v.cumulative_tokens or 0,
        cumulative_seconds=v.cumulative_seconds or 0.0,
        metrics=dict(v.metrics or {}),
        origin=dict(v.origin) if isinstance(v.origin, dict) else None,
    )


def _bounded(value: Any, kind: type, default: Any, high: float) -> Any:
    """``kind(value)`` when it is a finite number in [0, high], else ``default``."""
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if 0 <= number <= high else default  # (False for NaN)


def register_version(
    model_dir: Path,
    metrics: dict[str, Any],
    *,
    run_id: int | None = None,
    corpus_id: int | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    name: str | None = None,
    parent_version_id: int | None = None,
    trained_by: str | None = None,
    notes: str = "",
    origin: dict[str, Any] | None = None,
) -> int:
    """Record a model (a finished run's, or an imported copy) and move `model_dir` into
    models/<id>/; returns the id. ``parent_version_id``: the version the run continued; the
    new version's cumulative tokens and seconds add its own to the parent's.

    Two transactions on purpose: the row is committed first and removed again if the move
    fails, so a folder under models/ always has a row and a row never points at nothing.
    ``trained_by`` defaults to whoever started the run ``run_id`` (for an imported model,
    ``origin`` set: who added it).
    """
    weights = model_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"training produced no {WEIGHTS_FILE} in {model_dir}")
    digest = artifact_digest(model_dir)
    if name is not None:
        name = validate_name(name, "version name")
    with session_scope() as s:
        corpus = s.get(Corpus, corpus_id) if corpus_id is not None else None
        parent = s.get(ModelVersion, parent_version_id) if parent_version_id else None
        tokens = _bounded(metrics.get("tokens_trained", 0), int, 0, 2**62)
        seconds = _bounded(metrics.get("train_time_s", 0.0), float, 0.0, 1e12)
        if trained_by is None and run_id is not None:
            trained_by = s.scalar(select(TrainingRun.started_by).where(TrainingRun.id == run_id))
        version = ModelVersion(
            trained_by=trained_by,
            origin=origin,
            notes=strip_invisible(notes)[0],
            run_id=run_id,
            corpus_id=corpus.id if corpus else None,
            name="",
            artifact_path="",
            sha256=digest,
            param_count=_bounded(metrics.get("parameters", 0), int, 0, MAX_ID),
            metrics=metrics,
            device=normalize_text(str(metrics.get("device", "cpu")))[:32] or "cpu",
            src_lang=src_lang or (corpus.src_lang if corpus else ""),
            tgt_lang=tgt_lang or (corpus.tgt_lang if corpus else ""),
            train_pair_count=_bounded(metrics.get("train_pairs", 0), int, 0, MAX_ID),
            train_seconds=seconds,
            parent_version_id=parent.id if parent else None,
            train_tokens=tokens,
            cumulative_tokens=tokens + (parent.cumulative_tokens if parent else 0),
            cumulative_seconds=seconds + (parent.cumulative_seconds if parent else 0.0),
        )
        s.add(version)
        s.flush()
        version.artifact_path = settings.model_folder(version.id)
        version.name = name or f"{real_name(corpus) if corpus else 'model'} v{version.id}"
        version_id, relative = version.id, version.artifact_path
        # Who trained it registered it (the worker acts as the local admin, not as bob).
        summary = f"registered version {version.name!r}"
        _record(s, version, "register", {}, summary, False, actor=trained_by)
    destination = settings.resolve(relative)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(model_dir), destination)
    except OSError as exc:
        with session_scope() as s:
            version = s.get(ModelVersion, version_id)
            before = history.capture(s, ModelVersion, [version_id])
            s.execute(delete(ModelVersion).where(ModelVersion.id == version_id))
            _record(s, version, "delete", before, "its files could not be stored", False)
        raise ArtifactError(
            Message(N_("could not store the model files ({error})"), error=exc)
        ) from exc
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
    """The versions as a table for display (one row per version). An imported version
    (``origin`` set) has no pairs or training time of its own here unless its folder recorded
    them (null, not 0), and who added it is "added by", not "trained by"."""
    rows = [
        {
            "id": v.id,
            "name": v.name,
            "created": v.created_at,
            "origin": v.origin,
            "corpus": v.corpus_name,
            "pairs": v.train_pair_count or (None if v.imported else 0),
            "parameters": v.param_count,
            "device": v.device,
            "train time (s)": round(v.train_seconds, 1) or (None if v.imported else 0.0),
            "parent": v.parent_version_id,
            "train tokens": v.train_tokens,
            "cumulative tokens": v.cumulative_tokens,
            "cumulative minutes": round(v.cumulative_seconds / 60, 1),
            "valid loss": v.metrics.get("valid_loss"),
            "BLEU": v.metrics.get("bleu"),
            "chrF": v.metrics.get("chrf"),
            "trained by": None if v.imported else v.trained_by,
            "added by": v.trained_by if v.imported else None,
            "notes": v.notes,
        }
        for v in list_versions()
    ]
    table = pd.DataFrame(rows)
    if not table.empty:  # ids and counts stay integers next to the rows that have none
        for column in ("parent", "pairs"):
            table[column] = table[column].astype("Int64")
    return table


def version_row(session: Session, version_id: int) -> ModelVersion:
    """The version's row in ``session``, or the error every service gives for a missing one."""
    return get_row(session, ModelVersion, version_id, NO_SUCH_VERSION)


def get_version(version_id: int) -> VersionInfo:
    if not 0 < int(version_id) <= MAX_ID:  # beyond the INTEGER column: no such row
        raise WorkbenchError(NO_SUCH_VERSION, id=version_id)
    with session_scope() as s:
        row = s.execute(
            select(ModelVersion, Corpus.name)
            .outerjoin(Corpus, Corpus.id == ModelVersion.corpus_id)
            .where(ModelVersion.id == version_id)
        ).first()
        if row is None:
            raise WorkbenchError(NO_SUCH_VERSION, id=version_id)
        return _to_info(*row)


def artifact_dir(version_id: int) -> Path:
    return settings.resolve(get_version(version_id).artifact_path)


def rename_version(version_id: int, name: str) -> None:
    """Rename a version; the name rule is that of corpora (`text_rules.validate_name`)."""
    require(Permission.TRAIN)
    name = validate_name(name, "version name")
    with session_scope() as s:
        version = version_row(s, version_id)
        before = history.capture(s, ModelVersion, [version.id])
        version.name = name
        _record(s, version, "rename", before, f"renamed version #{version.id} to {name!r}")


def set_notes(version_id: int, notes: str) -> None:
    require(Permission.TRAIN)
    with session_scope() as s:
        version = version_row(s, version_id)
        before = history.capture(s, ModelVersion, [version.id])
        version.notes = strip_invisible(notes)[0]
        _record(s, version, "notes", before, f"notes of version #{version.id} changed")


def delete_version(version_id: int) -> None:
    """Delete the row and its files (the row first: a half-deleted folder is never listed);
    refused for a row whose folder is not one of ``models/`` (nothing else is ever deleted);
    a folder that another row names too is kept for that row."""
    require(Permission.DELETE)
    with session_scope() as s:
        version = version_row(s, version_id)
        folder = settings.version_folder(version.artifact_path)
        if folder is None:  # only a hand-edited or restored row can name one
            raise WorkbenchError(
                N_(
                    "version {id}'s folder {path} is not inside the data folder's models/: "
                    "not deleting it"
                ),
                id=version_id,
                path=version.artifact_path,
            )
        # only a hand-edited row shares its folder (a restore refuses such a database)
        shared = any(
            settings.version_folder(other.artifact_path) == folder
            for other in s.scalars(select(ModelVersion).where(ModelVersion.id != version_id))
        )
        before = history.capture(s, ModelVersion, [version.id])
        # lineage has no foreign key (migration 0008): the children lose their parent here,
        # their cumulative numbers stay
        s.execute(
            update(ModelVersion)
            .where(ModelVersion.parent_version_id == version_id)
            .values(parent_version_id=None)
        )
        s.delete(version)
        _record(s, version, "delete", before, f"deleted version {version.name!r}", False)
    if not shared:
        shutil.rmtree(folder, ignore_errors=True)
    _load_cached.cache_clear()


def check_direction(version: ModelVersion, corpus: Corpus) -> None:
    """A WorkbenchError unless ``version`` translates the languages of ``corpus`` (continuing a
    version on a corpus, translating a corpus' pool with it)."""
    translates = (version.src_lang, version.tgt_lang)
    holds = (corpus.src_lang, corpus.tgt_lang)
    if [lang.lower() for lang in translates] != [lang.lower() for lang in holds]:
        raise WorkbenchError(
            N_("Version {id} translates {pair} but corpus {name!r} is {corpus_pair}."),
            id=version.id,
            pair="→".join(translates),
            name=corpus.name,
            corpus_pair="→".join(holds),
        )


def corpus_of_pair(version_id: int, corpus: CorpusRef) -> int:
    """The id of ``corpus``, refused (``check_direction``) unless ``version_id`` translates its
    languages: the memory or the glossary of another pair would put that pair's text into the
    translations (an en→zh memory's exact match answering a zh→en request in Chinese)."""
    with session_scope() as s:
        found = find(s, corpus)
        check_direction(version_row(s, version_id), found)
        return found.id


def _record(
    s: Session,
    version: ModelVersion,
    action: str,
    before: dict[int, dict[str, Any]],
    summary: str,
    reversible: bool = True,
    actor: str | None = None,
) -> None:
    """Record a change to a version's row (by ``actor``, else whoever acts). Adding and
    deleting a version move its files too, which an undo cannot do: those changes are
    recorded as not reversible."""
    s.flush()
    after = history.capture(s, ModelVersion, [version.id])
    items = history.diff(ModelVersion, before, after)
    history.record(
        s,
        action,
        items,
        corpus_id=version.corpus_id,
        summary=summary,
        reversible=reversible,
        actor=actor,
    )


@lru_cache(maxsize=4)
def _load_cached(folder: str, sha256: str, device: str) -> LoadedModel:
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(
            Message(N_("the files of this version are missing ({path})"), path=weights)
        )
    if sha256 and not matches_recorded_sha256(folder, sha256):
        raise ArtifactError(
            Message(
                N_("its files do not match the recorded sha256 (a file is corrupt or was edited)")
            )
        )
    return load_model(folder, device=device, verify=False)


def load_version(version_id: int, device: str = "cpu") -> LoadedModel:
    """The version's model and tokenizers, verified against the registry and cached."""
    return load_model_of(get_version(version_id), device)


def load_model_of(info: VersionInfo, device: str = "cpu") -> LoadedModel:
    """``load_version`` for a version already read (no database access)."""
    try:
        return _load_cached(str(settings.resolve(info.artifact_path)), info.sha256, device)
    except ArtifactError as exc:
        raise WorkbenchError(
            N_("Model version {id} cannot be loaded: {reason}."),
            id=info.id,
            reason=artifact_problem(exc),
        ) from None


def artifact_problem(exc: ArtifactError) -> str:
    """An artifact problem as the reason inside a sentence: the registry's own (a ``Message``,
    shown translated on a page) as it is, core_model's (English) without its full stop."""
    given = exc.args[0] if exc.args else ""
    return given if isinstance(given, Message) else str(exc).rstrip(".")


def version_zip(version_id: int) -> bytes:
    """The version's model files as a zip (config.json, model.safetensors, tokenizer/):
    nothing else that may lie in its folder, and never what a link points to."""
    folder = artifact_dir(version_id)
    if not folder.is_dir():
        raise WorkbenchError(N_("The files of model version {id} are missing."), id=version_id)
    try:
        files = model_files(folder)
    except ArtifactError as exc:
        raise WorkbenchError(
            N_("Model version {id} cannot be zipped: {reason}"), id=version_id, reason=str(exc)
        ) from None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            zf.write(folder / rel, f"version-{version_id}/{rel}")
    return buffer.getvalue()
