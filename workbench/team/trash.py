"""The trash: a deleted corpus is hidden for ``TRASH_DAYS`` before it is really removed.

``trash_corpus`` (inside the deleting service's transaction) hides the corpus with its pairs,
terms and pool untouched and frees its name for reuse (``deleted_name`` keeps it);
``restore_corpus`` brings it back as it was; ``sweep_trash`` removes for good the corpora
trashed longer ago than ``TRASH_DAYS`` (the app and the worker run it when they start).
Each of these is a recorded change (``workbench.team.history``); removal for good cannot be
undone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from db.tables import Corpus, Pair, utcnow
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope
from workbench.team import history
from workbench.team.access import Permission, require

TRASH_DAYS = 30
_TRASH_NAME = "(deleted #{id}) {name}"  # unique by the id; the real name is free again


@dataclass(frozen=True)
class TrashedCorpus:
    id: int
    name: str  # the name it had
    src_lang: str
    tgt_lang: str
    pair_count: int
    deleted_at: datetime
    removed_after: datetime  # when the sweep removes it for good


def real_name(corpus: Corpus) -> str:
    """The name a corpus goes by: in the trash, the one it had (``name`` then holds the trash
    name, "(deleted #1) clinic"), which a restore gives back and a version registered
    meanwhile is named from."""
    return corpus.deleted_name or corpus.name


def trash_corpus(session: Session, corpus: Corpus) -> None:
    """Move ``corpus`` to the trash in the caller's transaction (recorded, undoable)."""
    before = history.capture(session, Corpus, [corpus.id])
    name = corpus.name
    corpus.deleted_name = name
    corpus.name = _TRASH_NAME.format(id=corpus.id, name=name)[:200]
    corpus.deleted_at = utcnow()
    session.flush()
    after = history.capture(session, Corpus, [corpus.id])
    history.record(
        session,
        "delete",
        history.diff(Corpus, before, after),
        corpus_id=corpus.id,
        summary=f"deleted corpus {name!r} (to the trash for {TRASH_DAYS} days)",
    )


def list_trash() -> list[TrashedCorpus]:
    """The corpora in the trash, most recently deleted first, with their pair counts."""
    counts = select(Pair.corpus_id, func.count().label("n")).group_by(Pair.corpus_id).subquery()
    stmt = (
        select(Corpus, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.corpus_id == Corpus.id)
        .where(Corpus.deleted_at.is_not(None))
        .order_by(Corpus.deleted_at.desc())
    )
    with session_scope() as s:
        return [
            TrashedCorpus(
                c.id,
                real_name(c),
                c.src_lang,
                c.tgt_lang,
                int(n),
                c.deleted_at,
                c.deleted_at + timedelta(days=TRASH_DAYS),
            )
            for c, n in s.execute(stmt)
        ]


def restore_corpus(corpus_id: int) -> str:
    """Take a corpus out of the trash under its old name; returns the name. Refused while
    another corpus has that name (rename one of them first)."""
    require(Permission.EDIT)
    with session_scope() as s:
        corpus = s.get(Corpus, int(corpus_id))
        if corpus is None or corpus.deleted_at is None:
            raise WorkbenchError(N_("corpus #{id} is not in the trash"), id=corpus_id)
        name = real_name(corpus)
        if s.scalar(select(Corpus.id).where(Corpus.name == name)) is not None:
            raise WorkbenchError(
                N_("a corpus named {name!r} exists: rename it before restoring this one"),
                name=name,
            )
        before = history.capture(s, Corpus, [corpus.id])
        corpus.name, corpus.deleted_name, corpus.deleted_at = name, None, None
        s.flush()
        after = history.capture(s, Corpus, [corpus.id])
        history.record(
            s,
            "restore",
            history.diff(Corpus, before, after),
            corpus_id=corpus.id,
            summary=f"restored corpus {name!r} from the trash",
        )
        return name


def sweep_trash(now: datetime | None = None) -> int:
    """Remove for good (pairs, terms and pool by cascade) the corpora trashed more than
    ``TRASH_DAYS`` before ``now``; returns how many. One transaction per corpus."""
    cutoff = (now or utcnow()) - timedelta(days=TRASH_DAYS)
    with session_scope() as s:
        doomed = list(s.scalars(select(Corpus.id).where(Corpus.deleted_at < cutoff)))
    removed = 0
    for corpus_id in doomed:
        with session_scope() as s:
            before = history.capture(s, Corpus, [corpus_id])
            if not before or before[corpus_id]["deleted_at"] is None:
                continue  # restored meanwhile
            s.execute(delete(Corpus).where(Corpus.id == corpus_id))
            name = before[corpus_id]["deleted_name"]
            history.record(
                s,
                "purge",
                history.diff(Corpus, before, {}),
                corpus_id=corpus_id,
                summary=f"removed corpus {name!r} from the trash for good",
                reversible=False,
                actor=history.SYSTEM_ACTOR,
            )
            removed += 1
    return removed
