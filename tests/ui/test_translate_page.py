"""The Translate page under AppTest: translating with real tiny versions, corrections and
glossaries."""

from __future__ import annotations

import pytest
from streamlit.util import calc_hash

from tests.ui.pages import PAGES, Trained, assert_clean, open_page, texts, wait_for_memory
from workbench.corpus import corpora, demo, glossary, pairs
from workbench.models import engines


def test_translate_and_save_a_correction(populated: Trained) -> None:
    at = open_page("translate")
    at.text_area(key="translate_input").input("我想喝一杯茶。\n谢谢你的帮助。")
    at.button(key="translate").click().run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert table["source"].tolist() == ["我想喝一杯茶。", "谢谢你的帮助。"]
    assert all(isinstance(t, str) and t for t in table["translation"])

    before = corpora.get_corpus(populated.corpus_id).pair_count
    at.text_area[1].input("Thank you so much for your help.")
    at.selectbox(key=at.selectbox[-2].key).select(1)  # the sentence picker
    at.run()
    at.text_area[1].input("Thank you so much for your help.")
    at.button[-1].click().run()  # Save as pair
    assert_clean(at)
    assert "Saved as pair" in texts(at.success)
    assert corpora.get_corpus(populated.corpus_id).pair_count == before + 1
    hits = pairs.search_pairs(populated.corpus_id, "so much").rows
    assert hits[["source", "target"]].values.tolist() == [
        ["谢谢你的帮助。", "Thank you so much for your help."]
    ]

    at.button[-1].click().run()  # the same pair again
    assert_clean(at)
    pair_id = int(hits["id"].iloc[0])
    assert f"This pair is already in corpus “{demo.DEMO_NAME}” (pair {pair_id})." in texts(at.error)
    assert corpora.get_corpus(populated.corpus_id).pair_count == before + 1


def test_translate_warns_on_unknown_and_overlong_input(populated: Trained) -> None:
    """Characters the model never saw, and inputs longer than anything it was trained on, are
    flagged (with the share of unknown pieces); a huge input gets no unreadable heat-map."""
    at = open_page("translate")
    at.text_area(key="translate_input").input("我想喝一杯茶。\nЖЩЮЯ ΔΘΛΞ\n" + "我想喝一杯茶。" * 40)
    at.toggle(key="translate_memory").set_value(False)  # the model's own output
    at.button(key="translate").click().run()
    assert_clean(at)
    assert "2 of 3 translations may be confident nonsense (sentences 2, 3)" in texts(at.warning)
    table = at.dataframe[0].value
    assert table["unknown"].round().tolist() == [0, 50, 0]
    assert table["warning"][0] == ""
    assert "50% of its pieces are unknown to this model" in table["warning"][1]
    assert "longer than any sentence the model was trained on" in table["warning"][2]
    assert len(at.get("vega_lite_chart")) == 1, "the first sentence's attention map"

    at.selectbox(key=at.selectbox[-2].key).select(2)  # the sentence picker: the long one
    at.run()
    assert_clean(at)
    assert "No map for this sentence: it has 281 source" in texts(at.caption)
    assert "This translation may be confident nonsense: it is longer than any sentence" in texts(
        at.warning
    )
    assert not at.get("vega_lite_chart")


def test_translate_with_beam_search(populated: Trained) -> None:
    at = open_page("translate")
    at.button_group(key="translate_mode").set_value("Beam search").run()
    at.text_area(key="translate_input").input("我想喝一杯茶。")
    at.button(key="translate").click().run()
    assert_clean(at)
    assert "beam 4" in texts(at.caption)


