"""Issue 23: the texts that the model, evaluation, serving and run services hand to the pages
(labels, notes, verdicts, stop reasons, warnings, refusals) are message ids with parameters:
English as they are (the CLI, the HTTP API, the logs), 简体中文 through ``ui.i18n`` on a page."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from core_model.training.progress import StopReason
from ui import i18n
from workbench.errors import WorkbenchError
from workbench.evaluation import evaluation, inspection, significance
from workbench.messages import Message
from workbench.models import engines, registry, translation
from workbench.serving import api_keys, served
from workbench.training import metric_rows, run_info, stop_words


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ui.i18n`` as on a page in 简体中文 (outside a Streamlit run it says English)."""
    monkeypatch.setattr(i18n, "current", lambda: "zh_Hans")


def shown(text: str) -> str:
    """What a page shows for a service's text: it must have a translation."""
    assert isinstance(text, Message), text
    assert i18n._translations("zh_Hans").gettext(text.msgid) != text.msgid, text.msgid
    return i18n.localized(text)


def refusal(exc: pytest.ExceptionInfo[WorkbenchError]) -> str:
    """An error as ``ui.feedback.error_boundary`` shows it."""
    assert exc.value.msgid is not None, str(exc.value)
    return i18n.translate(exc.value.msgid, exc.value.params)


def test_decoding_and_engine_labels(chinese: None) -> None:
    assert (translation.decoding_label(1), translation.decoding_label(4)) == ("greedy", "beam 4")
    assert shown(translation.decoding_label(1)) == "贪心解码"
    assert shown(translation.decoding_label(4)) == "束搜索 4"
    assert engines.ENGINE_LABELS["handwritten"] == "handwritten decoder"
    assert i18n.translate(engines.ENGINE_LABELS["handwritten"]) == "手写解码器"


def test_score_basis_and_notes(chinese: None) -> None:
    basis = evaluation.ScoreBasis("validation", 3, 1)
    assert str(basis) == "validation · 3 pairs · greedy"  # the CLI and the HTML report
    assert shown(basis.label()) == "验证 · 3 个句对 · 贪心解码"  # nested messages translated
    assert (
        shown(evaluation.ScoreBasis("test", 1_200, 4).label()) == "测试 · 1,200 个句对 · 束搜索 4"
    )
    assert shown(evaluation.ScoreBasis("test", 1, None).label()) == "测试 · 1 个句对"


def test_verdicts_and_withheld_p_values(chinese: None) -> None:
    def scores(bleu: float, chrf: float, p: float | None) -> dict:
        return {
            "bleu": significance.Estimate(bleu, bleu, bleu - 2, bleu + 2, p),
            "chrf": significance.Estimate(chrf, chrf, chrf - 2, chrf + 2, p),
        }

    base = scores(20.0, 40.0, None)
    said = significance.verdict("#3", "#1", scores(22.1, 42.0, 0.01), base)
    assert said == "#3 is better than #1: +2.1 BLEU, p = 0.01"
    assert shown(said) == "#3 优于 #1：+2.1 BLEU，p = 0.01"
    assert significance.tone(said) == "better"
    assert shown(significance.verdict("#3", "#1", scores(20.4, 40.2, 0.41), base)) == (
        "#3 与 #1 之间没有显著差异（+0.4 BLEU，p = 0.41）"
    )
    caveats = shown(significance.verdict("#3", "#1", scores(20.1, 39.0, 0.002), base))
    assert caveats.startswith("#3 优于 #1：+0.1 BLEU，p = 0.002") and "chrF" in caveats
    assert "negligible" not in caveats and "points the other way" not in caveats
    withheld = significance.too_few_pairs(4)
    assert withheld is not None and withheld.startswith("only 4 test pairs: below 50")
    assert shown(withheld).startswith("只有 4 个测试句对：少于 50 个时")
    assert i18n.translate(significance.INTERVAL_KIND) == "自助法（bootstrap）百分位区间"


def test_input_warnings(chinese: None) -> None:
    check = translation.InputCheck(pieces=101, unknown=50, longest_trained=20, max_len=64)
    unknown, cut = check.warnings
    assert unknown == "50% of its pieces are unknown to this model: expect a wrong translation"
    assert shown(unknown) == "它有 50% 的词元是这个模型不认识的：译文很可能是错的"
    assert shown(cut) == "只翻译了它 100 个词元中的前 63 个（模型读不了更多）"
    longer = translation.InputCheck(pieces=30, unknown=0, longest_trained=20, max_len=64)
    assert (
        shown(longer.warnings[0])
        == "它比模型训练时见过的任何句子都长（29 个词元，训练中最多 19 个）"
    )


