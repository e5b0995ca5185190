"""Which version answers HTTP requests for a language pair.

Each pair (source, target) has at most one served version, chosen on the Models page or with
``workbench serve-version ID``. The server reads the choice for every request, so a switch
takes effect at once without a restart; requests already gathered for the old version finish
with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select

from db.tables import ModelVersion, ServedVersion, utcnow
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.models.registry import get_version
from workbench.serving.config import DEFAULT_HOST, DEFAULT_PORT
from workbench.storage import session_scope
from workbench.team.access import Permission, require


@dataclass(frozen=True)
class ServedPair:
    src_lang: str
    tgt_lang: str
    version_id: int
    version_name: str
    since: datetime

    @property
    def pair(self) -> str:
        return f"{self.src_lang}→{self.tgt_lang}"


def serve_version(version_id: int) -> int | None:
    """Make the version answer for its language pair; returns the version it replaces, if
    any (None also when it was already served)."""
    require(Permission.SERVE)
    info = get_version(version_id)
    with session_scope() as s:
        row = s.get(ServedVersion, (info.src_lang, info.tgt_lang), with_for_update=True)
        if row is None:
            s.add(ServedVersion(src_lang=info.src_lang, tgt_lang=info.tgt_lang, version_id=info.id))
            return None
        previous = row.version_id
        if previous != info.id:
            row.version_id, row.since = info.id, utcnow()
        return previous if previous != info.id else None


def stop_serving(version_id: int) -> None:
    """Its language pair is no longer served (until a version is chosen for it again)."""
    require(Permission.SERVE)
    with session_scope() as s:
        gone = s.execute(delete(ServedVersion).where(ServedVersion.version_id == version_id))
        if not gone.rowcount:
            raise WorkbenchError(N_("Model version {id} is not served."), id=version_id)


def list_served() -> list[ServedPair]:
    """Every served pair, by source then target language."""
    with session_scope() as s:
        rows = s.execute(
            select(ServedVersion, ModelVersion.name)
            .join(ModelVersion, ModelVersion.id == ServedVersion.version_id)
            .order_by(ServedVersion.src_lang, ServedVersion.tgt_lang)
        ).all()
        return [ServedPair(r.src_lang, r.tgt_lang, r.version_id, name, r.since) for r, name in rows]


def served_version_id(src_lang: str, tgt_lang: str) -> int:
    """The version that answers for source → target (codes compared without case)."""
    with session_scope() as s:
        version_id = s.scalar(
            select(ServedVersion.version_id).where(
                func.lower(ServedVersion.src_lang) == src_lang.lower(),
                func.lower(ServedVersion.tgt_lang) == tgt_lang.lower(),
            )
        )
    if version_id is None:
        raise WorkbenchError(
            N_(
                "No version is served for {source}→{target}: choose one on the Models page "
                "or with `python -m workbench serve-version ID`."
            ),
            source=src_lang,
            target=tgt_lang,
        )
    return version_id


def serving_of(version_id: int) -> ServedPair | None:
    """The pair this version answers for, or None when it is not served."""
    return next((p for p in list_served() if p.version_id == version_id), None)


def base_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    return f"http://{host}:{port}"


def curl_example(src_lang: str, tgt_lang: str, url: str | None = None) -> str:
    """The request that translates with the version served for this pair (LibreTranslate's
    protocol, as in the README)."""
    body = json.dumps({"q": "YOUR TEXT", "source": src_lang, "target": tgt_lang})
    return (
        f"curl -s {url or base_url()}/translate -H 'Content-Type: application/json' \\\n"
        f"  -d '{body}'"
    )