def test_translate_with_ctranslate2(populated: Trained) -> None:
    """The engine choice: the version is exported to CTranslate2 on first use and translates
    there; the attention map is still drawn (by our model)."""
    at = open_page("translate")
    at.button_group(key="translate_engine").set_value("ctranslate2").run()
    at.text_area(key="translate_input").input("我想喝一杯茶。\n谢谢你的帮助。")
    at.toggle(key="translate_memory").set_value(False)  # the model's own output
    at.button(key="translate").click().run()
    assert_clean(at)
    assert "greedy · CTranslate2" in texts(at.caption)
    assert all(isinstance(t, str) and t for t in at.dataframe[0].value["translation"])
    assert len(at.get("vega_lite_chart")) == 1


def test_models_offers_a_ctranslate2_download(populated: Trained) -> None:
    at = open_page("models")
    version_id = populated.version_ids[0]
    assert at.selectbox(key=f"ct2_weights_{version_id}").options == list(engines.QUANTIZATIONS)
    button = at.download_button(key=f"download_ct2_{version_id}")
    assert button.label == "Download for CTranslate2"


def test_a_glossary_edited_on_the_corpus_page_is_obeyed_on_translate(
    populated: Trained,
) -> None:
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/menu_book: Glossary"
    at.run()
    assert_clean(at)
    editor = at.data_editor[0]
    at.session_state[editor.key] = {
        "edited_rows": {},
        "added_rows": [{"source term": "茶", "target term": "apple"}],
        "deleted_rows": [],
    }
    at.run()
    at.button(key="glossary_save").click().run()
    assert_clean(at)
    assert "1 term" in texts(at.success)
    try:
        at = open_page("translate")
        at.text_area(key="translate_input").input("我想喝一杯茶。\n你好，很高兴认识你。")
        at.toggle(key="translate_memory").set_value(False)  # the model's own output
        at.button(key="translate").click().run()
        assert_clean(at)
        with_terms = at.session_state["translate_results"]["items"]
        assert "apple" in with_terms[0]["text"] and "glossary applied" in texts(at.caption)
        at.toggle(key="translate_glossary").set_value(False).run()
        at.button(key="translate").click().run()
        without = at.session_state["translate_results"]["items"]
        assert "apple" not in without[0]["text"]
        assert without[1]["text"] == with_terms[1]["text"]  # no term: the same translation
    finally:
        glossary.set_terms(populated.corpus_id, [])


@pytest.mark.parametrize(
    ("page", "key", "typed"),
    [
        ("translate", "translate_input", "我想喝一杯茶。\n谢谢你的帮助。"),
        ("inspect", "inspect_text", "谢谢。"),
    ],
)
def test_typed_text_survives_a_visit_to_another_page(
    populated: Trained, page: str, key: str, typed: str
) -> None:
    """Streamlit forgets a widget that a run does not draw: without the router's
    ``keep_typed_text`` the sentences typed on Translate (or Inspect) were gone after a look at
    the Train page."""
    at = open_page(page)
    box = at.text_area(key=key) if page == "translate" else at.text_input(key=key)
    box.input(typed).run()
    at._page_hash = calc_hash(PAGES["train"].url_path)
    at.run()
    assert_clean(at)
    at._page_hash = calc_hash(PAGES[page].url_path)
    at.run()
    assert_clean(at)
    box = at.text_area(key=key) if page == "translate" else at.text_input(key=key)
    assert box.value == typed


def test_the_corpus_memory_is_built_in_the_background_then_followed(populated: Trained) -> None:
    """The switch starts the store's build (its progress on the page while it runs); once it
    is ready the page says what it holds, and a train pair's source comes out as its target
    whatever the 60-step version would write."""
    at = open_page("translate")
    at.toggle(key="translate_memory").set_value(False)  # the exact matches: the model decodes
    at.toggle(key="translate_knn").set_value(True).run()
    assert_clean(at)
    wait_for_memory(at)
    row = pairs.search_pairs(populated.corpus_id, split="train", page_size=1).rows.iloc[0]
    at.text_area(key="translate_input").input(row["source"])
    at.button(key="translate").click().run()
    assert_clean(at)
    assert at.dataframe[0].value["translation"].tolist() == [row["target"]]
    assert "corpus memory (kNN-MT)" in texts(at.caption)
