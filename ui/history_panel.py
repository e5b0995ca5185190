"""The Corpus page's History tab: every change to the corpus (who, when, what), filtered by
user and time; undo one change, or everything since a moment (asking first when that is
more than one row); and the trash, where deleted corpora wait to be restored.

Everything here is view code: the history and its undo are ``workbench.team.history``, the
trash ``workbench.team.trash``. Times are shown and entered in UTC.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, formatting
from ui.signin import can
from workbench.corpus.corpora import CorpusInfo
from workbench.team import history, trash
from workbench.team.access import Permission
from workbench.team.history import ChangeInfo

EVERYONE = "Everyone"


def history_panel(current: CorpusInfo) -> None:
    st.caption(
        "Every change to this corpus, its pairs and its glossary, newest first (times in "
        "UTC). An undo is a change too: it can be undone in turn."
    )
    left, middle, right = st.columns(3)
    who = left.selectbox("User", [EVERYONE, *history.actors(current.id)], key="history_actor")
    since = middle.date_input("From", value=None, key="history_from")
    until = right.date_input("To (inclusive)", value=None, key="history_to")
    changes = history.list_changes(
        current.id,
        actor=None if who == EVERYONE else who,
        since=_start_of(since) if since else None,
        until=_start_of(until + timedelta(days=1)) if until else None,
    )
    if not changes:
        st.info("No changes match.", icon=":material/info:")
    else:
        st.dataframe(_table(changes), hide_index=True, width="stretch", key="history_table")
        if len(changes) == history.LIST_LIMIT:
            st.caption(f"The newest {history.LIST_LIMIT} changes; narrow the dates for older ones.")
        if can(Permission.EDIT):  # an undo is an edit (the service checks it too)
            _undo_one(current, changes)
    if can(Permission.EDIT):
        _undo_since(current)
    with st.expander("Trash: deleted corpora", icon=":material/delete:"):
        trash_list()


def _start_of(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _state(c: ChangeInfo) -> str:
    if c.undone_by is not None:
        return f"undone by #{c.undone_by}"
    if not c.reversible:
        return "cannot be undone"
    return ""


def _table(changes: list[ChangeInfo]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "change": f"#{c.id}",
                "when (UTC)": c.at.strftime("%Y-%m-%d %H:%M:%S"),
                "who": c.actor,
                "what": c.entity if c.entity_id is None else f"{c.entity} {c.entity_id}",
                "action": c.action,
                "summary": c.summary,
                "rows": c.rows,
                "state": _state(c),
            }
            for c in changes
        ]
    )


def _label(c: ChangeInfo) -> str:
    return f"#{c.id} · {c.at:%Y-%m-%d %H:%M} · {c.actor} · {c.summary or c.action}"


def _undo_one(current: CorpusInfo, changes: list[ChangeInfo]) -> None:
    undoable = {c.id: c for c in changes if c.reversible and c.undone_by is None}
    if not undoable:
        return
    left, right = st.columns([4, 1], vertical_alignment="bottom")
    chosen = left.selectbox(
        "Change to undo",
        list(undoable),
        format_func=lambda i: _label(undoable[i]),
        key="history_undo_choice",
    )
    change = undoable[chosen]
    if right.button("Undo", icon=":material/undo:", key="history_undo", width="stretch"):
        if change.rows > 1:
            dialogs.ask_confirmation("history_undo_one")
        else:
            with feedback.error_boundary("undoing the change"):
                feedback.flash(_undo(change))
                st.rerun()
    dialogs.confirmation_dialog(
        "history_undo_one",
        "Undo a change",
        f"Undo change **#{change.id}** ({change.summary or change.action}), which touched "
        f"**{formatting.plural(change.rows, 'row')}**?",
        "Undo",
        lambda: _undo(change),
    )


def _undo(change: ChangeInfo) -> str:
    new_id = history.undo_change(change.id)
    return f"Undid change #{change.id} (recorded as change #{new_id})."


def _undo_since(current: CorpusInfo) -> None:
    with st.expander("Undo everything since…", icon=":material/history:"):
        left, middle, right = st.columns([2, 2, 1], vertical_alignment="bottom")
        day = left.date_input("Day (UTC)", value=datetime.now(UTC).date(), key="history_since_day")
        moment = middle.time_input("Time (UTC)", value=time(0, 0), key="history_since_time")
        since = datetime.combine(day, moment, tzinfo=UTC)
        if right.button("Undo since…", key="history_undo_since", width="stretch"):
            dialogs.ask_confirmation("history_undo_since")
        dialogs.confirmation_dialog(
            "history_undo_since",
            "Undo everything since",
            f"Undo **{formatting.plural(history.changes_since(current.id, since), 'change')}** "
            f"made to **{current.name}** since {since:%Y-%m-%d %H:%M} UTC, newest first? "
            "The undos are recorded and can be undone in turn.",
            "Undo them",
            lambda: _undo_all(current, since),
        )


def _undo_all(current: CorpusInfo, since: datetime) -> str:
    done = history.undo_since(current.id, since)
    if not done:
        return "Nothing to undo since then."
    return f"Undid {formatting.plural(len(done), 'change')} made since {since:%Y-%m-%d %H:%M} UTC."


def trash_list() -> None:
    """The corpora in the trash, each with Restore."""
    trashed = trash.list_trash()
    st.caption(
        f"A deleted corpus stays here for {trash.TRASH_DAYS} days with all its pairs, then it "
        "is removed for good."
    )
    if not trashed:
        st.caption("The trash is empty.")
        return
    for t in trashed:
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.markdown(
            f"**{t.name}** ({t.src_lang}→{t.tgt_lang}, {formatting.plural(t.pair_count, 'pair')})"
            f" · deleted {t.deleted_at:%Y-%m-%d %H:%M} UTC · removed after "
            f"{t.removed_after:%Y-%m-%d}"
        )
        if can(Permission.EDIT) and right.button(
            "Restore", icon=":material/restore_from_trash:", key=f"restore_{t.id}"
        ):
            with feedback.error_boundary("restoring the corpus"):
                name = trash.restore_corpus(t.id)
                feedback.flash(f"Restored corpus “{name}”.")
                st.rerun()
