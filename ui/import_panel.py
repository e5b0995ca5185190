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
from ui.i18n import N_, _, labels, localized, n_, translate
from workbench.corpus import formats, import_checks, importing, splits
from workbench.corpus.cleaning import CleaningOptions
from workbench.corpus.corpora import CorpusInfo

PREVIEW_ROWS = 20
# The columns of the preview and of the validation report: message ids, shown translated.
PREVIEW_COLUMNS = (N_("line"), N_("source"), N_("target"), N_("split"), N_("note"))
REPORT_COLUMNS = (N_("line"), N_("severity"), N_("kind"), N_("message"))
# The severities of the validation report (``import_checks.Severity``, stored in English): each
# is its own message id, shown in the session's language. Named here for the catalogue's
# extraction only: the report translates the stored value itself.
SEVERITIES = (N_("error"), N_("warning"), N_("duplicate"), N_("filtered"))


def import_panel(current: CorpusInfo) -> None:
    nonce = st.session_state.get("upload_nonce", 0)
    chosen = _choose_files(current, nonce)
    if chosen is None:
        return
    upload, fmt, target, options = chosen
    skip_key = f"skip_conflicts_{nonce}"
    skip = bool(st.session_state.get(skip_key, False))
    parsed = _preview(current, upload, fmt, target, options, skip)
    if parsed is None:
        return
    _show_counts(parsed, options)
    _show_conflicts(parsed, skip_key)
    _show_preview(parsed)
    _show_report(parsed)
    if st.button(
        n_("Import {n} pair", "Import {n} pairs", parsed.accepted),
        type="primary",
        icon=":material/upload:",
        key="do_import",
        disabled=not parsed.accepted,
    ):
        with (
            feedback.error_boundary(N_("importing the file")),
            st.spinner(_("Importing…"), show_time=True),
        ):
            # The upload is read again as a stream: the preview kept only a sample.
            result = importing.import_file(
                current.id, upload, fmt=fmt, tgt=target, cleaning=options, skip_conflicts=skip
            )
            st.session_state["upload_nonce"] = nonce + 1
            st.session_state.pop("_import_preview", None)
            feedback.flash(_imported_text(current, result))
            st.rerun()


def _choose_files(current: CorpusInfo, nonce: int) -> tuple[Any, str, Any, CleaningOptions] | None:
    """The upload(s), their format and the clean-up options; None (with a hint) until every
    file the format needs is chosen."""
    left, right = st.columns([3, 2])
    with left:
        upload = st.file_uploader(
            _("Pairs file"),
            type=formats.FILE_TYPES,
            key=f"upload_{nonce}",
            help=_(
                "UTF-8 text, optionally gzip-compressed (.gz); at most {mb} MB per file.",
                mb=st.get_option("server.maxUploadSize"),
            ),
        )
    guessed = _guess_format(upload)
    names = list(formats.FORMATS)
    with right:
        fmt = st.selectbox(
            _("Format"),
            names,
            index=names.index(guessed),
            key=f"upload_format_{nonce}_{upload.file_id if upload else ''}",
            help="\n".join(
                f"- **{name}**: {translate(f.description)}" for name, f in formats.FORMATS.items()
            ),
        )
        st.caption(translate(formats.FORMATS[fmt].description))
    with st.expander(_("Clean up while importing"), icon=":material/cleaning_services:"):
        options = cleaning_panel.options_form(f"import_clean_{nonce}", current)
    target = None
    two_files = formats.FORMATS[fmt].two_files
    if two_files:
        target = st.file_uploader(
            _("Target-language file ({lang})", lang=current.tgt_lang),
            type=formats.FILE_TYPES,
            key=f"upload_target_{nonce}",
            help=_("The first file is the source side ({lang}).", lang=current.src_lang),
        )
    if upload is None:
        st.info(
            _(
                "Choose a file to import into **{name}**. You will see a preview and the "
                "validation report before anything is written.",
                name=current.name,
            ),
            icon=":material/upload_file:",
        )
        return None
    if two_files and target is None:
        st.info(_("Now choose the target-language file."), icon=":material/upload_file:")
        return None
    return upload, fmt, target, options


def _show_counts(parsed: import_checks.ParsedImport, options: CleaningOptions) -> None:
    counts = st.columns(5 if options.active else 4)
    counts[0].metric(_("Rows read"), formatting.fmt_int(parsed.rows))
    counts[1].metric(_("Will be added"), formatting.fmt_int(parsed.accepted))
    counts[2].metric(_("Duplicates skipped"), formatting.fmt_int(parsed.duplicates))
    counts[3].metric(_("Invalid rows skipped"), formatting.fmt_int(parsed.skipped))
    if options.active:
        converted = parsed.issue_counts.get("converted", 0)
        counts[4].metric(
            _("Filtered by clean-up"),
            formatting.fmt_int(parsed.filtered),
            n_("{n} converted", "{n} converted", converted) if converted else None,
            delta_color="off",
            delta_arrow="off",
        )


def _conflict_line(c: import_checks.Conflict) -> str:
    """One example: the row, and where the other translation is (the corpus, or an earlier
    line of the file)."""
    row = {
        "line": c.line,
        "source": formatting.markdown_text(c.source),
        "target": formatting.markdown_text(c.target),
    }
    if c.file_line:
        return _(
            "line {line}: {source} → {target} (line {earlier} translates it differently)",
            earlier=c.file_line,
            **row,
        )
    return _(
        "line {line}: {source} → {target} (the corpus: {corpus_target})",
        corpus_target=formatting.markdown_text(c.corpus_target),
        **row,
    )


