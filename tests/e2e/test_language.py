"""The language switch in a real browser (issue 23): an English browser gets English; the
sidebar's switch turns the navigation, the pages and the Train button into 简体中文, a reload
keeps it; a browser whose language is Chinese gets Chinese on its first visit. The app and the
browser are those of ``test_browser`` (its ``app`` fixture). Screenshots of the Chinese Corpus
and Train pages go to the test's folder, or with UPDATE_SCREENSHOTS=1 to docs/screenshots/
(the README shows them; fonts-wqy-microhei draws the Chinese)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.e2e import test_browser
from tests.e2e.test_browser import (
    EXPECT_TIMEOUT_MS,
    README_SCREENSHOTS,
    VIEWPORT,
    App,
    _shot,
    assert_clean_log,
    launch,
)

pytestmark = test_browser.pytestmark
app = test_browser.app  # the fixture: `make run`'s app on a fresh WORKBENCH_HOME


def test_switch_to_chinese_and_back(app: App, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    shots = README_SCREENSHOTS if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path / "shots"
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=VIEWPORT, locale="en-US")
            page.set_default_timeout(60_000)
            page.goto(f"{app.url}/corpus")
            expect(page.get_by_role("heading", name="Corpus", exact=True)).to_be_visible()
            sidebar = page.get_by_test_id("stSidebar")
            sidebar.get_by_text("简体中文", exact=True).click()

            expect(page.get_by_role("heading", name="语料库", exact=True)).to_be_visible()
            nav = page.get_by_test_id("stTopNav")
            for title in ("语料库", "训练", "翻译", "检视", "模型", "审校"):
                expect(nav.get_by_text(title, exact=True).first).to_be_visible()
            expect(page).to_have_url(re.compile(r"[?&]lang=zh_Hans"))
            expect(page.get_by_test_id("stToast")).to_have_count(0)  # the first run's toast
            _shot(page, shots, "zh_corpus")

            nav.get_by_text("训练", exact=True).first.click()
            expect(page.get_by_role("heading", name="训练", exact=True)).to_be_visible()
            train = page.locator(".st-key-train_button")
            expect(train.get_by_role("button", name="训练", exact=True)).to_be_visible()
            expect(page.get_by_role("heading", name="新的训练", exact=True)).to_be_visible()
            _shot(page, shots, "zh_train")

            page.reload()  # the address keeps the language
            expect(page.get_by_role("heading", name="训练", exact=True)).to_be_visible()
            page.get_by_test_id("stSidebar").get_by_text("English", exact=True).click()
            train = page.locator(".st-key-train_button")
            expect(train.get_by_role("button", name="Train", exact=True)).to_be_visible()

            zh = browser.new_page(viewport=VIEWPORT, locale="zh-CN")  # a Chinese browser
            zh.goto(f"{app.url}/train")
            expect(zh.get_by_role("heading", name="训练", exact=True)).to_be_visible()
            assert page.locator('[data-testid="stException"]').count() == 0
        finally:
            browser.close()
    assert_clean_log(app)
