"""API keys for the HTTP API: created and revoked in the UI or the CLI, stored hashed.

A key is ``wbk_`` + 32 random URL-safe characters, shown once when it is created. The
database keeps its sha256 digest (a random key of that length needs no salt: nobody can
guess it from the digest) and its first characters, so a person can tell keys apart without
the key. Each key may carry its own limits; None means the server's default. A key is never
written to a log, a metric label or an error message. Each key holds a role (``key_actor``):
a request acts with it, so a viewer's key can translate but no write service lets it write.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from db.tables import ApiKey, Role, utcnow
from workbench.corpus.text_rules import validate_name
from workbench.errors import WorkbenchError
from workbench.messages import N_, MessageId
from workbench.storage import get_row, session_scope
from workbench.team.access import Actor, Permission, parse_role, require

KEY_PREFIX = "wbk_"
SHOWN_CHARACTERS = 8  # of the key, kept to tell keys apart ("wbk_Ab3x…")
MAX_REQUESTS_PER_MINUTE = 1_000_000
MAX_CHARS_PER_REQUEST = 10_000_000


@dataclass(frozen=True)
class ApiKeyInfo:
    id: int
    name: str
    prefix: str  # the key's first characters
    requests_per_minute: int | None  # None: the server's default
    chars_per_request: int | None
    created_at: datetime
    revoked_at: datetime | None
    role: Role = Role.VIEWER

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def shown(self) -> str:
        """How a page or a listing names the key: its first characters."""
        return f"{self.prefix}…"


@dataclass(frozen=True)
class NewKey:
    info: ApiKeyInfo
    key: str  # the secret: shown once, never stored


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _to_info(row: ApiKey) -> ApiKeyInfo:
    return ApiKeyInfo(
        row.id,
        row.name,
        row.prefix,
        row.requests_per_minute,
        row.chars_per_request,
        row.created_at,
        row.revoked_at,
        Role(row.role),
    )


def _limit(value: int | None, high: int, refusal: MessageId) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise WorkbenchError(refusal, high=high, value=value)
    return value


def create_key(
    name: str,
    requests_per_minute: int | None = None,
    chars_per_request: int | None = None,
    role: Role | str = Role.VIEWER,
) -> NewKey:
    """A new active key; the returned ``key`` is the only time the secret is seen."""
    require(Permission.API_KEYS)
    name = validate_name(name, "key name")
    key_role = parse_role(role)
    rpm = _limit(
        requests_per_minute,
        MAX_REQUESTS_PER_MINUTE,
        N_("requests per minute must be a whole number from 1 to {high:,}, got {value!r}"),
    )
    chars = _limit(
        chars_per_request,
        MAX_CHARS_PER_REQUEST,
        N_("characters per request must be a whole number from 1 to {high:,}, got {value!r}"),
    )
    key = KEY_PREFIX + secrets.token_urlsafe(24)
    with session_scope() as s:
        row = ApiKey(
            name=name,
            key_hash=digest(key),
            prefix=key[:SHOWN_CHARACTERS],
            requests_per_minute=rpm,
            chars_per_request=chars,
            role=key_role.value,
        )
        s.add(row)
        s.flush()
        return NewKey(_to_info(row), key)


def revoke_key(key_id: int) -> None:
    """The key stops working at once (for every server reading this database)."""
    require(Permission.API_KEYS)
    with session_scope() as s:
        row = get_row(s, ApiKey, key_id, N_("API key {id} does not exist."))
        if row.revoked_at is not None:
            raise WorkbenchError(N_("API key {id} is already revoked."), id=key_id)
        row.revoked_at = utcnow()


def list_keys() -> list[ApiKeyInfo]:
    """Every key, revoked ones too, newest first."""
    with session_scope() as s:
        return [_to_info(r) for r in s.scalars(select(ApiKey).order_by(ApiKey.id.desc()))]


def find_active_key(key: str) -> ApiKeyInfo | None:
    """The active key with this secret, or None (unknown or revoked)."""
    if not key.startswith(KEY_PREFIX):
        return None
    with session_scope() as s:
        row = s.scalar(
            select(ApiKey).where(ApiKey.key_hash == digest(key), ApiKey.revoked_at.is_(None))
        )
        return _to_info(row) if row is not None else None


def key_actor(info: ApiKeyInfo) -> Actor:
    """Who a request with this key acts as: the key (named by its first characters), with
    its role."""
    return Actor(f"API key {info.shown}", info.role)
