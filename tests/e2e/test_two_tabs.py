"""Two real tabs of one browser edit the same corpus (issue 37, item 1): tab A edits a pair
and does not save; tab B, opened at ``/``, is told of A's unsaved change, edits the same pair
and saves; A's save then holds its edit back and shows both versions (theirs, by whom and
when; yours), A keeps its own and saves. Then more interleavings of the two tabs: A saves
first and B merges; both edit different pairs; B deletes a pair A edits; the first to edit
saves first and the other keeps theirs. After each, the
database (read through the services, beside the running app) holds every saved edit that
nobody chose to replace. The app and the browser are those of ``test_browser``."""

from __future__ import annotations

import re

from db.tables import TableDraft
from tests.e2e import test_browser
from tests.e2e.test_browser import (
    EXPECT_TIMEOUT_MS,
    VIEWPORT,
    App,
    _edit_cell,
    _no_traceback,
    _row_y,
    _settle,
    assert_clean_log,
    launch,
)
from tests.helpers import module_home, wait_for
from workbench.corpus import pairs
from workbench.corpus.demo import DEMO_NAME
from workbench.storage import session_scope
from workbench.team.access import local_admin

pytestmark = test_browser.pytestmark
app = test_browser.app  # the fixture: `make run`'s app on a fresh WORKBENCH_HOME

_ROW_MARKER_X = 16  # px from the grid's left edge: the row's selection box (drawn on canvas)


class _Tab:
    """One tab of the shared browser context, on the Corpus page's table of demo pairs."""

    def __init__(self, page) -> None:
        self.page = page
        self.grid = page.locator('[data-testid="stDataFrame"]').first
        self.footer = page.get_by_text(re.compile(r"pairs (\(all splits\)|match) · "))

    def front(self) -> None:
        """Act in this tab: bring it to the front and wait for its last run to end."""
        self.page.bring_to_front()
        _settle(self.page)

    def edit(self, row: int, target: str) -> None:
        self.front()
        _edit_cell(self.page, self.grid, "target", target, row=row)

    def delete(self, row: int) -> None:
        """Select a row by its marker and delete it with the grid's own toolbar button.

        The button shows only once the row is selected: waiting for it is waiting for the
        selection (a key pressed right after a click on a canvas still drawing after a run
        deleted nothing)."""
        self.front()
        box, y = _row_y(self.grid, row)
        self.grid.click(position={"x": _ROW_MARKER_X, "y": y - box["y"]})
        self.page.get_by_role("button", name="Delete row(s)").click()

    def save(self, message: str) -> None:
        from playwright.sync_api import expect

        self.front()
        self.page.locator(".st-key-save_edits button").click()
        expect(self.page.get_by_text(message).first).to_be_visible()
        _settle(self.page)

    def unsaved(self, n: int) -> None:
        """The footer counts ``n`` unsaved changes once the tab's run is over (mid-run, the
        footer of the run before can still be on the page beside the new one: CI once timed
        out on a loaded machine with both shown)."""
        from playwright.sync_api import expect

        _settle(self.page)
        changes = f"{n} unsaved change{'s' if n > 1 else ''}" if n else "add rows at the bottom"
        expect(self.footer).to_contain_text(changes)


def _a_draft_is_stored() -> bool:
    with session_scope() as s:
        return s.query(TableDraft).count() > 0


def _targets(ids: list[int]) -> dict[int, str]:
    """The stored target of each of ``ids`` (those that exist), read through the services."""
    rows = pairs.search_pairs(DEMO_NAME, page_size=1000).rows
    return {int(r.id): r.target for r in rows.itertuples() if int(r.id) in ids}


def _pair_with(target: str) -> list[tuple[int, str]]:
    rows = pairs.search_pairs(DEMO_NAME, target, page_size=1000).rows
    return [(int(r.id), r.source) for r in rows.itertuples() if r.target == target]


