"""Corpus operations: corpora, pairs, search, edits, statistics and training snapshots.

Text rules (applied on every write, so stored text is always canonical):

* **Cleaning and normalisation** — ``workbench.text_rules``: control and invisible
  characters removed (and counted), Unicode NFC, whitespace collapsed to single spaces.
* **Identity** — ``content_hash`` = ``text_rules.pair_hash`` of the normalised pair; it is
  unique per corpus, so the same pair can never be stored twice.
* **Split rule** — a pair written without an explicit split goes to ``train`` while the corpus
  (counting the pairs in the same write) has fewer than ``TINY_CORPUS`` (20) pairs, so a tiny
  corpus is learned whole. From then on the split is derived from the pair's hash: buckets
  0-89 of 100 → ``train``, 90-94 → ``valid``, 95-99 → ``test`` (≈ 90/5/5). The same pair gets
  the same bucket in every corpus and on every machine. A split given explicitly (import
  column, data editor) always wins.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, case, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.engine import MAX_ID, session_scope
from db.models import SPLITS, Corpus, Pair, utcnow
from workbench.errors import WorkbenchError
from workbench.text_rules import (
    clean_text,
    explicit_id,
    normalize_text,
    pair_hash,
    validate_name,
)

if TYPE_CHECKING:  # pandas is imported lazily: the CLI and worker start faster without it
    import pandas as pd

TINY_CORPUS = 20
SPLIT_BUCKETS = (("train", 90), ("valid", 95), ("test", 100))  # cumulative, of 100
MAX_CHARS = 2000  # per side; longer "sentences" are almost always paste accidents
COUNT_CAP = 10_000  # filtered searches count at most this many matches (then "10,000+")
LIKE_SCAN_CAP = 100_000  # unindexed (short) queries count matches among this many pairs
STATS_SAMPLE = 5_000
FTS_MIN_QUERY = 3  # the trigram index needs at least 3 characters

CorpusRef = int | str
STAGING_NAME = "(import {token})"  # a hidden staging corpus (workbench.importing)
CORPUS_REF_HELP = (
    "a corpus name, or its id written #ID (a plain number is taken as an id when no corpus "
    "has that name)"
)
_LANG_RE = re.compile(r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$")
_CJK_RE = re.compile(
    r"[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)


# ----------------------------------------------------------------------------- text rules


def hash_split(content_hash: str) -> str:
    """The deterministic ≈90/5/5 split of a pair, from hex digits 8-15 of its hash."""
    bucket = int(content_hash[8:16], 16) % 100
    for name, upper in SPLIT_BUCKETS:
        if bucket < upper:
            return name
    return "train"  # unreachable


def default_split(content_hash: str, corpus_size_after_write: int) -> str:
    """The split rule of this module (see the module docstring)."""
    if corpus_size_after_write < TINY_CORPUS:
        return "train"
    return hash_split(content_hash)


def rough_token_count(text: str) -> int:
    """Tokens for length statistics: each CJK character counts as one token, other text is
    counted in whitespace-separated words (so unsegmented Chinese is not "one word")."""
    cjk = len(_CJK_RE.findall(text))
    rest = _CJK_RE.sub(" ", text)
    return cjk + len(rest.split())


def validate_split(split: Any) -> str | None:
    """A canonical split name, or None for "not given" (None, NaN, empty)."""
    if split is None or (isinstance(split, str) and split.strip() == ""):
        return None
    if _blank(split):
        return None
    value = str(split).strip().lower()
    if value not in SPLITS:
        raise WorkbenchError(f"invalid split {split!r}: use one of {', '.join(SPLITS)}")
    return value


def _shorten(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class CorpusInfo:
    id: int
    name: str
    src_lang: str
    tgt_lang: str
    pair_count: int
    created_at: datetime | None = None


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


@dataclass(frozen=True)
class CorpusStats:
    split_counts: dict[str, int]  # every split present as a key, zero included
    total: int
    # A bounded uniform sample (≤ STATS_SAMPLE rows), never the whole corpus; columns:
    # source_chars, target_chars, source_tokens, target_tokens.
    lengths: pd.DataFrame
    sample_size: int


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


# ----------------------------------------------------------------------------- corpora


def _validate_lang(lang: str, what: str) -> str:
    value = (lang or "").strip()
    if not _LANG_RE.match(value):
        raise WorkbenchError(f"invalid {what} language code {lang!r} (expected e.g. zh, en, pt-BR)")
    return value


def _info(session: Session, corpus: Corpus) -> CorpusInfo:
    count = session.scalar(select(func.count()).where(Pair.corpus_id == corpus.id)) or 0
    return CorpusInfo(
        corpus.id, corpus.name, corpus.src_lang, corpus.tgt_lang, count, corpus.created_at
    )


def _visible(corpus: Corpus | None) -> Corpus | None:
    """``corpus`` unless it is hidden by a large import in progress (see ``importing``): a
    staging corpus does not exist for anyone else; an (empty) corpus receiving pairs is busy."""
    if corpus is None or corpus.import_token is None:
        return corpus
    if corpus.name == STAGING_NAME.format(token=corpus.import_token):
        return None
    raise WorkbenchError(
        f"corpus {corpus.name!r} is receiving a large import; try again when it is done"
    )


def _by_id(session: Session, corpus_id: int) -> Corpus | None:
    if not 0 < corpus_id <= MAX_ID:  # beyond the INTEGER column: no such row
        return None
    return _visible(session.get(Corpus, corpus_id))


def _resolve(session: Session, ref: CorpusRef) -> Corpus:
    """A visible corpus by reference (see ``CORPUS_REF_HELP``)."""
    corpus: Corpus | None = None
    if isinstance(ref, str):
        explicit = explicit_id(ref)
        if explicit is not None:
            corpus = _by_id(session, explicit)
        else:
            corpus = _visible(
                session.scalar(select(Corpus).where(Corpus.name == normalize_text(ref)))
            )
            if ref.strip().isdigit():
                by_id = _by_id(session, int(ref))
                if corpus is not None and by_id is not None and by_id.id != corpus.id:
                    raise WorkbenchError(
                        f"{ref.strip()!r} is both the name of corpus #{corpus.id} and the id of "
                        f"corpus {by_id.name!r}: write '#{ref.strip()}' for the id, or rename "
                        "the corpus"
                    )
                corpus = corpus or by_id
    elif isinstance(ref, numbers.Integral) and not isinstance(ref, bool):  # numpy ints too
        corpus = _by_id(session, int(ref))
    if corpus is None:
        raise WorkbenchError(f"no corpus {ref!r}")
    return corpus


class _NameTaken(WorkbenchError):
    pass


def create_corpus(name: str, src_lang: str, tgt_lang: str) -> CorpusInfo:
    """A new empty corpus; names are unique (after whitespace normalisation)."""
    clean = validate_name(name)
    src, tgt = _validate_lang(src_lang, "source"), _validate_lang(tgt_lang, "target")
    try:
        with session_scope() as s:
            if s.scalar(select(Corpus.id).where(Corpus.name == clean)) is not None:
                raise _NameTaken(f"a corpus named {clean!r} already exists")
            corpus = Corpus(name=clean, src_lang=src, tgt_lang=tgt)
            s.add(corpus)
            s.flush()
            return CorpusInfo(corpus.id, clean, src, tgt, 0, corpus.created_at)
    except IntegrityError:  # lost a race with a concurrent create
        raise _NameTaken(f"a corpus named {clean!r} already exists") from None


def get_or_create_corpus(name: str, src_lang: str, tgt_lang: str) -> CorpusInfo:
    """The corpus ``name``; created if missing. An existing corpus must match the languages."""
    try:
        info = get_corpus(name)
    except WorkbenchError:
        try:
            return create_corpus(name, src_lang, tgt_lang)
        except _NameTaken:
            info = get_corpus(name)  # created concurrently
    if (info.src_lang, info.tgt_lang) != (src_lang, tgt_lang):
        raise WorkbenchError(
            f"corpus {info.name!r} is {info.src_lang}→{info.tgt_lang}, not {src_lang}→{tgt_lang}"
        )
    return info


def rename_corpus(corpus_id: CorpusRef, new_name: str) -> CorpusInfo:
    clean = validate_name(new_name)
    try:
        with session_scope() as s:
            corpus = _resolve(s, corpus_id)
            other = s.scalar(select(Corpus.id).where(Corpus.name == clean))
            if other is not None and other != corpus.id:
                raise WorkbenchError(f"a corpus named {clean!r} already exists")
            corpus.name = clean
            s.flush()
            return _info(s, corpus)
    except IntegrityError:
        raise WorkbenchError(f"a corpus named {clean!r} already exists") from None


def delete_corpus(corpus_id: CorpusRef) -> None:
    """Delete a corpus and (by ON DELETE CASCADE) all its pairs."""
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        s.execute(delete(Corpus).where(Corpus.id == corpus.id))


def list_corpora() -> list[CorpusInfo]:
    """All corpora by name, with pair counts (one grouped query)."""
    counts = select(Pair.corpus_id, func.count().label("n")).group_by(Pair.corpus_id).subquery()
    stmt = (
        select(Corpus, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.corpus_id == Corpus.id)
        .where(Corpus.import_token.is_(None))
        .order_by(Corpus.name)
    )
    with session_scope() as s:
        return [
            CorpusInfo(c.id, c.name, c.src_lang, c.tgt_lang, int(n), c.created_at)
            for c, n in s.execute(stmt)
        ]


def get_corpus(id_or_name: CorpusRef) -> CorpusInfo:
    with session_scope() as s:
        return _info(s, _resolve(s, id_or_name))


# ------------------------------------------------------------------------------ search


def _like_pattern(q: str) -> str:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _has_fts(conn: Connection) -> bool:
    if conn.dialect.name != "sqlite":
        return False
    row = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pairs_fts'"
    ).first()
    return row is not None


_PAGE_COLUMNS = ["id", "source", "target", "split", "note"]


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
    on PostgreSQL with ILIKE backed by pg_trgm GIN indexes. Counts are capped (see
    ``PairPage``) so that a page stays fast on a million-pair corpus.
    """
    page = max(1, int(page))
    page_size = max(1, min(int(page_size), 1000))
    split = validate_split(split)
    q = normalize_text(query or "")
    offset = (page - 1) * page_size
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        conn = s.connection()
        if q and len(q) >= FTS_MIN_QUERY and _has_fts(conn):
            rows, total, exact = _search_fts(conn, corpus.id, q, split, page_size, offset)
        else:
            rows, total, exact = _search_like(conn, corpus.id, q, split, page_size, offset)
    import pandas as pd

    frame = pd.DataFrame([tuple(r) for r in rows], columns=_PAGE_COLUMNS)
    frame["id"] = frame["id"].astype("int64")
    return PairPage(frame, total, page, page_size, exact)


