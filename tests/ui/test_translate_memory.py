"""The Translate page's memory under AppTest: an exact match gives the curated target,
marked as from the memory; the switch turns it off; matches with their scores beside each
translation; the XLIFF panel; in Chinese too."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.ui.pages import Trained, assert_clean, open_page, texts
from workbench.corpus import pairs

KNOWN = "今天的天气真不错。"  # a pair of the demo corpus the versions were trained on


def test_an_exact_match_gives_the_curated_target_marked_and_the_switch_turns_it_off(
    populated: Trained,
) -> None:
    pairs.add_pair(populated.corpus_id, "这句话从来没有被训练过。", "A curated sentence.")
    at = open_page("translate")
    at.text_area(key="translate_input").input(f"{KNOWN}\n这句话从来没有被训练过。")
    at.button(key="translate").click().run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert table["translation"].tolist()[1] == "A curated sentence."  # saved after training
    assert table["memory"].tolist() == ["from the memory", "from the memory"]
    assert "Memory matches" in texts(at.markdown)
    assert "**100 %**" in texts(at.markdown)
    assert "This translation is from the memory" in texts(at.caption)

    at.toggle(key="translate_memory").set_value(False).run()
    at.button(key="translate").click().run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert table["memory"].tolist() == ["", ""]
    assert table["translation"].tolist()[1] != "A curated sentence."  # the model's own
    assert "**100 %**" in texts(at.markdown)  # the matches are still shown


def test_the_memory_and_the_file_panel_in_chinese(populated: Trained) -> None:
    at = open_page("translate", lang="zh_Hans")
    at.text_area(key="translate_input").input(KNOWN)
    at.button(key="translate").click().run()
    assert_clean(at)
    assert at.dataframe[0].value["memory"].tolist() == ["来自记忆库"]
    assert "记忆库匹配" in texts(at.markdown)
    assert any(e.label == "翻译文件（XLIFF）" for e in at.expander)
    assert at.toggle(key="translate_memory").label == "使用记忆库的完全匹配"


def _build_progress_of_a_deleted_version() -> None:
    from ui import memory_panel

    memory_panel._memory_build_progress(10**6)


def test_a_build_s_progress_whose_version_is_gone_is_one_error_line(populated: Trained) -> None:
    """The progress fragment's timed reruns run it alone (outside the panel's boundary): a
    version deleted (or its corpus trashed) during the build is an error line, not a
    traceback."""
    at = AppTest.from_function(_build_progress_of_a_deleted_version, default_timeout=30).run()
    assert_clean(at)
    assert len(at.error) == 1 and "1000000" in at.error[0].value, texts(at.error)
