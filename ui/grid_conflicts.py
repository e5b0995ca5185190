"""The edit conflicts of a grid's draft (``workbench.corpus.draft_saves``), shown above the
grid (``ui.grid``): an edit whose row was changed since it was made, theirs beside yours, and
what a save says it held back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import streamlit as st

from ui import feedback, formatting
from ui.i18n import N_, _, n_
from workbench.corpus import draft_saves

if TYPE_CHECKING:
    from ui.grid import Grid


def held_back(saved: str, conflicts: Sequence[draft_saves.Conflict]) -> tuple[str, str]:
    """A save's message and its kind for ``feedback.flash``: a warning when it held edits back
    (the page's messages come first; the conflicts are shown below them, above the grid)."""
    if not conflicts:
        return saved, "success"
    held = n_(
        "{n} edit was held back: its row was changed since you edited it (see below).",
        "{n} edits were held back: their rows were changed since you edited them (see below).",
        len(conflicts),
    )
    return _("{done} {held}", done=saved, held=held), "warning"


def _version(cells: dict[str, Any] | None) -> str:
    """A row's cells as markdown lines (or "deleted")."""
    if cells is None:
        return _("*deleted*")
    return "\n".join(
        "- " + _("{column} “{value}”", column=col, value="" if v is None else v)
        for col, v in cells.items()
    )


def show(grid: Grid, browser_key: str, forget: Callable[[], None]) -> None:
    """The draft's edits whose rows were changed since (another tab, another person, an
    undo): both versions side by side, theirs (by whom, when) and yours, and a choice: keep
    theirs, keep mine, or merge (a row to edit). Resolving changes the draft only; the next
    Save writes it. Until then the edit stays in the draft: nothing typed is lost.
    ``forget``: the grid's widget state, dropped once the draft changed."""
    with feedback.error_boundary(N_("checking the unsaved edits against the saved rows")):
        found = draft_saves.conflicts(browser_key, grid.corpus.id, grid.table)
        if not found:
            return
        st.warning(
            n_(
                "**{n} edit conflicts with a change made since.** Choose what to keep.",
                "**{n} edits conflict with changes made since.** Choose what to keep.",
                len(found),
            ),
            icon=":material/call_split:",
        )
        for c in found:
            _conflict(grid, c, browser_key, forget)


def _conflict(
    grid: Grid, c: draft_saves.Conflict, browser_key: str, forget: Callable[[], None]
) -> None:
    label = _("pair {id}", id=c.row_id) if grid.table == "pairs" else _("term {id}", id=c.row_id)
    slug = hashlib.blake2b(repr((grid.table, c.row_id)).encode(), digest_size=6).hexdigest()
    with st.container(border=True, key=f"conflict_{slug}"):
        st.markdown(f"**{label}**")
        theirs, yours = st.columns(2)
        if c.by:
            when = formatting.fmt_datetime(c.at)
            theirs.markdown(_("**Theirs** · changed by {who} on {when}", who=c.by, when=when))
        else:
            theirs.markdown(_("**Theirs** · changed since"))
        theirs.markdown(_version(c.theirs))
        yours.markdown(_("**Yours** · not saved"))
        yours.markdown(_version(c.yours))
        buttons = st.columns(3)

        def resolve(keep: str, cells: dict[str, Any] | None = None) -> None:
            draft_saves.resolve(browser_key, grid.corpus.id, grid.table, c.row_id, keep, cells)
            forget()
            feedback.flash(_("Resolved {row}: Save to write it.", row=label), "info")
            st.rerun()

        if buttons[0].button(_("Keep theirs"), key=f"theirs_{slug}", width="stretch"):
            resolve("theirs")
        if buttons[1].button(_("Keep mine"), key=f"mine_{slug}", width="stretch"):
            resolve("mine")
        with buttons[2].popover(_("Merge"), width="stretch"):
            merged = {
                col: st.text_area(col, value=str(v or ""), key=f"merge_{slug}_{col}")
                for col, v in (c.yours or c.theirs or {}).items()
                if col != "split"
            }
            if st.button(_("Keep this merge"), key=f"merged_{slug}", type="primary"):
                base = c.yours or c.theirs or {}
                resolve("merged", {**base, **merged})
