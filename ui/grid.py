"""The one editable grid of the app (the pairs table, the glossary): a ``st.data_editor``
whose unsaved edits are a draft kept in the database (``workbench.corpus.drafts``), per browser and
per corpus, never only in the widget.

Streamlit drops a widget's state whenever the widget is not drawn (another corpus picked,
another page opened, a reload), so the edits are copied into the draft on every run, before
any page draws (``keep_drafts``, called by the router), and again right after the grid is
drawn. A grid drawn afresh starts from its draft: the stored rows with the draft's edits
applied. The browser is named by a key kept in the page's address (``?drafts=…``), which
survives a reload; Streamlit clears the address' parameters on a page switch, so every run
puts it back.

Every grid has the same footer: what it shows, its unsaved changes (a half-filled new row is
counted as incomplete: ``Draft.incomplete``, the one rule), Review · Discard · Save.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, grid_conflicts
from ui.i18n import N_, _, n_, p_
from ui.signin import can
from workbench.corpus import draft_saves, drafts
from workbench.corpus.corpora import CorpusInfo
from workbench.corpus.drafts import Draft
from workbench.team.access import Permission

PARAM = "drafts"  # the address' parameter holding the tab's key
COOKIE = "workbench_browser"  # names the browser: the first part of its tabs' keys
_BROWSER_KEY = "_drafts_browser_key"
_COOKIE_BOX = "browser_cookie"  # the hidden container of the script that sets COOKIE
_LIVE = "_drafts_live_grids"  # grid name -> the grid drawn last (a plain dict, see _live)
_GENERATION = "_drafts_generation"


def browser_key() -> str:
    """This tab's key: the one in the address (a reload keeps it), else a new one in this
    browser (its cookie ``COOKIE`` names the browser, ``_remember_browser``: its other tabs'
    drafts are then found, ``drafts.other_tabs``); and put it (back) into the address."""
    key = st.session_state.get(_BROWSER_KEY)
    if key is None:
        given = st.query_params.get(PARAM)
        browser = st.context.cookies.get(COOKIE)
        key = given if drafts.is_browser_key(given) else drafts.new_browser_key(browser)
        st.session_state[_BROWSER_KEY] = key
    if st.query_params.get(PARAM) != key:
        st.query_params[PARAM] = key
    return key


def _remember_browser(key: str) -> None:
    """Set the cookie that names this browser (the first part of ``key``: the browser's tabs
    share the first one's) when this tab's connection did not send it — on every run until
    then, as a run that replaces the page before the browser drew it drops a script set once;
    in a container the page hides (a visible element, even an empty one, takes a gap)."""
    if st.context.cookies.get(COOKIE) == drafts.browser_of(key):
        return
    st.html(
        f'<style>[data-testid="stLayoutWrapper"]:has(> .st-key-{_COOKIE_BOX}), '
        f".st-key-{_COOKIE_BOX} {{ display: none; }}</style>"
    )
    with st.container(key=_COOKIE_BOX):
        st.html(
            f"<script>document.cookie = '{COOKIE}={drafts.browser_of(key)}; path=/; "
            "max-age=31536000; samesite=strict';</script>",
            unsafe_allow_javascript=True,
        )


def _open_tab(key: str) -> None:
    """Show another tab's drafts in this one (this tab's own, if any, stay under its key and
    are then listed as another tab's)."""
    st.session_state[_BROWSER_KEY] = key
    st.session_state.pop(_LIVE, None)


def keep_drafts() -> None:
    """Copy the edits of every grid drawn on the last run into its draft, before anything on
    this run can drop the widget's state (a switch of corpus or page, another view). Only
    for someone who may edit: a draft is an edit not saved yet (the grid drawn last was
    editable, and its user has become a viewer since: its edits are not kept)."""
    if not can(Permission.EDIT):
        st.session_state.pop(_LIVE, None)
        return
    with feedback.error_boundary(N_("keeping the unsaved edits")):
        key = browser_key()
        _remember_browser(key)
        lives: dict[str, dict[str, Any]] = st.session_state.get(_LIVE, {})
        for name, live in list(lives.items()):
            if live["key"] in st.session_state:
                _store(key, live)
            else:  # not drawn on the last run: its edits are in the draft already
                del lives[name]


def _store(key: str, live: dict[str, Any]) -> Draft:
    """The grid's draft now (its base plus the widget's changes, applied onto those of another
    tab with the same key: ``drafts.save``), stored if it changed. Only for a grid whose
    widget state exists (drawn on the last run or this one)."""
    base = Draft.from_payload(live["base"])
    draft = base.merged(
        live["ids"],
        st.session_state[live["key"]],
        drafts.COLUMNS[live["table"]],
        live.get("revisions"),  # what the grid showed when the edit was typed
    )
    payload = draft.payload()
    if payload != live["saved"]:
        # Applied onto the stored draft: another tab with this key may have stored its own.
        last = Draft.from_payload(live["saved"])
        stored = drafts.save(key, live["corpus_id"], live["table"], draft, since=last)
        live["saved"] = payload
        return stored
    return draft


def pending(table: str, corpus: CorpusInfo) -> Draft:
    """The grid's unsaved edits, as stored (``keep_drafts`` stored this run's first); none
    for someone who may not edit (a viewer neither saves nor discards a draft)."""
    if not can(Permission.EDIT):
        return Draft()
    return drafts.load(browser_key(), corpus.id, table)


def _name(table: str, corpus_id: int) -> str:
    return f"{table}:{corpus_id}"


def forget(table: str, corpus_id: int) -> None:
    """The grid starts afresh from its (saved or discarded) draft on the next run."""
    st.session_state.get(_LIVE, {}).pop(_name(table, corpus_id), None)


@dataclass(frozen=True)
class Grid:
    """What differs between the grids: the table, its columns, its buttons' keys, and what
    Save does (a ``workbench.corpus.drafts`` service; returns the message shown after it)."""

    table: str
    corpus: CorpusInfo
    key_prefix: str
    column_config: dict[str, Any]
    save: Callable[[str], tuple[str, str]]  # (message, its ``feedback.flash`` kind)
    save_key: str
    discard_key: str
    id_column: str | None = None  # a read-only column showing the row id
    disabled: Sequence[str] = field(default_factory=tuple)


def draw(
    grid: Grid,
    rows: Sequence[tuple[Any, dict[str, Any]]],
    *,
    view: Hashable,
    summary: str,
    height: int | str = "auto",
    left: Callable[[], None] | None = None,
) -> Draft:
    """Draw the grid over ``rows`` (row id, cells) with its draft applied, then its footer
    (``left`` draws into the footer's first column, e.g. a pager). ``view`` names what the
    rows are (a search and page): another view is another widget. Returns the draft.
    Someone who may not edit (a viewer) reads the same rows, locked, with no footer buttons."""
    if not can(Permission.EDIT):
        return _read_only(grid, rows, summary, height, left)
    key = browser_key()
    name = _name(grid.table, grid.corpus.id)
    lives: dict[str, dict[str, Any]] = st.session_state.setdefault(_LIVE, {})
    row_ids = [_plain(rid) for rid, _cells in rows]
    # The stored rows' text: another tab's save changes it, and a widget drawn over other data
    # starts afresh, so the grid does too, from the draft (``keep_drafts`` stored its edits).
    cells = hashlib.blake2b(repr(list(rows)).encode(), digest_size=8).hexdigest()
    live = lives.get(name)
    if (
        live is None
        # another tab with this key (a duplicated tab, one opened here) changed the draft
        or drafts.load(key, grid.corpus.id, grid.table).payload() != live["saved"]
        or live["view"] != repr(view)
        or live["rows"] != row_ids
        or live.get("cells") != cells
        or live["key"] not in st.session_state
    ):
        stored = drafts.load(key, grid.corpus.id, grid.table)
        generation = st.session_state.get(_GENERATION, 0) + 1
        st.session_state[_GENERATION] = generation
        digest = hashlib.blake2b(repr((name, generation)).encode(), digest_size=6).hexdigest()
        live = {
            "key": f"{grid.key_prefix}_{digest}",
            "table": grid.table,
            "corpus_id": grid.corpus.id,
            "view": repr(view),
            "rows": row_ids,  # the stored rows it was drawn over
            "cells": cells,
            # The ids of the rows it shows, by position (deleted ones are not shown; the
            # draft's added rows follow them): what the widget's row positions refer to.
            "ids": [rid for rid, _cells in stored.shown(rows) if rid is not None],
            "base": stored.payload(),
            "saved": stored.payload(),
        }
        lives[name] = live
    grid_conflicts.show(grid, browser_key(), lambda: forget(grid.table, grid.corpus.id))
    live["revisions"] = draft_saves.revisions(grid.corpus.id, grid.table, row_ids)
    shown = Draft.from_payload(live["base"]).shown(rows)
    columns = ([grid.id_column] if grid.id_column else []) + list(drafts.COLUMNS[grid.table])
    frame = pd.DataFrame(
        [({grid.id_column: rid} if grid.id_column else {}) | cells for rid, cells in shown],
        columns=columns,
    ).astype({c: "string" for c in drafts.COLUMNS[grid.table]})  # an all-empty column is text
    st.data_editor(
        frame,
        key=live["key"],
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        height=height,
        disabled=[grid.id_column, *grid.disabled] if grid.id_column else list(grid.disabled),
        column_order=columns,
        # No `required=True`: the browser would then keep a half-filled new row to itself
        # (never sent, so silently dropped); sent, the draft's one rule names it instead.
        column_config=grid.column_config,
        placeholder="",  # an empty cell (a new row's) reads empty, not "None"
    )
    draft = _store(key, live)
    _footer(grid, draft, summary, left)
    return draft


def _read_only(
    grid: Grid,
    rows: Sequence[tuple[Any, dict[str, Any]]],
    summary: str,
    height: int | str,
    left: Callable[[], None] | None,
) -> Draft:
    columns = ([grid.id_column] if grid.id_column else []) + list(drafts.COLUMNS[grid.table])
    frame = pd.DataFrame(
        [({grid.id_column: rid} if grid.id_column else {}) | cells for rid, cells in rows],
        columns=columns,
    )
    st.data_editor(  # the same grid, locked: no cell edits, no rows to add
        frame,
        key=f"{grid.key_prefix}_read_only",
        disabled=True,
        num_rows="fixed",
        hide_index=True,
        width="stretch",
        height=height,
        column_config=grid.column_config,
        placeholder="",
    )
    foot = st.columns([3, 5], vertical_alignment="center")
    if left is not None:
        with foot[0]:
            left()
    foot[1].caption(_("{summary} · read only", summary=summary))
    return Draft.from_payload(None)


def _plain(value: Any) -> Any:
    """A row id as JSON keeps it (a numpy integer from a DataFrame is a Python int)."""
    return value.item() if hasattr(value, "item") else value


def _footer(grid: Grid, draft: Draft, summary: str, left: Callable[[], None] | None) -> None:
    n = draft.count
    incomplete = draft.incomplete(grid.table, grid.corpus)
    foot = st.columns([3, 2, 1, 1, 1], vertical_alignment="center")
    if left is not None:
        with foot[0]:
            left()
    if not n:
        state = _("{summary} · add rows at the bottom", summary=summary)
    elif incomplete:
        state = n_(
            "{summary} · **{n} unsaved change** ({incomplete} incomplete)",
            "{summary} · **{n} unsaved changes** ({incomplete} incomplete)",
            n,
            summary=summary,
            incomplete=len(incomplete),
        )
    else:
        state = n_(
            "{summary} · **{n} unsaved change**",
            "{summary} · **{n} unsaved changes**",
            n,
            summary=summary,
        )
    foot[1].caption(state)
    with foot[2].popover(p_("grid", "Review"), disabled=not n, width="stretch"):
        st.markdown(
            n_(
                "**{corpus}: {n} unsaved change**",
                "**{corpus}: {n} unsaved changes**",
                n,
                corpus=grid.corpus.name,
            )
        )
        st.markdown("\n".join(f"- {line}" for line in describe(draft, grid)))
    if foot[3].button(_("Discard…"), key=grid.discard_key, disabled=not n, width="stretch"):
        dialogs.ask_confirmation(grid.discard_key)

    def discard() -> str:
        drafts.discard(browser_key(), grid.corpus.id, grid.table)
        forget(grid.table, grid.corpus.id)
        return n_("Discarded {n} unsaved change.", "Discarded {n} unsaved changes.", n)

    dialogs.confirmation_dialog(
        grid.discard_key,
        _("Discard the unsaved changes"),
        n_(
            "Discard **{n} unsaved change** of “{corpus}”? It is not saved anywhere: this "
            "cannot be undone.",
            "Discard **{n} unsaved changes** of “{corpus}”? They are not saved anywhere: this "
            "cannot be undone.",
            n,
            corpus=grid.corpus.name,
        ),
        _("Discard"),
        discard,
    )
    if foot[4].button(
        _("Save"),
        key=grid.save_key,
        type="primary",
        icon=":material/save:",
        disabled=not n,
        width="stretch",
    ):
        with feedback.error_boundary(N_("saving the edits")):
            message, kind = grid.save(browser_key())
            forget(grid.table, grid.corpus.id)
            feedback.flash(message, kind)
            st.rerun()


def describe(draft: Draft, grid: Grid) -> list[str]:
    """The draft's changes in words, one per line (the Review list)."""
    pairs = grid.table == "pairs"
    out = [
        (
            _("pair {id}: {changes}", id=rid, changes=changes)
            if pairs
            else _("term {id}: {changes}", id=rid, changes=changes)
        )
        for rid, cells in draft.edited.items()
        for changes in [
            _(", ").join(
                _("{column} → “{value}”", column=col, value="" if v is None else v)
                for col, v in cells.items()
            )
        ]
    ]
    out += [
        _(
            "new row: {cells}",
            cells=" · ".join(
                _("{column} “{value}”", column=col, value=v)
                for col, v in row.items()
                if v is not None
            ),
        )
        for row in draft.added
        if any(v is not None and str(v).strip() for v in row.values())
    ]
    out += [
        _("pair {id}: deleted", id=rid) if pairs else _("term {id}: deleted", id=rid)
        for rid in draft.deleted
    ]
    return out


def drafts_elsewhere(
    current: CorpusInfo, shown_table: str | None, open_grid: Callable[[int, str], None]
) -> None:
    """The browser's unsaved edits that are not on screen (another corpus, another tab), each
    with an Open button (``open_grid(corpus_id, table)``, an on-click callback): nothing typed
    is forgotten out of sight. Not shown to someone who may not edit: they could not save
    them."""
    if not can(Permission.EDIT):
        return
    with feedback.error_boundary(N_("listing the unsaved edits")):
        others = [
            d
            for d in drafts.list_drafts(browser_key())
            if (d.corpus_id, d.table) != (current.id, shown_table)
        ]
        for other, n in drafts.other_tabs(browser_key()):
            cols = st.columns([6, 1], vertical_alignment="center")
            cols[0].warning(
                n_(
                    "Another tab of this browser has **{n} unsaved change**.",
                    "Another tab of this browser has **{n} unsaved changes**.",
                    n,
                ),
                icon=":material/tab:",
            )
            cols[1].button(
                _("Open here"),
                key=f"open_tab_{other}",
                on_click=_open_tab,
                args=(other,),
                width="stretch",
            )
        for d in others:
            cols = st.columns([6, 1], vertical_alignment="center")
            cols[0].warning(
                n_(
                    "**{corpus}**: {n} unsaved change in the pairs, not saved yet.",
                    "**{corpus}**: {n} unsaved changes in the pairs, not saved yet.",
                    d.count,
                    corpus=d.corpus_name,
                )
                if d.table == "pairs"
                else n_(
                    "**{corpus}**: {n} unsaved change in the glossary, not saved yet.",
                    "**{corpus}**: {n} unsaved changes in the glossary, not saved yet.",
                    d.count,
                    corpus=d.corpus_name,
                ),
                icon=":material/edit_note:",
            )
            cols[1].button(
                _("Open"),
                key=f"open_draft_{d.corpus_id}_{d.table}",
                on_click=open_grid,
                args=(d.corpus_id, d.table),
                width="stretch",
            )
