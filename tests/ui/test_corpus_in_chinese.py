"""The Corpus page in 简体中文 shows what the corpus services say in Chinese (issue 23): the
import's validation report, a file that cannot be read, the refusal of half-filled rows, the
details of a clean-up preview. The same texts stay English on the command line."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.ui.pages import APP, TIMEOUT, assert_clean, texts
from ui import i18n
from workbench.corpus import corpora, pairs


def corpus_page_in_chinese(tab: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params[i18n.PARAM] = "zh_Hans"
    at.run()
    if tab is not None:
        at.session_state["corpus_tab"] = tab
        at.run()
    assert_clean(at)
    return at


def test_the_import_report_is_in_chinese(small_corpus: int) -> None:
    at = corpus_page_in_chinese(":material/upload: 导入")
    data = "汤\tsoup\nthis line has no tab\n\t只有译文\n汤\tsoup\n".encode()
    at.file_uploader[0].upload("menu.tsv", data, "text/tab-separated-values").run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    report = next(df.value for df in at.dataframe if "message" in df.value.columns)
    rows = {r["line"]: (r["severity"], r["message"]) for r in report.to_dict(orient="records")}
    assert rows[2][0] == "错误"
    assert rows[2][1].startswith(
        "应为 2 到 4 个制表符分隔的列（源文、译文、划分、备注），实际有 1 列"
    )
    assert rows[3] == ("错误", "源文为空")
    assert rows[4] == ("重复", "与第 1 行重复")
    kinds = dict(zip(report["line"], report["kind"], strict=True))  # words, not codes
    assert (kinds[2], kinds[3], kinds[4]) == ("格式不对的记录", "有一边为空", "文件中重复")
    assert corpora.get_corpus(small_corpus).pair_count == 3, "a preview writes nothing"


def test_a_file_that_cannot_be_read_is_one_chinese_error_line(small_corpus: int) -> None:
    at = corpus_page_in_chinese(":material/upload: 导入")
    at.file_uploader[0].upload("bad.jsonl", b'{"source": "\xff"}\n', "application/jsonl").run()
    assert_clean(at)
    assert "文件第 1 行：不是有效的 UTF-8（字节 0xff）；请把文件存为 UTF-8" in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3


def test_half_filled_rows_are_named_in_chinese(small_corpus: int) -> None:
    at = corpus_page_in_chinese()
    editor = at.data_editor[0]
    at.session_state[editor.key] = {
        "edited_rows": {},
        "added_rows": [{"source": "汤", "target": "soup"}, {"source": "水"}, {"note": "todo"}],
        "deleted_rows": [],
    }
    at.run()
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert (
        "什么都没有保存：第 2 个新行没有译文（en）；第 3 个新行没有源文（zh），也没有译文（en）。"
        "请把两边都填好或删除这些行，然后再保存。"
    ) in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3


def test_a_clean_up_preview_explains_each_pair_in_chinese(small_corpus: int) -> None:
    pairs.apply_edits(small_corpus, added=[{"source": "汤", "target": "one two three four five"}])
    at = corpus_page_in_chinese(":material/download: 导出与清洗")
    at.checkbox(key="cleanup_use_ratio").check().run()
    at.button(key="cleanup_preview").click().run()
    assert_clean(at)
    sample = next(df.value for df in at.dataframe if "说明" in df.value.columns)
    why = dict(zip(sample["原因"], sample["说明"], strict=True))
    assert why == {"长度比过大": "1 对 5 个词元"}
