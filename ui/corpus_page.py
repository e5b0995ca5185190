"""Corpus page: pick or create a corpus; browse, edit, import, export and inspect its pairs.

The tabs: Pairs (``ui.pairs_table``: a paged, searchable table whose edits are saved together
in one transaction), Import (``ui.import_panel``: previewed and validated before anything is
written), Export & clean up (``ui.cleaning_panel``: previewed, confirmed, undoable),
Statistics, and Glossary (``ui.glossary_panel``).
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
    import_panel,
    pairs_table,
    pickers,
)
from workbench import corpora, exporting, pairs
from workbench.corpora import CorpusInfo
from workbench.pairs import SPLITS

TABS = (
    ":material/table: Pairs",
    ":material/upload: Import",
    ":material/download: Export & clean up",
    ":material/bar_chart: Statistics",
    ":material/menu_book: Glossary",
)
GRID_OF_TAB = {TABS[0]: "pairs", TABS[4]: "glossary"}  # the tabs that hold a grid


def render() -> None:
    feedback.page_header(
        "Corpus", "The sentence pairs your models learn from: curate, import, export, inspect."
    )
    all_corpora = corpora.list_corpora()
    if not all_corpora:
        st.info(
            "No corpus yet. Create one below, then add pairs in the table or import a file.",
            icon=":material/info:",
        )
        with st.container(border=True):
            create_form()
        return

    head = st.columns([5, 1, 1, 1], vertical_alignment="bottom")
    with head[0]:
        current = pickers.corpus_picker(all_corpora, key="corpus_page_corpus")
    with head[1], st.popover("New", icon=":material/add:", width="stretch"):
        create_form()
    with head[2], st.popover("Rename", icon=":material/edit:", width="stretch"):
        rename_form(current)
    with head[3]:
        if st.button("Delete", icon=":material/delete:", key="delete_corpus", width="stretch"):
            dialogs.ask_confirmation("delete_corpus")
    dialogs.confirmation_dialog(
        "delete_corpus",
        "Delete corpus",
        f"Delete **{current.name}** and its **{formatting.plural(current.pair_count, 'pair')}**? "
        "This cannot be undone. Model versions trained on it are kept.",
        "Delete corpus",
        lambda: _delete(current),
    )

    tab = st.session_state.get("corpus_tab", TABS[0])
    grid.drafts_elsewhere(current, GRID_OF_TAB.get(tab), _open_grid)
    tabs = st.tabs(list(TABS), key="corpus_tab", on_change="rerun")
    if tabs[0].open is not False:
        with tabs[0]:
            pairs_table.pairs_editor(current)
    if tabs[1].open:
        with tabs[1]:
            import_panel.import_panel(current)
    if tabs[2].open:
        with tabs[2]:
            export_panel(current)
    if tabs[3].open:
        with tabs[3]:
            statistics_panel(current)
    if tabs[4].open:
        with tabs[4]:
            glossary_panel.glossary_panel(current)


def _open_grid(corpus_id: int, table: str) -> None:
    """Show a corpus' grid (an on-click callback: it runs before the widgets are drawn)."""
    st.session_state["corpus_page_corpus"] = corpus_id
    st.session_state[pickers.CURRENT_CORPUS] = corpus_id
    st.session_state["corpus_tab"] = next(t for t, g in GRID_OF_TAB.items() if g == table)


# ------------------------------------------------------------------- corpus management


def create_form() -> None:
    st.markdown("**New corpus**")
    # Not clear_on_submit: a refused name must stay for the user to fix. A created corpus
    # starts the next form afresh (new widget keys).
    nonce = st.session_state.get("create_nonce", 0)
    with st.form(f"create_corpus_{nonce}", border=False):
        name = st.text_input("Name", placeholder="e.g. Support tickets zh→en")
        left, right = st.columns(2)
        src = left.text_input("Source language", value="zh", help="An ISO code: zh, en, pt-BR…")
        tgt = right.text_input("Target language", value="en")
        if st.form_submit_button("Create corpus", type="primary", icon=":material/add:"):
            with feedback.error_boundary("creating the corpus"):
                info = corpora.create_corpus(name, src, tgt)
                st.session_state["create_nonce"] = nonce + 1
                st.session_state[pickers.CURRENT_CORPUS] = info.id
                pickers.select_later("corpus_page_corpus", info.id)
                feedback.flash(f"Created corpus “{info.name}” ({info.src_lang}→{info.tgt_lang}).")
                st.rerun()


