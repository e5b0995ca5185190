"""Drafts: the unsaved edits of a grid (the pairs table, the glossary), kept in the database
per browser and per corpus until they are saved or discarded.

A grid's edits used to live only in its widget, and Streamlit drops a widget's state whenever
the widget is not drawn: another corpus picked, another page opened, a reload. A draft is
kept outside the widget instead (table ``table_drafts``), so every one of those paths keeps
the edits, and the grid is drawn again with them. A draft names rows by their id (a pair's
id, a glossary term's stored source term), never by their position on a page, so it stays
true whatever page or search the grid shows.

One rule for half-filled rows, for every grid (``Draft.incomplete``): a new row with
something in it but an empty required column is named and refused, never dropped.
Each public function is one transaction. Saving a draft (``apply_pairs``, ``apply_glossary``)
and the edit conflicts a save holds back are ``workbench.corpus.draft_saves``.

A draft is an edit of pairs or glossary terms not saved yet, so every write of one (keeping,
forgetting, saving it) needs the role that may save it, ``Permission.EDIT``: a viewer or
nobody signed in stores nothing. Reading a draft needs no role, like every read.

A draft belongs to the signed-in user as well as to the browser (``stored_key``): the tab's key
travels with the page's address, so another member opening a copied address must find her own
(empty) drafts there, not save or discard his. The local user (sign-in off) keeps the bare key.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from db.tables import DRAFT_TABLES, Corpus, TableDraft, utcnow
from workbench import settings
from workbench.corpus import glossary
from workbench.corpus.corpora import CorpusRef, find
from workbench.corpus.text_rules import is_blank
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.storage import session_scope
from workbench.team.access import Permission, current_actor, require

TABLES = DRAFT_TABLES
# The editable columns of each grid, in the order it shows them.
COLUMNS: dict[str, tuple[str, ...]] = {
    "pairs": ("source", "target", "split", "note"),
    "glossary": ("source term", "target term"),
}
# The columns a row must fill (the source's, then the target's).
_REQUIRED: dict[str, tuple[str, str]] = {
    "pairs": ("source", "target"),
    "glossary": ("source term", "target term"),
}
# What a half-filled row lacks, by table and by (source missing, target missing).
_INCOMPLETE = {
    ("pairs", True, False): N_("new row {n} has no source ({src})"),
    ("pairs", False, True): N_("new row {n} has no target ({tgt})"),
    ("pairs", True, True): N_("new row {n} has no source ({src}) and no target ({tgt})"),
    ("glossary", True, False): N_("new row {n} has no source term ({src})"),
    ("glossary", False, True): N_("new row {n} has no target term ({tgt})"),
    ("glossary", True, True): N_(
        "new row {n} has no source term ({src}) and no target term ({tgt})"
    ),
}
_KEY = re.compile(r"[0-9a-f]{32}")


# A key's first 16 hexadecimal characters name the browser (a cookie its tabs share), the
# rest the tab: a new tab of the same browser finds the drafts of the others (``other_tabs``).
_BROWSER = re.compile(r"[0-9a-f]{16}")


def new_browser_key(browser: object = None) -> str:
    """A fresh key naming one tab's drafts (kept in the page's address), in ``browser`` (16
    hexadecimal characters; a new one when not given)."""
    if not isinstance(browser, str) or _BROWSER.fullmatch(browser) is None:
        browser = secrets.token_hex(8)
    return browser + secrets.token_hex(8)


def browser_of(browser_key: str) -> str:
    """The browser part of a tab's key."""
    return browser_key[:16]


def is_browser_key(value: object) -> bool:
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def blank(value: Any) -> bool:
    """An empty cell: None, NaN, pd.NA (an untouched cell) or text of only spaces."""
    return is_blank(value) or (isinstance(value, str) and not value.strip())


def _cell(value: Any) -> Any:
    """A cell as JSON keeps it (None for NaN and pd.NA)."""
    return None if is_blank(value) else value


def filled_cells(row: Mapping[str, Any]) -> dict[str, Any]:
    """The cells of a row that hold something."""
    return {k: v for k, v in row.items() if not blank(v)}


