"""The browser UI: `make run` (or `streamlit run streamlit_app.py`).

This file is the router: page config, what every run does first (style, the demo corpus on a
first start), and the pages, each registered as a callable (`ui.navigation`: a page's
module's `render`, inside the error boundary). The pages live in `ui/`; all work is done by
`workbench` services, and all state that matters lives in the database under WORKBENCH_HOME,
so reloading the page or restarting Streamlit never stops a training run nor loses a grid's
unsaved edits (``ui.grid``: drafts).
"""

import streamlit as st

from ui import grid, navigation, startup
from ui.feedback import guarded

st.set_page_config(
    page_title=startup.APP_TITLE,
    page_icon=":material/translate:",
    layout="wide",
    menu_items={"About": "Curate sentence pairs, train a Transformer, compare versions."},
)

startup.apply_style()
startup.seed_demo()
grid.keep_drafts()  # before any page can drop a grid's unsaved edits

pages = [
    st.Page(guarded(ref.render), title=ref.title, icon=ref.icon, url_path=ref.url_path)
    for ref in navigation.PAGES
]
# The root address is a hidden page that opens the first page at its own address (see
# ui.navigation: Streamlit would serve the default page at "/" only, and /corpus not at all).
root = st.Page(
    navigation.open_first_page,
    title=navigation.PAGES[0].title,
    url_path=navigation.ROOT_PATH,
    default=True,
    visibility="hidden",
)
st.navigation([*pages, root], position="top").run()
