"""The browser UI: `make run` (or `streamlit run streamlit_app.py`).

This file is the router: page config, what every run does first (style, the demo corpus on a
first start), and the pages, each registered as a callable (``ui.feedback.page``: the page's
header from ``ui.navigation``, then its module's `render`, inside the error boundary). The
pages live in `ui/`; all work is done by `workbench` services, and all state that matters lives
in the database under WORKBENCH_HOME, so reloading the page or restarting Streamlit never stops
a training run nor loses a grid's unsaved edits (``ui.grid``: drafts). With sign-in configured
(``ui.signin``), nothing but the sign-in button is drawn for an anonymous visitor.
"""

import streamlit as st

from ui import feedback, grid, i18n, navigation, signin, startup
from ui.i18n import _
from workbench.team.access import Permission

st.set_page_config(
    page_title=i18n.translate(startup.APP_TITLE),
    page_icon=str(startup.PAGE_ICON),
    layout="wide",
    menu_items={"About": _("Curate sentence pairs, train a Transformer, compare versions.")},
)

startup.apply_style()
i18n.selector()  # even before sign-in: the sign-in page is translated too
i18n.keep_in_address()
signin.install()
actor = signin.gate()  # with sign-in on, an anonymous visitor stops here
startup.seed_demo()
startup.sweep_trash()
startup.sweep_imports()
grid.keep_drafts()  # before any page can drop a grid's unsaved edits
startup.keep_typed_text()  # and what was typed in a page's text boxes

pages = [
    st.Page(feedback.page(ref), title=ref.label, icon=ref.icon, url_path=ref.url_path)
    for ref in navigation.pages(team=signin.sign_in_configured() and actor.can(Permission.USERS))
]
# The root address is a hidden page that opens the first page at its own address (see
# ui.navigation: Streamlit would serve the default page at "/" only, and /corpus not at all).
root = st.Page(
    navigation.open_first_page,
    title=navigation.PAGES[0].label,
    url_path=navigation.ROOT_PATH,
    default=True,
    visibility="hidden",
)
st.navigation([*pages, root], position="top").run()