@dataclass(frozen=True)
class Draft:
    """A grid's pending edits: changed cells by row id, rows added (in the order they were
    added, blank ones included: the grid shows them where they were), row ids deleted, and
    the revision each edit or deletion was based on."""

    edited: dict[Any, dict[str, Any]] = field(default_factory=dict)
    added: tuple[dict[str, Any], ...] = ()
    deleted: tuple[Any, ...] = ()
    # row id -> the revision the row had when it was first edited or deleted in this draft
    # (a draft kept before revisions has none: its edits are written as they were)
    bases: dict[Any, int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Changes the user made: rows edited, deleted, and added with something in them."""
        return len(self.edited) + len(self.deleted) + sum(1 for r in self.added if filled_cells(r))

    def __bool__(self) -> bool:
        return bool(self.edited or self.added or self.deleted)

    def payload(self) -> dict[str, Any]:
        return {
            "edited": [[k, v] for k, v in self.edited.items()],
            "added": list(self.added),
            "deleted": list(self.deleted),
            "bases": [[k, v] for k, v in self.bases.items()],
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any] | None) -> Draft:
        payload = payload or {}
        return cls(
            edited={k: dict(v) for k, v in payload.get("edited") or []},
            added=tuple(dict(r) for r in payload.get("added") or []),
            deleted=tuple(payload.get("deleted") or []),
            bases={k: int(v) for k, v in payload.get("bases") or []},
        )

    def merged(
        self,
        ids: Sequence[Any],
        state: Mapping[str, Any],
        columns: Sequence[str],
        revisions: Mapping[Any, int] | None = None,
    ) -> Draft:
        """This draft plus a data editor's change set (``edited_rows``, ``added_rows``,
        ``deleted_rows``: row positions) made on a grid that showed ``self.shown(...)``:
        positions below ``len(ids)`` are the rows ``ids``, the next ones this draft's added
        rows. Only ``columns`` are kept (a read-only id column is not an edit). A row edited
        or deleted for the first time keeps the revision the grid showed (``revisions``)."""
        edited = {k: dict(v) for k, v in self.edited.items()}
        added = [dict(r) for r in self.added]
        deleted = list(self.deleted)
        bases = dict(self.bases)
        n = len(ids)

        def based(rid: Any) -> None:
            if revisions is not None and rid in revisions:
                bases.setdefault(rid, int(revisions[rid]))

        for pos, change in (state.get("edited_rows") or {}).items():
            pos = int(pos)
            cells = {k: _cell(v) for k, v in change.items() if k in columns}
            if not cells:
                continue
            if pos < n:
                edited.setdefault(ids[pos], {}).update(cells)
                based(ids[pos])
            elif pos - n < len(added):
                added[pos - n].update(cells)
        gone = set()
        for pos in state.get("deleted_rows") or []:
            pos = int(pos)
            if pos < n:
                if ids[pos] not in deleted:
                    deleted.append(ids[pos])
                edited.pop(ids[pos], None)
                based(ids[pos])
            else:
                gone.add(pos - n)
        added = [r for j, r in enumerate(added) if j not in gone]
        added += [
            {k: _cell(v) for k, v in row.items() if k in columns}
            for row in state.get("added_rows") or []
        ]
        return Draft(edited, tuple(added), tuple(deleted), bases)

    def only(self, row_ids: set[Any]) -> Draft:
        """The edits and deletions of ``row_ids`` alone (what a save held back)."""
        return Draft(
            {k: v for k, v in self.edited.items() if k in row_ids},
            (),
            tuple(k for k in self.deleted if k in row_ids),
            {k: v for k, v in self.bases.items() if k in row_ids},
        )

    def without(self, row_ids: set[Any]) -> Draft:
        """This draft less the edits and deletions of ``row_ids``."""
        return Draft(
            {k: v for k, v in self.edited.items() if k not in row_ids},
            self.added,
            tuple(k for k in self.deleted if k not in row_ids),
            {k: v for k, v in self.bases.items() if k not in row_ids},
        )

    def rebased(self, ancestor: Draft, theirs: Draft) -> Draft:
        """This draft's changes since ``ancestor`` applied onto ``theirs``: two tabs that
        share one key (a duplicated tab, another tab opened here) each keep their own edits
        instead of the last to store replacing the other's. Added rows count as a multiset
        (one changed since ``ancestor`` is moved to the end)."""
        edited = {k: dict(v) for k, v in theirs.edited.items()}
        for rid, cells in self.edited.items():
            was = ancestor.edited.get(rid, {})
            changed = {c: v for c, v in cells.items() if c not in was or was[c] != v}
            if changed:
                edited.setdefault(rid, {}).update(changed)
        deleted = list(theirs.deleted)
        for rid in self.deleted:
            if rid not in ancestor.deleted and rid not in deleted:
                deleted.append(rid)
                edited.pop(rid, None)
        gone, new = [dict(r) for r in ancestor.added], []
        for r in self.added:
            if r in gone:
                gone.remove(r)
            else:
                new.append(dict(r))
        added = [dict(r) for r in theirs.added]
        for r in gone:
            if r in added:
                added.remove(r)
        kept = set(edited) | set(deleted)
        bases = {k: v for k, v in {**self.bases, **theirs.bases}.items() if k in kept}
        return Draft(edited, tuple(added + new), tuple(deleted), bases)

    def shown(self, rows: Sequence[tuple[Any, dict[str, Any]]]) -> list[tuple[Any, dict]]:
        """``rows`` (row id, cells) as the grid shows them with this draft: edited cells
        replaced, deleted rows left out, added rows at the end (row id None)."""
        gone = set(self.deleted)
        out = [(rid, {**cells, **self.edited.get(rid, {})}) for rid, cells in rows]
        out = [(rid, cells) for rid, cells in out if rid not in gone]
        return out + [(None, dict(r)) for r in self.added]

    def incomplete(self, table: str, corpus: Any) -> list[Message]:
        """The one rule for half-filled rows, in the grid's own words ("new row 2 has no
        target (en)"): a row needs every required column, and one only begun is named, not
        dropped. New rows are counted as ``count`` counts them: a blank one is no row.
        ``corpus`` is anything with ``src_lang`` and ``tgt_lang``."""
        out = []
        source, target = _REQUIRED[table]
        begun = [filled for filled in map(filled_cells, self.added) if filled]
        for n, filled in enumerate(begun, start=1):
            missing = (source not in filled, target not in filled)
            if any(missing):
                msgid = _INCOMPLETE[(table, *missing)]
                out.append(Message(msgid, n=n, src=corpus.src_lang, tgt=corpus.tgt_lang))
        return out


def stored_key(browser_key: str) -> str:
    """The key a tab's drafts are stored under: the tab's key, followed for a signed-in member
    by a digest of her e-mail (``table_drafts.browser_key`` holds 64 characters, an e-mail
    up to 320), so the same address names other drafts for each member. The local user, or
    nobody acting, keeps the bare key (the drafts kept before sign-in existed)."""
    actor = current_actor()
    if actor is None or actor.email == settings.local_admin_name():
        return browser_key
    return f"{browser_key}:{hashlib.sha256(actor.email.encode()).hexdigest()[:24]}"


def check(browser_key: str, table: str) -> None:
    """Refuse a malformed browser key or a table that has no drafts."""
    if not is_browser_key(browser_key):
        raise WorkbenchError(N_("a draft's browser key is 32 hexadecimal characters"))
    if table not in TABLES:
        raise WorkbenchError(
            N_("no drafts for a table {table!r} (one of {tables})"),
            table=table,
            tables=", ".join(TABLES),
        )


def stored_row(s: Session, browser_key: str, corpus_id: int, table: str) -> TableDraft | None:
    """The stored draft of a grid of a corpus in one browser, of the user acting, if any."""
    return s.scalar(
        select(TableDraft).where(
            TableDraft.browser_key == stored_key(browser_key),
            TableDraft.corpus_id == corpus_id,
            TableDraft.table_kind == table,
        )
    )


def load(browser_key: str, corpus_id: CorpusRef, table: str) -> Draft:
    """The draft of a grid of a corpus in one browser (an empty one if there is none)."""
    check(browser_key, table)
    with session_scope() as s:
        row = stored_row(s, browser_key, find(s, corpus_id).id, table)
        return Draft.from_payload(row.payload if row else None)


def save(
    browser_key: str, corpus_id: CorpusRef, table: str, draft: Draft, since: Draft | None = None
) -> Draft:
    """Keep ``draft`` as the grid's pending edits (an empty draft forgets them); returns what
    is stored. ``since``: the draft this tab stored last; when the stored one is no longer it
    (another tab with the same key stored its edits meanwhile), ``draft``'s changes since are
    applied onto the stored one (``Draft.rebased``) instead of replacing it."""
    check(browser_key, table)
    require(Permission.EDIT)
    with session_scope() as s:
        corpus = find(s, corpus_id)
        row = stored_row(s, browser_key, corpus.id, table)
        stored = Draft.from_payload(row.payload if row else None)
        if since is not None and stored.payload() != since.payload():
            draft = draft.rebased(since, stored)
        if not draft:
            if row is not None:
                s.delete(row)
        elif row is None:
            s.add(
                TableDraft(
                    browser_key=stored_key(browser_key),
                    corpus_id=corpus.id,
                    table_kind=table,
                    payload=draft.payload(),
                )
            )
        else:
            row.payload = draft.payload()
            row.updated_at = utcnow()
    return draft


def discard(browser_key: str, corpus_id: CorpusRef, table: str) -> None:
    """Forget a grid's pending edits."""
    check(browser_key, table)
    require(Permission.EDIT)
    with session_scope() as s:
        forget_stored(s, browser_key, find(s, corpus_id), table)


