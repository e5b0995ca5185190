"""The Corpus page's Glossary tab: the terms a translation must use (source term → target
term), edited in a table or imported from a TSV/CSV file. Translate, evaluate and compare
read them from here (``workbench.corpus.glossary``)."""

from __future__ import annotations

import streamlit as st

from ui import feedback, grid, grid_conflicts
from ui.i18n import N_, _, n_
from workbench.corpus import draft_saves, drafts, formats, glossary
from workbench.corpus.corpora import CorpusInfo
from workbench.corpus.glossary import Glossary


def glossary_toggle(
    corpus_id: int | None, corpus_name: str, *, value: bool = False, key: str, help: str
) -> tuple[Glossary | None, bool]:
    """A corpus' glossary (None without a corpus), and whether the translations must use its
    terms: a toggle that the Translate page and Compare both show, only where there are terms
    (``help`` says what it changes there)."""
    terms = glossary.glossary_of(corpus_id) if corpus_id is not None else None
    if not terms:
        return terms, False
    use = st.toggle(
        n_(
            "Use the glossary of “{corpus}” ({n} term)",
            "Use the glossary of “{corpus}” ({n} terms)",
            len(terms.terms),
            corpus=corpus_name,
        ),
        value=value,
        key=key,
        help=help,
    )
    return terms, use


def glossary_panel(current: CorpusInfo) -> None:
    st.caption(
        _(
            "Where a source term occurs in a sentence ({src}), translations must use its "
            "target term ({tgt}): the model is made to (constrained beam search; a switch on "
            "the Translate page turns it off), and Models → Compare reports how often each "
            "version does.",
            src=current.src_lang,
            tgt=current.tgt_lang,
        )
    )
    nonce = st.session_state.get("glossary_nonce", 0)
    rows = drafts.glossary_rows(current.id)
    grid.draw(
        grid.Grid(
            table="glossary",
            corpus=current,
            key_prefix=f"glossary_editor_{current.id}",
            column_config={
                "source term": st.column_config.TextColumn(
                    _("source term ({lang})", lang=current.src_lang)
                ),
                "target term": st.column_config.TextColumn(
                    _("target term ({lang})", lang=current.tgt_lang)
                ),
            },
            save=lambda key: _save(key, current),
            save_key="glossary_save",
            discard_key="glossary_discard",
        ),
        rows,
        view=("glossary", current.id, nonce),
        summary=n_("{n} term", "{n} terms", len(rows)),
    )
    with st.expander(_("Import terms from a file"), icon=":material/upload_file:"):
        upload = st.file_uploader(
            _("TSV or CSV: source term, target term per line"),
            type=formats.file_types(formats.COLUMN_FORMATS),
            key=f"glossary_upload_{nonce}",
        )
        if st.button(_("Import terms"), key="glossary_import", disabled=upload is None):
            with feedback.error_boundary(N_("importing the glossary")):
                fmt = formats.infer_format(upload.name)
                n = glossary.import_terms(current.id, upload, fmt)
                st.session_state["glossary_nonce"] = nonce + 1  # the grid shows the new terms
                feedback.flash(
                    n_(
                        "Imported the terms: the glossary holds {n} term.",
                        "Imported the terms: the glossary holds {n} terms.",
                        n,
                    )
                )
                st.rerun()


def _save(browser_key: str, current: CorpusInfo) -> tuple[str, str]:
    done = draft_saves.apply_glossary(browser_key, current.id)
    saved = n_(
        "Saved the glossary of “{name}”: {n} term.",
        "Saved the glossary of “{name}”: {n} terms.",
        done.result,
        name=current.name,
    )
    return grid_conflicts.held_back(saved, done.conflicts)