def _show_conflicts(parsed: import_checks.ParsedImport, skip_key: str) -> None:
    """Rows whose source the corpus already translates differently: named with a few
    examples (the memory's exact match would pick one of the two without a word), and the
    choice to leave them out (``skip_key``: read before the preview, which it changes)."""
    n = parsed.conflict_count
    if not n:
        return
    lines = [
        n_(
            "{n} row gives a source the corpus or the file already translates differently:",
            "{n} rows give a source the corpus or the file already translates differently:",
            n,
        )
    ]
    lines += ["- " + _conflict_line(c) for c in parsed.conflicts]
    st.warning("\n".join(lines), icon=":material/call_split:")
    st.checkbox(
        _("Skip these rows"),
        key=skip_key,
        help=_(
            "By default they are added: the corpus then holds both translations of the "
            "source, and the memory's exact match gives one of them."
        ),
    )


def _show_preview(parsed: import_checks.ParsedImport) -> None:
    shown = min(PREVIEW_ROWS, len(parsed.pairs))
    st.markdown(
        n_(
            "**Preview** (the first {n} pair to be added)",
            "**Preview** (the first {n} pairs to be added)",
            shown,
        )
        if shown < parsed.accepted
        else n_("**Preview** ({n} pair to be added)", "**Preview** ({n} pairs to be added)", shown)
    )
    preview = pd.DataFrame(
        [
            {
                "line": p.line,
                "source": p.source,
                "target": p.target,
                "split": p.split or _("auto"),
                "note": p.note,
            }
            for p in parsed.pairs[:PREVIEW_ROWS]
        ],
        columns=list(PREVIEW_COLUMNS),
    )
    st.dataframe(preview, hide_index=True, width="stretch", column_config=labels(PREVIEW_COLUMNS))


def _show_report(parsed: import_checks.ParsedImport) -> None:
    if parsed.report:
        warnings = len(parsed.warnings)
        total = sum(parsed.issue_counts.values())
        title = n_("Validation report: {n} issue", "Validation report: {n} issues", total)
        if total > len(parsed.report):
            title = _(
                "{report} (the first {listed} listed)", report=title, listed=len(parsed.report)
            )
        if warnings:
            title = n_(
                "{report}, {n} warning imported anyway",
                "{report}, {n} warnings imported anyway",
                warnings,
                report=title,
            )
        with st.expander(
            title,
            expanded=bool(parsed.errors),
            icon=":material/rule:",
        ):
            st.dataframe(
                _report(parsed),
                hide_index=True,
                width="stretch",
                column_config=labels(REPORT_COLUMNS),
            )
    elif not parsed.rows:
        st.warning(_("The file has no rows: nothing to import."), icon=":material/warning:")
    else:
        st.success(_("Every row is valid."), icon=":material/check_circle:")


def _imported_text(current: CorpusInfo, result: import_checks.ImportResult) -> str:
    """What the page says after an import: counts, clean-up and regrouped sentence groups."""
    cleaned = result.issue_counts.get("control_chars", 0)
    skipped = _(
        "{duplicates} and {invalid} skipped",
        duplicates=n_("{n} duplicate", "{n} duplicates", result.duplicates),
        invalid=n_("{n} invalid row", "{n} invalid rows", result.skipped),
    )
    if result.filtered or cleaned:
        skipped = _(
            "{skipped}, {filtered} filtered by clean-up, {cleaned}",
            skipped=skipped,
            filtered=formatting.fmt_int(result.filtered),
            cleaned=n_(
                "control or invisible characters removed from {n} row",
                "control or invisible characters removed from {n} rows",
                cleaned,
            ),
        )
    done = n_(
        "Imported {n} pair into “{name}” ({skipped}).",
        "Imported {n} pairs into “{name}” ({skipped}).",
        result.added,
        name=current.name,
        skipped=skipped,
    )
    if result.conflict_count:
        conflicts = (
            n_(
                "{n} row whose source the corpus or the file translates differently was skipped.",
                "{n} rows whose source the corpus or the file translates differently were skipped.",
                result.conflict_count,
            )
            if result.conflicts_skipped
            else n_(
                "{n} row whose source the corpus or the file translates differently was added.",
                "{n} rows whose source the corpus or the file translates differently were added.",
                result.conflict_count,
            )
        )
        done = _("{done} {conflicts}", done=done, conflicts=conflicts)
    if result.regrouped:
        done = _(
            "{done} {regrouped}",
            done=done,
            regrouped=localized(splits.regrouped_text(result.regrouped)),
        )
    return done


def _report(parsed: Any) -> pd.DataFrame:
    """The validation report in the session's language."""
    return pd.DataFrame(
        [
            (
                i.line,
                translate(i.severity),
                translate(import_checks.KIND_LABELS.get(i.kind, i.kind)),
                localized(i.message),
            )
            for i in parsed.report
        ],
        columns=list(REPORT_COLUMNS),
    )


def _guess_format(upload: Any) -> str:
    if upload is None:
        return "tsv"
    try:
        upload.seek(0)
        return formats.infer_format(upload.name, upload.read(formats.SNIFF_BYTES))
    except Exception:  # unknown extension: let the user choose
        return "tsv"


def _preview(
    current: CorpusInfo,
    upload: Any,
    fmt: str,
    target: Any,
    options: CleaningOptions,
    skip_conflicts: bool,
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
        skip_conflicts,
    )
    cached = st.session_state.get("_import_preview")
    if cached and cached[0] == ident:
        return cached[1]
    parsed = None
    with feedback.error_boundary(N_("reading the file")), st.spinner(_("Checking the file…")):
        parsed = importing.preview_import(
            current.id,
            upload,
            fmt=fmt,
            tgt=target,
            sample=PREVIEW_ROWS,
            cleaning=options,
            skip_conflicts=skip_conflicts,
        )
        st.session_state["_import_preview"] = (ident, parsed)
    return parsed
