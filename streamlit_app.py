"""The browser UI: `make run` (or `streamlit run streamlit_app.py`).

This file is the router: page config, what every run does first (style, the demo corpus on a
first start), and the pages, each registered as a callable (`ui.navigation`: a page's
module's `render`, inside the error boundary). The pages live in `ui/`; all work is done by
`workbench` services, and all state that matters lives in the database under WORKBENCH_HOME,
so reloading the page or restarting Streamlit never stops a training run.
"""

import streamlit as st

from ui import navigation, startup
from ui.feedback import guarded

st.set_page_config(
    page_title=startup.APP_TITLE,
    page_icon=":material/translate:",
    layout="wide",
    menu_items={"About": "Curate sentence pairs, train a Transformer, compare versions."},
)

startup.apply_style()
startup.seed_demo()
startup.sweep_trash()

pages = [
    st.Page(
        guarded(ref.render),
        title=ref.title,
        icon=ref.icon,
        url_path=ref.url_path,
        default=ref == navigation.PAGES[0],
    )
    for ref in navigation.PAGES
]
st.navigation(pages, position="top").run()