def fts_query(q: str, max_terms: int = 12) -> str:
    """An FTS5 MATCH expression ANDing the trigrams of ``q`` (len >= 3).

    The index is built with ``detail='none'`` (no positions, so no phrase queries): any row
    containing all trigrams is a candidate, and the caller confirms the substring with
    LIKE. Long queries use an evenly spread subset of their trigrams.
    """
    grams = list(dict.fromkeys(q[i : i + 3] for i in range(len(q) - 2)))
    if len(grams) > max_terms:
        step = (len(grams) - 1) / (max_terms - 1)
        grams = [grams[round(i * step)] for i in range(max_terms)]
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)


def _search_fts(
    conn: Connection, corpus_id: int, q: str, split: str | None, limit: int, offset: int
) -> tuple[list, int, bool]:
    where = (
        "pairs_fts MATCH :m AND p.corpus_id = :c"
        + (" AND p.split = :s" if split else "")
        + " AND (p.source LIKE :pat ESCAPE '\\' OR p.target LIKE :pat ESCAPE '\\')"
    )
    params = {"m": fts_query(q), "c": corpus_id, "s": split, "pat": _like_pattern(q)}
    # CROSS JOIN pins the FTS table as the outer loop (else SQLite may probe it per row).
    base = f"FROM pairs_fts CROSS JOIN pairs p ON p.id = pairs_fts.rowid WHERE {where}"
    # ORDER BY the FTS rowid lets SQLite stream matches in id order and stop at LIMIT.
    rows = conn.execute(
        text(
            f"SELECT p.id, p.source, p.target, p.split, p.note {base} "
            "ORDER BY pairs_fts.rowid LIMIT :lim OFFSET :off"
        ),
        {**params, "lim": limit, "off": offset},
    ).all()
    n = conn.execute(
        text(f"SELECT count(*) FROM (SELECT 1 {base} LIMIT :cap)"), {**params, "cap": COUNT_CAP + 1}
    ).scalar_one()
    return rows, min(n, COUNT_CAP), n <= COUNT_CAP


