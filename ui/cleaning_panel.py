"""Clean-up controls: the options (shared by the import preview and the Export & clean up tab)
and the corpus clean-up itself — previewed, applied only after a confirmation, undoable."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, formatting
from workbench.corpus import cleaning, cleanups
from workbench.corpus.corpora import CorpusInfo

PREVIEW = "_cleanup_preview"


def options_form(prefix: str, current: CorpusInfo) -> cleaning.CleaningOptions:
    """The clean-up options as widgets; what they say now."""
    left, right = st.columns(2)
    language_id = left.checkbox(
        "Drop pairs in another language",
        key=f"{prefix}_langid",
        help=f"Language identification (py3langid) of each side; a side is dropped only when "
        f"it is confidently not {current.src_lang} (source) or {current.tgt_lang} (target). "
        "Very short sentences are kept.",
    )
    drop_copies = left.checkbox(
        "Drop copies (target = source)", key=f"{prefix}_copies", help="Untranslated pairs."
    )
    use_ratio = right.checkbox("Drop pairs with a length ratio above", key=f"{prefix}_use_ratio")
    ratio = right.number_input(
        "Maximum length ratio",
        min_value=1.0,
        value=3.0,
        step=0.5,
        key=f"{prefix}_ratio",
        disabled=not use_ratio,
        label_visibility="collapsed",
        help="Tokens of the longer side over tokens of the shorter (a CJK character counts as "
        "one token): a much longer side is usually a misalignment.",
    )
    chinese = right.selectbox(
        "Chinese script (OpenCC)",
        list(cleaning.CHINESE_CONVERSIONS),
        format_func=cleaning.CHINESE_CONVERSIONS.__getitem__,
        key=f"{prefix}_chinese",
        help="Convert the Chinese side(s) to one script, so the model does not learn two.",
    )
    return cleaning.CleaningOptions(
        language_id=language_id,
        max_ratio=float(ratio) if use_ratio else None,
        drop_copies=drop_copies,
        chinese=chinese,
    )


def cleanup_panel(current: CorpusInfo) -> None:
    """Preview a clean-up of the corpus, apply it after a confirmation, undo past ones."""
    st.markdown("**Clean up**")
    st.caption(
        "See what the chosen rules would remove or change first; nothing is removed until "
        "you confirm, and a clean-up can be undone below."
    )
    options = options_form("cleanup", current)
    ident = (current.id, current.pair_count, options)
    if st.button(
        "Preview clean-up",
        icon=":material/preview:",
        key="cleanup_preview",
        disabled=not options.active,
    ):
        with feedback.error_boundary("previewing the clean-up"):
            st.session_state[PREVIEW] = (ident, cleanups.preview_cleanup(current.id, options))
    cached = st.session_state.get(PREVIEW)
    if cached and cached[0] == ident:
        _preview(cached[1])
        if cached[1].counts and st.button(
            "Apply clean-up…",
            type="primary",
            icon=":material/cleaning_services:",
            key="cleanup_apply",
        ):
            dialogs.ask_confirmation("cleanup")
        preview = cached[1]
        dialogs.confirmation_dialog(
            "cleanup",
            "Apply the clean-up",
            f"Remove **{formatting.plural(preview.removed, 'pair')}** and change "
            f"**{formatting.plural(preview.changed, 'pair')}** of **{current.name}**? "
            "You can undo it afterwards.",
            "Apply clean-up",
            lambda: _apply(current, options),
        )
    _history(current)


def _preview(preview: cleanups.CleanupPreview) -> None:
    if preview.unchecked_languages:
        st.warning(
            "Language identification does not know "
            + ", ".join(preview.unchecked_languages)
            + ": that side is not checked.",
            icon=":material/warning:",
        )
    if not preview.counts:
        st.success(
            f"Nothing to clean in {formatting.plural(preview.pairs, 'pair')}.",
            icon=":material/check_circle:",
        )
        return
    st.markdown(
        f"Of {formatting.plural(preview.pairs, 'pair')}: "
        f"**{preview.removed:,} would be removed** and **{preview.changed:,} changed**."
    )
    st.dataframe(
        pd.DataFrame(
            [(cleaning.REASONS[k], n) for k, n in sorted(preview.counts.items())],
            columns=["reason", "pairs"],
        ),
        hide_index=True,
        key="cleanup_counts",
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "pair": v.pair_id,
                    "reason": cleaning.REASONS[v.reason],
                    "source": v.source,
                    "target": v.target,
                    "becomes": "(removed)"
                    if v.new_source is None
                    else f"{v.new_source} ‖ {v.new_target}",
                    "why": v.detail,
                }
                for v in preview.sample
            ]
        ),
        hide_index=True,
        width="stretch",
        key="cleanup_sample",
    )
    if len(preview.sample) < preview.removed + preview.changed:
        st.caption(f"The first {len(preview.sample)} are shown.")


def _apply(current: CorpusInfo, options: cleaning.CleaningOptions) -> str:
    info = cleanups.apply_cleanup(current.id, options)
    st.session_state.pop(PREVIEW, None)
    removed = sum(n for k, n in info.summary.items() if k in cleaning.DROP_REASONS)
    changed = info.summary.get("converted", 0)
    return (
        f"Clean-up #{info.id}: removed {formatting.plural(removed, 'pair')} and changed "
        f"{formatting.plural(changed, 'pair')}. Undo it under “Past clean-ups” if needed."
    )


def _history(current: CorpusInfo) -> None:
    past = cleanups.list_cleanups(current.id)
    if not past:
        return
    with st.expander(f"Past clean-ups ({len(past)})", icon=":material/history:"):
        for info in past:
            counts = ", ".join(
                f"{cleaning.REASONS[k]}: {n:,}" for k, n in sorted(info.summary.items())
            )
            row = st.columns([4, 1], vertical_alignment="center")
            when = info.created_at.strftime("%Y-%m-%d %H:%M")
            state = " · undone" if info.undone_at else ""
            row[0].markdown(f"**#{info.id}** · {when}{state}  \n{counts or 'nothing changed'}")
            if info.undone_at is None and row[1].button(
                "Undo", icon=":material/undo:", key=f"cleanup_undo_{info.id}"
            ):
                with feedback.error_boundary("undoing the clean-up"):
                    undone = cleanups.undo_cleanup(info.id)
                    skipped = (
                        f"; {undone.skipped:,} left as they are (changed since)"
                        if undone.skipped
                        else ""
                    )
                    feedback.flash(
                        f"Undid clean-up #{info.id}: {undone.restored:,} pairs put back, "
                        f"{undone.reverted:,} changed back{skipped}."
                    )
                    st.rerun()