def test_stop_reasons_budgets_and_rules(chinese: None) -> None:
    assert stop_words.describe_stop("max_steps", {"max_steps": 60}) == "reached its step limit"
    assert shown(stop_words.describe_stop("max_steps", {"max_steps": 60})) == "达到了步数上限"
    # a row from before the automatic budget had its own reason: told truthfully
    assert shown(stop_words.describe_stop("epochs", {"epochs": None})) == (
        "完成了自动预算计划的几遍语料库训练"
    )
    patience = stop_words.describe_stop("early_stopping", {"patience": 3})
    assert patience == "validation stopped improving for 3 epochs"
    assert shown(patience) == "验证结果连续 3 轮没有改善"
    for reason in StopReason:  # every stored reason has its words in both languages
        assert stop_words.describe_stop(reason.value) == stop_words.STOP_WORDS[reason]
        shown(stop_words.describe_stop(reason.value))
    rule = stop_words.describe_watch(
        {"rule": "patience", "metric": "loss", "patience": 4, "bad_epochs": 1}
    )
    assert rule == (
        "Stops early if validation loss does not improve for 4 epochs: 1 without improvement "
        "so far."
    )
    assert shown(rule) == "验证损失：如果连续 4 轮没有改善就提前停止，目前已有 1 轮没有改善。"
    memorise = stop_words.describe_watch({"rule": "memorise", "reproduced": 0.4, "pairs": 1200})
    assert shown(memorise) == "一旦能复现每个训练句对就提前停止：目前已复现 1,200 个中的 40%。"

    def budget(**config: object) -> str:
        run = SimpleNamespace(config=config, token_budget=config.get("token_budget"))
        return run_info.RunInfo.budget.fget(run)  # type: ignore[attr-defined]

    assert [budget(time_budget_s=150), budget(token_budget=1_100_000), budget(epochs=1)] == [
        "2.5 min",
        "1.1M tokens",
        "1 epoch",
    ]
    assert [shown(budget(time_budget_s=150)), shown(budget(epochs=3)), shown(budget())] == [
        "2.5 分钟",
        "3 轮",
        "自动",
    ]


def test_inspection_step_notes(chinese: None) -> None:
    metrics = pd.DataFrame(columns=metric_rows.METRIC_COLUMNS)
    best = SimpleNamespace(metrics={"selected": "best", "best_epoch": 2, "steps": 90})
    step, note = inspection.version_step(best, metrics)
    assert (step, note) == (90, "the weights of the best epoch (2)")
    assert shown(note) == "最佳一轮（第 2 轮）的权重"
    assert (
        shown(inspection.version_step(SimpleNamespace(metrics={}), metrics)[1]) == "训练最后的权重"
    )


def test_refusals_read_chinese_on_a_page_and_english_elsewhere(chinese: None) -> None:
    with pytest.raises(WorkbenchError) as exc:
        translation.translate(1, ["你好"], beam=99)
    assert str(exc.value) == "Beam size must be between 1 and 16."
    assert refusal(exc) == "束宽（beam size）必须在 1 到 16 之间。"
    with pytest.raises(WorkbenchError) as exc:
        inspection.inspect(1, "   ")
    assert refusal(exc) == "请输入要检视的句子（文本为空）。"
    with pytest.raises(WorkbenchError) as exc:
        evaluation.compare([1], [("你好", "hello")])
    assert refusal(exc) == "请至少选择两个不同的版本来比较。"


def test_refusals_of_stored_things(wb_home: Path, chinese: None) -> None:
    with pytest.raises(WorkbenchError) as exc:
        served.served_version_id("zh", "en")
    assert str(exc.value).startswith("No version is served for zh→en: choose one on the Models")
    assert refusal(exc).startswith("zh→en 没有提供服务的版本：请在“模型”页面选择一个")
    with pytest.raises(WorkbenchError) as exc:
        run_info.get_run(12345)
    assert refusal(exc) == "训练 12345 不存在。"
    # the registry's own reason inside the sentence is translated too
    gone = SimpleNamespace(id=7, artifact_path="models/7", sha256="")
    with pytest.raises(WorkbenchError) as exc:
        registry.load_model_of(gone)  # type: ignore[arg-type]
    assert str(exc.value).startswith("Model version 7 cannot be loaded: the files of this")
    assert refusal(exc).startswith("无法加载模型版本 7：这个版本的文件不见了（")
    with pytest.raises(WorkbenchError) as exc:
        api_keys.create_key("plugin", requests_per_minute=0)
    high = f"{api_keys.MAX_REQUESTS_PER_MINUTE:,}"
    assert str(exc.value) == f"requests per minute must be a whole number from 1 to {high}, got 0"
    assert refusal(exc) == f"每分钟请求数必须是 1 到 {high} 之间的整数，收到的是 0"


def test_the_early_stopping_rule_spaces_latin_words_as_chinese_does(chinese: None) -> None:
    """Issue 30 item 13: "验证BLEU" had no space between the Chinese and the Latin word."""
    watch = {"rule": "patience", "metric": "bleu", "patience": 3, "bad_epochs": 1}
    said = stop_words.describe_watch(watch)
    assert said == (
        "Stops early if validation BLEU does not improve for 3 epochs: 1 without improvement "
        "so far."
    )
    assert shown(said).startswith("验证 BLEU：如果连续 3 轮没有改善就提前停止")
    loss = stop_words.describe_watch({**watch, "metric": "loss"})
    assert loss.startswith("Stops early if validation loss does not improve")
    assert shown(loss).startswith("验证损失：如果连续 3 轮没有改善就提前停止")
