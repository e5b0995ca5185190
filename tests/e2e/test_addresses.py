"""Every page opens at its own address in a real browser, the first page included (issue 19:
/corpus answered "Page not found" because Streamlit serves its default page only at the
root). The app and the browser are those of ``test_browser`` (its ``app`` fixture)."""

from __future__ import annotations

import re

from tests.e2e import test_browser
from tests.e2e.test_browser import EXPECT_TIMEOUT_MS, VIEWPORT, App, assert_clean_log, launch
from ui import navigation

pytestmark = test_browser.pytestmark
app = test_browser.app  # the fixture: `make run`'s app on a fresh WORKBENCH_HOME


def test_every_page_opens_at_its_own_address(app: App) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    url = app.url
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(60_000)
            for ref in navigation.PAGES:
                page.goto(f"{url}/{ref.url_path}")
                expect(page.get_by_role("heading", name=ref.title, exact=True)).to_be_visible()
                expect(page.get_by_text("Page not found")).to_have_count(0)
                assert page.url.split("?")[0] == f"{url}/{ref.url_path}"  # ?drafts=… may follow
            # The root opens the first page at its own address (what a bookmark then keeps).
            first = navigation.PAGES[0]
            page.goto(url)
            expect(page.get_by_role("heading", name=first.title, exact=True)).to_be_visible()
            expect(page).to_have_url(re.compile(rf"{re.escape(url)}/{first.url_path}(\?.*)?$"))
            expect(page.get_by_text("Page not found")).to_have_count(0)
        finally:
            browser.close()
    assert_clean_log(app)
