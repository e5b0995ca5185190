"""What the page tests share: open a page of the app under AppTest, and check it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.helpers import ROOT
from ui import navigation

APP = ROOT / "streamlit_app.py"


PAGES = {
    "corpus": navigation.CORPUS,
    "train": navigation.TRAIN,
    "translate": navigation.TRANSLATE,
    "inspect": navigation.INSPECT,
    "models": navigation.MODELS,
    "review": navigation.REVIEW,
}


TIMEOUT = 120


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    if name != "corpus":
        # The pages are callables, which `AppTest.switch_page` cannot address (it knows page
        # files): ask for the page's script hash, the hash of its URL path, as a browser that
        # opens /<url_path> does.
        at._page_hash = calc_hash(PAGES[name].url_path)
        at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    """No traceback element on the page (errors must be one st.error line)."""
    assert not at.exception, [e.value for e in at.exception]


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


@dataclass(frozen=True)
class Trained:
    home: Path
    corpus_id: int
    version_ids: list[int]  # newest first
    run_ids: list[int]
