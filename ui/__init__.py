"""The Streamlit pages of the workbench (one module per page) and their shared widgets.

Pages are thin: every action calls a `workbench` service; nothing here opens a database
session or imports torch. State that matters lives in the database, so a reload or a restart
of Streamlit loses nothing; `st.session_state` only keeps view state (selections, the last
translation shown).
"""