def forget_stored(s: Session, browser_key: str, corpus: Corpus, table: str) -> None:
    """Delete the stored draft of the user acting (inside the caller's transaction)."""
    s.execute(
        delete(TableDraft).where(
            TableDraft.browser_key == stored_key(browser_key),
            TableDraft.corpus_id == corpus.id,
            TableDraft.table_kind == table,
        )
    )


@dataclass(frozen=True)
class DraftInfo:
    """One grid with pending edits, for the list of a browser's unsaved work."""

    corpus_id: int
    corpus_name: str
    table: str
    count: int


def list_drafts(browser_key: str) -> list[DraftInfo]:
    """Every grid with pending edits in one browser, of the user acting, by corpus name."""
    check(browser_key, TABLES[0])
    with session_scope() as s:
        rows = s.execute(
            select(TableDraft, Corpus.name)
            .join(Corpus, Corpus.id == TableDraft.corpus_id)
            .where(TableDraft.browser_key == stored_key(browser_key), Corpus.import_token.is_(None))
            .order_by(Corpus.name, TableDraft.table_kind)
        ).all()
        infos = [
            DraftInfo(d.corpus_id, name, d.table_kind, Draft.from_payload(d.payload).count)
            for d, name in rows
        ]
    return [i for i in infos if i.count]


