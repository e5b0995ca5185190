"""Honest splits: no source or target sentence of a corpus' valid/test pairs is in its train.

The rule for one pair is ``text_rules.default_split`` (by its source's group key); pairs that
share a target join one group as well (``text_rules.split_groups``), and a group may span
two splits only until ``settle_splits`` runs, which every write of pairs calls (edits before
they commit, an import right after, as a change of its own in the history). A group found
in several splits moves, whole, to the split of the pair that pulls it (a split chosen
explicitly in the data editor or with ``pairs.set_split``), or else to the split of its
oldest pair: the sentence stays where it was first seen, and a newly imported paraphrase
joins it, whatever an import's split column said for it.

What moved is logged and kept on the corpus (``Corpus.split_note``) for the Corpus page (in
English: a stored text, written once for every later reader).
Corpora from before the rule are regrouped once by ``group_old_corpora``, the data step that
follows the 0008 migration.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Row, select, update
from sqlalchemy.orm import Session

from db.tables import Corpus, Pair
from workbench.corpus.text_rules import default_split, split_groups
from workbench.messages import N_, Message

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("workbench.corpus.splits")
# Writes of at most this many pairs read only their own groups (indexed by nothing: each
# lookup scans the corpus' rows in SQL, which beats reading a big corpus into Python).
LOCAL_MAX = 2_000
_IN_CHUNK = 500
_PAIR_COLUMNS = select(Pair.id, Pair.source, Pair.target, Pair.split)


def settle_splits(
    s: Session,
    corpus_id: int,
    pulled: Mapping[int, str] | None = None,
    why: str = "a write",
    written: Collection[int] | None = None,
) -> dict[int, tuple[str, str]]:
    """Move every group of ``corpus_id`` that spans several splits into one (see the module
    docstring), in the caller's transaction; ``pulled``: pair id -> the split chosen for it
    explicitly in this write. ``written``: the ids of the pairs this write added or changed,
    when they are few: then only their groups are read (every other group is in one split
    already), else the whole corpus. Returns the pairs moved, {pair id: (the split it left, the
    split it joined)}: a writer records them with its change, so that an undo puts them back."""
    if written is not None and len(written) <= LOCAL_MAX:
        rows = _groups_around(s, corpus_id, written)
        ids = [r.id for r in rows]
        # Two sentences whose hashes collide would only share a group: never a leak.
        keys = [(hash(r.source), hash(r.target)) for r in rows]
        in_split = [r.split for r in rows]
    else:
        ids, keys, in_split = _sharing_pairs(s, corpus_id)
    moves = _settle(s, ids, keys, in_split, pulled or {})
    if moves:
        note = describe_moves(Counter(moves.values()), why)
        s.execute(update(Corpus).where(Corpus.id == corpus_id).values(split_note=note))
        log.info("corpus %s: %s", corpus_id, note)
    return moves


def rows_before_moves(
    after: Mapping[int, dict[str, Any]],
    moves: Mapping[int, tuple[str, str]],
    written: Collection[int] = (),
) -> dict[int, dict[str, Any]]:
    """The rows (``history.capture``: ``after``, as they are now) of the pairs that only moved
    with their sentence group, as they were before the move: a writer records them with its
    change, so that an undo moves them back and no group is left spanning two splits.
    ``written``: the pairs the write itself changed (their rows before are the writer's)."""
    return {i: after[i] | {"split": left} for i, (left, _) in moves.items() if i not in written}


def _sharing_pairs(
    s: Session, corpus_id: int
) -> tuple[list[int], list[tuple[int, int]], list[str]]:
    """(ids, (source hash, target hash), split) of the corpus' pairs that share a source or
    a target with another pair, in id order: every group of two pairs or more, and nothing
    else (a pair alone is in one split). The corpus is streamed into arrays of 8-byte hashes
    and the repeated ones found with numpy: about 30 bytes a pair, where tuples and
    dictionaries of every pair took 520 (680 MB at 1.3M pairs, after an import)."""
    import numpy as np

    ids, sources, targets, codes = array("q"), array("q"), array("q"), array("B")
    names: dict[str, int] = {}  # split -> its code
    rows = s.execute(
        _PAIR_COLUMNS.where(Pair.corpus_id == corpus_id)
        .order_by(Pair.id)
        .execution_options(yield_per=2_000)
    )
    for r in rows:
        ids.append(r.id)
        sources.append(hash(r.source))
        targets.append(hash(r.target))
        codes.append(names.setdefault(r.split, len(names)))
    shared = _repeated(np.frombuffer(sources, dtype=np.int64))
    shared |= _repeated(np.frombuffer(targets, dtype=np.int64))
    split_of = list(names)
    chosen = np.flatnonzero(shared).tolist()
    return (
        [ids[i] for i in chosen],
        [(sources[i], targets[i]) for i in chosen],
        [split_of[codes[i]] for i in chosen],
    )


def _repeated(values: np.ndarray) -> np.ndarray:
    """Which of ``values`` occur more than once (a boolean mask)."""
    import numpy as np

    order = np.argsort(values, kind="stable")
    ordered = values[order]
    same = ordered[1:] == ordered[:-1]
    mask = np.zeros(len(values), dtype=bool)
    mask[order[1:][same]] = True
    mask[order[:-1][same]] = True
    return mask


def _groups_around(s: Session, corpus_id: int, written: Collection[int]) -> list[Row]:
    """The pairs of the groups of the ``written`` pairs, in id order: pairs sharing a source or
    a target with them, then with those, until no new pair joins."""
    found: dict[int, Row] = {}
    seeds = sorted(set(written))
    for start in range(0, len(seeds), _IN_CHUNK):
        chunk = seeds[start : start + _IN_CHUNK]
        for r in s.execute(_PAIR_COLUMNS.where(Pair.corpus_id == corpus_id, Pair.id.in_(chunk))):
            found[r.id] = r
    sources = {r.source for r in found.values()}
    targets = {r.target for r in found.values()}
    asked_sources: set[str] = set()
    asked_targets: set[str] = set()
    while sources or targets:
        new_rows: list[Row] = []
        for column, texts in ((Pair.source, sorted(sources)), (Pair.target, sorted(targets))):
            for start in range(0, len(texts), _IN_CHUNK):
                chunk = texts[start : start + _IN_CHUNK]
                query = _PAIR_COLUMNS.where(Pair.corpus_id == corpus_id, column.in_(chunk))
                new_rows += [r for r in s.execute(query) if r.id not in found]
        asked_sources |= sources
        asked_targets |= targets
        for r in new_rows:
            found[r.id] = r
        sources = {r.source for r in new_rows} - asked_sources
        targets = {r.target for r in new_rows} - asked_targets
    return [found[i] for i in sorted(found)]


def _settle(
    s: Session,
    ids: Sequence[int],
    keys: Sequence[tuple[int, int]],
    in_split: Sequence[str],
    pulled: Mapping[int, str],
) -> dict[int, tuple[str, str]]:
    """Move the pairs (in id order) of every group that spans several splits."""
    groups = split_groups(keys)  # per pair, the index of its group's first (oldest) pair
    spanning = {g for g, split in zip(groups, in_split, strict=True) if split != in_split[g]}
    goal = {g: in_split[g] for g in spanning}  # the split of its oldest pair, unless pulled
    pulled_groups: set[int] = set()
    for g, pid in zip(groups, ids, strict=True):
        if g in spanning and pid in pulled and g not in pulled_groups:
            goal[g] = pulled[pid]  # the first explicit choice of this write wins
            pulled_groups.add(g)
    moves: dict[int, tuple[str, str]] = {}
    to_move: dict[str, list[int]] = {}
    for g, pid, split in zip(groups, ids, in_split, strict=True):
        target = goal.get(g)
        if target is not None and split != target:
            moves[pid] = (split, target)
            to_move.setdefault(target, []).append(pid)
    for split, ids in to_move.items():
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            # a pair that follows its group is not edited: its updated_at stays (an import's
            # pairs stay undoable, and the writer's record of the move is exact)
            moved = update(Pair).where(Pair.id.in_(chunk))
            s.execute(moved.values(split=split, updated_at=Pair.updated_at))
    return moves


def fresh_splits(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The split of each pair when ``pairs`` (normalised, no duplicates) are written, in this
    order and without explicit splits, into an empty corpus: each group in the split of its
    first pair's source (``text_rules.default_split``), which ``settle_splits`` would keep.
    Benchmarks split their data with it, so their figures use the product's own rule."""
    groups = split_groups(pairs)
    return [default_split(pairs[g][0], len(pairs)) for g in groups]


def describe_moves(moves: Mapping[tuple[str, str], int], why: str) -> str:
    """'Grouped splits after an import: 3 pairs moved (2 test→train, 1 valid→train) so that
    no valid or test sentence is also in train.'"""
    total = sum(moves.values())
    detail = ", ".join(f"{n:,} {a}→{b}" for (a, b), n in sorted(moves.items()))
    noun = "pair" if total == 1 else "pairs"
    return (
        f"Grouped splits after {why}: {total:,} {noun} moved ({detail}) so that no valid or "
        "test sentence is also in train."
    )


def regrouped_text(moved: int) -> str:
    """What a front end says after a write that moved other pairs ('' when none moved): a
    ``Message``, which a page shows translated (``ui.i18n.localized``)."""
    if not moved:
        return ""
    if moved == 1:
        return Message(
            N_(
                "1 pair moved to another split with their sentence group, so that no valid or "
                "test sentence is also in train."
            )
        )
    return Message(
        N_(
            "{n} pairs moved to another split with their sentence group, so that no valid or "
            "test sentence is also in train."
        ),
        n=f"{moved:,}",
    )


def group_old_corpora(engine: Engine) -> dict[int, int]:
    """The data step after migration 0008: regroup each corpus whose splits predate the rule,
    one transaction per corpus (the flag is claimed first, so two processes starting at once
    regroup it once). Returns {corpus id: pairs moved}."""
    with Session(engine) as s:
        todo = s.scalars(select(Corpus.id).where(Corpus.splits_grouped.is_(False))).all()
    moved: dict[int, int] = {}
    for corpus_id in todo:
        with Session(engine) as s, s.begin():
            claimed = s.execute(
                update(Corpus)
                .where(Corpus.id == corpus_id, Corpus.splits_grouped.is_(False))
                .values(splits_grouped=True)
            ).rowcount
            if claimed:
                moves = settle_splits(s, corpus_id, why="the upgrade to grouped splits")
                moved[corpus_id] = len(moves)
    return moved
