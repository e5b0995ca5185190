"""The browser UI: `make run` (or `streamlit run streamlit_app.py`).

This file is the router: page config, the demo corpus on a first start, and the four pages.
The pages live in `ui/`; all work is done by `workbench` services, and all state that matters
lives in the database under WORKBENCH_HOME, so reloading the page or restarting Streamlit
never stops a training run.
"""

import streamlit as st

from ui import common

st.set_page_config(
    page_title=common.APP_TITLE,
    page_icon=":material/translate:",
    layout="wide",
    menu_items={"About": "Curate sentence pairs, train a Transformer, compare versions."},
)

common.apply_style()
common.seed_demo()

pages = [
    st.Page(common.CORPUS_PAGE, title="Corpus", icon=":material/dataset:", default=True),
    st.Page(common.TRAIN_PAGE, title="Train", icon=":material/model_training:", url_path="train"),
    st.Page(
        common.TRANSLATE_PAGE, title="Translate", icon=":material/translate:", url_path="translate"
    ),
    st.Page(common.MODELS_PAGE, title="Models", icon=":material/deployed_code:", url_path="models"),
]
st.navigation(pages, position="top").run()
