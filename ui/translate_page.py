"""Translate page: translate sentences with any version, look at its cross-attention, and save
a corrected output back into a corpus as a new pair.

Models are loaded (and kept) by `models.registry`'s cache, so the second translation with a
version does not read its files again. The last batch of results is kept in session_state as
plain lists: it is what the user is looking at, not data.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, feedback, formatting, glossary_panel, memory_panel, pickers
from ui.i18n import N_, _, localized, n_, translate
from ui.signin import can
from workbench import settings
from workbench.corpus import corpora, pairs
from workbench.memory import recall
from workbench.models import engines, translation
from workbench.team.access import Permission

RESULTS = "translate_results"
MAX_LINES = 500
# Larger attention maps are unreadable (and slow to draw): up to this many source and output
# pieces the map is drawn, beyond it the page says why it is not.
MAX_MAP_PIECES = 80


def render() -> None:
    form = pickers.version_form("translate")
    if form is None:
        return
    version, beam = form.version, form.beam
    with form.box:
        with form.right:
            engine = pickers.engine_picker("translate")
        text = st.text_area(
            _("Source sentences ({lang}), one per line", lang=version.src_lang),
            key="translate_input",
            height=140,
            placeholder=_examples(version),
        )
        terms, use_glossary = glossary_panel.glossary_toggle(
            version.corpus_id,
            version.corpus_name,
            value=True,
            key="translate_glossary",
            help=_(
                "Sentences that contain a source term of the glossary must use its target term "
                "(constrained beam search); other sentences are translated as without it."
            ),
        )
        use_memory = st.toggle(
            _("Use the memory's exact matches"),
            value=version.corpus_id is not None,
            key="translate_memory",
            disabled=version.corpus_id is None,
            help=_(
                "A sentence that a pair of the version's corpus has as its source (the same text "
                "up to spaces) gets that pair's target, marked as from the memory, instead of "
                "the model's translation. The closest pairs are shown beside each translation "
                "either way."
            ),
        )
        use_knn = memory_panel.knn_toggle(version, engine)
        if st.button(_("Translate"), type="primary", icon=":material/translate:", key="translate"):
            lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
            if not lines:
                st.warning(_("Type or paste at least one sentence."), icon=":material/edit_note:")
            elif len(lines) > MAX_LINES:
                st.warning(
                    _("At most {max} lines at once, got {count}.", max=MAX_LINES, count=len(lines))
                )
            else:
                with (
                    feedback.error_boundary(N_("translating")),
                    st.spinner(
                        n_(
                            "Translating {n} sentence…",
                            "Translating {n} sentences…",
                            len(lines),
                        ),
                        show_time=True,
                    ),
                ):
                    results, memory = recall.translate_with_memory(
                        version.id,
                        lines,
                        translation.DecodingOptions(
                            beam=beam, with_attention=True, engine=engine, knn=use_knn
                        ),
                        glossary=terms if use_glossary else None,
                        matches=memory_panel.MATCHES if version.corpus_id else 0,
                        use_exact=use_memory,
                    )
                    checks = translation.check_inputs(version.id, results)
                    st.session_state[RESULTS] = {
                        "version_id": version.id,
                        "version": pickers.version_label(version),
                        "beam": beam,
                        "engine": engine,
                        "glossary": use_glossary,
                        "knn": use_knn,
                        "items": [
                            _plain(src, r, c) | memory_panel.plain_memory(m)
                            for src, r, c, m in zip(lines, results, checks, memory, strict=True)
                        ],
                    }

    memory_panel.xliff_panel(version, beam, engine)
    shown = st.session_state.get(RESULTS)
    if not shown:
        return
    results_view(shown, version)


def _examples(version: Any) -> str:
    """A few training sentences of the version's corpus as a hint of what it knows."""
    if version.corpus_id is None:
        return _("One sentence per line")
    examples = _training_examples(settings.database_url(), version.corpus_id)
    return examples or _("One sentence per line")


@st.cache_data(ttl=300, show_spinner=False)
def _training_examples(database: str, corpus_id: int) -> str:
    try:
        page = pairs.search_pairs(corpus_id, split="train", page_size=3)
    except Exception:  # the corpus may be gone; the hint is optional
        return ""
    return "\n".join(page.rows["source"].tolist())


def _plain(source: str, result: Any, check: translation.InputCheck) -> dict[str, Any]:
    attention = result.attention
    return {
        "source": source,
        "text": result.text,
        "src_pieces": list(result.src_pieces),
        "out_pieces": list(result.out_pieces),
        "attention": attention.tolist() if attention is not None else None,
        "unknown_share": check.unknown_share,
        "warnings": check.warnings,
    }


# ---------------------------------------------------------------------------- results


def _reasons(warnings: list[str]) -> str:
    """A sentence's warnings (``translation.InputCheck.warnings``) in the page's language."""
    return _("; ").join(localized(w) for w in warnings)


