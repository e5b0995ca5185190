"""Concurrent requests for one version share decoder batches.

Requests are queued per (version, decoding options: beam, attention, engine, quantization,
kNN-MT memory). A single decoding thread takes the queue whose first request is oldest; when
it was idle it first waits a short window for more requests to arrive, then decodes whole
requests together up to a sentence and character cap.
While it decodes, new requests queue up and form the next batch, so under load every batch is
as large as the traffic allows and no request waits for more than one batch ahead of it.
Requests are never split, and a request whose caller gave up (timeout) is skipped.

What decodes is the ``Engine``: the translation service and its loader. The service itself
offers the decoders of ``workbench.models.engines`` (handwritten, CTranslate2): a request names one,
and only requests for the same one share a batch.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from core_model.translator import TranslationResult
from workbench.memory import recall
from workbench.models import translation
from workbench.models.engines import ENGINES
from workbench.models.translation import DecodingOptions

# (version_id, texts, options) -> one result per text
TranslateFn = Callable[[int, list[str], DecodingOptions], list[TranslationResult]]


@dataclass(frozen=True)
class Engine:
    """How batches are decoded: ``translate(version_id, texts, options)`` (one result per
    text, in order; ``options`` a ``workbench.models.translation.DecodingOptions``) and
    ``load(version_id, engine)`` (loads the weights once per process)."""

    translate: TranslateFn
    load: Callable[[int, str], Any]


def default_engine() -> Engine:
    """The workbench's translation service: the handwritten Transformer, or CTranslate2."""
    return Engine(translate=recall.decode, load=translation.load_for)


class Busy(Exception):
    """Too many sentences are already waiting: the request is refused, not queued."""


@dataclass(frozen=True)
class BatchKey:
    version_id: int
    options: DecodingOptions


@dataclass
class _Request:
    texts: list[str]
    chars: int
    future: asyncio.Future[list[TranslationResult]]
    arrived: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BatchDone:
    """What the metrics hear after each decoder call."""

    version_id: int
    requests: int
    sentences: int
    seconds: float


class Batcher:
    """Gathers ``translate`` calls from the event loop into decoder batches (see the module
    docstring). ``batching=False`` decodes each request on its own, in arrival order."""

    def __init__(
        self,
        engine: Engine,
        *,
        batching: bool = True,
        window_s: float = 0.005,
        max_sentences: int = 64,
        max_chars: int = 16_000,
        max_queued_sentences: int = 4_096,
        threads: int = 1,
        on_batch: Callable[[BatchDone], None] | None = None,
    ) -> None:
        self.engine = engine
        self.batching = batching
        self.window_s = window_s if batching else 0.0
        self.max_sentences = max_sentences if batching else 1
        self.max_chars = max_chars
        self.max_queued_sentences = max_queued_sentences
        self.on_batch = on_batch
        self.queued_sentences = 0
        self._queues: dict[BatchKey, deque[_Request]] = {}
        self._wakeup = asyncio.Event()
        # One thread decodes, with `threads` CPU threads of torch's own (the CTranslate2
        # engine loads with torch's count too). Few is the default: on a small or busy
        # machine torch's threads wait for each other whenever one is descheduled, and a
        # small model gains little from more; --workers adds processes.
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="decode",
            initializer=torch.set_num_threads,
            initargs=(threads,),
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def load(self, version_id: int, engine: str = ENGINES[0]) -> None:
        """Load a version's weights for `engine` on the decoding thread (so loading never
        races a batch, and a CTranslate2 export happens before the first request)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.engine.load, version_id, engine)

    async def translate(
        self, version_id: int, texts: list[str], options: DecodingOptions
    ) -> list[TranslationResult]:
        """One result per text, in order, decoded together with other waiting requests."""
        if self.queued_sentences + len(texts) > self.max_queued_sentences:
            raise Busy(f"{self.queued_sentences:,} sentences are waiting to be translated")
        request = _Request(texts, sum(map(len, texts)), asyncio.get_running_loop().create_future())
        key = BatchKey(version_id, options)
        self._queues.setdefault(key, deque()).append(request)
        self.queued_sentences += len(texts)
        self._wakeup.set()
        return await request.future

    # ------------------------------------------------------------------------ the runner

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while key := self._oldest_key():
                await self._gather(key)
                batch = self._take(key)
                if batch:
                    await self._decode(key, batch)

    def _oldest_key(self) -> BatchKey | None:
        for key in [k for k, q in self._queues.items() if not q]:
            del self._queues[key]
        if not self._queues:
            return None
        return min(self._queues, key=lambda k: self._queues[k][0].arrived)

    async def _gather(self, key: BatchKey) -> None:
        """Wait out the rest of the window since the first request arrived, unless the
        batch is already full."""
        queue = self._queues[key]
        wait = queue[0].arrived + self.window_s - time.monotonic()
        if wait > 0 and sum(len(r.texts) for r in queue) < self.max_sentences:
            await asyncio.sleep(wait)

    def _take(self, key: BatchKey) -> list[_Request]:
        """Whole requests from the front of the queue up to the caps (at least one)."""
        queue = self._queues[key]
        batch: list[_Request] = []
        sentences = chars = 0
        while queue:
            request = queue[0]
            if request.future.done():  # its caller gave up
                queue.popleft()
                self.queued_sentences -= len(request.texts)
                continue
            over = (
                sentences + len(request.texts) > self.max_sentences
                or chars + request.chars > self.max_chars
            )
            if batch and over:
                break
            queue.popleft()
            batch.append(request)
            sentences += len(request.texts)
            chars += request.chars
        return batch

    async def _decode(self, key: BatchKey, batch: list[_Request]) -> None:
        texts = [t for r in batch for t in r.texts]
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            results = await loop.run_in_executor(
                self._executor,
                self.engine.translate,
                key.version_id,
                texts,
                key.options,
            )
        except Exception as exc:  # every request of the batch hears it; the runner goes on
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        finally:
            self.queued_sentences -= len(texts)
        start = 0
        for request in batch:
            end = start + len(request.texts)
            if not request.future.done():
                request.future.set_result(results[start:end])
            start = end
        if self.on_batch is not None:
            self.on_batch(
                BatchDone(key.version_id, len(batch), len(texts), time.monotonic() - started)
            )
