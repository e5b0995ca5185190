"""Corpus page: pick or create a corpus; browse, edit, import, export and inspect its pairs.

The tabs: Pairs (``ui.pairs_table``: a paged, searchable table whose edits are saved together
in one transaction), Import (``ui.import_panel``: previewed and validated before anything is
written), Export & clean up (``ui.cleaning_panel``: previewed, confirmed, undoable),
Statistics, Glossary (``ui.glossary_panel``), and History (``ui.history_panel``: every
change, undo, and the trash of deleted corpora).
"""

from __future__ import annotations

import streamlit as st

from ui import (
    charts,
    cleaning_panel,
    dialogs,
    feedback,
    formatting,
    glossary_panel,
    grid,
    history_panel,
    import_panel,
    pairs_table,
    pickers,
)
from ui.i18n import N_, _, n_, translate
from ui.signin import READ_ONLY, can
from workbench.corpus import corpora, exporting, formats, pairs
from workbench.corpus.corpora import CorpusInfo
from workbench.corpus.pairs import SPLITS
from workbench.team import trash
from workbench.team.access import Permission
from workbench.training import run_info
from workbench.training.runs import RunStatus

TABS = (  # icon, name (a message id)
    (":material/table:", N_("Pairs")),
    (":material/upload:", N_("Import")),
    (":material/download:", N_("Export & clean up")),
    (":material/bar_chart:", N_("Statistics")),
    (":material/menu_book:", N_("Glossary")),
    (":material/history:", N_("History")),
)
GRID_OF_TAB = {0: "pairs", 4: "glossary"}  # the tabs (by position) that hold a grid


def tab_labels() -> list[str]:
    """The tabs' labels in the session's language (the value of the ``corpus_tab`` widget)."""
    return [f"{icon} {translate(name)}" for icon, name in TABS]


def render() -> None:
    all_corpora = corpora.list_corpora()
    if not all_corpora:
        feedback.empty_state(
            _("No corpus yet. Create one below, then add pairs in the table or import a file.")
        )
        with st.container(border=True):
            create_form()
        with st.expander(_("Trash: deleted corpora"), icon=":material/delete:"):
            history_panel.trash_list()
        return

    head = st.columns([4, 1, 1.2, 1], vertical_alignment="bottom")  # "Rename" fits at 1400 px
    with head[0]:
        current = pickers.corpus_picker(all_corpora, key="corpus_page_corpus")
    if can(Permission.EDIT):  # the services check the role; the page hides what it refuses
        with head[1], st.popover(_("New"), icon=":material/add:", width="stretch"):
            create_form()
        with head[2], st.popover(_("Rename"), icon=":material/edit:", width="stretch"):
            rename_form(current)
    if can(Permission.DELETE):
        with head[3]:
            if st.button(
                _("Delete"), icon=":material/delete:", key="delete_corpus", width="stretch"
            ):
                dialogs.ask_confirmation("delete_corpus")
    dialogs.confirmation_dialog(
        "delete_corpus",
        _("Delete corpus"),
        n_(
            "Delete **{name}** and its **{n} pair**? It stays in the trash for {days} days "
            "(History tab → Trash), where it can be restored. Model versions trained on it are "
            "kept.",
            "Delete **{name}** and its **{n} pairs**? It stays in the trash for {days} days "
            "(History tab → Trash), where it can be restored. Model versions trained on it are "
            "kept.",
            current.pair_count,
            name=current.name,
            days=trash.TRASH_DAYS,
        )
        + _runs_going_on(current),
        _("Delete corpus"),
        lambda: _delete(current),
    )

    labels = tab_labels()
    if st.session_state.get("corpus_tab") not in (None, *labels):  # the language was switched
        del st.session_state["corpus_tab"]
    tab = st.session_state.get("corpus_tab", labels[0])
    grid.drafts_elsewhere(current, GRID_OF_TAB.get(labels.index(tab)), _open_grid)
    tabs = st.tabs(labels, key="corpus_tab", on_change="rerun")
    if tabs[0].open is not False:
        with tabs[0]:
            pairs_table.pairs_editor(current)
    if tabs[1].open:
        with tabs[1]:
            if can(Permission.EDIT):
                import_panel.import_panel(current)
            else:
                st.info(READ_ONLY, icon=":material/lock:")
    if tabs[2].open:
        with tabs[2]:
            export_panel(current)
    if tabs[3].open:
        with tabs[3]:
            statistics_panel(current)
    if tabs[4].open:
        with tabs[4]:
            glossary_panel.glossary_panel(current)
    if tabs[5].open:
        with tabs[5]:
            history_panel.history_panel(current)


