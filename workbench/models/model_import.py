"""A model made elsewhere, added to the registry: a model folder of ours (e.g. trained under
torchrun), a public Marian checkpoint in Hugging Face's format (an OPUS-MT model, converted
by ``core_model.marian``), or a zip of either (``archives``) — the ``register FOLDER_OR_ZIP``
command and the Models page's "Add a public model".

Everything is staged, converted, loaded and checked before ``registry.register_version``
changes the registry, so a corrupt, mismatched or hand-edited model is refused and what is
registered is exactly what was checked.
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from core_model.artifact import ArtifactError, copy_model, load_model
from core_model.marian import MarianError, card_summary, convert_marian, is_marian
from workbench import settings
from workbench.corpus.corpora import get_corpus, validate_lang
from workbench.corpus.text_rules import normalize_text, validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models import registry
from workbench.models.archives import is_zip, unpack_model_zip
from workbench.team.access import Permission, require


def import_version(
    folder: Path,
    corpus: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    name: str | None = None,
    *,
    marian: bool = False,
    target_token: str | None = None,
) -> int:
    """Register a model made outside the workbench; returns the id. `folder` is a model
    folder of ours (e.g. trained under torchrun), or a public Marian checkpoint in Hugging
    Face's format (an OPUS-MT model; detected from its config.json, or required by `marian`),
    or a zip of either (``archives``). A Marian model is converted (`core_model.marian`):
    `target_token` picks the target language of a multilingual one, and its model card's
    numbers become the version's notes.

    Only the model files are read (never moved: the user's folder stays theirs), links and
    special files are refused and the size is bounded (`model_files`); the copy is then
    loaded, so a corrupt, mismatched or hand-edited one is refused before the registry
    changes, and what is registered is exactly what was checked. Languages are required:
    given, else the linked corpus's, else those recorded in the folder (our config.json; a
    Marian model's tokenizer_config.json or OPUS-MT folder name). The folder's metrics are
    informative only: kept when they are plain finite values.

    The corpus is read, the folder copied and checked, and the version registered in
    separate steps: no transaction is held open while a model is copied and loaded.
    """
    actor = require(Permission.TRAIN)
    if name is not None:
        name = validate_name(name, "version name")
    corpus_info = get_corpus(corpus) if corpus else None
    folder = Path(folder)
    # Staged under runs/, where the worker's sweep removes what a killed import left behind.
    staging = settings.new_import_staging_dir(uuid.uuid4().hex)
    model_dir = staging / "model"
    try:
        if folder.is_file() and not is_zip(folder):
            raise WorkbenchError(N_("{folder} is neither a model folder nor a zip"), folder=folder)
        source = unpack_model_zip(folder, staging / "unpacked") if is_zip(folder) else folder
        pretrained = marian or is_marian(source)
        if target_token is not None and not pretrained:
            raise WorkbenchError(
                N_("{folder} is not a Marian model: a target-language token is only for those"),
                folder=folder,
            )
        try:
            if pretrained:
                # (a zip's own name names the checkpoint whose files lie at its root)
                label = folder.stem if source == staging / "unpacked" else source.name
                convert_marian(source, model_dir, target_token, label)
            else:
                copy_model(source, model_dir)
            loaded = load_model(model_dir)
        except (ArtifactError, MarianError) as exc:
            raise WorkbenchError(
                N_("cannot import {folder}: {reason}"), folder=folder, reason=str(exc)
            ) from exc
        except OSError as exc:
            raise WorkbenchError(
                N_("cannot copy {folder} ({reason})"), folder=folder, reason=exc.strerror or exc
            ) from exc
        saved = loaded.config
        recorded = saved.get("corpus") if isinstance(saved.get("corpus"), dict) else {}
        if isinstance(saved.get("pretrained"), dict):
            recorded = saved["pretrained"]
        langs = vars(corpus_info) if corpus_info else recorded
        src_lang, tgt_lang = src_lang or langs.get("src_lang"), tgt_lang or langs.get("tgt_lang")
        if not (src_lang and tgt_lang):
            raise WorkbenchError(
                N_("{folder} records no languages: give --corpus, or --src-lang and --tgt-lang"),
                folder=folder,
            )
        src_lang = validate_lang(str(src_lang), "source")
        tgt_lang = validate_lang(str(tgt_lang), "target")
        metrics = _plain_metrics(saved.get("metrics"))
        metrics["parameters"] = sum(p.numel() for p in loaded.model.parameters())
        notes = card_summary(saved["pretrained"]) if pretrained else ""
        del loaded
        return registry.register_version(
            model_dir,
            metrics,
            corpus_id=corpus_info.id if corpus_info else None,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            name=name,
            trained_by=actor.email,
            notes=notes,
        )
    except ArtifactError as exc:  # the checked copy could not be stored (register_version)
        raise WorkbenchError(
            N_("cannot register {folder}: {reason}"),
            folder=folder,
            reason=registry.artifact_problem(exc),
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already unless storing failed


def import_zip_upload(data: bytes, filename: str, **options: Any) -> int:
    """`import_version` of an uploaded zip (the Models page's "Add a public model"); its
    file name (e.g. opus-mt-zh-en.zip) names a checkpoint whose files lie at the zip's root.
    `options`: those of `import_version`."""
    require(Permission.TRAIN)
    stem = "".join(c for c in Path(str(filename)).stem if c.isalnum() or c in "-_.")[:100]
    upload = settings.new_import_staging_dir(uuid.uuid4().hex)
    path = upload / f"{stem or 'model'}.zip"
    try:
        upload.mkdir(parents=True)
        path.write_bytes(data)
        return import_version(path, **options)
    except WorkbenchError as exc:  # says the user's file, never where the server staged it
        shown = str(filename)
        if exc.msgid is None:
            raise WorkbenchError(_as_uploaded(str(exc), shown)) from None
        params = {
            k: shown if v in (path, path.name) else _as_uploaded(v, shown)
            for k, v in exc.params.items()
        }
        raise WorkbenchError(exc.msgid, **params) from None
    finally:
        shutil.rmtree(upload, ignore_errors=True)


def _as_uploaded(value: Any, filename: str) -> Any:
    """A message parameter with the staging paths of an upload (``runs/import-<hex>/…``, its
    copy of the zip or what was unpacked from it) given as the uploaded file's name."""
    if not isinstance(value, str | Path):
        return value
    prefix = re.escape(str(settings.runs_dir() / settings.IMPORT_STAGING_PREFIX))
    staged = re.compile(prefix + r"[0-9a-f]+(?:/[^/\s'\"]+\.zip|/unpacked|/model)?(/[^\s'\"]*)?")
    return staged.sub(
        lambda m: filename + (f": {m.group(1)[1:]}" if m.group(1) else ""), str(value)
    )


def _plain_metrics(raw: Any) -> dict[str, Any]:
    """The JSON scalars of a hand-made metrics section that every database can store:
    finite numbers, booleans and short clean strings, under short clean names."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = normalize_text(key)[:64] if isinstance(key, str) else ""
        if not name:
            continue
        if isinstance(value, str):
            out[name] = normalize_text(value)[:200]
        elif isinstance(value, int | float) and abs(value) < 2**53:  # not NaN, not inf
            out[name] = value
    return out