def results_view(shown: dict[str, Any], version: Any) -> None:
    items = shown["items"]
    st.subheader(_("Translations"), anchor=False)
    engine = translate(engines.ENGINE_LABELS[shown.get("engine", engines.ENGINES[0])])
    parts = [shown["version"], localized(translation.decoding_label(shown["beam"])), engine]
    if shown.get("glossary"):
        parts.append(_("glossary applied"))
    if shown.get("knn"):
        parts.append(_("corpus memory (kNN-MT)"))
    st.caption(" · ".join(parts))
    flagged = [n for n, i in enumerate(items, start=1) if i["warnings"]]
    if flagged and len(items) > 1:  # each sentence's own reasons are shown when it is picked
        st.warning(
            n_(
                "{n} of {total} translations may be confident nonsense (sentence "
                "{numbers}): see the “{column}” column.",
                "{n} of {total} translations may be confident nonsense (sentences "
                "{numbers}): see the “{column}” column.",
                len(flagged),
                total=len(items),
                numbers=", ".join(map(str, flagged)),
                column=_("warning"),
            ),
            icon=":material/warning:",
        )
    table = pd.DataFrame(
        {
            "#": range(1, len(items) + 1),
            "source": [i["source"] for i in items],
            "translation": [i["text"] for i in items],
            "memory": [_("from the memory") if i.get("from_memory") else "" for i in items],
            "unknown": [100 * i["unknown_share"] for i in items],
            "warning": [_reasons(i["warnings"]) for i in items],
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            # widths that keep the warnings in view on a 1400 px window (sidebar open)
            "#": st.column_config.NumberColumn("#", width="small"),
            "source": st.column_config.TextColumn(_("source"), width=250),
            "translation": st.column_config.TextColumn(_("translation"), width=250),
            "memory": st.column_config.TextColumn(_("origin"), width="small"),
            "unknown": st.column_config.NumberColumn(
                _("unknown"),
                format="%.0f %%",
                width="small",
                help=_(
                    "Share of the source's pieces that this version never saw in training: it "
                    "cannot read them. Above {share} the translation is mostly guesswork.",
                    share=f"{translation.UNKNOWN_SHARE_WARNING:.0%}",
                ),
            ),
            "warning": st.column_config.TextColumn(_("warning"), width=250),
        },
    )

    choice = st.selectbox(
        _("Sentence"),
        range(len(items)),
        format_func=lambda i: f"{i + 1}. {items[i]['source']}",
        key=f"translate_pick_{len(items)}_{shown['version_id']}",
    )
    item = items[choice]
    if item["warnings"]:
        st.warning(
            _(
                "This translation may be confident nonsense: {reasons}.",
                reasons=_reasons(item["warnings"]),
            ),
            icon=":material/warning:",
        )
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.markdown("**" + _("Cross-attention") + "**")
        size = max(len(item["src_pieces"]), len(item["out_pieces"]))
        if item["attention"] and size > MAX_MAP_PIECES:
            st.caption(
                _(
                    "No map for this sentence: it has {source} source and {output} output "
                    "pieces, and a map of more than {max} is unreadable. Translate a shorter part "
                    "to see one.",
                    source=formatting.fmt_int(len(item["src_pieces"])),
                    output=formatting.fmt_int(len(item["out_pieces"])),
                    max=MAX_MAP_PIECES,
                )
            )
        elif item["attention"]:
            st.altair_chart(charts.attention_chart(item), width="stretch")
            st.caption(
                _(
                    "Each row is an output piece; darker cells are the source pieces the last "
                    "decoder layer attended to while producing it (averaged over heads)."
                )
            )
        elif item.get("from_memory"):
            st.caption(_("No map for this sentence: its translation is from the memory."))
        elif item["text"]:
            st.caption(
                _(
                    "No map for this sentence: it was decoded again to use the glossary's terms "
                    "(constrained search), which keeps no attention."
                )
            )
        else:
            st.caption(_("No attention for an empty sentence."))
    with right:
        memory_panel.matches_view(item)
        correction_form(item, shown, version)


def correction_form(item: dict[str, Any], shown: dict[str, Any], version: Any) -> None:
    if not can(Permission.EDIT):
        return
    st.markdown("**" + _("Correct and save as a pair") + "**")
    all_corpora = corpora.list_corpora()
    if not all_corpora:
        st.caption(_("Create a corpus on the Corpus page to save corrections."))
        return
    langs = [
        c for c in all_corpora if (c.src_lang, c.tgt_lang) == (version.src_lang, version.tgt_lang)
    ]
    options = langs or all_corpora
    if version.corpus_id in {c.id for c in options}:
        st.session_state.setdefault(pickers.CURRENT_CORPUS, version.corpus_id)
    key = f"{shown['version_id']}_{abs(hash(item['source']))}"
    with st.form(f"correction_{key}", border=False):
        st.text_input(_("Source"), value=item["source"], disabled=True)
        target = st.text_area(_("Corrected translation"), value=item["text"], height=90)
        target_corpus = pickers.corpus_picker(
            options, key="translate_corpus", label=_("Into corpus"), in_address=False
        )
        if st.form_submit_button(_("Save as pair"), icon=":material/playlist_add:"):
            with feedback.error_boundary(N_("saving the pair")):
                pair_id = translation.save_correction(target_corpus.id, item["source"], target)
                # Like every write: say so on the next run, which draws the pickers (drawn
                # above, before the save) with the new pair counts.
                feedback.flash(
                    _("Saved as pair #{id} in “{corpus}”.", id=pair_id, corpus=target_corpus.name)
                )
                st.rerun()
