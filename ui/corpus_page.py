"""Corpus page: pick or create a corpus; browse, edit, import, export and inspect its pairs.

Only one page of pairs is ever loaded (search, filter and paging run in the database), so the
page stays quick on a corpus of a million pairs. Edits in the table are saved together, in one
transaction, by the Save button; an import is previewed and validated before anything is
written.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import altair as alt
import pandas as pd
import streamlit as st

from ui import common
from workbench import corpus, importing
from workbench.corpus import SPLITS, CorpusInfo

PAGE_SIZES = (25, 50, 100, 200)
UPLOAD_TYPES = ["tsv", "tab", "txt", "csv", "jsonl", "ndjson", "json", "gz"]
FORMAT_HELP = {
    "tsv": "source ⇥ target [⇥ split [⇥ note]] per line; a header line is optional",
    "csv": "source, target [, split [, note]] with standard quoting; a header is optional",
    "jsonl": 'one JSON object per line: {"source": …, "target": …, "split"?: …, "note"?: …}',
    "aligned": "two plain-text files: line N of one translates line N of the other",
    "tatoeba": "the Tatoeba export: English ⇥ other language ⇥ attribution",
}
PREVIEW_ROWS = 20


def render() -> None:
    common.page_header(
        "Corpus", "The sentence pairs your models learn from: curate, import, export, inspect."
    )
    corpora = corpus.list_corpora()
    if not corpora:
        st.info(
            "No corpus yet. Create one below, then add pairs in the table or import a file.",
            icon=":material/info:",
        )
        with st.container(border=True):
            create_form()
        return

    head = st.columns([5, 1, 1, 1], vertical_alignment="bottom")
    with head[0]:
        current = common.corpus_picker(corpora, key="corpus_page_corpus")
    with head[1], st.popover("New", icon=":material/add:", width="stretch"):
        create_form()
    with head[2], st.popover("Rename", icon=":material/edit:", width="stretch"):
        rename_form(current)
    with head[3]:
        if st.button("Delete", icon=":material/delete:", key="delete_corpus", width="stretch"):
            common.ask_confirmation("delete_corpus")
    common.confirmation_dialog(
        "delete_corpus",
        "Delete corpus",
        f"Delete **{current.name}** and its **{common.plural(current.pair_count, 'pair')}**? "
        "This cannot be undone. Model versions trained on it are kept.",
        "Delete corpus",
        lambda: _delete(current),
    )

    tabs = st.tabs(
        [
            ":material/table: Pairs",
            ":material/upload: Import",
            ":material/download: Export & clean up",
            ":material/bar_chart: Statistics",
        ],
        key="corpus_tab",
        on_change="rerun",
    )
    if tabs[0].open is not False:
        with tabs[0]:
            pairs_editor(current)
    if tabs[1].open:
        with tabs[1]:
            import_panel(current)
    if tabs[2].open:
        with tabs[2]:
            export_panel(current)
    if tabs[3].open:
        with tabs[3]:
            statistics_panel(current)


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
            with common.error_boundary("creating the corpus"):
                info = corpus.create_corpus(name, src, tgt)
                st.session_state["create_nonce"] = nonce + 1
                st.session_state[common.CURRENT_CORPUS] = info.id
                common.select_later("corpus_page_corpus", info.id)
                common.flash(f"Created corpus “{info.name}” ({info.src_lang}→{info.tgt_lang}).")
                st.rerun()


def rename_form(current: CorpusInfo) -> None:
    new_name = st.text_input("New name", value=current.name, key=f"rename_{current.id}")
    if st.button("Rename", type="primary", key="rename_corpus"):
        with common.error_boundary("renaming the corpus"):
            info = corpus.rename_corpus(current.id, new_name)
            common.flash(f"Renamed to “{info.name}”.")
            st.rerun()


def _delete(current: CorpusInfo) -> str:
    corpus.delete_corpus(current.id)
    st.session_state.pop(common.CURRENT_CORPUS, None)
    return f"Deleted corpus “{current.name}”."


# ------------------------------------------------------------------------------ pairs

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
            f"**Save or discard your {common.plural(unsaved, 'unsaved change')} first.** "
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
    st.data_editor(
        rows,
        key=key,
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        height=min(38 + 35 * (len(rows) + 1), 560),
        disabled=["id"],
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
        else common.pair_count_label(result.total, "all")
    )
    foot[1].caption(
        f"{counted} · "
        + (
            f"**{common.plural(n_changes, 'unsaved change')}**"
            + (f" ({len(incomplete)} incomplete)" if incomplete else "")
            if n_changes
            else "add rows at the bottom"
        )
    )
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
    with common.error_boundary("saving the edits"):
        res = corpus.apply_edits(current.id, **changes)
        st.session_state["editor_nonce"] = st.session_state.get("editor_nonce", 0) + 1
        common.flash(f"Saved: {res.added} added, {res.updated} edited, {res.deleted} deleted.")
        st.rerun()


def _search(view: _View) -> corpus.PairPage:
    split = None if view.split == "all" else view.split
    return corpus.search_pairs(view.corpus_id, view.query, split, view.page, view.page_size)


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


# ----------------------------------------------------------------------------- import


def import_panel(current: CorpusInfo) -> None:
    nonce = st.session_state.get("upload_nonce", 0)
    left, right = st.columns([3, 2])
    with left:
        upload = st.file_uploader(
            "Pairs file",
            type=UPLOAD_TYPES,
            key=f"upload_{nonce}",
            help="UTF-8 text, optionally gzip-compressed (.gz); at most "
            f"{st.get_option('server.maxUploadSize')} MB per file.",
        )
    guessed = _guess_format(upload)
    with right:
        fmt = st.selectbox(
            "Format",
            importing.FORMATS,
            index=importing.FORMATS.index(guessed),
            key=f"upload_format_{nonce}_{upload.file_id if upload else ''}",
            help="\n".join(f"- **{k}**: {v}" for k, v in FORMAT_HELP.items()),
        )
        st.caption(FORMAT_HELP[fmt])
    target = None
    if fmt == "aligned":
        target = st.file_uploader(
            f"Target-language file ({current.tgt_lang})",
            type=UPLOAD_TYPES,
            key=f"upload_target_{nonce}",
            help=f"The first file is the source side ({current.src_lang}).",
        )
    if upload is None:
        st.info(
            f"Choose a file to import into **{current.name}**. You will see a preview and the "
            "validation report before anything is written.",
            icon=":material/upload_file:",
        )
        return
    if fmt == "aligned" and target is None:
        st.info("Now choose the target-language file.", icon=":material/upload_file:")
        return

    parsed = _preview(current, upload, fmt, target)
    if parsed is None:
        return
    counts = st.columns(4)
    counts[0].metric("Rows read", f"{parsed.rows:,}")
    counts[1].metric("Will be added", f"{parsed.accepted:,}")
    counts[2].metric("Duplicates skipped", f"{parsed.duplicates:,}")
    counts[3].metric("Invalid rows skipped", f"{parsed.skipped:,}")

    shown = min(PREVIEW_ROWS, len(parsed.pairs))
    st.markdown(
        f"**Preview** (the first {common.plural(shown, 'pair')} to be added)"
        if shown < parsed.accepted
        else f"**Preview** ({common.plural(shown, 'pair')} to be added)"
    )
    preview = pd.DataFrame(
        [
            {
                "line": p.line,
                "source": p.source,
                "target": p.target,
                "split": p.split or "auto",
                "note": p.note,
            }
            for p in parsed.pairs[:PREVIEW_ROWS]
        ],
        columns=["line", "source", "target", "split", "note"],
    )
    st.dataframe(preview, hide_index=True, width="stretch")
    if parsed.report:
        warnings = len(parsed.warnings)
        total = sum(parsed.issue_counts.values())
        listed = f" (the first {len(parsed.report):,} listed)" if total > len(parsed.report) else ""
        with st.expander(
            f"Validation report: {total:,} issue(s){listed}"
            + (f", {warnings:,} warning(s) imported anyway" if warnings else ""),
            expanded=bool(parsed.errors),
            icon=":material/rule:",
        ):
            st.dataframe(parsed.report_frame(), hide_index=True, width="stretch")
    else:
        st.success("Every row is valid.", icon=":material/check_circle:")

    if st.button(
        f"Import {common.plural(parsed.accepted, 'pair')}",
        type="primary",
        icon=":material/upload:",
        key="do_import",
        disabled=not parsed.accepted,
    ):
        with (
            common.error_boundary("importing the file"),
            st.spinner("Importing…", show_time=True),
        ):
            # The upload is read again as a stream: the preview kept only a sample.
            result = importing.import_file(current.id, upload, fmt, target)
            st.session_state["upload_nonce"] = nonce + 1
            st.session_state.pop("_import_preview", None)
            cleaned = result.issue_counts.get("control_chars", 0)
            common.flash(
                f"Imported {result.added:,} pairs into “{current.name}” "
                f"({result.duplicates:,} duplicates and {result.skipped:,} invalid rows skipped"
                + (
                    f"; control or invisible characters removed from {cleaned:,} rows)."
                    if cleaned
                    else ")."
                )
            )
            st.rerun()


def _guess_format(upload: Any) -> str:
    if upload is None:
        return "tsv"
    try:
        upload.seek(0)
        return importing.infer_format(upload.name, upload.read(65536))
    except Exception:  # unknown extension: let the user choose
        return "tsv"


def _preview(current: CorpusInfo, upload: Any, fmt: str, target: Any) -> Any:
    """Parse + validate once per (file, format, corpus); reruns reuse the result.

    Only a bounded summary is kept in the session (counts, the capped report and the first
    ``PREVIEW_ROWS`` pairs), never the whole parse: a big upload must not cost its size
    again in every browser session that previews it."""
    ident = (
        current.id,
        current.pair_count,
        upload.file_id,
        fmt,
        target.file_id if target else None,
    )
    cached = st.session_state.get("_import_preview")
    if cached and cached[0] == ident:
        return cached[1]
    parsed = None
    with common.error_boundary("reading the file"), st.spinner("Checking the file…"):
        parsed = importing.preview_import(current.id, upload, fmt, target, sample=PREVIEW_ROWS)
        st.session_state["_import_preview"] = (ident, parsed)
    return parsed


# ------------------------------------------------------------------- export & clean-up


def export_panel(current: CorpusInfo) -> None:
    left, right = st.columns(2, gap="large")
    with left, st.container(border=True):
        st.markdown("**Export**")
        st.caption("Download every pair of the corpus (with split and note).")
        fmt = st.segmented_control(
            "Format", importing.EXPORT_FORMATS, default="tsv", key="export_format"
        )
        fmt = fmt or "tsv"
        st.download_button(
            f"Download {fmt.upper()}",
            data=lambda: importing.export_bytes(current.id, fmt),
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
            common.ask_confirmation("dedupe")
    common.confirmation_dialog(
        "dedupe",
        "Remove near-duplicates",
        f"Remove near-duplicate pairs from **{current.name}**? This cannot be undone.",
        "Remove duplicates",
        lambda: _dedupe(current),
    )


def _dedupe(current: CorpusInfo) -> str:
    removed = corpus.deduplicate(current.id)
    if not removed:
        return "No near-duplicates found."
    return f"Removed {removed:,} near-duplicate pairs."


def _slug(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name.strip())
    return "-".join(part for part in keep.split("-") if part) or "corpus"


# -------------------------------------------------------------------------- statistics


def statistics_panel(current: CorpusInfo) -> None:
    stats = corpus.corpus_stats(current.id)
    cols = st.columns(4)
    cols[0].metric("Pairs (all splits)", f"{stats.total:,}")
    for col, name in zip(cols[1:], SPLITS, strict=True):
        n = stats.split_counts.get(name, 0)
        share = f"{100 * n / stats.total:.0f} %" if stats.total else "—"
        col.metric(name.capitalize(), f"{n:,}", share, delta_color="off", delta_arrow="off")
    if stats.total == 0:
        st.info("No pairs yet: add some in the Pairs tab or import a file.")
        return
    if not stats.split_counts.get("test"):
        st.caption("No test pairs: versions cannot be compared on this corpus until some exist.")
    lengths = stats.lengths
    charts = st.columns(2, gap="large")
    sides = (
        ("source", current.src_lang, "#3b5bdb"),
        ("target", current.tgt_lang, "#f08c00"),
    )
    for col, (side, lang, color) in zip(charts, sides, strict=True):
        with col:
            st.markdown(f"**{side.capitalize()} sentence lengths** ({lang})")
            st.altair_chart(length_histogram(lengths[f"{side}_tokens"], color), width="stretch")
    sample = (
        f"a uniform sample of {stats.sample_size:,} pairs"
        if stats.sample_size < stats.total
        else "all pairs"
    )
    st.caption(
        f"Lengths from {sample}. Chinese/Japanese/Korean characters count as one token each; "
        "other text is counted in words."
    )


def length_histogram(tokens: pd.Series, color: str) -> alt.Chart:
    """Pairs per sentence length; whole-token bins (lengths are integers)."""
    data = pd.DataFrame({"tokens": tokens})
    return (
        alt.Chart(data)
        .mark_bar(color=color, opacity=0.9)
        .encode(
            x=alt.X(
                "tokens:Q",
                bin=alt.Bin(maxbins=40, minstep=1),
                title="length (tokens)",
                axis=alt.Axis(format="d"),
            ),
            y=alt.Y("count():Q", title="pairs"),
            tooltip=[
                alt.Tooltip("tokens:Q", bin=alt.Bin(maxbins=40, minstep=1), title="length"),
                alt.Tooltip("count():Q", title="pairs"),
            ],
        )
        .properties(height=240)
    )


if __name__ == "__main__":
    common.run_page(render)
