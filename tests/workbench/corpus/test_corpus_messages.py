"""The corpus and curation services speak in message ids (issue 23): each refusal, import row
message, clean-up detail and note is a ``Message`` (or an error with ``msgid`` and
``params``) whose English is what the CLI prints and whose Chinese a page shows, nested
messages (a file's role, a row's problem) translated too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import parse_pairs
from ui import i18n
from workbench.corpus import corpora, draft_saves, drafts, pairs, splits
from workbench.corpus.cleaning import Cleaner, CleaningOptions
from workbench.corpus.formats import read_rows
from workbench.corpus.text_rules import validate_name
from workbench.curation import pool
from workbench.errors import WorkbenchError
from workbench.messages import Message


@pytest.fixture
def chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ui.i18n`` as on a page in 简体中文 (outside a Streamlit run it says English)."""
    monkeypatch.setattr(i18n, "current", lambda: "zh_Hans")


def shown(error: WorkbenchError) -> str:
    """What ``ui.feedback.error_boundary`` shows for ``error``."""
    assert error.msgid is not None, f"no message id: {error}"
    return i18n.translate(error.msgid, error.params)


def test_a_refusal_reads_english_on_the_cli_and_chinese_on_a_page(chinese: None) -> None:
    with pytest.raises(WorkbenchError) as empty:
        validate_name("   ")
    assert str(empty.value) == "corpus name must not be empty"
    assert shown(empty.value) == "语料库名称不能为空"
    with pytest.raises(WorkbenchError) as version:
        validate_name("", "version name")
    assert shown(version.value) == "版本名称不能为空"
    with pytest.raises(WorkbenchError) as lang:
        corpora.validate_lang("not a language!", "target")
    assert str(lang.value).startswith("invalid target language code 'not a language!'")
    assert shown(lang.value).startswith("无效的目标语言代码“not a language!”")


def test_an_unreadable_file_names_its_role_in_chinese(chinese: None) -> None:
    with pytest.raises(WorkbenchError) as bad:
        list(read_rows(b"a\tb\nc\xffd\te\n", "tsv", None, "zh", "en"))
    assert str(bad.value).startswith("file line 2: not valid UTF-8 (byte 0xff)")
    assert shown(bad.value) == "文件第 2 行：不是有效的 UTF-8（字节 0xff）；请把文件存为 UTF-8"
    with pytest.raises(WorkbenchError) as aligned:
        list(read_rows(b"ok\n", "aligned", b"ok\n\xfe\n", "zh", "en"))
    assert shown(aligned.value).startswith("目标文件第 2 行：")


def test_import_row_messages_are_messages_with_a_translation(chinese: None) -> None:
    data = "汤\tsoup\nno tab here\n\tempty source\n汤\tsoup\nsame\tsame\n".encode()
    parsed = parse_pairs(data, "tsv")
    messages = {issue.kind: issue.message for issue in parsed.report}
    assert set(messages) == {"malformed", "empty", "duplicate_in_file", "identical"}
    assert all(isinstance(m, Message) for m in messages.values())
    assert messages["duplicate_in_file"] == "duplicate of line 1"  # English, as the CLI prints
    assert i18n.localized(messages["duplicate_in_file"]) == "与第 1 行重复"
    assert i18n.localized(messages["empty"]) == "源文为空"
    assert i18n.localized(messages["malformed"]).startswith("应为 2 到 4 个制表符分隔的列")
    assert i18n.localized(messages["identical"]) == "源文与译文完全相同"


def test_clean_up_details_and_filtered_rows_are_translated(chinese: None) -> None:
    verdict = Cleaner(CleaningOptions(max_ratio=2.0), "en", "en").check(
        "one two three four five six seven", "one"
    )
    assert (verdict.reason, verdict.detail) == ("ratio", "7 vs 1 tokens")
    assert i18n.localized(verdict.detail) == "7 对 1 个词元"
    parsed = parse_pairs(b"one two three four five six seven\tone\n", "tsv")
    assert parsed.accepted == 1, "no clean-up options: kept"


def test_the_regrouping_note_is_a_message(chinese: None) -> None:
    assert splits.regrouped_text(0) == ""
    one, many = splits.regrouped_text(1), splits.regrouped_text(1234)
    assert one.startswith("1 pair moved to another split") and many.startswith("1,234 pairs")
    assert i18n.localized(one).startswith("有 1 个句对随其句子组移到了另一个划分")
    assert i18n.localized(many).startswith("有 1,234 个句对")


def test_edit_problems_nest_the_row_and_the_problem(wb_home: Path, chinese: None) -> None:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    with pytest.raises(WorkbenchError) as refused:
        pairs.apply_edits(info.id, added=[{"source": "汤", "target": ""}, {"source": ""}])
    assert str(refused.value) == "new row 1: target is empty (and 1 more problems)"
    assert shown(refused.value) == "第 1 个新行：译文为空（另有 1 个问题）"
    with pytest.raises(WorkbenchError) as split:
        pairs.apply_edits(info.id, added=[{"source": "汤", "target": "soup", "split": "dev"}])
    assert shown(split.value) == "第 1 个新行：无效的划分“dev”：请使用 train, valid, test 之一"


def test_half_filled_rows_are_joined_in_chinese(wb_home: Path, chinese: None) -> None:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    key = drafts.new_browser_key()
    added = tuple({"source": "汤"} if i % 2 else {"target": "soup"} for i in range(40))
    drafts.save(key, info.id, "pairs", drafts.Draft({}, added, ()))
    with pytest.raises(WorkbenchError) as refused:
        draft_saves.apply_pairs(key, info.id)
    english = str(refused.value)
    assert english.startswith("nothing was saved: new row 1 has no source (zh); new row 2 has")
    assert english.count("; ") == 39
    chinese_text = shown(refused.value)
    assert chinese_text.startswith(
        "什么都没有保存：第 1 个新行没有源文（zh）；第 2 个新行没有译文（en）；"
    )
    assert chinese_text.endswith("请把两边都填好或删除这些行，然后再保存。")


def test_a_pool_review_refusal_keeps_the_rows_problem(wb_home: Path, chinese: None) -> None:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    pool.add_to_pool(info.id, "汤\n".encode())
    [item_id] = [s.id for s in _pool_items(info.id)]
    with pytest.raises(WorkbenchError) as refused:
        pool.review(item_id, "edit", "x" * 3000)
    assert str(refused.value) == "Not saved: target is longer than 2000 characters."
    assert shown(refused.value) == "未保存：译文超过 2000 个字符。"


def _pool_items(corpus_id: int) -> list:
    from sqlalchemy import select

    from db.tables import PoolSentence
    from workbench.storage import session_scope

    with session_scope() as s:
        return list(s.scalars(select(PoolSentence).where(PoolSentence.corpus_id == corpus_id)))
