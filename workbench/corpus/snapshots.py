"""Snapshots: the pairs a training run learns from, frozen when the run is queued.

A run stores its snapshot's pair ids and content hash (``take_snapshot`` inside the unit of
work that queues it); its worker re-reads those pairs (``snapshot_from_ids``) and can tell
from the hash whether they changed meanwhile. ``split_pairs`` reads one split, e.g. the test
pairs that versions are compared on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.tables import Corpus, Pair
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.text_rules import validate_split
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.storage import session_scope


@dataclass(frozen=True)
class CorpusSnapshot:
    """What a training run trains on, frozen at enqueue time (``test`` pairs are held out).

    ``content_hash`` covers the split and content of every snapshot pair in id order, so a
    worker can tell whether the pairs behind ``pair_ids`` changed since the run was queued.
    """

    corpus_id: int
    train_ids: list[int]
    train_pairs: list[tuple[str, str]]
    valid_ids: list[int]
    valid_pairs: list[tuple[str, str]]
    content_hash: str

    @property
    def pair_ids(self) -> list[int]:
        return sorted(self.train_ids + self.valid_ids)

    @property
    def size(self) -> int:
        return len(self.train_ids) + len(self.valid_ids)


def split_pairs(
    corpus_id: CorpusRef, split: str, limit: int | None = None
) -> list[tuple[str, str]]:
    """The (source, target) pairs of one split in id order; the first `limit` if given."""
    value = validate_split(split)
    if value is None:
        raise WorkbenchError(N_("split must not be empty"))
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows = s.execute(
            select(Pair.source, Pair.target)
            .where(Pair.corpus_id == corpus.id, Pair.split == value)
            .order_by(Pair.id)
            .limit(limit)
        )
        return [(a, b) for a, b in rows]


def _snapshot_from_rows(corpus_id: int, rows: Iterable[Sequence[Any]]) -> CorpusSnapshot:
    """rows: (id, split, source, target, content_hash) in id order."""
    digest = hashlib.sha256()
    train_ids: list[int] = []
    valid_ids: list[int] = []
    train: list[tuple[str, str]] = []
    valid: list[tuple[str, str]] = []
    for pid, split, src, tgt, h in rows:
        if split == "train":
            train_ids.append(pid)
            train.append((src, tgt))
        elif split == "valid":
            valid_ids.append(pid)
            valid.append((src, tgt))
        else:
            continue
        digest.update(f"{split}\t{h}\n".encode())
    return CorpusSnapshot(corpus_id, train_ids, train, valid_ids, valid, digest.hexdigest())


def snapshot(corpus_id: CorpusRef) -> CorpusSnapshot:
    """The train + valid pairs of a corpus now, with their ids and a content hash."""
    with session_scope() as s:
        return take_snapshot(s, find(s, corpus_id))


def take_snapshot(session: Session, corpus: Corpus) -> CorpusSnapshot:
    """``snapshot`` inside the caller's unit of work (a run is queued in the same one)."""
    rows = session.execute(
        select(Pair.id, Pair.split, Pair.source, Pair.target, Pair.content_hash)
        .where(Pair.corpus_id == corpus.id, Pair.split.in_(("train", "valid")))
        .order_by(Pair.id)
    ).all()
    return _snapshot_from_rows(corpus.id, rows)


def snapshot_from_ids(corpus_id: CorpusRef, pair_ids: Sequence[int]) -> CorpusSnapshot:
    """Re-read a stored snapshot (``training_runs.snapshot_pair_ids``) for the worker.

    Pairs deleted since are missing from the result; edited ones carry their new text/split.
    Compare ``content_hash`` with the stored ``snapshot_hash`` to detect either.
    """
    ids = sorted({int(i) for i in pair_ids})
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows: list[Any] = []
        for start in range(0, len(ids), 900):
            rows.extend(
                s.execute(
                    select(Pair.id, Pair.split, Pair.source, Pair.target, Pair.content_hash)
                    .where(Pair.corpus_id == corpus.id, Pair.id.in_(ids[start : start + 900]))
                    .order_by(Pair.id)
                ).all()
            )
        return _snapshot_from_rows(corpus.id, rows)
