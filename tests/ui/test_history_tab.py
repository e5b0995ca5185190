"""The Corpus page's History tab (Streamlit AppTest on a real SQLite file): the list of
changes, its filter by user, undo with a confirmation, undo since a moment, and the trash."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.ui.pages import APP, TIMEOUT, assert_clean, open_page, texts
from ui import i18n
from workbench.corpus import corpora, demo, pairs
from workbench.team import history

HISTORY_TAB = ":material/history: History"


@pytest.fixture
def edited_corpus(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A corpus that ana made with three pairs, two of which bo then deleted."""
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)
    monkeypatch.setattr(history, "actor_name", lambda: "ana@example.org")
    info = corpora.create_corpus("Menus", "zh", "en")
    ids = pairs.apply_edits(
        info.id,
        added=[
            {"source": s, "target": t}
            for s, t in [("汤", "soup"), ("面", "noodles"), ("茶", "tea")]
        ],
    ).added_ids
    monkeypatch.setattr(history, "actor_name", lambda: "bo@example.org")
    pairs.apply_edits(info.id, deleted=ids[:2])
    monkeypatch.setattr(history, "actor_name", lambda: history.LOCAL_ACTOR)
    return info.id


def _history_page():
    at = open_page("corpus")
    at.session_state["corpus_tab"] = HISTORY_TAB
    at.run()
    assert_clean(at)
    return at


def _listed(at):
    """The History tab's table of changes (the only table while the tab is open)."""
    [table] = at.dataframe
    return table.value


def test_the_history_tab_lists_filters_and_undoes_with_confirmation(edited_corpus: int) -> None:
    at = _history_page()
    table = _listed(at)
    assert list(table["who"]) == ["bo@example.org", "ana@example.org", "ana@example.org"]
    assert list(table["summary"]) == ["2 deleted", "3 added", "created corpus 'Menus'"]

    at.selectbox(key="history_actor").select("bo@example.org").run()
    assert list(_listed(at)["summary"]) == ["2 deleted"]
    at.selectbox(key="history_actor").select("Everyone").run()

    # Undo bo's deletion of two pairs: it asks first; cancelling changes nothing.
    [deletion] = [c for c in history.list_changes(edited_corpus) if c.summary == "2 deleted"]
    at.selectbox(key="history_undo_choice").select(deletion.id).run()
    at.button(key="history_undo").click().run()
    assert corpora.get_corpus(edited_corpus).pair_count == 1, "undoing two rows asks first"
    at.button(key="history_undo_one_cancel").click().run()
    assert corpora.get_corpus(edited_corpus).pair_count == 1
    at.button(key="history_undo").click().run()
    at.button(key="history_undo_one_confirm").click().run()
    assert_clean(at)
    assert corpora.get_corpus(edited_corpus).pair_count == 3
    assert f"Undid change #{deletion.id}" in texts(at.success)
    table = _listed(at)
    assert table["action"].iloc[0] == "undo" and table["who"].iloc[0] == "local"
    assert f"undone by #{deletion.id + 1}" in list(table["state"])

    # Everything since midnight: the pairs go; the corpus stays (Delete removes corpora).
    expander_day = at.date_input(key="history_since_day")
    assert expander_day.value == datetime.now(UTC).date()
    at.time_input(key="history_since_time").set_value(time(0, 0)).run()
    at.button(key="history_undo_since").click().run()
    assert corpora.get_corpus(edited_corpus).pair_count == 3, "asks first"
    assert "Undo **1 change**" in texts(at.markdown)  # the deletion and its undo cancel out
    at.button(key="history_undo_since_confirm").click().run()
    assert_clean(at)
    assert corpora.get_corpus(edited_corpus).pair_count == 0
    assert "Undid 1 change" in texts(at.success)


def test_undo_since_a_moment_without_changes_offers_nothing(edited_corpus: int) -> None:
    """Issue 30 item 12: "Undo 0 changes … ?" behind an active button. A moment after the
    last change: the button is off and the page says there is nothing to undo."""
    at = _history_page()
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    at.date_input(key="history_since_day").set_value(tomorrow).run()
    assert at.button(key="history_undo_since").disabled
    assert "No change since then: nothing to undo." in texts(at.caption)
    at.date_input(key="history_since_day").set_value(datetime.now(UTC).date()).run()
    assert not at.button(key="history_undo_since").disabled
    assert "No change since then" not in texts(at.caption)


def test_a_deleted_corpus_is_restored_from_the_trash(edited_corpus: int) -> None:
    at = open_page("corpus")
    at.button(key="delete_corpus").click().run()
    assert "trash for 30 days" in texts(at.markdown)
    at.button(key="delete_corpus_confirm").click().run()
    assert_clean(at)
    assert corpora.list_corpora() == []
    assert "**Menus** (zh→en, 1 pair)" in texts(at.markdown)
    at.button(key=f"restore_{edited_corpus}").click().run()
    assert_clean(at)
    assert [c.name for c in corpora.list_corpora()] == ["Menus"]
    assert "Restored corpus “Menus”" in texts(at.success)


def test_the_history_tab_names_actions_and_refusals_in_chinese(edited_corpus: int) -> None:
    """The actions and what they touched read Chinese (the stored summaries stay as they were
    recorded), and an undo that the data refuses says why in Chinese."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params[i18n.PARAM] = "zh_Hans"
    at.run()
    at.session_state["corpus_tab"] = ":material/history: 历史"
    at.run()
    assert_clean(at)
    table = _listed(at)
    assert list(table["action"]) == ["编辑", "编辑", "创建"]
    assert list(table["what"]) == ["句对", "句对", f"语料库 {edited_corpus}"]

    # Undoing ana's three added pairs while bo's deletion of two of them stands: refused.
    [added] = [c for c in history.list_changes(edited_corpus) if c.summary == "3 added"]
    at.selectbox(key="history_undo_choice").select(added.id).run()
    at.button(key="history_undo").click().run()
    at.button(key="history_undo_one_confirm").click().run()
    assert_clean(at)
    assert f"在修改 #{added.id} 之后又被修改 #" in texts(at.error), texts(at.error)
    assert "was changed by" not in texts(at.error)
    assert corpora.get_corpus(edited_corpus).pair_count == 1  # nothing changed


def test_the_state_has_room_and_the_newest_change_is_preselected(edited_corpus: int) -> None:
    """Issue 37: the state column was cut ("cannot be u"), and "Change to undo" kept showing
    the change that was newest when the tab opened, after newer ones."""
    at = _history_page()
    assert json.loads(at.dataframe[0].proto.columns)["state"]["width"] == "medium"
    choice = at.selectbox(key="history_undo_choice")
    assert choice.value == history.list_changes(edited_corpus)[0].id
    pairs.apply_edits(edited_corpus, added=[{"source": "水", "target": "water"}])
    at.run()
    newest, older = history.list_changes(edited_corpus)[:2]
    assert at.selectbox(key="history_undo_choice").value == newest.id
    at.selectbox(key="history_undo_choice").select(older.id).run()
    at.run()
    assert at.selectbox(key="history_undo_choice").value == older.id, "the user's choice stays"
