"""Clean-up controls: the options (shared by the import preview and the Export & clean up tab)
and the corpus clean-up itself — previewed, applied only after a confirmation, undoable."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, formatting
from ui.i18n import N_, _, localized, n_, translate
from workbench.corpus import cleaning, cleanups
from workbench.corpus.corpora import CorpusInfo

PREVIEW = "_cleanup_preview"


def options_form(prefix: str, current: CorpusInfo) -> cleaning.CleaningOptions:
    """The clean-up options as widgets; what they say now."""
    left, right = st.columns(2)
    language_id = left.checkbox(
        _("Drop pairs in another language"),
        key=f"{prefix}_langid",
        help=_(
            "Language identification (py3langid) of each side; a side is dropped only when it "
            "is confidently not {src} (source) or {tgt} (target). Very short sentences are "
            "kept.",
            src=current.src_lang,
            tgt=current.tgt_lang,
        ),
    )
    drop_copies = left.checkbox(
        _("Drop copies (target = source)"),
        key=f"{prefix}_copies",
        help=_("Untranslated pairs."),
    )
    use_ratio = right.checkbox(_("Drop pairs with a length ratio above"), key=f"{prefix}_use_ratio")
    ratio = right.number_input(
        _("Maximum length ratio"),
        min_value=1.0,
        value=3.0,
        step=0.5,
        key=f"{prefix}_ratio",
        disabled=not use_ratio,
        label_visibility="collapsed",
        help=_(
            "Tokens of the longer side over tokens of the shorter (a CJK character counts as "
            "one token): a much longer side is usually a misalignment."
        ),
    )
    chinese = right.selectbox(
        _("Chinese script (OpenCC)"),
        list(cleaning.CHINESE_CONVERSIONS),
        format_func={c: translate(t) for c, t in cleaning.CHINESE_CONVERSIONS.items()}.__getitem__,
        key=f"{prefix}_chinese",
        help=_("Convert the Chinese side(s) to one script, so the model does not learn two."),
    )
    return cleaning.CleaningOptions(
        language_id=language_id,
        max_ratio=float(ratio) if use_ratio else None,
        drop_copies=drop_copies,
        chinese=chinese,
    )


def cleanup_panel(current: CorpusInfo) -> None:
    """Preview a clean-up of the corpus, apply it after a confirmation, undo past ones."""
    st.markdown(_("**Clean up**"))
    st.caption(
        _(
            "See what the chosen rules would remove or change first; nothing is removed until "
            "you confirm, and a clean-up can be undone below."
        )
    )
    options = options_form("cleanup", current)
    ident = (current.id, current.pair_count, options)
    if st.button(
        _("Preview clean-up"),
        icon=":material/preview:",
        key="cleanup_preview",
        disabled=not options.active,
    ):
        with feedback.error_boundary(N_("previewing the clean-up")):
            st.session_state[PREVIEW] = (ident, cleanups.preview_cleanup(current.id, options))
    cached = st.session_state.get(PREVIEW)
    if cached and cached[0] == ident:
        _preview(cached[1])
        if cached[1].counts and st.button(
            _("Apply clean-up…"),
            type="primary",
            icon=":material/cleaning_services:",
            key="cleanup_apply",
        ):
            dialogs.ask_confirmation("cleanup")
        preview = cached[1]
        dialogs.confirmation_dialog(
            "cleanup",
            _("Apply the clean-up"),
            _(
                "Remove **{removed}** and change **{changed}** of **{name}**? You can undo it "
                "afterwards.",
                removed=_pairs(preview.removed),
                changed=_pairs(preview.changed),
                name=current.name,
            ),
            _("Apply clean-up"),
            lambda: _apply(current, options),
        )
    _history(current)


def _pairs(n: int) -> str:
    """'3 pairs': a count the sentences around it name as a whole."""
    return n_("{n} pair", "{n} pairs", n)


def _preview(preview: cleanups.CleanupPreview) -> None:
    if preview.unchecked_languages:
        st.warning(
            _(
                "Language identification does not know {languages}: that side is not checked.",
                languages=", ".join(preview.unchecked_languages),
            ),
            icon=":material/warning:",
        )
    if not preview.counts:
        st.success(
            n_("Nothing to clean in {n} pair.", "Nothing to clean in {n} pairs.", preview.pairs),
            icon=":material/check_circle:",
        )
        return
    st.markdown(
        n_(
            "Of {n} pair: **{removed} would be removed** and **{changed} changed**.",
            "Of {n} pairs: **{removed} would be removed** and **{changed} changed**.",
            preview.pairs,
            removed=formatting.fmt_int(preview.removed),
            changed=formatting.fmt_int(preview.changed),
        )
    )
    st.dataframe(
        pd.DataFrame(
            [(translate(cleaning.REASONS[k]), n) for k, n in sorted(preview.counts.items())],
            columns=[_("reason"), _("pairs")],
        ),
        hide_index=True,
        key="cleanup_counts",
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    _("pair"): v.pair_id,
                    _("reason"): translate(cleaning.REASONS[v.reason]),
                    _("source"): v.source,
                    _("target"): v.target,
                    _("becomes"): _("(removed)")
                    if v.new_source is None
                    else f"{v.new_source} ‖ {v.new_target}",
                    _("why"): localized(v.detail),
                }
                for v in preview.sample
            ]
        ),
        hide_index=True,
        width="stretch",
        key="cleanup_sample",
    )
    if len(preview.sample) < preview.removed + preview.changed:
        st.caption(_("The first {n} are shown.", n=len(preview.sample)))


def _apply(current: CorpusInfo, options: cleaning.CleaningOptions) -> str:
    info = cleanups.apply_cleanup(current.id, options)
    st.session_state.pop(PREVIEW, None)
    removed = sum(n for k, n in info.summary.items() if k in cleaning.DROP_REASONS)
    changed = info.summary.get("converted", 0)
    return _(
        "Clean-up #{id}: removed {removed} and changed {changed}. Undo it under “Past "
        "clean-ups” if needed.",
        id=info.id,
        removed=_pairs(removed),
        changed=_pairs(changed),
    )


def _history(current: CorpusInfo) -> None:
    past = cleanups.list_cleanups(current.id)
    if not past:
        return
    with st.expander(_("Past clean-ups ({n})", n=len(past)), icon=":material/history:"):
        for info in past:
            counts = _(", ").join(
                _("{reason}: {n}", reason=translate(cleaning.REASONS[k]), n=formatting.fmt_int(n))
                for k, n in sorted(info.summary.items())
            )
            row = st.columns([4, 1], vertical_alignment="center")
            when = formatting.fmt_datetime(info.created_at)
            head = (
                _("**#{id}** · {when} · undone", id=info.id, when=when)
                if info.undone_at
                else _("**#{id}** · {when}", id=info.id, when=when)
            )
            row[0].markdown(f"{head}  \n{counts or _('nothing changed')}")
            if info.undone_at is None and row[1].button(
                _("Undo"), icon=":material/undo:", key=f"cleanup_undo_{info.id}"
            ):
                with feedback.error_boundary(N_("undoing the clean-up")):
                    undone = cleanups.undo_cleanup(info.id)
                    counts = {
                        "id": info.id,
                        "restored": n_("{n} pair put back", "{n} pairs put back", undone.restored),
                        "reverted": formatting.fmt_int(undone.reverted),
                    }
                    feedback.flash(
                        _(
                            "Undid clean-up #{id}: {restored}, {reverted} changed back; "
                            "{skipped} left as they are (changed since).",
                            skipped=formatting.fmt_int(undone.skipped),
                            **counts,
                        )
                        if undone.skipped
                        else _(
                            "Undid clean-up #{id}: {restored}, {reverted} changed back.",
                            **counts,
                        )
                    )
                    st.rerun()