def _open_grid(corpus_id: int, table: str) -> None:
    """Show a corpus' grid (an on-click callback: it runs before the widgets are drawn)."""
    st.session_state["corpus_page_corpus"] = corpus_id
    st.session_state[pickers.CURRENT_CORPUS] = corpus_id
    tab = next(i for i, g in GRID_OF_TAB.items() if g == table)
    st.session_state["corpus_tab"] = tab_labels()[tab]


# ------------------------------------------------------------------- corpus management


def create_form() -> None:
    st.markdown(_("**New corpus**"))
    # Not clear_on_submit: a refused name must stay for the user to fix. A created corpus
    # starts the next form afresh (new widget keys).
    nonce = st.session_state.get("create_nonce", 0)
    with st.form(f"create_corpus_{nonce}", border=False):
        name = st.text_input(_("Name"), placeholder=_("e.g. Support tickets zh→en"))
        left, right = st.columns(2)
        src = left.text_input(
            _("Source language"), value="zh", help=_("An ISO code: zh, en, pt-BR…")
        )
        tgt = right.text_input(_("Target language"), value="en")
        if st.form_submit_button(_("Create corpus"), type="primary", icon=":material/add:"):
            with feedback.error_boundary(N_("creating the corpus")):
                info = corpora.create_corpus(name, src, tgt)
                st.session_state["create_nonce"] = nonce + 1
                st.session_state[pickers.CURRENT_CORPUS] = info.id
                pickers.select_later("corpus_page_corpus", info.id)
                feedback.flash(
                    _(
                        "Created corpus “{name}” ({src}→{tgt}).",
                        name=info.name,
                        src=info.src_lang,
                        tgt=info.tgt_lang,
                    )
                )
                st.rerun()


def rename_form(current: CorpusInfo) -> None:
    new_name = st.text_input(_("New name"), value=current.name, key=f"rename_{current.id}")
    if st.button(_("Rename"), type="primary", key="rename_corpus"):
        with feedback.error_boundary(N_("renaming the corpus")):
            info = corpora.rename_corpus(current.id, new_name)
            feedback.flash(_("Renamed to “{name}”.", name=info.name))
            st.rerun()


def _runs_going_on(current: CorpusInfo) -> str:
    """The dialog's word on the corpus' queued and running runs (none: nothing): deleting does
    not stop them, and each still registers its version."""
    lines = [
        _(
            "Run #{id} is training on it: it will finish and register its version.",
            id=run_id,
        )
        if status == RunStatus.RUNNING
        else _(
            "Run #{id} is queued on it: it will still train and register its version.",
            id=run_id,
        )
        for run_id, status in run_info.active_runs(current.id)
    ]
    return "".join(f"\n\n{line}" for line in lines)


def _delete(current: CorpusInfo) -> str:
    corpora.delete_corpus(current.id)
    st.session_state.pop(pickers.CURRENT_CORPUS, None)
    return _("Deleted corpus “{name}”.", name=current.name)


# ------------------------------------------------------------------- export & clean-up