def _search_like(
    conn: Connection, corpus_id: int, q: str, split: str | None, limit: int, offset: int
) -> tuple[list, int, bool]:
    t = Pair.__table__
    conds = [t.c.corpus_id == corpus_id]
    if split:
        conds.append(t.c.split == split)

    def matches(cols: Any) -> Any:
        pat = _like_pattern(q)
        if conn.dialect.name == "postgresql":
            return cols.source.ilike(pat, escape="\\") | cols.target.ilike(pat, escape="\\")
        return cols.source.like(pat, escape="\\") | cols.target.like(pat, escape="\\")

    text_conds = [matches(t.c)] if q else []
    stmt = (
        select(t.c.id, t.c.source, t.c.target, t.c.split, t.c.note)
        .where(*conds, *text_conds)
        .order_by(t.c.id)
        .limit(limit)
        .offset(offset)
    )
    rows = conn.execute(stmt).all()
    if not q:
        total = conn.execute(select(func.count()).select_from(t).where(*conds)).scalar_one()
        return rows, int(total), True
    if conn.dialect.name == "postgresql" and len(q) >= FTS_MIN_QUERY:
        # pg_trgm answers this from the GIN indexes; only the number of matches is capped.
        capped = select(t.c.id).where(*conds, *text_conds).limit(COUNT_CAP + 1).subquery()
        n = conn.execute(select(func.count()).select_from(capped)).scalar_one()
        return rows, min(n, COUNT_CAP), n <= COUNT_CAP
    # No index can answer this (short query, or no FTS): count within the first LIKE_SCAN_CAP
    # pairs only, so the count never scans a million rows. Beyond that it is a lower bound.
    window = (
        select(t.c.source, t.c.target).where(*conds).order_by(t.c.id).limit(LIKE_SCAN_CAP)
    ).subquery()
    scanned, hits = conn.execute(
        select(func.count(), func.coalesce(func.sum(case((matches(window.c), 1), else_=0)), 0))
    ).one()
    exact = scanned < LIKE_SCAN_CAP and hits <= COUNT_CAP
    total = min(int(hits), COUNT_CAP)
    if not exact:
        total = max(total, offset + len(rows))
    return rows, total, exact


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