def test_two_tabs_of_one_browser_lose_no_saved_edit(app: App) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with module_home(app.home), sync_playwright() as p:
        browser = launch(p)
        try:
            context = browser.new_context(viewport=VIEWPORT)
            context.set_default_timeout(30_000)
            a = _Tab(context.new_page())
            a.page.goto(app.url)
            expect(a.footer).to_contain_text("48 pairs (all splits)")
            first = pairs.search_pairs(DEMO_NAME, page_size=6).rows
            ids = [int(i) for i in first["id"]]
            sources = dict(zip(ids, first["source"], strict=True))

            # 1. A edits pair X and does not save; B, a new tab at "/", is told of it.
            x = ids[0]
            a.edit(0, "A typed this (round 1)")
            a.unsaved(1)
            _settle(a.page)
            # A's draft is in the database, where another tab reads it, before B opens
            wait_for(_a_draft_is_stored, 30, "A's draft in the database")
            b = _Tab(context.new_page())
            b.page.goto(app.url)
            expect(
                b.page.get_by_text("Another tab of this browser has 1 unsaved change.")
            ).to_be_visible()
            expect(b.page.get_by_role("button", name="Open here")).to_be_visible()
            assert b.page.url != a.page.url  # a tab of its own: its own drafts key
            # B edits pair X itself and saves: nothing held it back.
            b.edit(0, "B typed this (round 1)")
            b.unsaved(1)
            b.save("Saved: 0 added, 1 edited, 0 deleted.")
            assert _targets([x]) == {x: "B typed this (round 1)"}
            # A saves: its edit is held back, both versions side by side.
            a.save("1 edit was held back")
            expect(a.page.get_by_text("1 edit conflicts with a change made since")).to_be_visible()
            conflict = a.page.locator("[class*='st-key-conflict_']")
            expect(conflict).to_have_count(1)
            expect(conflict).to_contain_text(f"pair {x}")
            who = re.escape(local_admin().email)  # B, as the app names whoever uses it here
            expect(conflict).to_contain_text(re.compile(rf"Theirs · changed by {who} on \d{{4}}-"))
            expect(conflict).to_contain_text("B typed this (round 1)")
            expect(conflict).to_contain_text("Yours · not saved")
            expect(conflict).to_contain_text("A typed this (round 1)")
            a.unsaved(1)  # kept in the draft
            assert _targets([x]) == {x: "B typed this (round 1)"}  # not overwritten
            # A keeps its own, then saves it.
            conflict.get_by_role("button", name="Keep mine").click()
            expect(a.page.get_by_text(f"Resolved pair {x}: Save to write it.")).to_be_visible()
            expect(conflict).to_have_count(0)
            a.save("Saved: 0 added, 1 edited, 0 deleted.")
            a.unsaved(0)
            assert _targets([x]) == {x: "A typed this (round 1)"}

            # 2. A saves first; B, whose page still shows the row as it was, edits it: B's
            # edit is held back at once, and B merges both.
            y = ids[1]
            a.edit(1, "A saved this first (round 2)")
            a.save("Saved: 0 added, 1 edited, 0 deleted.")
            b.edit(1, "B typed this later (round 2)")
            stale = b.page.locator("[class*='st-key-conflict_']")
            expect(stale).to_contain_text("A saved this first (round 2)")
            expect(stale).to_contain_text("B typed this later (round 2)")
            assert _targets([y]) == {y: "A saved this first (round 2)"}
            stale.get_by_role("button", name="Merge").click()
            merged = b.page.get_by_role("textbox", name="target")
            merged.fill("A and B, merged (round 2)")
            b.page.get_by_role("button", name="Keep this merge").click()
            expect(b.page.get_by_text(f"Resolved pair {y}: Save to write it.")).to_be_visible()
            b.save("Saved: 0 added, 1 edited, 0 deleted.")
            assert _targets([x, y]) == {
                x: "A typed this (round 1)",
                y: "A and B, merged (round 2)",
            }

            # 3. Each tab edits a different pair; B saves first, then A: both saved.
            z, w = ids[2], ids[3]
            a.edit(2, "A's own pair (round 3)")
            b.edit(3, "B's own pair (round 3)")
            b.save("Saved: 0 added, 1 edited, 0 deleted.")
            a.save("Saved: 0 added, 1 edited, 0 deleted.")
            expect(a.page.locator("[class*='st-key-conflict_']")).to_have_count(0)
            assert _targets([z, w]) == {z: "A's own pair (round 3)", w: "B's own pair (round 3)"}

            # 4. A edits a pair that B then deletes and saves: A's save holds its edit back
            # beside "deleted"; keeping it brings the pair back as a new one.
            v = ids[4]
            a.edit(4, "A edited a pair B deleted (round 4)")
            a.unsaved(1)
            b.delete(4)
            b.unsaved(1)
            b.save("Saved: 0 added, 0 edited, 1 deleted.")
            assert _targets([v]) == {}
            a.save("1 edit was held back")
            gone = a.page.locator("[class*='st-key-conflict_']")
            expect(gone).to_contain_text("deleted")
            expect(gone).to_contain_text("A edited a pair B deleted (round 4)")
            gone.get_by_role("button", name="Keep mine").click()
            expect(a.page.get_by_text(f"Resolved pair {v}: Save to write it.")).to_be_visible()
            a.save("Saved: 1 added, 0 edited, 0 deleted.")
            [(back, source)] = _pair_with("A edited a pair B deleted (round 4)")
            assert back != v and source == sources[v]  # the text of both sides is kept

            # 5. Both edit a pair, and the first to edit saves first (round 1 the other way
            # round): B's save holds its edit back, and B keeps A's.
            u = ids[5]  # row 4 now, in both tabs (the pair kept in round 4 is at the end)
            a.edit(4, "A, first to edit (round 5)")
            b.edit(4, "B, second to edit (round 5)")
            a.save("Saved: 0 added, 1 edited, 0 deleted.")
            b.save("1 edit was held back")
            theirs = b.page.locator("[class*='st-key-conflict_']")
            expect(theirs).to_contain_text("A, first to edit (round 5)")
            expect(theirs).to_contain_text("B, second to edit (round 5)")
            assert _targets([u]) == {u: "A, first to edit (round 5)"}
            theirs.get_by_role("button", name="Keep theirs").click()
            expect(b.page.get_by_text(f"Resolved pair {u}: Save to write it.")).to_be_visible()
            b.unsaved(0)  # B chose to drop its edit: nothing is left to save

            # In the end: every save that nobody chose to replace is in the database.
            assert _targets([x, y, z, w, u]) == {
                x: "A typed this (round 1)",
                y: "A and B, merged (round 2)",
                z: "A's own pair (round 3)",
                w: "B's own pair (round 3)",
                u: "A, first to edit (round 5)",
            }
            assert pairs.search_pairs(DEMO_NAME).total == 48
            for tab in (a, b):
                tab.front()
                tab.unsaved(0)
                _no_traceback(tab.page)
        finally:
            browser.close()
    assert_clean_log(app)
