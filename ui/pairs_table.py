"""The Corpus page's table of pairs: one page of a search at a time, edited in place and saved
in one transaction.

Only one page of pairs is ever loaded (search, filter and paging run in the database), so the
table stays quick on a corpus of a million pairs. The table is the app's one grid
(``ui.grid``): unsaved edits are a draft kept in the database, so a corpus switch, another
page or a reload keeps them; they hold the table on the rows they were made in until they
are saved or discarded, and a new row that is only begun is named, never dropped.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import streamlit as st

from ui import formatting, grid, grid_conflicts
from ui.i18n import _, localized, n_
from workbench.corpus import draft_saves, pairs, splits
from workbench.corpus.corpora import CorpusInfo
from workbench.corpus.pairs import SPLITS

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
            parts.append(
                _("the search “{query}”", query=self.query)
                if self.query
                else _("clearing the search")
            )
        if self.split != shown.split:
            parts.append(
                _("all splits") if self.split == "all" else _("the {split} split", split=self.split)
            )
        if self.page_size != shown.page_size:
            parts.append(_("{n} rows per page", n=self.page_size))
        if self.page != shown.page and not parts:
            parts.append(_("page {page}", page=self.page))
        return _(", ").join(parts)


def _digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=6).hexdigest()


def _reset_page() -> None:
    st.session_state["pairs_page"] = 1


def pairs_editor(current: CorpusInfo) -> None:
    shown: _View | None = st.session_state.get(VIEW)
    if shown is not None and shown.corpus_id != current.id:
        shown = None
    unsaved = grid.pending("pairs", current).count

    wanted = _search_bar(current)
    # Unsaved edits hold the table on the rows they were made in (the draft keeps them
    # whatever the table shows, but the user would no longer see them): the wanted view
    # waits (the search bar keeps what was typed) until they are saved or discarded.
    if shown is None or not unsaved:
        shown = wanted
    elif shown != wanted:
        st.warning(
            n_(
                "**Save or discard your {n} unsaved change first.** The table keeps the rows "
                "you edited; {changes} will apply once they are saved or discarded.",
                "**Save or discard your {n} unsaved changes first.** The table keeps the rows "
                "you edited; {changes} will apply once they are saved or discarded.",
                unsaved,
                changes=wanted.changes_from(shown),
            ),
            icon=":material/edit_note:",
        )
    result = _search(shown)
    if shown.page > result.page_count and not unsaved:  # e.g. the last page was emptied
        shown = shown._replace(page=result.page_count)
        st.session_state["pairs_page"] = shown.page
        result = _search(shown)
    st.session_state[VIEW] = shown

    filtered = shown.query or shown.split != "all"

    def pager() -> None:
        if result.total:
            # The page number is plain view state ("pairs_page"); the widget is keyed by the
            # filters and page count, so a new search or a shrinking corpus starts it afresh.
            filters = (shown.query, shown.split, shown.page_size, result.total)
            key = f"pairs_pager_{_digest(*filters)}"

            def on_page() -> None:
                st.session_state["pairs_page"] = st.session_state[key]

            st.pagination(
                result.page_count,
                default=wanted.page,
                key=key,
                on_change=on_page,
                max_visible_pages=7,
            )
        else:
            st.caption(
                _("No pairs match.")
                if filtered
                else _("No pairs yet: add rows in the table or import a file.")
            )

    counted = (
        (
            n_("{n} pair matches", "{n} pairs match", result.total)
            if result.total_is_exact
            else n_("{n}+ pair match", "{n}+ pairs match", result.total)
        )
        if filtered
        else formatting.pair_count_label(result.total, "all")
    )
    rows = [
        (int(r["id"]), {c: r[c] for c in ("source", "target", "split", "note")})
        for r in result.rows.to_dict("records")
    ]
    grid.draw(
        grid.Grid(
            table="pairs",
            corpus=current,
            key_prefix="pairs_editor",
            id_column="id",
            column_config=_columns(current),
            save=lambda key: _save(key, current),
            save_key="save_edits",
            discard_key="discard_edits",
        ),
        rows,
        view=shown,
        summary=counted,
        height=min(38 + 35 * (len(rows) + 1), 560),
        left=pager,
    )


def _search_bar(current: CorpusInfo) -> _View:
    """The search bar (text, split, rows per page) and the page: the view the user asks for."""
    bar = st.columns([4, 1.4, 1.1], vertical_alignment="bottom")
    query = bar[0].text_input(
        _("Search"),
        key="pairs_query",
        placeholder=_("Search source or target text…"),
        on_change=_reset_page,
        icon=":material/search:",
    )
    split = bar[1].selectbox(
        _("Split"),
        ["all", *SPLITS],
        # A split is a value of the table: shown as it is. (Labels made here, in the run:
        # AppTest calls a format_func outside it, where the language is not known.)
        format_func={"all": _("all"), **{s: s for s in SPLITS}}.__getitem__,
        key="pairs_split",
        on_change=_reset_page,
    )
    page_size = bar[2].selectbox(
        _("Rows per page"), PAGE_SIZES, index=1, key="pairs_page_size", on_change=_reset_page
    )
    return _View(
        current.id, query, split, int(page_size), int(st.session_state.get("pairs_page", 1))
    )


def _columns(current: CorpusInfo) -> dict[str, Any]:
    """The table's columns, sized to keep every one in view."""
    return {
        "id": st.column_config.NumberColumn(_("id"), width="small", format="%d"),
        # widths that keep every column in view on a 1400 px window (sidebar open)
        "source": st.column_config.TextColumn(
            _("source ({lang})", lang=current.src_lang), width=310
        ),
        "target": st.column_config.TextColumn(
            _("target ({lang})", lang=current.tgt_lang), width=310
        ),
        "split": st.column_config.SelectboxColumn(
            _("split"),
            options=list(SPLITS),
            width="small",
            help=_("Leave empty on a new row to let the workbench choose (≈90/5/5)."),
        ),
        "note": st.column_config.TextColumn(_("note"), width=150),
    }


def _save(browser_key: str, current: CorpusInfo) -> tuple[str, str]:
    done = draft_saves.apply_pairs(browser_key, current.id)
    res = done.result
    saved = _(
        "Saved: {added} added, {edited} edited, {deleted} deleted.",
        added=res.added,
        edited=res.updated,
        deleted=res.deleted,
    )
    if res.regrouped:
        regrouped = localized(splits.regrouped_text(res.regrouped))
        saved = _("{done} {regrouped}", done=saved, regrouped=regrouped)
    return grid_conflicts.held_back(saved, done.conflicts)


def _search(view: _View) -> pairs.PairPage:
    split = None if view.split == "all" else view.split
    return pairs.search_pairs(view.corpus_id, view.query, split, view.page, view.page_size)
