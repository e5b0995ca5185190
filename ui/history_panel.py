"""The Corpus page's History tab: every change to the corpus (who, when, what), filtered by
user and time; undo one change, or everything since a moment (asking first when that is
more than one row); and the trash, where deleted corpora wait to be restored.

Everything here is view code: the history is ``workbench.team.history``, its undo
``workbench.team.undo``, the trash ``workbench.team.trash``. Times are shown and entered in UTC.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, formatting, pickers
from ui.i18n import N_, _, n_, translate
from ui.signin import can
from workbench.corpus.corpora import CorpusInfo
from workbench.team import history, trash, undo
from workbench.team.access import Permission
from workbench.team.history import ChangeInfo

EVERYONE = N_("Everyone")  # the User filter's first option (a message id): no filter
# The table's columns, the long summary last: the state stays in view on a 1400 px window.
COLUMNS = ("change", "when (UTC)", "who", "action", "what", "rows", "state", "summary")


def history_panel(current: CorpusInfo) -> None:
    st.caption(
        _(
            "Every change to this corpus, its pairs and its glossary, newest first (times in "
            "UTC). An undo is a change too: it can be undone in turn."
        )
    )
    left, middle, right = st.columns(3)
    actors = {EVERYONE: translate(EVERYONE)} | {a: a for a in history.actors(current.id)}
    who = left.selectbox(
        _("User"),
        list(actors),
        format_func=actors.__getitem__,
        key="history_actor",
    )
    since = middle.date_input(_("From"), value=None, key="history_from")
    until = right.date_input(_("To (inclusive)"), value=None, key="history_to")
    changes = history.list_changes(
        current.id,
        actor=None if who == EVERYONE else who,
        since=_start_of(since) if since else None,
        until=_start_of(until + timedelta(days=1)) if until else None,
    )
    if not changes:
        st.info(_("No changes match."), icon=":material/info:")
    else:
        st.dataframe(
            _table(changes),
            hide_index=True,
            width="stretch",
            key="history_table",
            column_order=COLUMNS,
            column_config=_columns(),
        )
        if len(changes) == history.LIST_LIMIT:
            st.caption(
                _(
                    "The newest {n} changes; narrow the dates for older ones.",
                    n=history.LIST_LIMIT,
                )
            )
        if can(Permission.EDIT):  # an undo is an edit (the service checks it too)
            _undo_one(current, changes)
    if can(Permission.EDIT):
        _undo_since(current)
    with st.expander(_("Trash: deleted corpora"), icon=":material/delete:"):
        trash_list()


def _start_of(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _state(c: ChangeInfo) -> str:
    if c.undone_by is not None:
        return _("undone by #{id}", id=c.undone_by)
    if not c.reversible:
        return _("cannot be undone")
    return ""


def _columns() -> dict[str, Any]:
    """The table's headers in the session's language (its columns keep their English keys);
    the state wide enough for "cannot be undone" (the grid sizes a column by its first rows,
    where the state is often empty), the summary no wider than the window leaves."""
    return {
        "change": _("change"),
        "when (UTC)": _("when (UTC)"),
        "who": _("who"),
        "what": _("what"),
        "action": _("action"),
        # a long summary would push the table past a 1400 px window: it is cut (the whole
        # text on hover) where the state is not
        "summary": st.column_config.TextColumn(_("summary"), width="medium"),
        "rows": _("rows"),
        "state": st.column_config.TextColumn(_("state"), width="medium"),
    }


def _entity(c: ChangeInfo) -> str:
    """What a change touched, in the session's language ("pair 12"; several rows: "pair")."""
    name = _named(history.ENTITY_LABELS, c.entity)
    return name if c.entity_id is None else f"{name} {c.entity_id}"


def _named(labels: dict[str, str], value: str) -> str:
    """A stored value's label translated (one recorded by a newer action: as it is)."""
    return translate(labels[value]) if value in labels else value


def _table(changes: list[ChangeInfo]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "change": f"#{c.id}",
                "when (UTC)": formatting.fmt_datetime(c.at, seconds=True),
                "who": c.actor,
                "what": _entity(c),
                "action": _named(history.ACTION_LABELS, c.action),
                "summary": c.summary,
                "rows": c.rows,
                "state": _state(c),
            }
            for c in changes
        ]
    )


def _label(c: ChangeInfo) -> str:
    what = c.summary or _named(history.ACTION_LABELS, c.action)
    return f"#{c.id} · {formatting.fmt_datetime(c.at)} · {c.actor} · {what}"


