"""What one HTTP server process holds (``Server``: its config, decoder batcher, rate limits,
metrics and which versions are loaded) and how it watches every request (``Observed``: times,
counts and logs it, and turns an unexpected failure into a JSON 500). The routes that use them
are ``http_app``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from core_model.translator import TranslationResult
from workbench.errors import PermissionDenied, WorkbenchError
from workbench.models.translation import DecodingOptions
from workbench.serving import api_keys
from workbench.serving.batching import Batcher, Busy, Engine
from workbench.serving.config import ServeConfig
from workbench.serving.limits import RateLimiter
from workbench.serving.metrics import Metrics
from workbench.serving.protocol import (
    ApiError,
    Texts,
)
from workbench.team import access
from workbench.team.access import Permission

log = logging.getLogger("workbench.serving")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


class Server:
    """What one server process holds: its config, batcher, limits, metrics and readiness."""

    def __init__(self, config: ServeConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.metrics = Metrics()
        self.limiter = RateLimiter()
        self.batcher: Batcher | None = None
        self.loaded: set[int] = set()
        self.load_errors: dict[int, str] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}

    def start(self) -> None:
        c = self.config
        self.batcher = Batcher(
            self.engine,
            batching=c.batching,
            window_s=c.batch_window_ms / 1000,
            max_sentences=c.max_batch_sentences,
            max_chars=c.max_batch_chars,
            max_queued_sentences=c.max_queued_sentences,
            threads=c.threads,
            on_batch=self.metrics.observe_batch,
        )
        self.batcher.start()

    # ------------------------------------------------------------------- readiness

    def ensure_loaded(self, version_ids: list[int]) -> None:
        """Start loading the versions not loaded yet (each once at a time; a failed one is
        tried again on the next call)."""
        for version_id in version_ids:
            if version_id not in self.loaded and version_id not in self._loading:
                task = asyncio.get_running_loop().create_task(self._load(version_id))
                self._loading[version_id] = task

    async def _load(self, version_id: int) -> None:
        assert self.batcher is not None
        try:
            await self.batcher.load(version_id, self.config.engine)
            self.loaded.add(version_id)
            self.load_errors.pop(version_id, None)
        except WorkbenchError as exc:
            self.load_errors[version_id] = str(exc)
        except Exception as exc:
            log.exception("loading version %s failed", version_id)
            self.load_errors[version_id] = f"version {version_id}: {type(exc).__name__}: {exc}"
        finally:
            self._loading.pop(version_id, None)

    # --------------------------------------------------------------------- requests

    async def authorize(self, request: Request, key: str | None) -> int:
        """Check the key (``identify``) and the client's rate; returns the characters this
        request may hold."""
        info = await self.identify(key)
        per_minute = (info and info.requests_per_minute) or self.config.requests_per_minute
        if per_minute:
            host = request.client.host if request.client else "unknown"
            client = f"key {info.id}" if info else f"address {host}"
            retry = self.limiter.allow(client, per_minute)
            if retry is not None:
                raise ApiError(
                    429,
                    f"Slowdown: at most {per_minute} requests per minute",
                    {"Retry-After": str(max(1, math.ceil(retry)))},
                )
        return (info and info.chars_per_request) or self.config.chars_per_request

    async def identify(self, key: str | None) -> api_keys.ApiKeyInfo | None:
        """The request's key, checked; the rest of the request acts with its role (without a
        key, as nobody: reading and translating only, every write service refuses). With
        ``--require-keys`` a key is required and must hold ``Permission.READ`` (400 without
        one, as LibreTranslate answers; 403 for a key that is unknown, revoked or may not
        read)."""
        info = None
        if key:
            info = await run_in_threadpool(api_keys.find_active_key, key)
            if info is None:
                raise ApiError(403, "Invalid API key")
        elif self.config.require_keys:
            raise ApiError(
                400, "An API key is required (api_key): ask this server's operator for one"
            )
        access.act_in_this_task(api_keys.key_actor(info) if info else None)
        if self.config.require_keys:
            try:
                access.require(Permission.READ)
            except PermissionDenied as exc:
                raise ApiError(403, str(exc)) from None
        return info

    async def authorize_read(self, request: Request) -> None:
        """A GET route that shows stored data or the server's traffic: with
        ``--require-keys``, a key that may read (``?api_key=``, ``identify``); without, open
        to whoever reaches the server, as before."""
        if self.config.require_keys:
            await self.identify(request.query_params.get("api_key"))

    def texts(self, q: Texts, max_chars: int) -> list[str]:
        texts = [q] if isinstance(q, str) else q
        if not texts or not any(texts):
            raise ApiError(400, "Invalid request: q is empty: give a text to translate")
        if len(texts) > self.config.max_texts:
            raise ApiError(
                400,
                f"Invalid request: {len(texts):,} texts, at most {self.config.max_texts:,} "
                "in one request",
            )
        if any("\ud800" <= ch <= "\udfff" for t in texts for ch in t):
            raise ApiError(400, "Invalid request: q is not valid Unicode text")
        within_limit(texts, max_chars)
        return texts

    async def translate(
        self, version_id: int, texts: list[str], options: DecodingOptions
    ) -> list[TranslationResult]:
        assert self.batcher is not None
        try:
            return await asyncio.wait_for(
                self.batcher.translate(version_id, texts, options),
                self.config.timeout_s,
            )
        except Busy as exc:
            raise ApiError(503, f"Busy: {exc}; try again shortly", {"Retry-After": "1"}) from None
        except TimeoutError:
            raise ApiError(
                503, f"No translation within {self.config.timeout_s:g} s: the server is overloaded"
            ) from None
        except WorkbenchError as exc:
            raise ApiError(500, f"Cannot translate text: {exc}") from None


def within_limit(texts: list[str], max_chars: int) -> None:
    """Refuse (400) texts that hold more than the characters a request may (``authorize``):
    ``/translate``'s and ``/v1/translate``'s texts, the text runs a ``/v1/translate_file``
    asks to translate."""
    size = sum(map(len, texts))
    if size > max_chars:
        raise ApiError(
            400,
            f"Invalid request: request ({size:,} characters) exceeds the limit of "
            f"{max_chars:,} characters",
        )


class Observed:
    """Times and counts every request, logs one line without the query (where a key may be)
    and answers an unexpected failure with a JSON 500 instead of a dropped connection."""

    def __init__(self, app: ASGIApp, server: Server) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500
        response_started = False

        async def observe_send(message: dict[str, Any]) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status, response_started = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, observe_send)
        except Exception:
            log.exception("internal error on %s %s", scope["method"], scope["path"])
            if not response_started:
                body = b'{"error":"Internal error: the server could not answer this request"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.monotonic() - started
            route = scope.get("route")
            path = getattr(route, "path", "other")
            version = scope.get("state", {}).get("version_id")
            self.server.metrics.observe_request(path, version, status, seconds)
            client = scope.get("client") or ("-", 0)
            log.info(
                '%s "%s %s" %d %.0f ms',
                client[0],
                scope["method"],
                scope["path"],
                status,
                seconds * 1000,
            )
