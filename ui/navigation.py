"""The pages of the app: their module, address, title, icon and caption, and links between
them.

Each page is the ``render`` callable of its module, which is imported the first time the page
runs: the first page a browser opens paints before the others' imports (torch, via the
registry and the runs) are loaded. ``streamlit_app.py`` registers ``pages(...)``; a page links to
another with ``link`` (so pages never import each other).

Every page answers at its own address (``/corpus``, ``/train``, …). Streamlit serves its
default page only at the root address, never at that page's ``url_path``, so the default is
a hidden page at ``ROOT_PATH`` that opens the first page at its own address: a bookmark of
``/corpus`` works like the root.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import streamlit as st

from ui.i18n import N_, translate


@dataclass(frozen=True)
class PageRef:
    """Where a page lives (its module and URL path), how the navigation shows it, and the
    line under its title on what it is for (``ui.feedback.page`` draws both)."""

    module: str
    url_path: str
    title: str  # a message id: ``label`` is what the navigation shows
    icon: str
    caption: str  # a message id

    @property
    def label(self) -> str:
        """The page's title in the session's language."""
        return translate(self.title)

    def render(self) -> None:
        """Draw the page: its module's ``render()``."""
        importlib.import_module(self.module).render()


CORPUS = PageRef(
    "ui.corpus_page",
    "corpus",
    N_("Corpus"),
    ":material/dataset:",
    N_("The sentence pairs your models learn from: curate, import, export, inspect."),
)
TRAIN = PageRef(
    "ui.train_page",
    "train",
    N_("Train"),
    ":material/model_training:",
    N_(
        "Train a Transformer on a corpus. Training runs in a background worker: you can "
        "leave this page, reload it or restart the app."
    ),
)
TRANSLATE = PageRef(
    "ui.translate_page",
    "translate",
    N_("Translate"),
    ":material/translate:",
    N_("Translate with any stored model version; inspect and correct its output."),
)
INSPECT = PageRef(
    "ui.inspect_page",
    "inspect",
    N_("Inspect"),
    ":material/visibility:",
    N_(
        "Watch a version translate one sentence: its pieces and positions, every layer's "
        "and head's attention, each decoding step, and the beam search tree."
    ),
)
MODELS = PageRef(
    "ui.models_page",
    "models",
    N_("Models"),
    ":material/deployed_code:",
    N_("Every trained version, its scores, and side-by-side comparisons."),
)
REVIEW = PageRef(
    "ui.review_page",
    "review",
    N_("Review"),
    ":material/rate_review:",
    N_(
        "What to correct next: the sentences your model is least sure of, to check and add "
        "to the corpus."
    ),
)
TEAM = PageRef(
    "ui.team_page",
    "team",
    N_("Team"),
    ":material/group:",
    N_("Who may sign in to this workbench, and what each of them may do."),
)
PAGES = (
    CORPUS,
    TRAIN,
    TRANSLATE,
    INSPECT,
    MODELS,
    REVIEW,
)  # in the navigation's order; the root address opens the first


ROOT_PATH = "start"  # the hidden default page's own name (its address is the root, "/")


def _page(ref: PageRef) -> st.Page:
    """The page as Streamlit addresses it (by its URL path) in a link or a switch."""
    return st.Page(ref.render, title=ref.label, icon=ref.icon, url_path=ref.url_path)


def pages(team: bool) -> tuple[PageRef, ...]:
    """The pages to show: ``PAGES``, plus the Team page for admins when sign-in is on."""
    return (*PAGES, TEAM) if team else PAGES


def link(ref: PageRef, label: str, icon: str | None = None) -> None:
    """A link to another page of the app."""
    st.page_link(_page(ref), label=label, icon=icon or ref.icon)


def open_first_page() -> None:
    """The root address: open the first page at its own address (the query string kept)."""
    st.switch_page(_page(PAGES[0]), query_params=st.query_params.to_dict())
