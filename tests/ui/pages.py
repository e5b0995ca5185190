"""What the page tests share: open a page of the app under AppTest, and check it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.helpers import ROOT, TrainedHome, trained_home, training
from ui import i18n, navigation

APP = ROOT / "streamlit_app.py"


# Every page of the navigation by its address ("corpus", "train", …): a test that iterates over
# them covers a new page without being told.
PAGES = {ref.url_path: ref for ref in navigation.PAGES}


TIMEOUT = 120


def pages_home(tmp_path_factory) -> TrainedHome:
    """A copy of the data folder the pages are tested on: the demo corpus and two real tiny
    versions (a short and a shorter training), trained once per test run."""
    return trained_home(
        tmp_path_factory,
        "demo",
        training(preset="tiny", max_steps=60),
        training(preset="tiny", max_steps=30),
    )


def open_page(name: str, lang: str | None = None) -> AppTest:
    """The page at address ``name`` as a browser opens it (in ``lang`` when given, as
    ``?lang=`` in the address gives it)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if lang is not None:
        at.query_params[i18n.PARAM] = lang
    at.run()  # the root address: it opens the first page
    if PAGES[name] is not navigation.PAGES[0]:
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


def wait_for_memory(at: AppTest, seconds: float = 120) -> None:
    """Run the page until its kNN-MT store, built in the background, says what it holds."""
    deadline = time.monotonic() + seconds
    while "Memory:" not in texts(at.caption):
        assert time.monotonic() < deadline, f"the memory was not built within {seconds:g} s"
        time.sleep(0.5)
        at.run()
        assert_clean(at)