def _undo_one(current: CorpusInfo, changes: list[ChangeInfo]) -> None:
    undoable = {c.id: c for c in changes if c.reversible and c.undone_by is None}
    if not undoable:
        return
    left, right = st.columns([4, 1], vertical_alignment="bottom")
    labels = {i: _label(c) for i, c in undoable.items()}
    pickers.follow_newest("history_undo_choice", labels)  # a new change is preselected
    chosen = left.selectbox(
        _("Change to undo"),
        list(undoable),
        format_func=labels.__getitem__,
        key="history_undo_choice",
    )
    change = undoable[chosen]
    if right.button(_("Undo"), icon=":material/undo:", key="history_undo", width="stretch"):
        if change.rows > 1:
            dialogs.ask_confirmation("history_undo_one")
        else:
            with feedback.error_boundary(N_("undoing the change")):
                feedback.flash(_undo(change))
                st.rerun()
    dialogs.confirmation_dialog(
        "history_undo_one",
        _("Undo a change"),
        n_(
            "Undo change **#{id}** ({summary}), which touched **{n} row**?",
            "Undo change **#{id}** ({summary}), which touched **{n} rows**?",
            change.rows,
            id=change.id,
            summary=change.summary or _named(history.ACTION_LABELS, change.action),
        ),
        _("Undo"),
        lambda: _undo(change),
    )


def _undo(change: ChangeInfo) -> str:
    new_id = undo.undo_change(change.id)
    return _("Undid change #{id} (recorded as change #{new_id}).", id=change.id, new_id=new_id)


def _undo_since(current: CorpusInfo) -> None:
    with st.expander(_("Undo everything since…"), icon=":material/history:"):
        left, middle, right = st.columns([2, 2, 1], vertical_alignment="bottom")
        day = left.date_input(
            _("Day (UTC)"), value=datetime.now(UTC).date(), key="history_since_day"
        )
        moment = middle.time_input(_("Time (UTC)"), value=time(0, 0), key="history_since_time")
        since = datetime.combine(day, moment, tzinfo=UTC)
        count = undo.changes_since(current.id, since)
        if right.button(
            _("Undo since…"), key="history_undo_since", width="stretch", disabled=not count
        ):
            dialogs.ask_confirmation("history_undo_since")
        if not count:
            st.caption(_("No change since then: nothing to undo."))
        dialogs.confirmation_dialog(
            "history_undo_since",
            _("Undo everything since"),
            n_(
                "Undo **{n} change** made to **{name}** since {since} UTC, newest first? The "
                "undos are recorded and can be undone in turn.",
                "Undo **{n} changes** made to **{name}** since {since} UTC, newest first? The "
                "undos are recorded and can be undone in turn.",
                count,
                name=current.name,
                since=formatting.fmt_datetime(since),
            ),
            _("Undo them"),
            lambda: _undo_all(current, since),
        )


def _undo_all(current: CorpusInfo, since: datetime) -> str:
    done = undo.undo_since(current.id, since)
    if not done:
        return _("Nothing to undo since then.")
    return n_(
        "Undid {n} change made since {since} UTC.",
        "Undid {n} changes made since {since} UTC.",
        len(done),
        since=formatting.fmt_datetime(since),
    )


def trash_list() -> None:
    """The corpora in the trash, each with Restore."""
    trashed = trash.list_trash()
    st.caption(
        _(
            "A deleted corpus stays here for {days} days with all its pairs, then it is "
            "removed for good.",
            days=trash.TRASH_DAYS,
        )
    )
    if not trashed:
        st.caption(_("The trash is empty."))
        return
    for t in trashed:
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.markdown(
            n_(
                "**{name}** ({src}→{tgt}, {n} pair) · deleted {deleted} UTC · removed after "
                "{removed}",
                "**{name}** ({src}→{tgt}, {n} pairs) · deleted {deleted} UTC · removed after "
                "{removed}",
                t.pair_count,
                name=t.name,
                src=t.src_lang,
                tgt=t.tgt_lang,
                deleted=formatting.fmt_datetime(t.deleted_at),
                removed=formatting.fmt_date(t.removed_after),
            )
        )
        if can(Permission.EDIT) and right.button(
            _("Restore"), icon=":material/restore_from_trash:", key=f"restore_{t.id}"
        ):
            with feedback.error_boundary(N_("restoring the corpus")):
                name = trash.restore_corpus(t.id)
                feedback.flash(_("Restored corpus “{name}”.", name=name))
                st.rerun()