def other_tabs(browser_key: str) -> list[tuple[str, int]]:
    """The other tabs of the same browser with unsaved changes of the user acting: (their
    key, how many)."""
    check(browser_key, TABLES[0])
    own = stored_key(browser_key)
    mine = own[len(browser_key) :]  # the user's part of every stored key of hers
    with session_scope() as s:
        rows = s.execute(
            select(TableDraft.browser_key, TableDraft.payload)
            .join(Corpus, Corpus.id == TableDraft.corpus_id)
            .where(
                TableDraft.browser_key.startswith(browser_of(browser_key)),
                TableDraft.browser_key != own,
                Corpus.import_token.is_(None),
            )
            .order_by(TableDraft.updated_at.desc())
        ).all()
    counts: dict[str, int] = {}
    for key, payload in rows:
        tab, user = key[: len(browser_key)], key[len(browser_key) :]
        if user == mine:
            counts[tab] = counts.get(tab, 0) + Draft.from_payload(payload).count
    return [(key, n) for key, n in counts.items() if n]


def refuse_incomplete(draft: Draft, table: str, corpus: Corpus) -> None:
    incomplete = draft.incomplete(table, corpus)
    if len(incomplete) == 1:
        raise WorkbenchError(
            N_(
                "nothing was saved: {problem}. Fill in both sides or delete that row, then "
                "save again."
            ),
            problem=incomplete[0],
        )
    if incomplete:
        raise WorkbenchError(
            N_(
                "nothing was saved: {problems}. Fill in both sides or delete those rows, then "
                "save again."
            ),
            problems=_joined(incomplete),
        )


def _joined(items: Sequence[Message]) -> Message:
    """``items`` as one message, "a; b; c" (halved at each level: no deep nesting)."""
    if len(items) == 1:
        return items[0]
    half = len(items) // 2
    return Message(N_("{first}; {rest}"), first=_joined(items[:half]), rest=_joined(items[half:]))


def glossary_rows(corpus_id: CorpusRef) -> list[tuple[str, dict[str, Any]]]:
    """The glossary as the grid's rows: (row id = the stored source term, cells)."""
    src, tgt = COLUMNS["glossary"]
    return [(a, {src: a, tgt: b}) for a, b in glossary.list_terms(corpus_id)]
