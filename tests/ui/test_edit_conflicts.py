"""Edit conflicts on the Corpus page under AppTest (issue 37, item 1): an edit of a pair that
another tab changed and saved meanwhile is held back, shown beside theirs (by whom, when),
and kept, dropped or merged; the drafts of another tab of the same browser are named."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.ui.pages import assert_clean, open_page, texts
from workbench.corpus import draft_saves, drafts, pairs
from workbench.corpus.drafts import Draft


def _edit(at: AppTest, **edited_rows: dict) -> None:
    at.session_state[at.data_editor[0].key] = {
        "edited_rows": {int(k[1:]): v for k, v in edited_rows.items()},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert_clean(at)


def _other_tab_saves(corpus_id: int, pair_id: int, target: str) -> None:
    other = drafts.new_browser_key()
    revision = draft_saves.revisions(corpus_id, "pairs", [pair_id])[pair_id]
    drafts.save(
        other, corpus_id, "pairs", Draft({pair_id: {"target": target}}, bases={pair_id: revision})
    )
    draft_saves.apply_pairs(other, corpus_id)


def _rice(corpus_id: int) -> int:
    return int(pairs.search_pairs(corpus_id, "rice").rows["id"][0])


def _markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_stale_edit_shows_both_versions_and_keep_mine_saves_it(small_corpus: int) -> None:
    at = open_page("corpus")
    rice = _rice(small_corpus)
    _edit(at, r0={"target": "rice (tab A)"})
    _other_tab_saves(small_corpus, rice, "rice (tab B)")
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "Saved: 0 added, 0 edited, 0 deleted." not in texts(at.success)
    assert (
        "Saved: 0 added, 0 edited, 0 deleted. 1 edit was held back: its row was changed since "
        "you edited it (see below)." in texts(at.warning)
    )
    assert "1 edit conflicts with a change made since" in texts(at.warning)
    shown = _markdown(at)
    assert "**Theirs** · changed by" in shown and "rice (tab B)" in shown
    assert "**Yours** · not saved" in shown and "rice (tab A)" in shown
    assert pairs.search_pairs(small_corpus, "tab B").total == 1  # not overwritten
    assert "1 unsaved change" in texts(at.caption)  # still in the draft

    [mine] = [b for b in at.button if b.key and b.key.startswith("mine_")]
    mine.click().run()
    assert_clean(at)
    assert "conflict" not in texts(at.warning)
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "Saved: 0 added, 1 edited, 0 deleted." in texts(at.success)
    assert pairs.search_pairs(small_corpus, "tab A").total == 1
    assert pairs.search_pairs(small_corpus, "tab B").total == 0


def test_keep_theirs_and_a_merge(small_corpus: int) -> None:
    at = open_page("corpus")
    rice = _rice(small_corpus)
    _edit(at, r0={"target": "rice (A)"})
    _other_tab_saves(small_corpus, rice, "rice (B)")
    at.run()
    assert "1 edit conflicts" in texts(at.warning)  # shown before any save too
    [area] = [a for a in at.text_area if a.key.endswith("_target")]
    area.input("rice (A+B)").run()
    [merge] = [b for b in at.button if b.key and b.key.startswith("merged_")]
    merge.click().run()
    assert_clean(at)
    at.button(key="save_edits").click().run()
    assert pairs.search_pairs(small_corpus, "A+B").total == 1

    _edit(at, r0={"target": "rice (C)"})
    _other_tab_saves(small_corpus, rice, "rice (D)")
    at.run()
    [theirs] = [b for b in at.button if b.key and b.key.startswith("theirs_")]
    theirs.click().run()
    assert_clean(at)
    assert "unsaved" not in texts(at.caption)
    assert pairs.search_pairs(small_corpus, "rice (D)").total == 1


def test_another_tab_of_the_same_browser_is_named_and_can_be_opened(small_corpus: int) -> None:
    at = open_page("corpus")
    mine = at.session_state["_drafts_browser_key"]
    other = drafts.new_browser_key(drafts.browser_of(mine))
    stranger = drafts.new_browser_key()
    rice = _rice(small_corpus)
    for key in (other, stranger):
        drafts.save(key, small_corpus, "pairs", Draft({rice: {"target": "rice elsewhere"}}))
    at.run()
    assert "Another tab of this browser has **1 unsaved change**." in texts(at.warning)
    assert texts(at.warning).count("Another tab") == 1  # another browser's are not named
    at.button(key=f"open_tab_{other}").click().run()
    assert_clean(at)
    assert at.session_state["_drafts_browser_key"] == other
    assert at.data_editor[0].value["target"].tolist()[0] == "rice elsewhere"


def test_two_tabs_with_one_key_keep_each_others_edits(small_corpus: int) -> None:
    """A duplicated tab (its address holds the same key) or a tab opened here shares the
    other's draft: each one's edits are applied onto the stored draft, never replacing the
    other's (the last to store dropped the other's edit before)."""
    a = open_page("corpus")
    key = a.session_state["_drafts_browser_key"]
    _edit(a, r0={"target": "rice by A"})
    b = open_page("corpus")
    b.session_state["_drafts_browser_key"] = key  # as "Open here" sets it
    b.session_state["_drafts_live_grids"] = {}
    b.run()
    assert b.data_editor[0].value["target"].tolist()[0] == "rice by A"
    _edit(b, r1={"target": "noodles by B"})
    _edit(a, r0={"target": "rice by A"}, r2={"target": "tea by A"})  # A's widget, cumulative
    stored = drafts.load(key, small_corpus, "pairs").edited
    assert sorted(v["target"] for v in stored.values()) == ["noodles by B", "rice by A", "tea by A"]
    assert "3 unsaved changes" in texts(a.caption)
    assert a.data_editor[0].value["target"].tolist()[1] == "noodles by B"  # shown in A too
    a.button(key="save_edits").click().run()
    assert_clean(a)
    assert "Saved: 0 added, 3 edited, 0 deleted." in texts(a.success)
