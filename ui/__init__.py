"""The Streamlit pages of the workbench and what they share.

Pages (one module each, a `render()` callable that `streamlit_app.py` registers):
`corpus_page`, `train_page`, `translate_page`, `inspect_page`, `models_page`. Shared, one
concept per module: `navigation` (the pages' addresses and links between them), `startup`
(style, demo corpus), `feedback` (header, one-shot messages, errors as one line), `pickers`
(corpus, version and decoding pickers), `dialogs` (confirmations), `charts` (Altair charts),
`formatting` (numbers, durations, dates, counts) and `i18n` (the session's language: every
text a page shows is ``_("…")`` / ``n_(…)`` from the gettext catalogs in ``locale/``).

Pages are thin: every action calls a `workbench` service; nothing here opens a database
session or imports torch. State that matters lives in the database, so a reload or a restart
of Streamlit loses nothing; `st.session_state` only keeps view state (selections, the last
translation or inspection shown).
"""
