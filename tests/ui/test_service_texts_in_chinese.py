"""Issue 23: what the model, evaluation and run services say reads 简体中文 on the pages —
decoding and engine labels, the input warnings, what scores were measured on, the verdicts,
the Inspect page's notices, why a run stopped and what it trained for, and their refusals."""

from __future__ import annotations

import json

import pytest

from tests.ui.pages import Trained, assert_clean, texts
from tests.ui.test_pages_in_chinese import harness_in_chinese, open_in_chinese  # noqa: F401
from ui import navigation
from workbench.corpus import demo
from workbench.evaluation import significance


def test_translate_page_labels_warnings_and_refusals(populated: Trained) -> None:
    at = open_in_chinese(navigation.TRANSLATE)
    at.text_area(key="translate_input").input("我想喝一杯茶。\nЖЩЮЯ ΔΘΛΞ\n谢谢你的帮助。")
    at.button(key="translate").click().run()
    assert_clean(at)
    assert " · 贪心解码 · 手写解码器" in texts(at.caption)
    warnings = at.dataframe[0].value["warning"].tolist()
    assert warnings[0] == "" and warnings[1].startswith("它有 50% 的词元是这个模型不认识的")
    # a refusal of the correction service: the pair is in the corpus already
    at.selectbox(key=at.selectbox[-2].key).select(2)  # the sentence picker
    at.run()
    at.text_area[1].input("Thank you for your help, really.")
    at.button[-1].click().run()  # Save as pair
    at.button[-1].click().run()  # the same pair again
    assert_clean(at)
    assert f"这个句对已经在语料库“{demo.DEMO_NAME}”中（句对 " in texts(at.error)


def test_models_page_scores_stop_reasons_and_verdicts(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(significance, "MIN_VERDICT_PAIRS", 4)  # the demo's 4 test pairs
    at = open_in_chinese(navigation.MODELS)
    assert at.dataframe[0].value["scored on"].tolist() == ["验证 · 3 个句对 · 贪心解码"] * 2
    stopped = {"**停止原因** 达到了步数上限", "**停止原因** 学会了每个训练句对"}
    assert any(reason in texts(at.markdown) for reason in stopped)
    at.button(key="compare").click().run()
    assert_clean(at)
    assert f"**在“{demo.DEMO_NAME}”上的分数** · 测试 · 4 个句对 · 贪心解码" in texts(at.markdown)
    verdicts = [m for m in texts(at.markdown).splitlines() if m.startswith("- #")]
    assert len(verdicts) == 1 and ("之间没有显著差异" in verdicts[0] or "于 #" in verdicts[0])
    columns = json.loads(at.dataframe[1].proto.columns)  # the help names the interval's kind
    assert columns["BLEU 95 % interval"]["help"].startswith("95 % 自助法（bootstrap）百分位区间")


def test_inspect_page_notices_and_the_weights_note(populated: Trained) -> None:
    at = open_in_chinese(navigation.INSPECT)
    at.text_input(key="inspect_text").input("我想喝一杯茶。" * 12)
    at.button(key="inspect").click().run()
    assert_clean(at)
    assert "只检视了它 " in texts(at.warning) and "更长句子的图无法看清" in texts(at.warning)
    assert "贪心解码: **" in texts(at.markdown)
    notes = ("训练最后的权重", "最佳一轮（第", "个快照的平均")
    assert any(note in texts(at.caption) for note in notes)
    at.text_input(key="inspect_text").input("   ")
    at.button(key="inspect").click().run()
    assert "请输入要检视的句子（文本为空）。" in texts(at.error)


def test_train_page_history_says_why_runs_stopped(populated: Trained) -> None:
    at = open_in_chinese(navigation.TRAIN)
    history = at.dataframe[-1].value
    reasons = {"达到了步数上限", "学会了每个训练句对"}
    assert set(history["stopped because"]) <= reasons
    assert not any(text.isascii() for text in history["budget"])  # "自动", "N 轮"
    assert any(f"步停止：{reason}。" in texts(at.caption) for reason in reasons)