def _blank(value: Any) -> bool:
    """None, NaN, pd.NA or NaT (what st.data_editor hands back for an untouched cell)."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


def _clean_pair(
    source: Any, target: Any, split: Any, note: Any, where: str
) -> tuple[_Row | None, str | None]:
    """(row, None) or (None, error message); ``row.removed`` counts the characters that the
    text rule took out of the source, target and note."""
    source, target = ("" if _blank(v) else v for v in (source, target))
    (src, n_src), (tgt, n_tgt) = clean_text(str(source)), clean_text(str(target))
    clean_note, n_note = ("", 0) if _blank(note) else clean_text(str(note))
    if not src:
        return None, f"{where}: source is empty"
    if not tgt:
        return None, f"{where}: target is empty"
    for side, value in (("source", src), ("target", tgt)):
        if len(value) > MAX_CHARS:
            return None, f"{where}: {side} is longer than {MAX_CHARS} characters"
    try:
        clean_split = validate_split(split)
    except WorkbenchError as exc:
        return None, f"{where}: {exc}"
    row = _Row(src, tgt, clean_split, clean_note, pair_hash(src, tgt), n_src + n_tgt + n_note)
    return row, None


def _raise_collected(errors: list[str]) -> None:
    if errors:
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise WorkbenchError(errors[0] + more)


def _existing_hashes(
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
    edits = {int(k): dict(v) for k, v in (edited or {}).items()}
    deleted_ids = {int(i) for i in deleted}
    errors: list[str] = []
    try:
        with session_scope() as s:
            corpus = _resolve(s, corpus_id)
            ids = sorted(set(edits) | deleted_ids)
            current: dict[int, Pair] = {}
            for start in range(0, len(ids), 900):
                chunk = ids[start : start + 900]
                for p in s.scalars(
                    select(Pair).where(Pair.corpus_id == corpus.id, Pair.id.in_(chunk))
                ):
                    current[p.id] = p
            errors += [
                f"pair {i} is not in corpus {corpus.name!r}" for i in ids if i not in current
            ]

            # 1. Validate the final state of every edited and every added pair.
            labelled: list[tuple[str, int | None, _Row]] = []  # (label, pair id, row)
            for pid, changes in edits.items():
                if pid in deleted_ids or pid not in current:
                    continue
                unknown = sorted(set(changes) - {"source", "target", "split", "note"})
                if unknown:
                    errors.append(f"pair {pid}: unknown field {unknown[0]!r}")
                    continue
                p = current[pid]
                row, err = _clean_pair(
                    changes.get("source", p.source),
                    changes.get("target", p.target),
                    changes.get("split", p.split),
                    changes.get("note", p.note),
                    f"pair {pid}",
                )
                if row is None:
                    errors.append(str(err))
                else:
                    labelled.append((f"pair {pid}", pid, row))
            for n, item in enumerate(added, start=1):
                row, err = _clean_pair(
                    item.get("source"),
                    item.get("target"),
                    item.get("split"),
                    item.get("note"),
                    f"new row {n}",
                )
                if row is None:
                    errors.append(str(err))
                else:
                    labelled.append((f"new row {n}", None, row))

            # 2. Duplicates inside the change set, then against the pairs that remain.
            claimed: dict[str, str] = {}
            for label, _pid, r in labelled:
                if r.content_hash in claimed:
                    errors.append(
                        f"{label} duplicates {claimed[r.content_hash]}: "
                        f"{_shorten(r.source)!r} → {_shorten(r.target)!r}"
                    )
                claimed.setdefault(r.content_hash, label)
            final_hash = {pid: r.content_hash for _l, pid, r in labelled if pid is not None}
            existing = _existing_hashes(s, corpus.id, claimed)
            for label, pid, r in labelled:
                owner = existing.get(r.content_hash)
                if owner is None or owner == pid or owner in deleted_ids:
                    continue
                if owner in final_hash and final_hash[owner] != r.content_hash:
                    continue  # the current owner moves to other content in this same edit
                errors.append(
                    f"{label} duplicates existing pair {owner}: "
                    f"{_shorten(r.source)!r} → {_shorten(r.target)!r}"
                )
            _raise_collected(errors)

            # 3. Write: deletes, updates (two phases so pairs may swap content), inserts.
            if deleted_ids:
                s.execute(delete(Pair).where(Pair.id.in_(sorted(deleted_ids))))
            now = utcnow()
            changed: list[tuple[Pair, _Row]] = []
            for _label, pid, r in labelled:
                if pid is None:
                    continue
                p = current[pid]
                new = (r.source, r.target, r.split or p.split, r.note)
                if (p.source, p.target, p.split, p.note) != new:
                    changed.append((p, r))
            for p, r in changed:
                if p.content_hash != r.content_hash:
                    p.content_hash = f"~{p.id}"  # placeholder, unique per pair
            s.flush()
            for p, r in changed:
                p.source, p.target, p.note = r.source, r.target, r.note
                p.split = r.split or p.split
                p.content_hash = r.content_hash
                p.updated_at = now
            s.flush()
            inserts = [r for _l, pid, r in labelled if pid is None]
            size_after = _count(s, corpus.id) + len(inserts)
            objs = [
                Pair(
                    corpus_id=corpus.id,
                    source=r.source,
                    target=r.target,
                    split=r.split or default_split(r.content_hash, size_after),
                    note=r.note,
                    content_hash=r.content_hash,
                    created_at=now,
                    updated_at=now,
                )
                for r in inserts
            ]
            s.add_all(objs)
            s.flush()
            cleaned = sum(r.removed for _l, _pid, r in labelled)
            ids_added = [o.id for o in objs]
            return EditResult(len(objs), len(changed), len(deleted_ids), ids_added, cleaned)
    except IntegrityError as exc:  # a concurrent writer created the same pair meanwhile
        raise WorkbenchError(f"the edit conflicts with a concurrent change: {exc.orig}") from None


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
    value = validate_split(split)
    if value is None:
        raise WorkbenchError("split must not be empty")
    ids = sorted({int(i) for i in pair_ids})
    changed = 0
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
        for start in range(0, len(ids), 900):
            res = s.execute(
                update(Pair)
                .where(Pair.corpus_id == corpus.id, Pair.id.in_(ids[start : start + 900]))
                .where(Pair.split != value)
                .values(split=value, updated_at=utcnow())
            )
            changed += res.rowcount or 0
    return changed


# ------------------------------------------------------------------------- statistics


def corpus_stats(corpus_id: CorpusRef, sample_size: int = STATS_SAMPLE) -> CorpusStats:
    """Split counts plus a bounded uniform length sample for histograms.

    The sample is the pairs whose content hash falls below a threshold chosen for
    ``sample_size`` — an index range scan, uniform because hashes are, and stable between
    calls (the histogram does not jitter on reruns).
    """
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
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
    return CorpusStats(counts, total, lengths, len(rows))


# ---------------------------------------------------------------------- deduplication


def loose_key(source: str, target: str) -> bytes:
    """Key under which ``deduplicate`` treats pairs as the same: NFKC (full-width → half-width
    forms) + case folding + normalised whitespace."""

    def fold(t: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", t).casefold().split())

    return hashlib.blake2b(f"{fold(source)}\x1f{fold(target)}".encode(), digest_size=12).digest()


def deduplicate(corpus_id: CorpusRef) -> int:
    """Remove near-duplicate pairs (same ``loose_key``), keeping the oldest; returns how many
    were removed. Exact duplicates cannot exist (unique content hash). Streams the corpus."""
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
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
        for start in range(0, len(doomed), 900):
            s.execute(delete(Pair).where(Pair.id.in_(doomed[start : start + 900])))
        return len(doomed)


# --------------------------------------------------------------------- training input


def split_pairs(
    corpus_id: CorpusRef, split: str, limit: int | None = None
) -> list[tuple[str, str]]:
    """The (source, target) pairs of one split in id order; the first `limit` if given."""
    value = validate_split(split)
    if value is None:
        raise WorkbenchError("split must not be empty")
    with session_scope() as s:
        corpus = _resolve(s, corpus_id)
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
        corpus = _resolve(s, corpus_id)
        rows = s.execute(
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
        corpus = _resolve(s, corpus_id)
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