def rename_form(current: CorpusInfo) -> None:
    new_name = st.text_input("New name", value=current.name, key=f"rename_{current.id}")
    if st.button("Rename", type="primary", key="rename_corpus"):
        with feedback.error_boundary("renaming the corpus"):
            info = corpora.rename_corpus(current.id, new_name)
            feedback.flash(f"Renamed to “{info.name}”.")
            st.rerun()


def _delete(current: CorpusInfo) -> str:
    corpora.delete_corpus(current.id)
    st.session_state.pop(pickers.CURRENT_CORPUS, None)
    return f"Deleted corpus “{current.name}”."


# ------------------------------------------------------------------- export & clean-up


def export_panel(current: CorpusInfo) -> None:
    left, right = st.columns(2, gap="large")
    with left, st.container(border=True):
        st.markdown("**Export**")
        st.caption("Download every pair of the corpus (with split and note).")
        fmt = st.segmented_control(
            "Format", exporting.EXPORT_FORMATS, default="tsv", key="export_format"
        )
        fmt = fmt or "tsv"
        st.download_button(
            f"Download {fmt.upper()}",
            data=lambda: exporting.export_bytes(current.id, fmt),
            file_name=f"{_slug(current.name)}.{fmt}",
            mime={"tsv": "text/tab-separated-values", "csv": "text/csv"}.get(
                fmt, "application/jsonl"
            ),
            icon=":material/download:",
            key="export_download",
            on_click="ignore",
        )
    with right, st.container(border=True):
        st.markdown("**Remove near-duplicates**")
        st.caption(
            "Pairs that differ only in letter case, full-width/half-width forms or spacing "
            "are merged; the oldest one is kept."
        )
        if st.button("De-duplicate…", icon=":material/filter_alt:", key="dedupe"):
            dialogs.ask_confirmation("dedupe")
    dialogs.confirmation_dialog(
        "dedupe",
        "Remove near-duplicates",
        f"Remove near-duplicate pairs from **{current.name}**? This cannot be undone.",
        "Remove duplicates",
        lambda: _dedupe(current),
    )
    with st.container(border=True):
        cleaning_panel.cleanup_panel(current)


def _dedupe(current: CorpusInfo) -> str:
    removed = pairs.deduplicate(current.id)
    if not removed:
        return "No near-duplicates found."
    return f"Removed {removed:,} near-duplicate pairs."


def _slug(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name.strip())
    return "-".join(part for part in keep.split("-") if part) or "corpus"


# -------------------------------------------------------------------------- statistics


def statistics_panel(current: CorpusInfo) -> None:
    stats = pairs.corpus_stats(current.id)
    cols = st.columns(4)
    cols[0].metric("Pairs (all splits)", f"{stats.total:,}")
    for col, name in zip(cols[1:], SPLITS, strict=True):
        n = stats.split_counts.get(name, 0)
        share = f"{100 * n / stats.total:.0f} %" if stats.total else "—"
        col.metric(name.capitalize(), f"{n:,}", share, delta_color="off", delta_arrow="off")
    if stats.total == 0:
        st.info("No pairs yet: add some in the Pairs tab or import a file.")
        return
    if stats.split_note:
        st.caption(stats.split_note)
    if not stats.split_counts.get("test"):
        st.caption("No test pairs: versions cannot be compared on this corpus until some exist.")
    lengths = stats.lengths
    columns = st.columns(2, gap="large")
    sides = (
        ("source", current.src_lang, "#3b5bdb"),
        ("target", current.tgt_lang, "#f08c00"),
    )
    for col, (side, lang, color) in zip(columns, sides, strict=True):
        with col:
            st.markdown(f"**{side.capitalize()} sentence lengths** ({lang})")
            st.altair_chart(
                charts.length_histogram(lengths[f"{side}_tokens"], color), width="stretch"
            )
    sample = (
        f"a uniform sample of {stats.sample_size:,} pairs"
        if stats.sample_size < stats.total
        else "all pairs"
    )
    st.caption(
        f"Lengths from {sample}. Chinese/Japanese/Korean characters count as one token each; "
        "other text is counted in words."
    )
