"""Pairs: search a corpus, edit its pairs, and describe and clean it up.

* **Search** — ``search_pairs``: one page of a corpus, filtered by a substring and a split,
  run in the database (``db.search``), so a page stays fast on a million pairs.
* **Edits** — ``apply_edits``: a data-editor change set (added, edited and deleted pairs),
  validated whole and written in one transaction; ``add_pair`` and ``set_split``.
* **Statistics** — ``corpus_stats``: split counts and a bounded length sample.
* **De-duplication** — ``deduplicate``: near-duplicates (``text_rules.loose_key``) removed.

Every write applies the text rule of ``workbench.corpus.text_rules`` (cleaning, normalisation,
identity, length limit and split rule), so stored text is always canonical.
``edit_pairs`` and ``existing_hashes`` take a session: the building blocks that other
modules (a saved correction, an import) use inside their own unit of work.

(Over 450 lines on purpose: every read and write of the pair rows of one corpus lives here, so
the text rule and the split rule are applied in one place; the import's bulk writes are
``pair_writer``. Two thirds of the module is the edit path — validate a whole change set, then
write it so that pairs may even swap content — which reads best in one piece; the search and
the statistics beside it are a page each.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db import search
from db.tables import SPLITS, Corpus, Pair, utcnow
from workbench.corpus import splits
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.import_checks import message_of, too_long
from workbench.corpus.text_rules import (
    MAX_CHARS,
    clean_and_count,
    default_split,
    is_blank,
    loose_key,
    normalize_text,
    pair_hash,
    rough_token_count,
    validate_split,
)
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.storage import session_scope
from workbench.team import history
from workbench.team.access import Permission, require

if TYPE_CHECKING:  # pandas is imported lazily: the CLI and worker start faster without it
    import pandas as pd

COUNT_CAP = 10_000  # filtered searches count at most this many matches (then "10,000+")
LIKE_SCAN_CAP = 100_000  # unindexed (short) queries count matches among this many pairs
STATS_SAMPLE = 5_000
_PAGE_COLUMNS = ["id", "source", "target", "split", "note"]


@dataclass(frozen=True)
class PairPage:
    """One page of a search. ``total`` is exact unless ``total_is_exact`` is False; it is
    then a lower bound (show it as "10,000+"). That happens when a text query matches more
    than ``COUNT_CAP`` pairs, or when a query too short for the index (< 3 characters) is
    run on a corpus larger than ``LIKE_SCAN_CAP`` pairs (only that many are counted)."""

    rows: pd.DataFrame  # columns: id, source, target, split, note
    total: int
    page: int = 1
    page_size: int = 50
    total_is_exact: bool = True

    @property
    def page_count(self) -> int:
        return max(1, -(-self.total // self.page_size))


@dataclass(frozen=True)
class EditResult:
    added: int = 0
    updated: int = 0
    deleted: int = 0
    added_ids: list[int] = field(default_factory=list)
    # Control or invisible characters (NUL, ESC, bidi overrides, stray BOMs …) removed from
    # the written text by the text rule; worth telling the user when not 0.
    cleaned: int = 0
    # other pairs moved to another split with their sentence group (workbench.corpus.splits)
    regrouped: int = 0


@dataclass(frozen=True)
class CorpusStats:
    split_counts: dict[str, int]  # every split present as a key, zero included
    total: int
    # A bounded uniform sample (≤ STATS_SAMPLE rows), never the whole corpus; columns:
    # source_chars, target_chars, source_tokens, target_tokens.
    lengths: pd.DataFrame
    sample_size: int
    split_note: str = ""  # what the latest regrouping of the splits moved (workbench.corpus.splits)


# ------------------------------------------------------------------------------ search


def search_pairs(
    corpus_id: CorpusRef,
    query: str = "",
    split: str | None = None,
    page: int = 1,
    page_size: int = 50,
) -> PairPage:
    """One page of pairs (id order) whose source or target contains ``query``.

    Substring search done in the database, case-insensitive for ASCII letters: on SQLite
    through the FTS5 trigram index (queries of ≥ 3 characters; shorter ones scan with LIKE),
    on PostgreSQL with ILIKE backed by pg_trgm GIN indexes (see ``db.search``). Counts are
    capped (see ``PairPage``) so that a page stays fast on a million-pair corpus.
    """
    page = max(1, int(page))
    page_size = max(1, min(int(page_size), 1000))
    split = validate_split(split)
    q = normalize_text(query or "")
    offset = (page - 1) * page_size
    with session_scope() as s:
        corpus = find(s, corpus_id)
        rows, total, exact = search.find_pairs(
            s.connection(),
            corpus.id,
            q,
            split,
            page_size,
            offset,
            count_cap=COUNT_CAP,
            scan_cap=LIKE_SCAN_CAP,
        )
    import pandas as pd

    frame = pd.DataFrame([tuple(r) for r in rows], columns=_PAGE_COLUMNS)
    frame["id"] = frame["id"].astype("int64")
    return PairPage(frame, total, page, page_size, exact)


# ------------------------------------------------------------------------------- edits


@dataclass
class _Row:
    """A validated pair about to be written."""

    source: str
    target: str
    split: str | None
    note: str
    content_hash: str
    removed: int = 0  # control/invisible characters the text rule removed


# How the problems of an edit name the row (messages: a page translates them).
PAIR = N_("pair {id}")
NEW_ROW = N_("new row {n}")
NEW_ROW_PROBLEM = N_("new row {n}: {problem}")


def _at(where: Message, problem: str) -> Message:
    """``problem`` of the row ``where`` (a ``PAIR`` or a ``NEW_ROW``)."""
    if where.msgid == PAIR:
        return Message(N_("pair {id}: {problem}"), problem=problem, **where.params)
    return Message(NEW_ROW_PROBLEM, problem=problem, **where.params)


def _clean_pair(
    source: Any, target: Any, split: Any, note: Any, where: Message
) -> tuple[_Row | None, Message | None]:
    """(row, None) or (None, error message); ``row.removed`` counts the characters that the
    text rule took out of the source, target and note."""
    source, target = ("" if is_blank(v) else v for v in (source, target))
    (src, n_src), (tgt, n_tgt) = clean_and_count(str(source)), clean_and_count(str(target))
    clean_note, n_note = ("", 0) if is_blank(note) else clean_and_count(str(note))
    if not src:
        return None, _at(where, Message(N_("source is empty")))
    if not tgt:
        return None, _at(where, Message(N_("target is empty")))
    if len(src) > MAX_CHARS or len(tgt) > MAX_CHARS:
        return None, _at(where, too_long(len(src) > MAX_CHARS))
    try:
        clean_split = validate_split(split)
    except WorkbenchError as exc:
        return None, _at(where, message_of(exc))
    row = _Row(src, tgt, clean_split, clean_note, pair_hash(src, tgt), n_src + n_tgt + n_note)
    return row, None


def _shorten(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _raise_collected(errors: list[Message]) -> None:
    if len(errors) > 1:
        raise WorkbenchError(
            N_("{problem} (and {more} more problems)"), problem=errors[0], more=len(errors) - 1
        )
    if errors:
        raise refusal(errors[0])


def refusal(message: Message) -> WorkbenchError:
    """The error that says ``message`` (with its message id and parameters)."""
    return WorkbenchError(message.msgid, **message.params)


def existing_hashes(
    session: Session | Connection, corpus_id: int, hashes: Iterable[str]
) -> dict[str, int]:
    """content_hash -> pair id for those of ``hashes`` already in the corpus (chunked IN)."""
    found: dict[str, int] = {}
    chunk: list[str] = []

    def flush() -> None:
        rows = session.execute(
            select(Pair.content_hash, Pair.id).where(
                Pair.corpus_id == corpus_id, Pair.content_hash.in_(chunk)
            )
        )
        found.update({h: i for h, i in rows})
        chunk.clear()

    for h in hashes:
        chunk.append(h)
        if len(chunk) >= 900:
            flush()
    if chunk:
        flush()
    return found


def _count(session: Session, corpus_id: int) -> int:
    return session.scalar(select(func.count()).where(Pair.corpus_id == corpus_id)) or 0


def apply_edits(
    corpus_id: CorpusRef,
    added: Sequence[Mapping[str, Any]] = (),
    edited: Mapping[int, Mapping[str, Any]] | None = None,
    deleted: Sequence[int] = (),
) -> EditResult:
    """Apply a data-editor change set in ONE transaction; validate everything first.

    ``added``: dicts with source, target and optional split, note. ``edited``: pair id (not
    the editor's row position) -> the changed fields (any of source, target, split, note).
    ``deleted``: pair ids. Any problem (empty side, bad split, unknown id, a pair that would
    duplicate another) raises ``WorkbenchError`` naming the first one; nothing is written.
    """
    require(Permission.EDIT)
    try:
        with session_scope() as s:
            return edit_pairs(s, find(s, corpus_id), added, edited, deleted)
    except IntegrityError as exc:  # a concurrent writer created the same pair meanwhile
        raise WorkbenchError(
            N_("the edit conflicts with a concurrent change: {error}"), error=str(exc.orig)
        ) from None


def edit_pairs(
    s: Session,
    corpus: Corpus,
    added: Sequence[Mapping[str, Any]] = (),
    edited: Mapping[int, Mapping[str, Any]] | None = None,
    deleted: Sequence[int] = (),
) -> EditResult:
    """``apply_edits`` inside the caller's unit of work (same arguments, same checks)."""
    edits = {int(k): dict(v) for k, v in (edited or {}).items()}
    deleted_ids = {int(i) for i in deleted}
    errors: list[Message] = []
    ids = sorted(set(edits) | deleted_ids)
    current: dict[int, Pair] = {}
    for start in range(0, len(ids), 900):
        chunk = ids[start : start + 900]
        for p in s.scalars(select(Pair).where(Pair.corpus_id == corpus.id, Pair.id.in_(chunk))):
            current[p.id] = p
    errors += [
        Message(N_("pair {id} is not in corpus {name!r}"), id=i, name=corpus.name)
        for i in ids
        if i not in current
    ]

    # 1. Validate the final state of every edited and every added pair.
    labelled = _validated_rows(edits, added, deleted_ids, current, errors)
    # 2. Duplicates inside the change set, then against the pairs that remain.
    errors += _duplicate_errors(s, corpus.id, labelled, deleted_ids)
    _raise_collected(errors)

    # 3. Write: deletes, updates (two phases so pairs may swap content), inserts.
    before = history.capture(s, Pair, ids)
    if deleted_ids:
        s.execute(delete(Pair).where(Pair.id.in_(sorted(deleted_ids))))
    now = utcnow()
    changed = _update_changed(s, current, labelled, now)
    inserts = [r for _l, pid, r in labelled if pid is None]
    size_after = _count(s, corpus.id) + len(inserts)
    objs = [
        Pair(
            corpus_id=corpus.id,
            source=r.source,
            target=r.target,
            split=r.split or default_split(r.source, size_after),
            note=r.note,
            content_hash=r.content_hash,
            created_at=now,
            updated_at=now,
        )
        for r in inserts
    ]
    s.add_all(objs)
    s.flush()
    # A split chosen in this edit takes the pair's sentence group along (workbench.corpus.splits).
    pulled = {pid: r.split for _l, pid, r in labelled if "split" in edits.get(pid or 0, {})}
    pulled |= {o.id: r.split for o, r in zip(objs, inserts, strict=True) if r.split}
    written = [p.id for p, _r in changed] + [o.id for o in objs]
    moves = splits.settle_splits(s, corpus.id, pulled, why="an edit", written=written)
    cleaned = sum(r.removed for _l, _pid, r in labelled)
    ids_added = [o.id for o in objs]
    kept = [i for i in ids if i not in deleted_ids]
    after = history.capture(s, Pair, [*ids_added, *kept, *moves])
    before |= splits.rows_before_moves(after, moves, written={*before, *ids_added})
    counts = ((len(objs), "added"), (len(changed), "edited"), (len(deleted_ids), "deleted"))
    history.record(
        s,
        "edit",
        history.diff(Pair, before, after),
        corpus_id=corpus.id,
        summary=", ".join(f"{n} {what}" for n, what in counts if n),
    )
    return EditResult(len(objs), len(changed), len(deleted_ids), ids_added, cleaned, len(moves))


_Labelled = list[tuple[Message, int | None, _Row]]  # (label, pair id or None if new, row)


def _validated_rows(
    edits: dict[int, dict[str, Any]],
    added: Sequence[Mapping[str, Any]],
    deleted_ids: set[int],
    current: dict[int, Pair],
    errors: list[Message],
) -> _Labelled:
    """The final state of every edited pair and every added row, cleaned; what is wrong with
    one goes to ``errors`` (all of them are reported at once)."""
    labelled: _Labelled = []
    for pid, changes in edits.items():
        if pid in deleted_ids or pid not in current:
            continue
        unknown = sorted(set(changes) - {"source", "target", "split", "note"})
        if unknown:
            errors.append(
                Message(N_("pair {id}: unknown field {field!r}"), id=pid, field=unknown[0])
            )
            continue
        p = current[pid]
        row, err = _clean_pair(
            changes.get("source", p.source),
            changes.get("target", p.target),
            changes.get("split", p.split),
            changes.get("note", p.note),
            Message(PAIR, id=pid),
        )
        if row is None:
            errors.append(err)
        else:
            labelled.append((Message(PAIR, id=pid), pid, row))
    for n, item in enumerate(added, start=1):
        row, err = _clean_pair(
            item.get("source"),
            item.get("target"),
            item.get("split"),
            item.get("note"),
            Message(NEW_ROW, n=n),
        )
        if row is None:
            errors.append(err)
        else:
            labelled.append((Message(NEW_ROW, n=n), None, row))
    return labelled


def _duplicate_errors(
    s: Session, corpus_id: int, labelled: _Labelled, deleted_ids: set[int]
) -> list[Message]:
    """Rows that duplicate each other, or a pair that stays (not deleted, not moved to other
    content in this same edit)."""
    errors: list[Message] = []
    claimed: dict[str, Message] = {}
    for label, _pid, r in labelled:
        if r.content_hash in claimed:
            errors.append(
                Message(
                    N_("{row} duplicates {other}: {source!r} → {target!r}"),
                    row=label,
                    other=claimed[r.content_hash],
                    source=_shorten(r.source),
                    target=_shorten(r.target),
                )
            )
        claimed.setdefault(r.content_hash, label)
    final_hash = {pid: r.content_hash for _l, pid, r in labelled if pid is not None}
    existing = existing_hashes(s, corpus_id, claimed)
    for label, pid, r in labelled:
        owner = existing.get(r.content_hash)
        if owner is None or owner == pid or owner in deleted_ids:
            continue
        if owner in final_hash and final_hash[owner] != r.content_hash:
            continue  # the current owner moves to other content in this same edit
        errors.append(
            Message(
                N_("{row} duplicates existing pair {id}: {source!r} → {target!r}"),
                row=label,
                id=owner,
                source=_shorten(r.source),
                target=_shorten(r.target),
            )
        )
    return errors


def _update_changed(
    s: Session, current: dict[int, Pair], labelled: _Labelled, now: datetime
) -> list[tuple[Pair, _Row]]:
    """Write the edited pairs whose content changed, in two phases (a placeholder hash first)
    so that two pairs may swap their content; each one's revision goes up by one."""
    changed: list[tuple[Pair, _Row]] = []
    for _label, pid, r in labelled:
        if pid is None:
            continue
        p = current[pid]
        new = (r.source, r.target, r.split or p.split, r.note)
        if (p.source, p.target, p.split, p.note) != new:
            changed.append((p, r))
    revisions = {p.id: p.revision for p, _r in changed}  # raised by one: not per UPDATE
    for p, r in changed:
        if p.content_hash != r.content_hash:
            p.content_hash = f"~{p.id}"  # placeholder, unique per pair
    s.flush()
    for p, r in changed:
        p.revision = revisions[p.id] + 1
        p.source, p.target, p.note = r.source, r.target, r.note
        p.split = r.split or p.split
        p.content_hash = r.content_hash
        p.updated_at = now
    s.flush()
    return changed


def add_pair(
    corpus_id: CorpusRef, source: str, target: str, split: str | None = None, note: str = ""
) -> int:
    """Add one pair (e.g. a corrected translation); returns its id. Duplicates raise."""
    result = apply_edits(
        corpus_id, added=[{"source": source, "target": target, "split": split, "note": note}]
    )
    return result.added_ids[0]


def set_split(corpus_id: CorpusRef, pair_ids: Sequence[int], split: str) -> int:
    """Move pairs to another split; returns how many changed."""
    require(Permission.EDIT)
    value = validate_split(split)
    if value is None:
        raise WorkbenchError(N_("split must not be empty"))
    changed = 0
    with session_scope() as s:
        corpus = find(s, corpus_id)
        # ids of another corpus (or of no pair) are ignored, and pull no group along
        asked = history.capture(s, Pair, {int(i) for i in pair_ids})
        mine = {i: row for i, row in asked.items() if row["corpus_id"] == corpus.id}
        ids = sorted(mine)
        for start in range(0, len(ids), 900):
            res = s.execute(
                update(Pair)
                .where(Pair.id.in_(ids[start : start + 900]), Pair.split != value)
                .values(split=value, updated_at=utcnow())
            )
            changed += res.rowcount or 0
        # the moved pairs take their sentence groups along (workbench.corpus.splits)
        moves = splits.settle_splits(
            s, corpus.id, dict.fromkeys(ids, value), why="a change of split", written=ids
        )
        after = history.capture(s, Pair, [*mine, *moves])
        history.record(
            s,
            "split",
            history.diff(
                Pair, mine | splits.rows_before_moves(after, moves, written=set(mine)), after
            ),
            corpus_id=corpus.id,
            summary=f"{changed} moved to {value}",
        )
    return changed


# ------------------------------------------------------------------------- statistics


def corpus_stats(corpus_id: CorpusRef, sample_size: int = STATS_SAMPLE) -> CorpusStats:
    """Split counts plus a bounded uniform length sample for histograms.

    The sample is the pairs whose content hash falls below a threshold chosen for
    ``sample_size`` — an index range scan, uniform because hashes are, and stable between
    calls (the histogram does not jitter on reruns).
    """
    with session_scope() as s:
        corpus = find(s, corpus_id)
        counts = dict.fromkeys(SPLITS, 0)
        for split, n in s.execute(
            select(Pair.split, func.count()).where(Pair.corpus_id == corpus.id).group_by(Pair.split)
        ):
            counts[split] = int(n)
        total = sum(counts.values())
        stmt = select(Pair.source, Pair.target).where(Pair.corpus_id == corpus.id)
        if total > sample_size:
            # Over-sample by 10 % so the LIMIT, not bad luck, decides the size.
            threshold = min(0xFFFFFFFF, int(0x100000000 * 1.1 * sample_size / total))
            stmt = stmt.where(Pair.content_hash < f"{threshold:08x}")
        rows = s.execute(stmt.order_by(Pair.content_hash).limit(sample_size)).all()
    import pandas as pd

    lengths = pd.DataFrame(
        {
            "source_chars": [len(r[0]) for r in rows],
            "target_chars": [len(r[1]) for r in rows],
            "source_tokens": [rough_token_count(r[0]) for r in rows],
            "target_tokens": [rough_token_count(r[1]) for r in rows],
        },
        dtype="int64",
    )
    return CorpusStats(counts, total, lengths, len(rows), corpus.split_note)


# ---------------------------------------------------------------------- deduplication


def deduplicate(corpus_id: CorpusRef) -> int:
    """Remove near-duplicate pairs (same ``loose_key``), keeping the oldest; returns how many
    were removed. Exact duplicates cannot exist (unique content hash). Streams the corpus."""
    require(Permission.EDIT)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        seen: set[bytes] = set()
        doomed: list[int] = []
        result = s.execute(
            select(Pair.id, Pair.source, Pair.target)
            .where(Pair.corpus_id == corpus.id)
            .order_by(Pair.id)
            .execution_options(yield_per=5000)
        )
        for pid, src, tgt in result:
            key = loose_key(src, tgt)
            if key in seen:
                doomed.append(pid)
            else:
                seen.add(key)
        result.close()
        before = history.capture(s, Pair, doomed)
        for start in range(0, len(doomed), 900):
            s.execute(delete(Pair).where(Pair.id.in_(doomed[start : start + 900])))
        history.record(
            s,
            "dedupe",
            history.diff(Pair, before, {}),
            corpus_id=corpus.id,
            summary=f"{len(doomed)} near-duplicates removed",
        )
        return len(doomed)
