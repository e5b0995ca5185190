"""What the app does on every start of a script run, before the page: its style, the demo
corpus on a first start (see ``workbench.corpus.demo``), and emptying what has been in the trash
long enough (``workbench.team.trash``) and what killed model imports left in runs/
(``workbench.models.staging``), once per server process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ui.feedback import error_boundary
from ui.i18n import N_, _, localized
from workbench import settings
from workbench.backup import restore_journal
from workbench.corpus import demo
from workbench.models import staging
from workbench.team import trash

APP_TITLE = N_("Translation workbench")  # a message id
# The browser tab's icon: a file sent with the page (a ":material/…:" page icon is fetched from
# Google's font server, which a local tool must never call).
PAGE_ICON = Path(__file__).with_name("icon.svg")

_STYLE = """
<style>
/* Less empty space between the top navigation and the page title. */
[data-testid="stMainBlockContainer"] { padding-top: 3.5rem; }
/* Tables need the width: 3rem margins instead of 5rem on a wide window (a 1400 px window with
   the sidebar open shows a 1,000 px page, not 940). */
@media (min-width: 992px) {
  [data-testid="stMainBlockContainer"] { padding-left: 3rem; padding-right: 3rem; }
}
</style>
"""


def apply_style() -> None:
    st.html(_STYLE)


@st.cache_resource(show_spinner=False)
def _seed_demo(database: str) -> dict[str, Any]:
    """Once per server process and database: add the demo corpus to an empty database."""
    info = demo.ensure_demo_corpus()
    return {"name": info.name if info is not None else None, "announced": False}


def seed_demo() -> None:
    """Add the demo corpus on first start (see `workbench.corpus.demo`) and say so, once; and
    say what opening the data folder did to a restore that was killed (``restore_journal``)."""
    with error_boundary(N_("adding the demo corpus")):
        seeded = _seed_demo(settings.database_url())
        if seeded["name"] and not seeded["announced"]:
            seeded["announced"] = True
            st.toast(
                _(
                    "Added the demo corpus “{name}”. Open **Train** and click Train to try it.",
                    name=seeded["name"],
                ),
                icon=":material/waving_hand:",
            )
    for outcome in restore_journal.untold_recoveries():
        st.warning(localized(outcome), icon=":material/restore:")


@st.cache_resource(show_spinner=False)
def _swept_trash(database: str) -> int:
    """Once per server process and database (the worker sweeps too, when it starts)."""
    return trash.sweep_trash()


def sweep_trash() -> None:
    """Remove for good the corpora deleted more than ``trash.TRASH_DAYS`` days ago."""
    with error_boundary(N_("emptying the trash")):
        _swept_trash(settings.database_url())


@st.cache_resource(show_spinner=False)
def _swept_imports(home: str) -> int:
    """Once per server process and data folder (the worker and each import sweep too)."""
    return staging.sweep()


def sweep_imports() -> None:
    """Remove the staging folders of model imports that were killed (``runs/import-…``)."""
    with error_boundary(N_("removing what killed model imports left")):
        _swept_imports(str(settings.home()))


# Text boxes whose contents must outlive a visit to another page: Streamlit forgets the state
# of a widget that a run does not draw (the grids keep theirs as drafts: ``ui.grid``).
TYPED_TEXT_KEYS = ("translate_input", "inspect_text")


def keep_typed_text() -> None:
    """Store each typed text again as plain session state (Streamlit's way to keep a widget's
    value across pages), so a page that does not draw its box still keeps what was typed."""
    for key in TYPED_TEXT_KEYS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
