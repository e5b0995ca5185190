"""The HTTP front end: LibreTranslate's protocol and the native ``/v1`` API (FastAPI).

Like the UI and the CLI it only calls workbench services: ``served`` (which version answers
a pair), ``api_keys``, ``registry`` and ``translation`` (through the ``Batcher``, which shares
decoder batches between concurrent requests). Blocking service calls run in the thread pool;
decoding runs on the batcher's thread, so the event loop keeps accepting requests.

Who may call what: without ``--require-keys`` every route is open (the server then listens
on a loopback address only, unless ``--allow-anonymous`` says that anyone may use it). With
it, ``/translate`` and ``/v1/translate`` need a key in their fields, and the GET routes that
show stored data or the server's traffic (``/v1/versions``, ``/metrics``) a key that may
read (``Permission.READ``, every key's role holds it) as ``?api_key=``; ``/languages``,
``/frontend/settings`` (LibreTranslate's, public in LibreTranslate too: a client reads them
before it has a key), ``/health`` (for load balancers and the Models page) and the API's
docs stay public. Writes go through the services, which check the key's role.

Errors are ``{"error": message}`` with LibreTranslate's codes: 400 bad request, 403 bad key,
429 too many requests, 500 a translation failure; besides 404 unknown version, 408/413 slow
or oversized bodies, 415 neither JSON nor a form, 503 busy or timed out. Bad input is never a
500, and an unexpected failure answers 500 without stopping the server. A client that closes
its connection before its body arrived is counted and logged as 499 (nginx's "client closed
request"), not as an error of the server. Keys are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from workbench import settings
from workbench.corpus.corpora import validate_lang
from workbench.errors import PermissionDenied, WorkbenchError
from workbench.memory import datastore
from workbench.messages import N_
from workbench.models import engines, registry
from workbench.models.engines import ENGINES
from workbench.models.translation import MEMORY_NEEDS_HANDWRITTEN, DecodingOptions, check_inputs
from workbench.serving import served
from workbench.serving.batching import Engine, default_engine
from workbench.serving.config import ServeConfig
from workbench.serving.memory_routes import (
    check_memory_corpus,
    file_routes,
    memory_fields,
    translate_remembering,
)
from workbench.serving.protocol import (
    ERROR_RESPONSES,
    ApiError,
    Language,
    TranslateRequest,
    TranslateResponse,
    V1Attention,
    V1TranslateRequest,
    V1TranslateResponse,
    V1Translation,
    V1Version,
    body_schema,
    language_name,
    read_fields,
    validated,
)
from workbench.serving.runtime import Observed, Server

log = logging.getLogger("workbench.serving")


def _served_version(source: str, target: str) -> int:
    if source.lower() == "auto":
        raise WorkbenchError(
            N_("Language detection (source 'auto') is not available: give the source language code")
        )
    return served.served_version_id(
        validate_lang(source, "source"), validate_lang(target, "target")
    )


def _version_record(info: registry.VersionInfo) -> V1Version:
    is_served = served.serving_of(info.id) is not None
    return V1Version(
        id=info.id,
        name=info.name,
        src_lang=info.src_lang,
        tgt_lang=info.tgt_lang,
        served=is_served,
    )


async def _call(fn: Callable[..., Any], *args: Any, status: int = 400) -> Any:
    """A blocking workbench service in the thread pool; its ``WorkbenchError`` -> ``status``
    (one the key's role does not allow: 403)."""
    try:
        return await run_in_threadpool(fn, *args)
    except PermissionDenied as exc:
        raise ApiError(403, str(exc)) from None
    except WorkbenchError as exc:
        raise ApiError(status, str(exc)) from None


async def _requested_version(
    version: int | None, source: str | None, target: str | None
) -> registry.VersionInfo:
    """The version a native request pins, else the one served for its pair: an unknown
    version is 404, a pair nothing serves 400 (as LibreTranslate's ``/translate`` answers), a
    pinned version of another pair than the one also given 400."""
    if version is None:
        if not (source and target):
            raise ApiError(400, "Invalid request: give a version, or a source and a target")
        return await _call(
            registry.get_version, await _call(_served_version, source, target), status=404
        )
    info = await _call(registry.get_version, version, status=404)
    await _call(_check_pinned_pair, info, source, target)
    return info


def _check_pinned_pair(info: registry.VersionInfo, source: str | None, target: str | None) -> None:
    """A pinned version asked for a pair as well: the pair must be the version's (``auto``
    stands for its source), else its languages would answer another pair's request."""
    asked = (
        validate_lang(source, "source") if source and source.strip().lower() != "auto" else "",
        validate_lang(target, "target") if target else "",
    )
    if any(
        a and own and a.lower() != own.lower()
        for a, own in zip(asked, (info.src_lang, info.tgt_lang), strict=True)
    ):
        raise WorkbenchError(
            N_("version {id} translates {pair}, not {asked}"),
            id=info.id,
            pair=f"{info.src_lang}→{info.tgt_lang}",
            asked=f"{asked[0] or info.src_lang}→{asked[1] or info.tgt_lang}",
        )


async def _memory_ready(version_id: int, engine: str, corpus: str | None) -> None:
    """A request with the corpus memory is decoded only once the store of the memory's corpus
    (``corpus``, else the version's own: ``datastore.memory_corpus``, as the CLI's) is ready;
    until then (its first build can take a minute) it is built in the background and the
    request answered 503 with how far the build is."""
    if engine != ENGINES[0]:
        raise ApiError(400, f"Invalid request: {MEMORY_NEEDS_HANDWRITTEN}")
    state = await _call(datastore.store_state, version_id, corpus)
    if state["state"] == "ready":
        return
    if state["state"] == "failed":
        raise ApiError(400, f"Invalid request: the memory could not be built: {state['error']}")
    job = await _call(datastore.build_in_background, version_id, corpus)
    raise ApiError(503, building_text(version_id, job), {"Retry-After": "5"})


def building_text(version_id: int, job: datastore.BuildProgress) -> str:
    """The 503 of a request that waits for the memory: how far its build is, or that it is
    starting (its pairs not counted yet: "0 of 0 pairs" read as an empty memory)."""
    progress = (
        f"is being built ({job.done:,} of {job.total:,} pairs encoded)"
        if job.total
        else "is starting to be built"
    )
    return f"The corpus memory of version {version_id} {progress}: try again shortly"


def create_app(config: ServeConfig | None = None, engine: Engine | None = None) -> FastAPI:
    """The app: one ``Server`` (what this process holds), the JSON error shapes, one router per
    concept (LibreTranslate's protocol, the native ``/v1`` API, health and metrics) and the
    middleware that watches every request."""
    server = Server(config or ServeConfig(), engine or default_engine())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        server.start()
        try:
            pairs = await run_in_threadpool(served.list_served)
            server.ensure_loaded([p.version_id for p in pairs])
        except Exception:  # no database yet: /health says so
            log.exception("reading the served versions failed")
        yield
        assert server.batcher is not None
        await server.batcher.stop()

    app = FastAPI(
        title="Translation workbench",
        summary="LibreTranslate-compatible translation with the workbench's stored versions",
        version="1",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    app.state.server = server
    _add_error_handlers(app)
    app.include_router(libretranslate_routes(server))
    app.include_router(native_routes(server))
    app.include_router(operations_routes(server))
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type"],
        max_age=24 * 3600,
    )
    app.add_middleware(Observed, server=server)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error answers ``{"error": message}``, as LibreTranslate's do."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse({"error": f"Invalid request: {where}: {first['msg']}"}, 400)


def libretranslate_routes(server: Server) -> APIRouter:
    """LibreTranslate's protocol: ``/translate``, ``/languages``, ``/frontend/settings``."""
    router = APIRouter(tags=["LibreTranslate"])

    @router.post(
        "/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        openapi_extra=body_schema(TranslateRequest, form=True),
        summary="Translate text(s) with the version served for the pair",
    )
    async def translate(request: Request) -> dict[str, Any]:
        c = server.config
        req = validated(TranslateRequest, await read_fields(request, c.max_body_bytes, c.timeout_s))
        max_chars = await server.authorize(request, req.api_key)
        texts = server.texts(req.q, max_chars)
        if req.format != "text":
            raise ApiError(400, f"{req.format} format is not supported: send plain text")
        version_id = await _call(_served_version, req.source, req.target)
        request.state.version_id = version_id
        # A line is what the model translates: texts are split at line breaks and joined back.
        lines = [t.split("\n") for t in texts]
        sentences = [x for ls in lines for x in ls]
        options = DecodingOptions(beam=c.beam, engine=c.engine)
        results = await server.translate(version_id, sentences, options)
        outputs, start = [], 0
        for ls in lines:
            outputs.append("\n".join(r.text for r in results[start : start + len(ls)]))
            start += len(ls)
        single = isinstance(req.q, str)
        answer: dict[str, Any] = {"translatedText": outputs[0] if single else outputs}
        if req.alternatives:  # the engine returns its best hypothesis only
            answer["alternatives"] = [] if single else [[] for _ in outputs]
        return answer

    @router.get(
        "/languages",
        response_model=list[Language],
        summary="The languages of the served pairs",
    )
    async def languages() -> list[Language]:
        """Public even with ``--require-keys``, as LibreTranslate's ``/languages`` is."""
        pairs = await run_in_threadpool(served.list_served)
        targets: dict[str, list[str]] = {}
        for p in pairs:
            targets.setdefault(p.src_lang, []).append(p.tgt_lang)
        for p in pairs:
            targets.setdefault(p.tgt_lang, [])
        return [
            Language(code=code, name=language_name(code), targets=sorted(t))
            for code, t in sorted(targets.items())
        ]

    @router.get("/frontend/settings", summary="Limits clients show")
    async def frontend_settings() -> dict[str, Any]:
        pairs = await run_in_threadpool(served.list_served)
        source, target = (pairs[0].src_lang, pairs[0].tgt_lang) if pairs else ("", "")
        return {
            "charLimit": server.config.chars_per_request,
            "frontendTimeout": int(server.config.timeout_s * 1000),
            "apiKeys": True,
            "keyRequired": server.config.require_keys,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {
                "source": {"code": source, "name": language_name(source)},
                "target": {"code": target, "name": language_name(target)},
            },
        }

    return router


def native_routes(server: Server) -> APIRouter:
    """The native API: ``/v1/translate``, ``/v1/translate_file``, ``/v1/versions``."""
    router = APIRouter(tags=["native"])

    @router.post(
        "/v1/translate",
        response_model=V1TranslateResponse,
        openapi_extra=body_schema(V1TranslateRequest, form=False),
        summary="Translate with a pinned version (or a pair's served one), any beam, attention "
        "and engine",
    )
    async def v1_translate(request: Request) -> V1TranslateResponse:
        c = server.config
        req = validated(
            V1TranslateRequest, await read_fields(request, c.max_body_bytes, c.timeout_s)
        )
        max_chars = await server.authorize(request, req.api_key)
        texts = server.texts(req.q, max_chars)
        if req.engine not in engines.available_engines():
            raise ApiError(400, f"Invalid request: the {req.engine} engine is not installed here")
        info = await _requested_version(req.version, req.source, req.target)
        request.state.version_id = info.id
        await check_memory_corpus(info, req.memory_corpus, _call)
        if req.memory:
            await _memory_ready(info.id, req.engine, req.memory_corpus)
        results, memory = await translate_remembering(server, info.id, texts, req, _call)
        checks = await _call(check_inputs, info.id, results, status=500)
        return V1TranslateResponse(
            version=await run_in_threadpool(_version_record, info),
            translations=[
                V1Translation(
                    text=r.text,
                    score=r.score,
                    warnings=check.warnings,
                    attention=V1Attention(
                        source_pieces=r.src_pieces,
                        output_pieces=r.out_pieces,
                        weights=[[round(w, 4) for w in row] for row in r.attention.tolist()],
                    )
                    if r.attention is not None
                    else None,
                    **memory_fields(recalled),
                )
                for r, check, recalled in zip(results, checks, memory, strict=True)
            ],
        )

    router.include_router(file_routes(server, _call, _requested_version))

    @router.get(
        "/v1/versions",
        response_model=list[V1Version],
        summary="Every stored version, and whether it is served",
    )
    async def v1_versions(request: Request) -> list[V1Version]:
        await server.authorize_read(request)

        def read() -> list[V1Version]:
            served_ids = {p.version_id for p in served.list_served()}
            return [
                V1Version(
                    id=v.id,
                    name=v.name,
                    src_lang=v.src_lang,
                    tgt_lang=v.tgt_lang,
                    served=v.id in served_ids,
                )
                for v in registry.list_versions()
            ]

        return await run_in_threadpool(read)

    return router


def operations_routes(server: Server) -> APIRouter:
    """What operators and load balancers read: ``/health`` and ``/metrics``."""
    router = APIRouter(tags=["operations"])

    @router.get("/health", summary="Ready once every served version loaded")
    async def health() -> JSONResponse:
        pairs = await run_in_threadpool(served.list_served)
        server.ensure_loaded([p.version_id for p in pairs])
        listed = [
            {"source": p.src_lang, "target": p.tgt_lang, "version": p.version_id} for p in pairs
        ]
        waiting = [p.version_id for p in pairs if p.version_id not in server.loaded]
        errors = [server.load_errors[v] for v in waiting if v in server.load_errors]
        if errors:
            body = {"status": "error", "error": "; ".join(errors), "served": listed}
            return JSONResponse(body, 503)
        if waiting:
            message = f"loading version(s) {', '.join(map(str, waiting))}"
            return JSONResponse({"status": "loading", "error": message, "served": listed}, 503)
        return JSONResponse({"status": "ok", "served": listed})

    @router.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus text format",
    )
    async def metrics(request: Request) -> PlainTextResponse:
        await server.authorize_read(request)
        assert server.batcher is not None
        return PlainTextResponse(
            server.metrics.render(server.batcher.queued_sentences),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    return router


def app_from_environment() -> FastAPI:
    """The app of a ``workbench serve`` process (uvicorn's factory; see ``entry``)."""
    raw = settings.serve_config()
    return create_app(ServeConfig.from_json(raw) if raw else ServeConfig())