def export_panel(current: CorpusInfo) -> None:
    left, right = st.columns(2, gap="large")
    with left, st.container(border=True):
        st.markdown(_("**Export**"))
        st.caption(_("Download every pair of the corpus (with split and note)."))
        fmt = st.segmented_control(
            _("Format"), exporting.EXPORT_FORMATS, default="tsv", key="export_format"
        )
        fmt = fmt or "tsv"
        st.download_button(
            _("Download {format}", format=fmt.upper()),
            data=lambda: exporting.export_bytes(current.id, fmt),
            file_name=f"{_slug(current.name)}.{fmt}",
            mime=formats.FORMATS[fmt].media_type,
            icon=":material/download:",
            key="export_download",
            on_click="ignore",
        )
    if not can(Permission.EDIT):  # de-duplicating and cleaning up change the corpus
        right.info(READ_ONLY, icon=":material/lock:")
        return
    with right, st.container(border=True):
        st.markdown(_("**Remove near-duplicates**"))
        st.caption(
            _(
                "Pairs that differ only in letter case, full-width/half-width forms or spacing "
                "are merged; the oldest one is kept."
            )
        )
        if st.button(_("De-duplicate…"), icon=":material/filter_alt:", key="dedupe"):
            dialogs.ask_confirmation("dedupe")
    dialogs.confirmation_dialog(
        "dedupe",
        _("Remove near-duplicates"),
        _(
            "Remove near-duplicate pairs from **{name}**? (The History tab can undo it.)",
            name=current.name,
        ),
        _("Remove duplicates"),
        lambda: _dedupe(current),
    )
    with st.container(border=True):
        cleaning_panel.cleanup_panel(current)


def _dedupe(current: CorpusInfo) -> str:
    removed = pairs.deduplicate(current.id)
    if not removed:
        return _("No near-duplicates found.")
    return n_("Removed {n} near-duplicate pair.", "Removed {n} near-duplicate pairs.", removed)


def _slug(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name.strip())
    return "-".join(part for part in keep.split("-") if part) or "corpus"


# -------------------------------------------------------------------------- statistics


def statistics_panel(current: CorpusInfo) -> None:
    stats = pairs.corpus_stats(current.id)
    cols = st.columns(4)
    cols[0].metric(_("Pairs (all splits)"), formatting.fmt_int(stats.total))
    for col, name in zip(cols[1:], SPLITS, strict=True):
        n = stats.split_counts.get(name, 0)
        share = f"{formatting.fmt_number(100 * n / stats.total, 0)} %" if stats.total else "—"
        col.metric(
            formatting.split_label(name),
            formatting.fmt_int(n),
            share,
            delta_color="off",
            delta_arrow="off",
        )
    if stats.total == 0:
        st.info(_("No pairs yet: add some in the Pairs tab or import a file."))
        return
    if stats.split_note:
        st.caption(stats.split_note)
    if not stats.split_counts.get("test"):
        st.caption(_("No test pairs: versions cannot be compared on this corpus until some exist."))
    lengths = stats.lengths
    columns = st.columns(2, gap="large")
    sides = (
        ("source", _("**Source sentence lengths** ({lang})", lang=current.src_lang), "#3b5bdb"),
        ("target", _("**Target sentence lengths** ({lang})", lang=current.tgt_lang), "#f08c00"),
    )
    for col, (side, heading, color) in zip(columns, sides, strict=True):
        with col:
            st.markdown(heading)
            st.altair_chart(
                charts.length_histogram(lengths[f"{side}_tokens"], color), width="stretch"
            )
    st.caption(
        n_(
            "Lengths from a uniform sample of {n} pair. Chinese/Japanese/Korean characters "
            "count as one token each; other text is counted in words.",
            "Lengths from a uniform sample of {n} pairs. Chinese/Japanese/Korean characters "
            "count as one token each; other text is counted in words.",
            stats.sample_size,
        )
        if stats.sample_size < stats.total
        else _(
            "Lengths from all pairs. Chinese/Japanese/Korean characters count as one token "
            "each; other text is counted in words."
        )
    )
