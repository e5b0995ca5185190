"""Cleaning a corpus on demand, and undoing it: the rules of ``cleaning`` applied to
the pairs a corpus holds.

``preview_cleanup`` counts and shows what would change and writes nothing;
``apply_cleanup`` removes and converts in one transaction and keeps every pair it touched as
it was (``cleanup_changes``); ``undo_cleanup`` puts them back, also in one transaction.
A converted pair whose new text another pair already has is removed as a duplicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from db.tables import Cleanup, CleanupChange, Pair, utcnow
from workbench.corpus import cleaning
from workbench.corpus.cleaning import Cleaner, CleaningOptions, Verdict
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.text_rules import pair_hash
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.storage import get_row, session_scope
from workbench.team import history
from workbench.team.access import Permission, require

PREVIEW_SAMPLE = 20
# What a clean-up change keeps of a pair, as (Pair's column, CleanupChange's column):
# ``apply_cleanup`` copies them one way and ``undo_cleanup`` back. The pair's created_at is
# kept too, but a change recorded before it was (None) restores the pair as created now.
_KEPT_COLUMNS = {
    "id": "pair_id",
    "source": "source",
    "target": "target",
    "split": "split",
    "note": "note",
    "content_hash": "content_hash",
}


@dataclass(frozen=True)
class CleanupChangeView:
    pair_id: int
    reason: str
    source: str
    target: str
    new_source: str | None  # None: removed
    new_target: str | None
    detail: str = ""


@dataclass(frozen=True)
class CleanupPreview:
    """What a clean-up would do: pairs per reason and the first few of them."""

    counts: dict[str, int]
    sample: list[CleanupChangeView]
    pairs: int  # pairs looked at
    unchecked_languages: list[str] = field(default_factory=list)

    @property
    def removed(self) -> int:
        return sum(n for reason, n in self.counts.items() if reason in cleaning.DROP_REASONS)

    @property
    def changed(self) -> int:
        return self.counts.get("converted", 0)


@dataclass(frozen=True)
class CleanupInfo:
    id: int
    corpus_id: int
    options: dict[str, Any]
    summary: dict[str, int]
    created_at: datetime
    undone_at: datetime | None


@dataclass(frozen=True)
class UndoResult:
    restored: int  # removed pairs put back
    reverted: int  # changed pairs given back their text
    skipped: int  # changes that could not be undone (the pair changed or came back since)


def _decisions(s: Session, corpus_id: int, cleaner: Cleaner) -> Iterator[tuple[Pair, Verdict]]:
    """Every pair the rules would drop or change, in id order; a converted pair whose new
    text equals another pair's (or an earlier converted one's) becomes a duplicate."""
    taken: set[str] = set(s.scalars(select(Pair.content_hash).where(Pair.corpus_id == corpus_id)))
    result = s.execute(
        select(Pair)
        .where(Pair.corpus_id == corpus_id)
        .order_by(Pair.id)
        .execution_options(yield_per=2000)
    )
    for (pair,) in result:
        verdict = cleaner.check(pair.source, pair.target)
        if verdict.reason is None:
            continue
        if verdict.reason == "converted":
            new_hash = pair_hash(verdict.source, verdict.target)
            if new_hash in taken:
                detail = Message(N_("after conversion"))
                verdict = Verdict("duplicate", pair.source, pair.target, detail)
            else:
                taken.add(new_hash)
        yield pair, verdict


def _view(pair: Pair, verdict: Verdict) -> CleanupChangeView:
    kept = not verdict.dropped
    return CleanupChangeView(
        pair.id,
        verdict.reason or "",
        pair.source,
        pair.target,
        verdict.source if kept else None,
        verdict.target if kept else None,
        verdict.detail,
    )


def preview_cleanup(
    corpus_id: CorpusRef, options: CleaningOptions, sample: int = PREVIEW_SAMPLE
) -> CleanupPreview:
    """What ``apply_cleanup`` would remove and change; writes nothing."""
    with session_scope() as s:
        corpus = find(s, corpus_id)
        cleaner = Cleaner(options, corpus.src_lang, corpus.tgt_lang)
        counts: Counter[str] = Counter()
        shown: list[CleanupChangeView] = []
        for pair, verdict in _decisions(s, corpus.id, cleaner):
            counts[verdict.reason or ""] += 1
            if len(shown) < sample:
                shown.append(_view(pair, verdict))
        total = s.scalar(select(func.count()).where(Pair.corpus_id == corpus.id)) or 0
    return CleanupPreview(dict(counts), shown, total, cleaner.unchecked_languages)


def apply_cleanup(corpus_id: CorpusRef, options: CleaningOptions) -> CleanupInfo:
    """Remove and change what the preview showed, in one transaction, keeping every touched
    pair as it was so that ``undo_cleanup`` can put it back."""
    require(Permission.EDIT)
    if not options.active:
        raise WorkbenchError(N_("Choose at least one clean-up option first."))
    with session_scope() as s:
        corpus = find(s, corpus_id)
        cleaner = Cleaner(options, corpus.src_lang, corpus.tgt_lang)
        decisions = list(_decisions(s, corpus.id, cleaner))
        counts = Counter(v.reason or "" for _, v in decisions)
        cleanup = Cleanup(corpus_id=corpus.id, options=options.as_dict(), summary=dict(counts))
        s.add(cleanup)
        s.flush()
        changes, removed, converted = [], [], []
        for pair, verdict in decisions:
            dropped = verdict.dropped
            new_hash = None if dropped else pair_hash(verdict.source, verdict.target)
            changes.append(
                {
                    "cleanup_id": cleanup.id,
                    "action": "removed" if dropped else "changed",
                    "reason": verdict.reason,
                    "pair_created_at": pair.created_at,
                    "new_hash": new_hash,
                    **{saved: getattr(pair, column) for column, saved in _KEPT_COLUMNS.items()},
                }
            )
            if dropped:
                removed.append(pair.id)
            else:
                converted.append((pair.id, verdict.source, verdict.target, new_hash))
        if changes:
            s.execute(CleanupChange.__table__.insert(), changes)
        touched = [pair.id for pair, _verdict in decisions]
        before = history.capture(s, Pair, touched)
        for start in range(0, len(removed), 900):
            s.execute(delete(Pair).where(Pair.id.in_(removed[start : start + 900])))
        now = utcnow()
        for pid, source, target, new_hash in converted:
            s.execute(
                update(Pair)
                .where(Pair.id == pid)
                .values(source=source, target=target, content_hash=new_hash, updated_at=now)
            )
        after = history.capture(s, Pair, touched)
        summary = f"clean-up #{cleanup.id}: {len(removed)} removed, {len(converted)} changed"
        history.record(
            s, "cleanup", history.diff(Pair, before, after), corpus_id=corpus.id, summary=summary
        )
        return _info(cleanup)


def undo_cleanup(cleanup_id: int) -> UndoResult:
    """Put back what a clean-up removed and give changed pairs their text again, in one
    transaction. A pair edited since, or whose old text another pair now holds, is left as
    it is (counted as skipped)."""
    require(Permission.EDIT)
    with session_scope() as s:
        cleanup = get_row(s, Cleanup, cleanup_id, N_("Clean-up {id} does not exist."))
        if cleanup.undone_at is not None:
            raise WorkbenchError(N_("Clean-up {id} was already undone."), id=cleanup_id)
        changes = s.scalars(
            select(CleanupChange).where(CleanupChange.cleanup_id == cleanup.id)
        ).all()
        taken = set(s.scalars(select(Pair.content_hash).where(Pair.corpus_id == cleanup.corpus_id)))
        before = history.capture(s, Pair, [c.pair_id for c in changes])
        restored = reverted = skipped = 0
        now = utcnow()
        for change in changes:
            if change.action == "removed":
                if change.content_hash in taken or s.get(Pair, change.pair_id) is not None:
                    skipped += 1
                    continue
                kept = {column: getattr(change, saved) for column, saved in _KEPT_COLUMNS.items()}
                created_at = change.pair_created_at or now
                s.add(
                    Pair(**kept, corpus_id=cleanup.corpus_id, created_at=created_at, updated_at=now)
                )
                taken.add(change.content_hash)
                restored += 1
            else:
                pair = s.get(Pair, change.pair_id)
                if (
                    pair is None
                    or pair.content_hash != change.new_hash
                    or (change.content_hash in taken)
                ):
                    skipped += 1
                    continue
                taken.discard(pair.content_hash)
                pair.source, pair.target = change.source, change.target
                pair.content_hash, pair.updated_at = change.content_hash, now
                taken.add(change.content_hash)
                reverted += 1
            s.flush()
        cleanup.undone_at = now
        after = history.capture(s, Pair, [c.pair_id for c in changes])
        history.record(
            s,
            "cleanup undo",
            history.diff(Pair, before, after),
            corpus_id=cleanup.corpus_id,
            summary=f"clean-up #{cleanup.id} undone: {restored} restored, {reverted} reverted",
        )
    return UndoResult(restored, reverted, skipped)


def list_cleanups(corpus_id: CorpusRef) -> list[CleanupInfo]:
    """A corpus' clean-ups, newest first."""
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows = s.scalars(
            select(Cleanup).where(Cleanup.corpus_id == corpus.id).order_by(Cleanup.id.desc())
        ).all()
        return [_info(c) for c in rows]


def _info(c: Cleanup) -> CleanupInfo:
    return CleanupInfo(
        c.id, c.corpus_id, dict(c.options), dict(c.summary), c.created_at, c.undone_at
    )
