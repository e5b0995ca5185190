"""The shapes of requests and answers, and how a request body becomes fields.

LibreTranslate's clients send either JSON or an HTML form (``libretranslatepy`` posts
``application/x-www-form-urlencoded``), with ``api_key`` among the fields; both are read the
same way here, query parameters included. Every refusal is an ``ApiError``: a 4xx (or 5xx)
status with a one-line message, answered as ``{"error": message}`` like LibreTranslate.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from starlette.requests import ClientDisconnect

from workbench.memory.matches import MAX_MATCHES
from workbench.models.engines import ENGINE_LABELS, ENGINES, MAX_BEAM

MAX_ALTERNATIVES = 8
LANGUAGE_NAMES = {  # ISO 639-1 codes LibreTranslate's clients show by name; others by code
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ru": "Russian", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian",
    "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


CLIENT_CLOSED = 499  # nginx's "client closed request": not an error of the server


class ApiError(Exception):
    """A refused request: ``status`` and a one-line message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.split("-")[0].lower(), code)


# ------------------------------------------------------------------------------ bodies


async def read_fields(request: Request, max_bytes: int, timeout_s: float) -> dict[str, Any]:
    """The request's fields: its query parameters, then its JSON object or form fields."""
    fields: dict[str, Any] = _form_fields(request.scope["query_string"], "the query")
    body = await _read_body(request, max_bytes, timeout_s)
    if not body:
        return fields
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind in ("application/json", "") or kind.endswith("+json"):
        fields.update(_json_fields(body))
    elif kind == "application/x-www-form-urlencoded":
        fields.update(_form_fields(body, "the form"))
    else:
        raise ApiError(415, f"Unsupported content type {kind!r}: send JSON or a form")
    return fields


def check_declared_length(request: Request, max_bytes: int) -> None:
    """Refuse a body that its Content-Length says is larger than ``max_bytes`` (413) before
    reading it, or a Content-Length that is not a number (400)."""
    declared = request.headers.get("content-length")
    if declared is None:
        return
    # ASCII digits only ("²".isdigit() too), and no int() of thousands of them: past
    # Python's digit limit (uvicorn refuses both first; another server may not)
    if not (declared.isascii() and declared.isdigit()):
        raise ApiError(400, "Invalid Content-Length header")
    digits = declared.lstrip("0") or "0"
    if len(digits) > len(str(max_bytes)) or int(digits) > max_bytes:
        raise ApiError(413, f"The request body is larger than {max_bytes:,} bytes")


async def _read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    check_declared_length(request, max_bytes)
    too_big = ApiError(413, f"The request body is larger than {max_bytes:,} bytes")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise ApiError(408, f"The request body did not arrive within {timeout_s:g} s") from None
    except ClientDisconnect:  # nobody is left to answer: counted and logged as nginx does
        raise ApiError(
            CLIENT_CLOSED, "The client closed the connection during its request"
        ) from None


def _json_fields(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "Invalid request: the body is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"Invalid JSON format: {exc.msg}") from None
    except RecursionError:
        raise ApiError(400, "Invalid JSON format: nested too deeply") from None
    except ValueError:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise ApiError(400, "Invalid JSON format: a number has too many digits") from None
    if not isinstance(data, dict):
        raise ApiError(400, "Invalid JSON format: expected an object")
    return data


def _form_fields(raw: bytes, where: str) -> dict[str, Any]:
    """Form or query fields: a name given once is a string, given again a list."""
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"Invalid request: {where} is not UTF-8 text") from None
    fields: dict[str, Any] = {}
    for name, value in pairs:
        if name in fields:
            previous = fields[name]
            fields[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            fields[name] = value
    return fields


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], fields: dict[str, Any]) -> M:
    """The fields as ``model``, or a 400 naming the first wrong field."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        if first["type"] == "missing":
            raise ApiError(400, f"Invalid request: missing {where} parameter") from None
        # a validator's own words, without pydantic's "Value error, " before them (nor the
        # field's name, when they start with it)
        own = first["type"] == "value_error"
        message = str(first["ctx"]["error"]) if own else first["msg"]
        if not (own and message.startswith(f"{where} ")):
            message = f"{where}: {message}"
        raise ApiError(400, f"Invalid request: {message}") from None


# ----------------------------------------------------------------------------- shapes


def _texts(value: Any, info: ValidationInfo) -> Any:
    """One refusal for any other shape: pydantic's own, one per member of the union, would
    name its internal path (``q.str``) instead."""
    if isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(text, str) for text in value)
    ):
        return value
    raise ValueError(f"{info.field_name} must be a string or a list of strings")


Texts = Annotated[str | list[str], BeforeValidator(_texts)]


class ErrorBody(BaseModel):
    error: str = Field(description="What was wrong, in one line")


class TranslateRequest(BaseModel):
    """LibreTranslate's ``POST /translate`` (JSON or form)."""

    model_config = ConfigDict(extra="ignore")  # clients send more (e.g. `secret`)

    q: Texts = Field(description="Text, or a list of texts, to translate")
    source: str = Field(description="Source language code ('auto' is not available)")
    target: str = Field(description="Target language code")
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(
        0,
        ge=0,
        le=MAX_ALTERNATIVES,
        description="Alternative translations wanted; this server returns the best only, "
        "so the list is empty",
    )
    api_key: str | None = None


