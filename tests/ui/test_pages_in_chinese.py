"""The Translate, Inspect, Models, Review and Team pages in 简体中文 (AppTest, ``?lang=zh_Hans``
as a bookmarked address gives it): each draws without an exception and shows its headings,
controls and explanations from the Chinese catalog, not the English message ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.ui.pages import APP, TIMEOUT, assert_clean, open_page, texts
from tests.ui.test_signin import AUTH, signed_in
from ui import i18n, navigation
from workbench.corpus import corpora, demo
from workbench.team import access
from workbench.training import runs


@pytest.fixture(autouse=True)
def harness_in_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """AppTest formats a control's options with its ``format_func`` outside the script run
    (to find the index of a value it sets), where ``ui.i18n`` says English: there it is
    Chinese too, as the page that drew the options was. Inside a run nothing changes."""
    in_run = i18n.current

    def current() -> str:
        return in_run() if get_script_run_ctx() is not None else "zh_Hans"

    monkeypatch.setattr(i18n, "current", current)


def open_in_chinese(page: navigation.PageRef, *, auth: bool = False) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params[i18n.PARAM] = "zh_Hans"
    if auth:
        at.secrets["auth"] = AUTH
        at.user = signed_in("ada@example.org")
    at.run()
    at._page_hash = calc_hash(page.url_path)
    at.run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    return at


def test_translate_page_in_chinese(populated) -> None:
    at = open_in_chinese(navigation.TRANSLATE)
    assert at.title[0].value == "翻译"
    assert at.text_area(key="translate_input").label == "源句（zh），每行一句"
    at.toggle(key="translate_memory").set_value(False)  # the model translates: a map is drawn
    at.text_area(key="translate_input").input("我想喝一杯茶。")
    at.button(key="translate").click().run()
    assert_clean(at)
    assert [h.value for h in at.subheader] == ["译文"]
    assert "每一行是一个输出词元" in texts(at.caption)
    assert "**修改并保存为句对**" in texts(at.markdown)


def test_inspect_page_in_chinese_names_the_papers_terms(populated) -> None:
    at = open_in_chinese(navigation.INSPECT)
    at.button_group(key="inspect_mode").set_value("Beam search").run()
    at.text_input(key="inspect_text").input("我想喝一杯茶。")
    at.button(key="inspect").click().run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    assert [h.value for h in at.subheader] == [
        "词元与位置",
        "注意力：每一层、每一个头",
        "逐步解码（贪心）",
        "束搜索",
        "模型学到了什么：最近邻",
        "训练它的那次运行",
    ]
    captions = texts(at.caption)
    for term in (
        "位置编码 (positional encoding)",
        "多头注意力 (multi-head attention)",
        "填充掩码 (padding mask",
        "束搜索 (beam search)",
        "长度惩罚 (length penalty)",
        "lp(Y) = ((5 + |Y|) / 6)^α",  # the formulas stay as the paper writes them
    ):
        assert term in captions, term
    # A control keeps its value in every language; only its label is translated.
    at.button_group(key="inspect_kind").set_value("Decoder masked self-attention").run()
    assert_clean(at)
    assert "掩码 (mask)" in texts(at.caption) and "上三角" in texts(at.caption)


def test_models_page_in_chinese(populated) -> None:
    at = open_in_chinese(navigation.MODELS)
    assert [t.label for t in at.tabs] == [
        ":material/edit: 管理版本",
        ":material/compare_arrows: 比较版本",
        ":material/api: HTTP 接口",
    ]
    assert "**训练者**" in texts(at.markdown) and "**通过 HTTP 提供服务**" in texts(at.markdown)
    assert at.download_button(key=f"download_{populated.version_ids[0]}").label == "下载 .zip"
    at.button(key="compare").click().run()
    assert_clean(at)
    assert f"**在“{demo.DEMO_NAME}”上的分数**" in texts(at.markdown)
    assert "只有 4 个测试句对" in texts(at.warning)
    assert "**逐句对照** · 4 个句子中有" in texts(at.markdown)


def test_train_history_and_models_leave_no_english_in_chinese(populated) -> None:
    """Issue 30 item 13: the run history's status and budget, the preset "auto", the versions
    table's "id", "0.31M 词元" and the loss chart's legend "version" stayed English."""
    cancelled = runs.enqueue_training(populated.corpus_id, minutes=1)
    runs.cancel_run(cancelled)
    try:
        at = open_in_chinese(navigation.TRAIN)
        history = at.dataframe[-1].value.set_index("run")
        assert history.loc[cancelled, ["status", "budget", "preset"]].tolist() == [
            "已取消",
            "1 分钟",
            "自动",
        ]
        assert set(history.loc[populated.run_ids, "status"]) == {"成功"}
    finally:
        runs.delete_run(cancelled)
    at = open_in_chinese(navigation.MODELS)
    assert json.loads(at.dataframe[0].proto.columns)["id"]["label"] == "编号"
    lineage = next(m for m in texts(at.markdown).splitlines() if "**新模型**" in m)
    assert "M" not in lineage and "个词元" in lineage, lineage
    at.button(key="compare").click().run()
    [chart] = at.get("vega_lite_chart")  # the loss curves of the versions compared
    legends = [json.loads(chart.proto.spec)["layer"][0]["encoding"]["color"]["title"]]
    assert legends == ["版本"]


def test_review_page_in_chinese(populated) -> None:
    target = corpora.create_corpus("审校池", "zh", "en")
    try:
        at = open_in_chinese(navigation.REVIEW)
        at.selectbox(key="review_corpus").select(target.id).run()
        assert_clean(at)
        assert [m.label for m in at.metric] == ["池中句子", "等待审校", "已翻译并排序", "已审校"]
        assert at.button(key="pool_add").label == "加入待审池"
    finally:
        corpora.delete_corpus(target.id)


def test_team_page_in_chinese(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)
    monkeypatch.setenv("WORKBENCH_ADMINS", "ada@example.org")
    access.set_role("ed@example.org", "editor")
    at = open_in_chinese(navigation.TEAM, auth=True)
    assert at.title[0].value == "团队"
    assert "**添加成员或更改角色**" in texts(at.markdown)
    assert at.text_input(key="team_email").label == "电子邮箱"
    assert at.button(key="team_remove").label == "移除"
    roles = at.dataframe[0].value.set_index("role")["may"]
    assert roles["查看者"] == "查看和翻译"
    assert roles["编辑者"] == "查看和翻译，编辑语料库，训练，审校待审池"
    assert list(at.dataframe[1].value["role"]) == ["管理员", "编辑者"]
    assert at.selectbox(key="team_role").options == ["查看者", "编辑者", "管理员"]
    at.text_input(key="team_email").set_value("vera@example.org")
    at.selectbox(key="team_role").set_value("viewer")  # the value stays the role's name
    at.button(key="FormSubmitter:team_set_role-保存").click().run()
    assert_clean(at)
    assert access.role_of("vera@example.org") == access.Role.VIEWER
    assert "vera@example.org 现在是查看者。" in texts(at.success)


@pytest.mark.parametrize(
    ("page", "notice"),
    [
        (navigation.TRANSLATE, "还没有模型版本：请先在“训练”页面训练一个（示例语料库"),
        (navigation.INSPECT, "还没有模型版本：请先在“训练”页面训练一个（示例语料库"),
        (navigation.MODELS, "还没有模型版本：请在“训练”页面开始一次训练"),
        (navigation.REVIEW, "还没有语料库：请先在“语料库”页面创建一个。"),
    ],
)
def test_an_empty_workbench_says_what_to_do_in_chinese(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch, page: navigation.PageRef, notice: str
) -> None:
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)
    at = open_in_chinese(page)
    assert notice in texts(at.info)


def test_inspect_shapes_beam_states_roles_and_the_live_panel_in_chinese(populated) -> None:
    """Issue 37: Inspect's tensor-shape block, the beam states (kept / finished / pruned /
    stopped), the role select ("viewer") and the live panel's "auto" stayed English. Stored
    values stay English: only what is shown is translated."""
    from core_model import inspection as core_inspection
    from core_model.beam_history import BEAM_STATUSES
    from ui import charts, inspect_page

    # every stage core_model names has its message id (core_model knows no catalog)
    stages = {name for name, _shape in core_inspection._shapes(_Cfg(), 3, 4)}
    assert stages == set(inspect_page.SHAPE_STAGES)
    assert set(charts.BEAM_STATUS_LABELS) == set(BEAM_STATUSES)

    at = open_in_chinese(navigation.INSPECT)
    at.button_group(key="inspect_mode").set_value("Beam search").run()
    at.text_input(key="inspect_text").input("我想喝一杯茶。")
    at.button(key="inspect").click().run()
    at.toggle(key="inspect_shapes").set_value(True).run()
    assert_clean(at)
    code = texts(at.code)
    assert "源 id" in code and "解码器输出" in code and "每层一份" in code, code
    assert "source ids" not in code and "per layer" not in code
    at.button_group(key="inspect_beam_rows").set_value("all").run()
    beam_table = next(d.value for d in at.dataframe if "hypothesis" in d.value.columns)
    assert set(beam_table["status"]) <= {"保留", "已完成", "剪除", "已停止"}, beam_table
    [beam_chart] = [
        json.loads(c.proto.spec) for c in at.get("vega_lite_chart") if '"log_prob"' in c.proto.spec
    ]
    domain = beam_chart["layer"][0]["encoding"]["color"]["scale"]["domain"]
    assert domain and set(domain) <= {"保留", "已完成", "剪除", "已停止"}, domain

    at = open_in_chinese(navigation.MODELS)
    role = at.selectbox(key="api_key_role")
    assert role.options == ["查看者", "编辑者", "管理员"] and role.value == "viewer"
    # Switched in the page: the browser keeps the label it was sent with the choice unless
    # the choice is sent again (``pickers.keep_label_fresh``).
    at = open_page("models")
    assert not at.selectbox(key="api_key_role").proto.set_value
    at.sidebar.radio(key="ui_language").set_value("zh_Hans").run()
    assert at.selectbox(key="api_key_role").proto.set_value

    queued = runs.enqueue_training(populated.corpus_id, minutes=1)  # the preset "auto"
    try:
        at = open_in_chinese(navigation.TRAIN)
        head = next(m for m in texts(at.markdown).splitlines() if f"#{queued}**" in m)
        assert "· 自动 ·" in head and "auto" not in head, head
    finally:
        runs.cancel_run(queued)
        runs.delete_run(queued)


class _Cfg:
    """The sizes ``core_model.inspection._shapes`` reads (any will do: only names count)."""

    d_model, n_heads, d_ff, tgt_vocab_size = 8, 2, 16, 10
