"""The Corpus page's table of pairs: one page of a search at a time, edited in place and saved
in one transaction.

Only one page of pairs is ever loaded (search, filter and paging run in the database), so the
table stays quick on a corpus of a million pairs. Unsaved edits hold the table on the rows
they were made in until they are saved or discarded, and a new row that is only begun is
named, never dropped.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from ui import feedback, formatting
from ui.signin import can
from workbench import pairs
from workbench.corpora import CorpusInfo
from workbench.pairs import SPLITS
from workbench.team.access import Permission

PAGE_SIZES = (25, 50, 100, 200)
VIEW = "pairs_view"  # the _View the table shows (it waits for unsaved edits, see pairs_editor)


class _View(NamedTuple):
    """Which rows the table shows: the search bar's values and the page, of one corpus.

    A tuple, not a dataclass: Streamlit runs this page file afresh each time, so a stored
    view is an instance of the previous run's class, and only tuples compare equal across.
    """

    corpus_id: int
    query: str
    split: str
    page_size: int
    page: int

    def changes_from(self, shown: _View) -> str:
        """What switching from `shown` to this view would do, in words."""
        parts = []
        if self.query != shown.query:
            parts.append(f"the search “{self.query}”" if self.query else "clearing the search")
        if self.split != shown.split:
            parts.append("all splits" if self.split == "all" else f"the {self.split} split")
        if self.page_size != shown.page_size:
            parts.append(f"{self.page_size} rows per page")
        if self.page != shown.page and not parts:
            parts.append(f"page {self.page}")
        return ", ".join(parts)


def _digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=6).hexdigest()


def _editor_key(view: _View) -> str:
    """One editor state per view and save count: paging or searching starts from the stored
    rows, never from stale edits of another page."""
    return f"pairs_editor_{_digest(view, st.session_state.get('editor_nonce', 0))}"


def _reset_page() -> None:
    st.session_state["pairs_page"] = 1


def _unsaved(view: _View | None) -> int:
    """Changes the user made in the table of `view` (its editor state is that of the last
    run, read before this run draws anything that could replace the table)."""
    return _change_count(st.session_state.get(_editor_key(view)) or {}) if view else 0


def _change_count(state: dict[str, Any]) -> int:
    """Rows changed in an editor state: edited, deleted, and added with something in them."""
    edited = sum(1 for change in (state.get("edited_rows") or {}).values() if set(change) - {"id"})
    added = sum(1 for row in state.get("added_rows") or [] if _fields(row))
    return edited + added + len(state.get("deleted_rows") or [])


def pairs_editor(current: CorpusInfo) -> None:
    shown: _View | None = st.session_state.get(VIEW)
    if shown is not None and shown.corpus_id != current.id:
        shown = None
    unsaved = _unsaved(shown)

    bar = st.columns([4, 1.4, 1.1], vertical_alignment="bottom")
    query = bar[0].text_input(
        "Search",
        key="pairs_query",
        placeholder="Search source or target text…",
        on_change=_reset_page,
        icon=":material/search:",
    )
    split = bar[1].selectbox("Split", ["all", *SPLITS], key="pairs_split", on_change=_reset_page)
    page_size = bar[2].selectbox(
        "Rows per page", PAGE_SIZES, index=1, key="pairs_page_size", on_change=_reset_page
    )
    wanted = _View(
        current.id, query, split, int(page_size), int(st.session_state.get("pairs_page", 1))
    )
    # Unsaved edits hold the table on the rows they were made in: the editor's changes are
    # row positions of that page, so another search or page would drop them. The wanted view
    # waits (the search bar keeps what was typed) until the edits are saved or discarded.
    if shown is None or not unsaved:
        shown = wanted
    elif shown != wanted:
        st.warning(
            f"**Save or discard your {formatting.plural(unsaved, 'unsaved change')} first.** "
            f"The table keeps the rows you edited; {wanted.changes_from(shown)} will apply "
            "once they are saved or discarded.",
            icon=":material/edit_note:",
        )
    result = _search(shown)
    if shown.page > result.page_count and not unsaved:  # e.g. the last page was emptied
        shown = shown._replace(page=result.page_count)
        st.session_state["pairs_page"] = shown.page
        result = _search(shown)
    st.session_state[VIEW] = shown

    rows = result.rows.reset_index(drop=True)
    key = _editor_key(shown)
    editable = can(Permission.EDIT)  # a viewer reads the same table, locked
    st.data_editor(
        rows,
        key=key,
        num_rows="dynamic" if editable else "fixed",
        hide_index=True,
        width="stretch",
        height=min(38 + 35 * (len(rows) + 1), 560),
        disabled=["id"] if editable else True,
        column_order=["id", "source", "target", "split", "note"],
        # No `required=True` on source/target: the browser would then keep a half-filled new
        # row to itself (never sent, so silently dropped); sent, it can be reported instead.
        column_config={
            "id": st.column_config.NumberColumn("id", width="small", format="%d"),
            "source": st.column_config.TextColumn(f"source ({current.src_lang})", width="large"),
            "target": st.column_config.TextColumn(f"target ({current.tgt_lang})", width="large"),
            "split": st.column_config.SelectboxColumn(
                "split",
                options=list(SPLITS),
                width="small",
                help="Leave empty on a new row to let the workbench choose (≈90/5/5).",
            ),
            "note": st.column_config.TextColumn("note", width="medium"),
        },
    )
    state = st.session_state.get(key) or {}
    changes = _collect_changes(rows, state)
    incomplete = _incomplete_rows(state, current)
    n_changes = _change_count(state)

    foot = st.columns([3, 2, 1, 1], vertical_alignment="center")
    filtered = shown.query or shown.split != "all"
    with foot[0]:
        if result.total:
            # The page number is plain view state ("pairs_page"); the widget is keyed by the
            # filters and page count, so a new search or a shrinking corpus starts it afresh.
            filters = (shown.query, shown.split, shown.page_size, result.total)
            pager = f"pairs_pager_{_digest(*filters)}"

            def on_page() -> None:
                st.session_state["pairs_page"] = st.session_state[pager]

            st.pagination(
                result.page_count,
                default=wanted.page,
                key=pager,
                on_change=on_page,
                max_visible_pages=7,
            )
        else:
            st.caption(
                "No pairs match."
                if filtered
                else "No pairs yet: add rows in the table or import a file."
            )
    counted = (
        f"{result.total:,}{'' if result.total_is_exact else '+'} pairs match"
        if filtered
        else formatting.pair_count_label(result.total, "all")
    )
    foot[1].caption(
        f"{counted} · "
        + (
            f"**{formatting.plural(n_changes, 'unsaved change')}**"
            + (f" ({len(incomplete)} incomplete)" if incomplete else "")
            if n_changes
            else "add rows at the bottom"
            if editable
            else "read only"
        )
    )
    if not editable:
        return
    if foot[2].button("Discard", key="discard_edits", disabled=not n_changes, width="stretch"):
        st.session_state["editor_nonce"] = st.session_state.get("editor_nonce", 0) + 1
        st.rerun()
    if foot[3].button(
        "Save",
        key="save_edits",
        type="primary",
        icon=":material/save:",
        disabled=not n_changes,
        width="stretch",
    ):
        if incomplete:
            st.error(
                f"Nothing was saved: {'; '.join(incomplete)}. Fill in both sides or delete "
                f"{'that row' if len(incomplete) == 1 else 'those rows'}, then save again.",
                icon=":material/error:",
            )
        else:
            _save(current, changes)


def _save(current: CorpusInfo, changes: dict[str, Any]) -> None:
    with feedback.error_boundary("saving the edits"):
        res = pairs.apply_edits(current.id, **changes)
        st.session_state["editor_nonce"] = st.session_state.get("editor_nonce", 0) + 1
        feedback.flash(f"Saved: {res.added} added, {res.updated} edited, {res.deleted} deleted.")
        st.rerun()


def _search(view: _View) -> pairs.PairPage:
    split = None if view.split == "all" else view.split
    return pairs.search_pairs(view.corpus_id, view.query, split, view.page, view.page_size)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value == ""


def _fields(change: dict[str, Any]) -> dict[str, Any]:
    """The cells of an editor row change that hold something (the id column is read-only)."""
    return {k: v for k, v in change.items() if k != "id" and not _blank(v)}


def _incomplete_rows(state: dict[str, Any], current: CorpusInfo) -> list[str]:
    """New rows the user started but left with an empty side, in the table's own words
    ("new row 2 has no target (en)"): a pair needs both sides, and a row that is only begun
    must be pointed out, not dropped."""
    sides = {"source": current.src_lang, "target": current.tgt_lang}
    out = []
    for n, row in enumerate(state.get("added_rows") or [], start=1):
        filled = _fields(row)
        missing = [f"{side} ({lang})" for side, lang in sides.items() if side not in filled]
        if filled and missing:
            out.append(f"new row {n} has no {' and no '.join(missing)}")
    return out


def _collect_changes(rows: pd.DataFrame, state: dict[str, Any]) -> dict[str, Any]:
    """Translate the editor's change set (row positions) into pair ids for apply_edits."""
    ids = rows["id"].tolist()
    edited: dict[int, dict[str, Any]] = {}
    for pos, change in (state.get("edited_rows") or {}).items():
        pos = int(pos)
        if 0 <= pos < len(ids):
            fields = {k: v for k, v in change.items() if k != "id"}
            if fields:
                edited[int(ids[pos])] = fields
    deleted = [int(ids[int(p)]) for p in state.get("deleted_rows") or [] if int(p) < len(ids)]
    # A row added and left empty is not an edit.
    added = [fields for fields in map(_fields, state.get("added_rows") or []) if fields]
    return {"added": added, "edited": edited, "deleted": deleted}
