"""A model made elsewhere, added to the registry: a model folder of ours (e.g. trained under
torchrun), a public Marian checkpoint in Hugging Face's format (an OPUS-MT model, converted
by ``core_model.marian``), or a zip of either (``archives``) — the ``register FOLDER_OR_ZIP``
command and the Models page's "Add a public model".

Everything is staged (``staging``), converted, loaded and checked before
``registry.register_version`` changes the registry, so a corrupt, mismatched, hostile or
hand-edited model is refused and what is registered is exactly what was checked. Every file
of the model is read as ``core_model.untrusted_files`` reads it (regular, bounded, no
recursion), so a FIFO, a link or a 200,000-deep JSON is one error line too.

Nobody here trained such a model: a public one is named after itself (its folder's or
zip's name), and the version keeps its ``origin`` (``ORIGIN_KEYS``: the file it came from,
its format and model type, its languages, its Hugging Face id and licence when its files
say them), which the pages and ``versions --json`` show instead of a corpus, pairs and a
training time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core_model import model_card
from core_model.artifact import ArtifactError, copy_model, load_model
from core_model.marian import MODEL_TYPE, MarianError, convert_marian, is_marian
from core_model.untrusted_files import UntrustedFileError
from workbench.corpus.corpora import check_languages, get_corpus, validate_languages
from workbench.corpus.text_rules import normalize_text, validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_, MessageId
from workbench.models import registry, staging
from workbench.models.archives import is_zip, unpack_model_zip
from workbench.team.access import Permission, require

# A version's origin: what each key holds (a short string, or None when the files do not say).
ORIGIN_KEYS = (
    "file",  # the folder's or zip's name, as given (never a path)
    "format",  # ORIGIN_FORMATS
    "model_type",  # config.json's ("marian"), or "transformer" (a folder of ours)
    "src_lang",
    "tgt_lang",
    "hub_id",  # e.g. Helsinki-NLP/opus-mt-zh-en
    "licence",  # e.g. cc-by-4.0
    "licence_file",  # e.g. LICENSE
)
ORIGIN_FORMATS = {
    MODEL_TYPE: N_("Marian (Hugging Face)"),
    "workbench": N_("workbench model folder"),
}


def import_version(
    folder: Path,
    corpus: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    name: str | None = None,
    *,
    marian: bool = False,
    target_token: str | None = None,
    shown_as: str | None = None,
) -> int:
    """Register a model made outside the workbench; returns the id. `folder` is a model
    folder of ours (e.g. trained under torchrun), or a public Marian checkpoint in Hugging
    Face's format (an OPUS-MT model; detected from its config.json, or required by `marian`),
    or a zip of either (``archives``). A Marian model is converted (`core_model.marian`):
    `target_token` picks the target language of a multilingual one, and its model card's
    numbers become the version's notes. The version is named `name`, else a public model
    after itself (its folder's or zip's name: opus-mt-zh-en), a folder of ours as the
    registry names versions; either records its origin (``ORIGIN_KEYS``).

    Only the model files, its card and its licence file are read (never moved: the user's
    folder stays theirs), links and special files are refused and the size is bounded
    (`model_files`, ``core_model.untrusted_files``); the copy is then
    loaded, so a corrupt, mismatched or hand-edited one is refused before the registry
    changes, and what is registered is exactly what was checked. Languages are required:
    given (and then those of the linked corpus, if any), else the linked corpus's, else those
    recorded in the folder (our config.json; a
    Marian model's tokenizer_config.json or OPUS-MT folder name). The folder's metrics are
    informative only: kept when they are plain finite values.

    The corpus is read, the folder copied and checked, and the version registered in
    separate steps: no transaction is held open while a model is copied and loaded.
    `shown_as`: how messages name the model (an upload's file name: never a staging path).
    """
    actor = require(Permission.TRAIN)
    if name is not None:
        name = validate_name(name, "version name")
    corpus_info = get_corpus(corpus) if corpus else None
    if corpus_info is not None and (src_lang or tgt_lang):  # refused before anything is copied
        has = (corpus_info.src_lang, corpus_info.tgt_lang)
        check_languages(corpus_info.name, has, (src_lang or has[0], tgt_lang or has[1]))
    folder = Path(folder)
    staging.sweep()  # what killed imports left behind
    with staging.staging_folder() as work:
        return _import(
            folder,
            work,
            actor.email,
            corpus_info,
            (src_lang, tgt_lang),
            name,
            (marian, target_token),
            shown_as or str(folder),
        )


def _import(
    folder: Path,
    work: Path,
    added_by: str | None,
    corpus_info: Any,
    languages: tuple[str | None, str | None],
    name: str | None,
    marian_options: tuple[bool, str | None],
    shown: str,
) -> int:
    """`import_version`'s work, in the locked staging folder `work`; messages name the
    model `shown`, never a path under `work`."""
    src_lang, tgt_lang = languages
    marian, target_token = marian_options
    model_dir = work / "model"
    try:
        if folder.is_file() and not is_zip(folder):
            raise WorkbenchError(N_("{folder} is neither a model folder nor a zip"), folder=shown)
        source = unpack_model_zip(folder, work / "unpacked") if is_zip(folder) else folder
        # (a zip's own name names the checkpoint whose files lie at its root)
        label = folder.stem if source == work / "unpacked" else source.name
        try:
            pretrained = marian or is_marian(source)
            if target_token is not None and not pretrained:
                raise WorkbenchError(
                    N_("{folder} is not a Marian model: a target-language token is only for those"),
                    folder=shown,
                )
            if pretrained:
                said = convert_marian(source, model_dir, target_token, label).source
            else:
                said = model_card.describe(source, {})
                copy_model(source, model_dir)
            loaded = load_model(model_dir)
        except (ArtifactError, MarianError, UntrustedFileError) as exc:
            raise WorkbenchError(
                N_("cannot import {folder}: {reason}"),
                folder=shown,
                reason=_without(str(exc), work, shown),
            ) from exc
        except OSError as exc:
            raise WorkbenchError(
                N_("cannot copy {folder} ({reason})"), folder=shown, reason=exc.strerror or exc
            ) from exc
        saved = loaded.config
        recorded = saved.get("corpus") if isinstance(saved.get("corpus"), dict) else {}
        if isinstance(saved.get("pretrained"), dict):
            recorded = saved["pretrained"]
            said = {**recorded, **{k: v for k, v in said.items() if v}}  # a descendant's
        langs = vars(corpus_info) if corpus_info else recorded
        src_lang, tgt_lang = src_lang or langs.get("src_lang"), tgt_lang or langs.get("tgt_lang")
        if not (src_lang and tgt_lang):
            raise WorkbenchError(
                N_("{folder} records no languages: give --corpus, or --src-lang and --tgt-lang"),
                folder=shown,
            )
        src_lang, tgt_lang = validate_languages(str(src_lang), str(tgt_lang))
        metrics = _plain_metrics(saved.get("metrics"))
        metrics["parameters"] = sum(p.numel() for p in loaded.model.parameters())
        notes = model_card.card_summary(said) if pretrained else ""
        del loaded
        origin = {
            "file": _clean(folder.name),
            "format": MODEL_TYPE if pretrained else "workbench",
            "model_type": _clean(said.get("model_type")) or "transformer",
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            **{key: _clean(said.get(key)) for key in ("hub_id", "licence", "licence_file")},
        }
        return registry.register_version(
            model_dir,
            metrics,
            corpus_id=corpus_info.id if corpus_info else None,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            name=name or (_model_name(label) if pretrained else None),
            trained_by=added_by,
            notes=notes,
            origin=origin,
        )
    except ArtifactError as exc:  # the checked copy could not be stored (register_version)
        raise WorkbenchError(
            N_("cannot register {folder}: {reason}"),
            folder=shown,
            reason=registry.artifact_problem(exc),
        ) from exc


def import_zip_upload(data: bytes, filename: str, **options: Any) -> int:
    """`import_version` of an uploaded zip (the Models page's "Add a public model"); its
    file name (e.g. opus-mt-zh-en.zip) names a checkpoint whose files lie at the zip's root.
    `options`: those of `import_version`."""
    require(Permission.TRAIN)
    stem = "".join(c for c in Path(str(filename)).stem if c.isalnum() or c in "-_.")[:100]
    shown = Path(str(filename)).name[:200]
    with staging.staging_folder() as upload:
        path = upload / f"{stem or 'model'}.zip"
        path.write_bytes(data)
        try:
            return import_version(path, **options, shown_as=shown)
        except WorkbenchError as exc:  # the staged copy's name is the user's file's
            if exc.msgid is None:
                raise
            raise _named_as_uploaded(exc.msgid, exc.params, path.name, shown) from None


def _named_as_uploaded(
    message: MessageId, params: dict[str, Any], staged: str, shown: str
) -> WorkbenchError:
    """The refusal `message` with the staged zip's name given as the uploaded file's."""
    return WorkbenchError(message, **{k: shown if v == staged else v for k, v in params.items()})


def _without(text: str, work: Path, shown: str) -> str:
    """`text` with the staging folder's paths (the model's copy, an unpacked zip) named as the
    user knows the model."""
    for path in sorted((str(p) for p in (work / "model", work / "unpacked", work)), key=len)[::-1]:
        text = text.replace(path, shown)
    return text


def _model_name(label: str) -> str | None:
    """The model's own name as the version's ('opus-mt-zh-en'), unless it breaks the name
    rule (then the registry's automatic one)."""
    try:
        return validate_name(label[:100], "version name")
    except WorkbenchError:
        return None


def _clean(value: Any) -> str | None:
    """A short one-line string of what a model's files said (None: they said nothing)."""
    return (normalize_text(value)[:200] or None) if isinstance(value, str) else None


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
