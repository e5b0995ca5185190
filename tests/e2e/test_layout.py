"""Every page in a real browser 1400 px wide with the sidebar open, in English and 简体中文
(issue 30 items 12 and 14), each at its own address and the first also at the root (issue
19: /corpus answered "Page not found" because Streamlit serves its default page only at the
root): no page asks for anything outside 127.0.0.1 (the page icon came
from Google's font server: 48 console errors offline), no button label is cut ("Ren…"), and
the tables whose columns the page talks about show them: the pairs' split, the Translate
table's warning column, the History tab's state, the Models table's BLEU and chrF.

A table's columns are drawn on a canvas; its scroller says whether they fit, and its
accessibility table lists the columns drawn (those in view, first). The app and the browser
are those of ``test_browser``, on a data folder that holds the demo corpus, two versions and
an API key before the app starts (the page tests' trained home: trained once per test run).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_browser
from tests.e2e.test_browser import (
    EXPECT_TIMEOUT_MS,
    App,
    _settle,
    assert_clean_log,
    launch,
    running_app,
)
from tests.helpers import module_home
from tests.ui.pages import pages_home
from ui import navigation
from workbench.serving import api_keys

pytestmark = test_browser.pytestmark


@pytest.fixture
def app(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The app on a copy of the page tests' trained home, with an API key."""
    built = pages_home(tmp_path_factory)
    with module_home(built.home):
        api_keys.create_key("plugin")
    with running_app(built.home, tmp_path / "streamlit.log") as started:
        yield started


WIDE = {"width": 1400, "height": 1000}
# Buttons whose label is cut carry the full label as a title (Streamlit's ellipsis).
_CUT_BUTTONS = """() => [...document.querySelectorAll('[data-testid="stMain"] button')]
    .filter(b => b.getBoundingClientRect().width > 0 && b.querySelector('[title]'))
    .map(b => b.querySelector('[title]').title)"""
# Per table: whether its columns fit its width, and the headers of the columns drawn.
_TABLES = """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')].map(f => {
    const s = f.querySelector('.dvn-scroller');
    return {fits: s !== null && s.scrollWidth <= s.clientWidth + 1,
            drawn: [...f.querySelectorAll('th')].map(t => t.innerText.trim())};
})"""

# `st.html` elements (a style, the script that sets the browser's cookie) placed where they
# take a gap in the page: an empty element still gets the column's spacing above the next.
_PLACED_HTML = """() => [...document.querySelectorAll(
    '[data-testid="stMain"] [data-testid="stHtml"]')].filter(e => e.offsetParent !== null).length"""


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1')
    _settle(page)


def _table(page, *headers: str) -> dict:
    """The table that draws these headers (the first columns of its kind), once drawn."""
    tables: list[dict] = []
    for _ in range(60):  # a table draws its canvas a moment after the script run
        tables = page.evaluate(_TABLES)
        found = [t for t in tables if set(headers) <= set(t["drawn"])]
        if found:
            return found[0]
        page.wait_for_timeout(500)
    raise AssertionError(f"no table draws {headers}: {tables}")


def test_pages_fit_1400_px_and_call_nothing_outside(app: App) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    outside: list[str] = []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=WIDE)
            page.set_default_timeout(60_000)
            page.on(
                "request",
                lambda r: (
                    None if r.url.startswith((app.url, "data:", "blob:")) else outside.append(r.url)
                ),
            )
            for lang, words in (("en", _ENGLISH), ("zh_Hans", _CHINESE)):
                for ref in navigation.PAGES:
                    _open(page, f"{app.url}/{ref.url_path}?lang={lang}")
                    assert page.evaluate(_CUT_BUTTONS) == [], (lang, ref.url_path)
                    assert page.evaluate(_PLACED_HTML) == 0, (lang, ref.url_path)
                    # every page opens at its own address (issue 19: /corpus answered "Page
                    # not found", Streamlit serving its default page only at the root)
                    expect(page.get_by_text("Page not found")).to_have_count(0)  # Streamlit's
                    assert page.url.split("?")[0] == f"{app.url}/{ref.url_path}"
                    if lang == "en":
                        heading = page.get_by_role("heading", name=ref.title, exact=True)
                        expect(heading).to_be_visible()
                if lang == "en":  # the root opens the first page at its own address
                    first = navigation.PAGES[0]
                    _open(page, app.url)
                    heading = page.get_by_role("heading", name=first.title, exact=True)
                    expect(heading).to_be_visible()
                    expect(page.get_by_text("Page not found")).to_have_count(0)
                    expect(page).to_have_url(
                        re.compile(rf"{re.escape(app.url)}/{first.url_path}(\?.*)?$")
                    )
                split = _table_on(page, f"{app.url}/corpus?lang={lang}", words["pairs"])
                assert split["fits"], split
                page.get_by_role("tab", name=re.compile(words["history_tab"])).click()
                _settle(page)
                assert _table(page, *words["history"])["fits"]

                _open(page, f"{app.url}/translate?lang={lang}")
                source = page.locator(".st-key-translate_input textarea")
                source.fill("我想喝一杯茶。\nΩψξ 水")  # the second: pieces it never saw
                source.press("Control+Enter")
                page.locator(".st-key-translate button").click()
                _settle(page)
                assert _table(page, *words["translations"])["fits"]

                _open(page, f"{app.url}/models?lang={lang}")
                _table(page, *words["versions"])  # the scores the caption is about: in view
                page.get_by_role("tab", name=re.compile(words["http_tab"])).click()
                _settle(page)
                assert page.evaluate(_CUT_BUTTONS) == [], (lang, "models: HTTP API")
            assert page.locator('[data-testid="stException"]').count() == 0
            # the drafts' browser cookie (ui.grid) was set, by that hidden script
            assert "workbench_browser=" in page.evaluate("document.cookie")
        finally:
            browser.close()
    assert outside == []
    assert_clean_log(app)


def _table_on(page, url: str, headers: tuple[str, ...]) -> dict:
    _open(page, url)
    return _table(page, *headers)


_ENGLISH = {
    "pairs": ("id", "source (zh)", "target (en)", "split", "note"),
    "history_tab": "History",
    "history": ("change", "who", "action", "state", "summary"),
    "translations": ("source", "translation", "unknown", "warning"),
    "versions": ("name", "valid BLEU", "valid chrF", "scored on"),
    "http_tab": "HTTP API",
}
_CHINESE = {
    "pairs": ("编号", "源文（zh）", "译文（en）", "划分", "备注"),
    "history_tab": "历史",
    "history": ("修改", "谁", "操作", "状态", "摘要"),
    "translations": ("源文", "译文", "未知", "警告"),
    "versions": ("名称", "验证 BLEU", "验证 chrF", "评分依据"),
    "http_tab": "HTTP 接口",
}
