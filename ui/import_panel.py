"""The Corpus page's import panel: choose a file and its format, see a validated preview and
the report, then import (all-or-nothing).

The preview keeps only a bounded summary in the session (counts, the capped report and the
first ``PREVIEW_ROWS`` pairs); the import reads the upload again as a stream.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import cleaning_panel, feedback, formatting
from workbench import formats, importing, splits
from workbench.cleaning import CleaningOptions
from workbench.corpora import CorpusInfo

PREVIEW_ROWS = 20


def import_panel(current: CorpusInfo) -> None:
    nonce = st.session_state.get("upload_nonce", 0)
    left, right = st.columns([3, 2])
    with left:
        upload = st.file_uploader(
            "Pairs file",
            type=formats.FILE_TYPES,
            key=f"upload_{nonce}",
            help="UTF-8 text, optionally gzip-compressed (.gz); at most "
            f"{st.get_option('server.maxUploadSize')} MB per file.",
        )
    guessed = _guess_format(upload)
    with right:
        fmt = st.selectbox(
            "Format",
            formats.FORMATS,
            index=formats.FORMATS.index(guessed),
            key=f"upload_format_{nonce}_{upload.file_id if upload else ''}",
            help="\n".join(f"- **{k}**: {v}" for k, v in formats.FORMAT_DESCRIPTIONS.items()),
        )
        st.caption(formats.FORMAT_DESCRIPTIONS[fmt])
    with st.expander("Clean up while importing", icon=":material/cleaning_services:"):
        options = cleaning_panel.options_form(f"import_clean_{nonce}", current)
    target = None
    if fmt == "aligned":
        target = st.file_uploader(
            f"Target-language file ({current.tgt_lang})",
            type=formats.FILE_TYPES,
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

    parsed = _preview(current, upload, fmt, target, options)
    if parsed is None:
        return
    counts = st.columns(5 if options.active else 4)
    counts[0].metric("Rows read", f"{parsed.rows:,}")
    counts[1].metric("Will be added", f"{parsed.accepted:,}")
    counts[2].metric("Duplicates skipped", f"{parsed.duplicates:,}")
    counts[3].metric("Invalid rows skipped", f"{parsed.skipped:,}")
    if options.active:
        converted = parsed.issue_counts.get("converted", 0)
        counts[4].metric(
            "Filtered by clean-up",
            f"{parsed.filtered:,}",
            f"{converted:,} converted" if converted else None,
            delta_color="off",
            delta_arrow="off",
        )

    shown = min(PREVIEW_ROWS, len(parsed.pairs))
    st.markdown(
        f"**Preview** (the first {formatting.plural(shown, 'pair')} to be added)"
        if shown < parsed.accepted
        else f"**Preview** ({formatting.plural(shown, 'pair')} to be added)"
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
        f"Import {formatting.plural(parsed.accepted, 'pair')}",
        type="primary",
        icon=":material/upload:",
        key="do_import",
        disabled=not parsed.accepted,
    ):
        with (
            feedback.error_boundary("importing the file"),
            st.spinner("Importing…", show_time=True),
        ):
            # The upload is read again as a stream: the preview kept only a sample.
            result = importing.import_file(current.id, upload, fmt, target, cleaning=options)
            st.session_state["upload_nonce"] = nonce + 1
            st.session_state.pop("_import_preview", None)
            cleaned = result.issue_counts.get("control_chars", 0)
            filtered = f", {result.filtered:,} filtered by clean-up" if result.filtered else ""
            feedback.flash(
                f"Imported {result.added:,} pairs into “{current.name}” "
                f"({result.duplicates:,} duplicates and {result.skipped:,} invalid rows skipped"
                + filtered
                + (
                    f"; control or invisible characters removed from {cleaned:,} rows)."
                    if cleaned
                    else ")."
                )
                + (f" {splits.regrouped_text(result.regrouped)}" if result.regrouped else "")
            )
            st.rerun()


def _guess_format(upload: Any) -> str:
    if upload is None:
        return "tsv"
    try:
        upload.seek(0)
        return formats.infer_format(upload.name, upload.read(65536))
    except Exception:  # unknown extension: let the user choose
        return "tsv"


def _preview(
    current: CorpusInfo, upload: Any, fmt: str, target: Any, options: CleaningOptions
) -> Any:
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
        options,
    )
    cached = st.session_state.get("_import_preview")
    if cached and cached[0] == ident:
        return cached[1]
    parsed = None
    with feedback.error_boundary("reading the file"), st.spinner("Checking the file…"):
        parsed = importing.preview_import(
            current.id, upload, fmt, target, sample=PREVIEW_ROWS, cleaning=options
        )
        st.session_state["_import_preview"] = (ident, parsed)
    return parsed
