"""How a server answers: key requirement, limits, timeouts and batching.

One ``ServeConfig`` per server, built by ``workbench serve`` from its options. Worker
processes (``--workers N``) receive it through the environment (``settings.serve_config``),
so every process of one server answers alike.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from workbench.models.engines import ENGINES, MAX_BEAM, available_engines

DEFAULT_HOST = "127.0.0.1"  # with keys off, only this machine can reach the server
DEFAULT_PORT = 5000  # LibreTranslate's


@dataclass(frozen=True)
class ServeConfig:
    # Translations need a valid api_key, and GET /v1/versions and /metrics one that may read.
    require_keys: bool = False
    # Requests a client (a key, else an address) may make per minute; a key's own limit wins.
    # None: no limit.
    requests_per_minute: int | None = None
    chars_per_request: int = 5_000  # all texts of one request together; a key's own limit wins
    max_texts: int = 128  # texts in one request (q as a list)
    max_body_bytes: int = 256 * 1024
    timeout_s: float = 60.0  # reading a body, and waiting for a translation
    beam: int = 1  # the beam of the LibreTranslate endpoint (/v1 chooses its own)
    engine: str = ENGINES[0]  # the decoder of the LibreTranslate endpoint (/v1 chooses its own)
    threads: int = 1  # torch's CPU threads for decoding (see batching.Batcher)
    batching: bool = True  # gather concurrent requests into shared decoder batches
    batch_window_ms: float = 5.0  # how long an idle decoder waits for more requests
    max_batch_sentences: int = 64
    # A stand-in for a token cap: the batcher runs before tokenization (one CJK character is
    # about one piece; Latin text has ~4 characters a piece, so the cap is conservative there).
    max_batch_chars: int = 16_000
    max_queued_sentences: int = 4_096  # beyond this a request is refused as busy (503)

    def __post_init__(self) -> None:
        if not 1 <= self.beam <= MAX_BEAM:
            raise ValueError(f"beam must be between 1 and {MAX_BEAM}")
        if self.engine not in available_engines():
            raise ValueError(
                f"engine {self.engine!r} is not available here; choose one of "
                + ", ".join(available_engines())
            )
        for name in (
            "chars_per_request",
            "max_texts",
            "max_body_bytes",
            "max_batch_sentences",
            "threads",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.timeout_s <= 0 or self.batch_window_ms < 0:
            raise ValueError("timeouts must be positive and the window not negative")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})
