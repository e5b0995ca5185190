"""The HTTP API's memory and file routes, beside ``http_app``'s: memory matches (and an exact
match's curated target) in ``POST /v1/translate``, and ``POST /v1/translate_file``, an XLIFF
file translated.

``/v1/translate_file`` takes LibreTranslate's ``/translate_file`` form (multipart: ``file``,
``source``, ``target``, ``api_key``) plus ``version`` (pin one instead of the pair's served
version), ``beam``, ``memory_exact`` and ``memory_corpus``; unlike LibreTranslate, which
answers a URL to download from later, it answers the translated file itself
(``application/xliff+xml``, named like the upload), with its counts in ``X-Units-*`` headers.
The text it asks to translate (each run of text between tags, once) counts against the
characters a request may hold, as ``/v1/translate``'s texts do.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from workbench.corpus.xliff import FilledFile
from workbench.memory import datastore
from workbench.memory.file_translation import translate_xliff
from workbench.memory.recall import Recalled, merged, recall
from workbench.models.engines import MAX_BEAM
from workbench.models.registry import VersionInfo
from workbench.models.translation import DecodingOptions
from workbench.serving.protocol import (
    ApiError,
    V1Match,
    V1TranslateRequest,
    check_declared_length,
)
from workbench.serving.runtime import Server, within_limit

_TRUE = {"1", "true", "yes", "on"}
# The form fields of /v1/translate_file (LibreTranslate's front end also sends `secret`,
# ignored as /translate ignores it).
FILE_FIELDS = frozenset(
    [
        "file",
        "api_key",
        "secret",
        "version",
        "source",
        "target",
        "beam",
        "memory_corpus",
        "memory_exact",
    ]
)


async def check_memory_corpus(info: VersionInfo, corpus: str | None, call: Any) -> None:
    """Refuse a ``memory_corpus`` that names no corpus, or one of another language pair (400),
    whether or not the request goes on to read it: a misspelt name must not pass unnoticed
    until memory is asked for."""
    if corpus is not None:
        await call(datastore.memory_corpus, info, corpus)


async def translate_remembering(
    server: Server, version_id: int, texts: list[str], req: V1TranslateRequest, call: Any
) -> tuple[list[Any], list[Recalled]]:
    """``server.translate`` of the texts the memory does not give (``req.memory_exact``), the
    curated targets of the others, and each text's memory (``call``: ``http_app._call``)."""
    memory = await call(
        _recall, version_id, texts, req.matches, req.memory_exact, req.memory_corpus
    )
    todo = [i for i, r in enumerate(memory) if r.exact is None]
    decoded = (
        await server.translate(
            version_id,
            [texts[i] for i in todo],
            DecodingOptions(
                beam=req.beam,
                with_attention=req.attention,
                engine=req.engine,
                knn=req.memory,
                memory_corpus=req.memory_corpus,
            ),
        )
        if todo
        else []
    )
    return merged(memory, decoded), memory


def _recall(
    version_id: int, texts: list[str], matches: int, exact: bool, corpus: str | None
) -> list[Recalled]:
    return recall(version_id, texts, matches=matches, use_exact=exact, corpus=corpus)


def memory_fields(recalled: Recalled) -> dict[str, Any]:
    """A translation's ``origin`` and ``matches`` (``V1Translation``)."""
    return {
        "origin": "memory" if recalled.exact is not None else "model",
        "matches": [
            V1Match(pair_id=m.pair_id, source=m.source, target=m.target, score=m.score)
            for m in recalled.matches
        ],
    }


def file_routes(server: Server, call: Any, requested_version: Any) -> APIRouter:
    """``POST /v1/translate_file`` (module docstring); ``call`` and ``requested_version`` are
    ``http_app``'s; the native router that includes it gives its tag."""
    router = APIRouter()

    @router.post(
        "/v1/translate_file",
        summary="Translate an XLIFF 1.2/2.x file: every empty target filled, tags kept, marked "
        "for review",
        response_class=Response,
        responses={200: {"content": {"application/xliff+xml": {}}}},
    )
    async def translate_file(request: Request) -> Response:
        c = server.config
        check_declared_length(request, c.max_body_bytes)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "multipart/form-data":
            raise ApiError(415, "Send the file as multipart/form-data (a field named file)")
        form = await request.form(max_files=1, max_fields=20)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(400, "Invalid request: give the XLIFF file in the field 'file'")
        data = await upload.read(c.max_body_bytes + 1)
        if len(data) > c.max_body_bytes:
            raise ApiError(413, f"The file is larger than {c.max_body_bytes:,} bytes")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        unknown = sorted(set(form) - FILE_FIELDS)
        if unknown:  # as /v1/translate refuses its unknown fields: a misspelt one is not ignored
            raise ApiError(
                400, f"Invalid request: unknown field(s) {', '.join(map(repr, unknown))}"
            )
        max_chars = await server.authorize(request, fields.get("api_key"))
        version = _form_number(fields, "version", "a version id")
        info = await requested_version(version, fields.get("source"), fields.get("target"))
        request.state.version_id = info.id
        beam = _form_number(fields, "beam", f"1 to {MAX_BEAM}")
        if beam is not None and not 1 <= beam <= MAX_BEAM:
            raise ApiError(400, f"Invalid request: beam must be 1 to {MAX_BEAM}")
        corpus = fields.get("memory_corpus") or None
        await check_memory_corpus(info, corpus, call)
        filled = await call(
            _translate,
            info.id,
            data,
            beam or 1,
            fields.get("memory_exact", "").lower() in _TRUE,
            corpus,
            max_chars,
        )
        name = PurePath(upload.filename or "translated.xlf").name
        return Response(
            filled.data,
            media_type="application/xliff+xml",
            headers={
                "Content-Disposition": f'attachment; filename="{_ascii(name)}"',
                "X-Units-Translated": str(filled.translated),
                "X-Units-From-Memory": str(filled.from_memory),
                "X-Units-Kept": str(filled.kept),
                "X-Units-Untranslatable": str(filled.untranslatable),
            },
        )

    return router


_MAX_DIGITS = 30  # far past any id or beam, far below what int() refuses (4,300 digits)


def _form_number(fields: dict[str, str], name: str, what: str) -> int | None:
    """A form field's whole number, None when absent: ASCII digits only ("²".isdigit() is
    true, but int() refuses it), few enough for int(); else 400 "``name`` must be ``what``"."""
    value = fields.get(name) or ""
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > _MAX_DIGITS:
        raise ApiError(400, f"Invalid request: {name} must be {what}")
    return int(value)


def _translate(
    version_id: int, data: bytes, beam: int, exact: bool, corpus: str | None, max_chars: int
) -> FilledFile:
    return translate_xliff(
        version_id,
        data,
        beam=beam,
        use_memory=exact,
        corpus=corpus,
        before_decoding=lambda texts: within_limit(texts, max_chars),
    )


def _ascii(name: str) -> str:
    return "".join(ch if ch.isascii() and ch not in '"\\' else "_" for ch in name)
