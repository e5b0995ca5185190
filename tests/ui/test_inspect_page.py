"""The Inspect page under AppTest: every panel of a version at work on one sentence."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from tests.ui.pages import Trained, assert_clean, open_page, texts, wait_for_memory
from workbench.corpus import pairs
from workbench.models import registry

INSPECT_PANELS = [
    "Tokens and positions",
    "Attention, every layer and head",
    "Decoding, step by step (greedy)",
    "Beam search",
    "What the model has learned: nearest neighbours",
    "The run that trained it",
]


def _inspect(at: AppTest, text: str) -> AppTest:
    at.text_input(key="inspect_text").input(text)
    return at.button(key="inspect").click().run()


def test_inspect_shows_every_panel_for_a_padded_sentence(populated: Trained) -> None:
    """Beam search on a sentence padded as in a batch: every panel draws, the PAD keys are
    masked, the tensor shapes appear on demand, and the controls scrub without recomputing."""
    at = open_page("inspect")
    at.button_group(key="inspect_mode").set_value("Beam search").run()
    at.number_input(key="inspect_padding").set_value(3).run()
    _inspect(at, "我想喝一杯茶。")
    assert_clean(at)
    assert not at.error, texts(at.error)
    assert [h.value for h in at.subheader] == INSPECT_PANELS
    charts = at.get("vega_lite_chart")
    assert len(charts) == 7, "PE, norms, attention grid + one map, top-k, beam, loss"
    captions = texts(at.caption)
    for section in ("§3.5", "§3.2.1", "§6.1", "§3.4", "lp(Y) = ((5 + |Y|) / 6)^α"):
        assert section in captions
    assert json.loads(charts[2].proto.spec)["facet"]["row"]["field"] == "layer"
    assert "<pad>" in json.dumps(json.loads(charts[3].proto.spec))  # the enlarged map's labels
    steps = registry.get_version(populated.version_ids[0]).metrics["steps"]  # the picked one
    assert f"The dashed line marks step {steps}: the run's last weights" in captions

    assert not at.code
    at.toggle(key="inspect_shapes").set_value(True).run()
    shapes = texts(at.code)
    assert "encoder self-attention weights softmax(QKᵀ/√d_k)" in shapes
    assert "weights softmax(QKᵀ/√d_k) [B, H, T_q, T_k] = [1, 4," in shapes

    at.button_group(key="inspect_kind").set_value("Decoder masked self-attention").run()
    at.slider(key="inspect_step").set_value(2).run()
    at.button_group(key="inspect_beam_rows").set_value("all").run()
    assert_clean(at)
    assert "Read so far: `<s>" in texts(at.markdown)
    assert "empty upper triangle" in texts(at.caption)
    beam_table = at.dataframe[-2].value
    assert {"kept", "finished", "pruned"} <= set(beam_table["status"])
    assert beam_table["best"].sum() == 1


def test_inspect_a_corpus_pair_with_its_reference(populated: Trained) -> None:
    at = open_page("inspect")
    at.button_group(key="inspect_source").set_value("From the corpus").run()
    pair = at.selectbox(key="inspect_pair")
    assert pair.options and "→" in pair.options[0]
    at.button(key="inspect").click().run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    assert "reference:" in texts(at.markdown)
    assert "Choose beam search above" in texts(at.caption), "greedy: no beam tree"


def test_inspect_refuses_an_empty_sentence_in_one_line(populated: Trained) -> None:
    at = open_page("inspect")
    _inspect(at, "   ")
    assert_clean(at)
    assert [e.value for e in at.error] == ["Type a sentence to inspect (the text is empty)."]
    assert not at.get("vega_lite_chart")


def test_inspect_cuts_a_long_input_and_says_so(populated: Trained) -> None:
    at = open_page("inspect")
    _inspect(at, ("我想喝一杯茶。" * 72)[:500])
    assert_clean(at)
    assert not at.error, texts(at.error)
    assert "Only the first 40 of its" in texts(at.warning)
    assert len(at.get("vega_lite_chart")) == 6, "greedy: every chart but the beam tree"


def test_inspect_shows_what_the_corpus_memory_did_at_each_step(populated: Trained) -> None:
    """With the kNN-MT switch on (its store built in the background first), a train pair's
    source is decoded with the memory: each step's choice beside the model's own, λ, and the
    retrieved neighbours with their pairs."""
    at = open_page("inspect")
    at.toggle(key="inspect_knn").set_value(True).run()
    wait_for_memory(at)
    row = pairs.search_pairs(populated.corpus_id, split="train", page_size=1).rows.iloc[0]
    _inspect(at, row["source"])
    assert_clean(at)
    assert "The corpus memory at each step (kNN-MT)" in [h.value for h in at.subheader]
    assert f"With the memory, greedy decoding writes: **{row['target']}**" in texts(at.markdown)
    steps = next(d.value for d in at.dataframe if "with the memory" in d.value.columns)
    assert len(steps) >= 2 and steps["λ"].iloc[0] > 0
    neighbours = next(d.value for d in at.dataframe if "next piece" in d.value.columns)
    assert row["source"] in neighbours["source"].tolist()  # its own exact context
    assert "p = λ·p_kNN + (1 − λ)·p_model" in texts(at.caption)