class TranslateResponse(BaseModel):
    translatedText: Texts  # LibreTranslate's name
    alternatives: list[str] | list[list[str]] | None = None


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class V1TranslateRequest(BaseModel):
    """The native ``POST /v1/translate``: a pinned version or a served pair, any beam, and
    the cross-attention on request."""

    model_config = ConfigDict(extra="forbid")

    q: Texts
    version: int | None = Field(None, ge=1, description="Pin this version")
    source: str | None = Field(None, description="With target: the served version of the pair")
    target: str | None = None
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="1 is greedy decoding")
    attention: bool = Field(False, description="Add the last layer's cross-attention")
    memory: bool = Field(
        False,
        description="Decode with the corpus memory (kNN-MT over the train pairs of "
        "memory_corpus, else of the version's corpus): pairs saved there act at once; "
        "handwritten engine only",
    )
    engine: str = Field(
        ENGINES[0],
        description="Who decodes: "
        + ", ".join(f"{e} ({ENGINE_LABELS[e]})" for e in ENGINES)
        + "; the attention is always the handwritten model's",
        json_schema_extra={"enum": list(ENGINES)},
    )
    matches: int = Field(0, ge=0, le=MAX_MATCHES, description="Memory matches to add per text")
    memory_exact: bool = Field(
        False, description="A text the memory holds exactly gets its curated target"
    )
    memory_corpus: str | None = Field(
        None, description="The memory's corpus (name or id); default: the version's"
    )
    api_key: str | None = None

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
        return engine


class V1Version(BaseModel):
    id: int
    name: str
    src_lang: str
    tgt_lang: str
    served: bool = Field(description="Whether it answers for its pair on /translate")


class V1Attention(BaseModel):
    source_pieces: list[str]
    output_pieces: list[str]
    weights: list[list[float]] = Field(description="A row per output piece")


class V1Match(BaseModel):
    pair_id: int
    source: str
    target: str
    score: float = Field(description="Fuzzy match score in % (edit-distance ratio)")


class V1Translation(BaseModel):
    text: str
    score: float = Field(description="Log-probability (beam: length-normalised)")
    warnings: list[str] = Field(description="Why this output may not be trusted")
    attention: V1Attention | None = None
    origin: str = Field("model", description="model, or memory (an exact match's target)")
    matches: list[V1Match] = Field(default_factory=list, description="Closest memory pairs")


class V1TranslateResponse(BaseModel):
    version: V1Version
    translations: list[V1Translation]


def body_schema(model: type[BaseModel], form: bool) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of an endpoint that parses its body itself."""
    schema = model.model_json_schema()
    content = {"application/json": {"schema": schema}}
    if form:
        content["application/x-www-form-urlencoded"] = {"schema": schema}
    return {"requestBody": {"required": True, "content": content}}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (400, "Invalid request"),
        (403, "Invalid API key"),
        (404, "No such version"),
        (408, "The body came too slowly"),
        (413, "The body is too large"),
        (415, "Neither JSON nor a form"),
        (429, "Too many requests: slow down"),
        (500, "Translation error"),
        (503, "Busy, or timed out"),
    )
}
