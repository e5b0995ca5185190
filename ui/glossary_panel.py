"""The Corpus page's Glossary tab: the terms a translation must use (source term → target
term), edited in a table or imported from a TSV/CSV file. Translate, evaluate and compare
read them from here (``workbench.glossary``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import feedback, formatting
from ui.signin import can
from workbench import glossary
from workbench.corpora import CorpusInfo
from workbench.team.access import Permission


def glossary_panel(current: CorpusInfo) -> None:
    st.caption(
        f"Where a source term occurs in a sentence ({current.src_lang}), translations must "
        f"use its target term ({current.tgt_lang}): the model is made to (constrained beam "
        "search; a switch on the Translate page turns it off), and Models → Compare reports "
        "how often each version does."
    )
    nonce = st.session_state.get("glossary_nonce", 0)
    terms = pd.DataFrame(glossary.list_terms(current.id), columns=["source term", "target term"])
    if not can(Permission.EDIT):
        st.dataframe(terms, hide_index=True, width="stretch")
        return
    edited = st.data_editor(
        terms,
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        key=f"glossary_editor_{current.id}_{nonce}",
        column_config={
            "source term": st.column_config.TextColumn(required=True),
            "target term": st.column_config.TextColumn(required=True),
        },
    )
    if st.button("Save glossary", type="primary", icon=":material/save:", key="glossary_save"):
        with feedback.error_boundary("saving the glossary"):
            rows = list(edited.itertuples(index=False, name=None))
            n = glossary.set_terms(current.id, rows)
            st.session_state["glossary_nonce"] = nonce + 1
            feedback.flash(
                f"Saved the glossary of “{current.name}”: {formatting.plural(n, 'term')}."
            )
            st.rerun()
    with st.expander("Import terms from a file", icon=":material/upload_file:"):
        upload = st.file_uploader(
            "TSV or CSV: source term, target term per line",
            type=["tsv", "csv", "txt"],
            key=f"glossary_upload_{nonce}",
        )
        if st.button("Import terms", key="glossary_import", disabled=upload is None):
            with feedback.error_boundary("importing the glossary"):
                fmt = "csv" if upload.name.lower().endswith(".csv") else "tsv"
                n = glossary.import_terms(current.id, upload, fmt)
                st.session_state["glossary_nonce"] = nonce + 1
                feedback.flash(
                    f"Imported the terms: the glossary holds {formatting.plural(n, 'term')}."
                )
                st.rerun()
