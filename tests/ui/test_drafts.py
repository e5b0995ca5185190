"""Drafts under AppTest: a grid's unsaved edits survive every path that used to drop them
(issue 19: the corpus picker, page navigation, a reload) and the glossary refuses a half-filled
row as the pairs table does."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.ui.pages import APP, TIMEOUT, assert_clean, open_page, texts
from ui import grid
from workbench.corpus import corpora, drafts, glossary, pairs

GLOSSARY_TAB = ":material/menu_book: Glossary"


@pytest.fixture
def two_corpora(small_corpus: int) -> tuple[int, int]:
    """The three-pair Kitchen corpus and a one-pair Travel corpus."""
    travel = corpora.create_corpus("Travel", "zh", "en")
    pairs.apply_edits(travel.id, added=[{"source": "火车", "target": "train"}])
    return small_corpus, travel.id


def _edit(at: AppTest, **state) -> None:
    at.session_state[at.data_editor[0].key] = {
        "edited_rows": state.get("edited_rows", {}),
        "added_rows": state.get("added_rows", []),
        "deleted_rows": state.get("deleted_rows", []),
    }
    at.run()


def _goto(at: AppTest, url_path: str) -> None:
    """Open another page of the same session, as the navigation does."""
    at._page_hash = calc_hash(url_path)
    at.run()
    assert_clean(at)


def _targets(at: AppTest) -> list[str]:
    return at.data_editor[0].value["target"].tolist()


def test_an_edit_survives_a_corpus_switch(two_corpora: tuple[int, int]) -> None:
    """Path 1: edit a pair, pick another corpus and come back: the edit is still pending."""
    kitchen, travel = two_corpora
    at = open_page("corpus")
    _edit(at, edited_rows={0: {"target": "cooked rice"}})
    assert "1 unsaved change" in texts(at.caption)
    at.selectbox(key="corpus_page_corpus").select(travel).run()
    assert_clean(at)
    assert _targets(at) == ["train"]
    assert "Kitchen**: 1 unsaved change in the pairs" in texts(at.warning), "said elsewhere"
    at.selectbox(key="corpus_page_corpus").select(kitchen).run()
    assert_clean(at)
    assert _targets(at) == ["cooked rice", "noodles", "tea"]
    assert "1 unsaved change" in texts(at.caption)
    at.button(key="save_edits").click().run()
    assert "Saved: 0 added, 1 edited, 0 deleted." in texts(at.success)
    assert pairs.search_pairs(kitchen, "cooked").total == 1
    assert "unsaved" not in texts(at.caption)


def test_an_edit_survives_a_visit_to_another_page(two_corpora: tuple[int, int]) -> None:
    """Path 2: edit a pair and a new row, open Train, come back to Corpus: both pending."""
    kitchen, _ = two_corpora
    at = open_page("corpus")
    _edit(
        at,
        edited_rows={1: {"target": "thin noodles"}},
        added_rows=[{"source": "汤", "target": "soup"}],
        deleted_rows=[2],
    )
    assert "3 unsaved changes" in texts(at.caption)
    _goto(at, "train")
    assert not at.data_editor
    _goto(at, "corpus")
    assert _targets(at) == ["rice", "thin noodles", "soup"]
    assert "3 unsaved changes" in texts(at.caption)
    # The restored table's rows are what it shows: the third is the new row now.
    _edit(at, edited_rows={2: {"target": "hot soup"}})
    assert "3 unsaved changes" in texts(at.caption)
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "Saved: 1 added, 1 edited, 1 deleted." in texts(at.success)
    assert pairs.search_pairs(kitchen).rows["target"].tolist() == [
        "rice",
        "thin noodles",
        "hot soup",
    ]


def test_an_edit_survives_a_reload_of_the_same_browser_only(two_corpora: tuple[int, int]) -> None:
    """A reload is a new session with the same address: the draft's key is in the address."""
    at = open_page("corpus")
    _edit(at, edited_rows={0: {"target": "cooked rice"}})
    key = at.query_params[grid.PARAM]
    assert drafts.is_browser_key(key)

    reloaded = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    reloaded.query_params[grid.PARAM] = key
    reloaded.run()
    assert_clean(reloaded)
    assert _targets(reloaded) == ["cooked rice", "noodles", "tea"]
    assert "1 unsaved change" in texts(reloaded.caption)

    other = open_page("corpus")  # another browser: its own drafts
    assert _targets(other) == ["rice", "noodles", "tea"]
    assert "unsaved" not in texts(other.caption)

    reloaded.button(key="discard_edits").click().run()
    reloaded.button(key="discard_edits_confirm").click().run()
    assert _targets(reloaded) == ["rice", "noodles", "tea"]
    assert drafts.load(key, two_corpora[0], "pairs").count == 0


def _glossary(at: AppTest) -> AppTest:
    at.session_state["corpus_tab"] = GLOSSARY_TAB
    at.run()
    assert_clean(at)
    return at


def test_the_glossary_refuses_a_half_filled_row_like_the_pairs(
    two_corpora: tuple[int, int],
) -> None:
    """Path 3: a source term with no target is named and kept, never "0 terms" saved."""
    kitchen, _ = two_corpora
    at = _glossary(open_page("corpus"))
    editor = at.data_editor[0]
    # A required column would make the browser keep the half-filled row to itself (never
    # sent to the server, so silently dropped): the grid's one rule names it instead.
    assert not [c for c in json.loads(editor.proto.columns).values() if c.get("required")]
    _edit(at, added_rows=[{"source term": "茶"}])
    assert "1 unsaved change** (1 incomplete)" in texts(at.caption)
    at.button(key="glossary_save").click().run()
    assert_clean(at)
    assert (
        "Nothing was saved: new row 1 has no target term (en). Fill in both sides or delete "
        "that row, then save again."
    ) in texts(at.error)
    assert not at.success
    assert glossary.list_terms(kitchen) == []
    assert "1 unsaved change** (1 incomplete)" in texts(at.caption), "the row stays"

    # The glossary's draft, too, survives another page; completed, it saves.
    _goto(at, "train")
    _goto(at, "corpus")
    at = _glossary(at)
    assert at.data_editor[0].value["source term"].tolist() == ["茶"]
    _edit(at, edited_rows={0: {"target term": "tea"}})
    at.button(key="glossary_save").click().run()
    assert_clean(at)
    assert "Saved the glossary of “Kitchen”: 1 term." in texts(at.success)
    assert glossary.list_terms(kitchen) == [("茶", "tea")]
