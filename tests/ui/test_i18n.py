"""The pages in English and 简体中文 (``ui.i18n``): the catalog is complete and keeps every
placeholder, every page renders in Chinese, the language comes from the address or the
browser and is kept, and a service's error reads Chinese on a page but English on the CLI."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from babel.messages import pofile
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.helpers import ROOT, cli
from tests.ui.pages import APP, PAGES, TIMEOUT, assert_clean, open_page, texts
from tests.ui.test_signin import (
    run_as,
    signed_in,
    team,  # noqa: F401 (a fixture)
)
from ui import i18n, navigation
from workbench.corpus import corpora
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message

PO = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "messages.po"
KEYWORDS = {**DEFAULT_KEYWORDS, "n_": (1, 2), "p_": ((1, "c"), 2)}  # as `make i18n` extracts
PLACEHOLDER = re.compile(r"(?<!\{)\{(\w+)(?:[!:][^{}]*)?\}")
CJK = re.compile(r"[\u4e00-\u9fff]")


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def extracted() -> dict[str, tuple[str, ...]]:
    """Every message of the code (``babel.cfg``'s files): msgid -> its forms (1 or 2)."""
    with open(ROOT / "babel.cfg", encoding="utf-8") as f:
        method_map, options_map = parse_mapping_cfg(f)
    found: dict[str, tuple[str, ...]] = {}
    for filename, lineno, message, _comments, context in extract_from_dir(
        str(ROOT), method_map, options_map, keywords=KEYWORDS
    ):
        forms = message if isinstance(message, tuple) else (message,)
        assert all(forms), f"{filename}:{lineno}: a message that is not a literal"
        found[f"{context}\x04{forms[0]}" if context else forms[0]] = forms
    return found


def catalog() -> dict[str, tuple[str, ...]]:
    """The Chinese catalog: msgid -> its translation(s), fuzzy ones left out (never shown)."""
    with open(PO, "rb") as f:
        cat = pofile.read_po(f)
    out = {}
    for m in cat:
        if not m.id or m.fuzzy:
            continue
        key = m.id[0] if isinstance(m.id, tuple) else m.id
        key = f"{m.context}\x04{key}" if m.context else key
        out[key] = m.string if isinstance(m.string, tuple) else (m.string,)
    return out


# ---------------------------------------------------------------------------- the catalog


def test_every_message_of_the_code_has_a_chinese_translation_with_its_placeholders() -> None:
    messages, chinese = extracted(), catalog()
    assert len(messages) > 300  # the pages' texts, not a handful
    missing = [m for m in messages if not all(chinese.get(m, ("",)))]
    assert not missing, f"{len(missing)} without a translation (run `make i18n`): {missing[:5]}"
    broken = [
        (m, t)
        for m, forms in messages.items()
        for t in chinese[m]
        if placeholders(t) != set().union(*map(placeholders, forms))
    ]
    assert not broken, f"translations that drop or add a placeholder: {broken[:5]}"
    stale = sorted(set(chinese) - set(messages))
    assert not stale, f"translations of messages no longer in the code: {stale[:5]}"


def test_translations_are_chinese() -> None:
    """A message left in English in the catalog counts as untranslated (allowed: texts that
    are only placeholders, symbols, codes or names)."""
    english = [
        (m, t[0])
        for m, t in catalog().items()
        if not CJK.search(t[0]) and re.search(r"[A-Za-z]{4,}", PLACEHOLDER.sub("", t[0]))
    ]
    assert english == [], english


def test_messages_are_literals_and_their_placeholders_are_given() -> None:
    """``_()``/``n_()`` take a literal (an f-string would never match the catalog), and every
    call passes each named placeholder of its message (else a KeyError on the page)."""
    problems = []
    files = [APP, *sorted((ROOT / "ui").glob("*.py")), *sorted((ROOT / "workbench").rglob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("_", "n_", "p_", "N_"):
                continue
            literals = node.args[:2] if node.func.id in ("n_", "p_") else node.args[:1]
            if not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in literals):
                problems.append(f"{path.name}:{node.lineno}: not a literal")
                continue
            if node.func.id == "N_" or any(k.arg is None for k in node.keywords):
                continue  # N_: filled in where shown; **params: not checked here
            given = {k.arg for k in node.keywords} | ({"n"} if node.func.id == "n_" else set())
            texts_ = literals[1:] if node.func.id == "p_" else literals
            wanted = set().union(*(placeholders(a.value) for a in texts_))
            if wanted - given:
                problems.append(f"{path.name}:{node.lineno}: missing {wanted - given}")
    assert not problems, problems


# ------------------------------------------------------------------------------ the pages


# Each page's title in Chinese: a page missing here fails the tests below (KeyError).
ZH_TITLES = {
    "corpus": "语料库",
    "train": "训练",
    "translate": "翻译",
    "inspect": "检视",
    "models": "模型",
    "review": "审校",
}
ENGLISH_HINT = re.compile(r"No (corpus|model version) yet")  # the empty pages' English hints


def chinese(text: str) -> bool:
    return bool(CJK.search(text))


@pytest.mark.usefixtures("populated")
@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_in_chinese(page: str) -> None:
    at = open_page(page, lang="zh_Hans")
    assert not at.error, texts(at.error)
    assert at.title[0].value == ZH_TITLES[page]
    under_title = at.main.caption[0].value  # what the page is for (feedback.page)
    assert chinese(under_title), under_title
    assert at.sidebar.radio(key="ui_language").value == "zh_Hans"


@pytest.mark.usefixtures("wb_home", "no_demo")
@pytest.mark.parametrize("page", list(PAGES))
def test_empty_pages_say_what_to_do_in_chinese(page: str) -> None:
    at = open_page(page, lang="zh_Hans")
    assert not at.error, texts(at.error)
    hint = texts(at.info)
    assert chinese(hint) and not ENGLISH_HINT.search(hint), hint
    links = [link.value for link in at.get("page_link")]  # where to start: "前往训练"
    assert all(chinese(label) for label in links), links


@pytest.mark.usefixtures("team")
def test_the_team_page_renders_in_chinese() -> None:
    at = run_as(signed_in("ada@example.org"), navigation.TEAM, lang="zh_Hans")
    assert_clean(at)
    assert not at.error and "已登录" in texts(at.sidebar.caption)  # the page's own text: i23-pages


@pytest.mark.usefixtures("wb_home", "no_demo")
def test_the_language_follows_the_browser_and_the_switch_is_kept() -> None:
    assert i18n.for_browser_locale("zh-CN") == "zh_Hans" == i18n.for_browser_locale("zh-TW")
    assert i18n.for_browser_locale("en-US") == "en" == i18n.for_browser_locale(None)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()  # AppTest's browser has no locale: English, and nothing in the address
    assert at.title[0].value == "Corpus" and i18n.PARAM not in at.query_params
    at.sidebar.radio(key="ui_language").set_value("zh_Hans").run()
    assert at.title[0].value == "语料库"
    assert at.query_params[i18n.PARAM] == "zh_Hans"  # a reload keeps it
    assert "drafts" in at.query_params  # beside the drafts' key
    at._page_hash = calc_hash(navigation.TRAIN.url_path)
    at.run()  # another page, same session: still Chinese, still in the address
    assert at.title[0].value == "训练" and at.query_params[i18n.PARAM] == "zh_Hans"
    at.sidebar.radio(key="ui_language").set_value("en").run()
    assert at.title[0].value == "Train"


def test_numbers_and_dates_are_formatted_for_the_language() -> None:
    from datetime import datetime

    from ui import formatting

    assert formatting.fmt_number(12345.678, 1) == "12,345.7"  # outside a page: English
    assert formatting.fmt_datetime(datetime(2026, 1, 2, 3, 4)) == "2026-01-02 03:04"
    assert formatting.fmt_duration(125) == "2 min 05 s"
    assert i18n.n_("{n} pair", "{n} pairs", 1000) == "1,000 pairs"


# ------------------------------------------------------------------ errors and messages


@pytest.mark.usefixtures("no_demo")
def test_a_service_error_is_chinese_on_the_page_and_english_on_the_cli(wb_home: Path) -> None:
    corpora.create_corpus("Menus", "zh", "en")
    with pytest.raises(WorkbenchError) as refused:  # (an assert in `except` could be skipped)
        corpora.create_corpus("Menus", "zh", "en")
    assert str(refused.value) == "a corpus named 'Menus' already exists"
    assert refused.value.msgid is not None
    at = open_page("corpus", lang="zh_Hans")
    at.text_input[0].input("Menus")
    at.button[0].click().run()  # the New corpus form, in its popover
    assert_clean(at)
    assert "已存在" in texts(at.error) and "Menus" in texts(at.error), texts(at.error)
    assert "already exists" not in texts(at.error)

    done = cli("export", str(wb_home / "out.tsv"), "--corpus", "no such corpus")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "error: no corpus 'no such corpus'"


def test_a_message_keeps_its_english_text_and_its_id() -> None:
    text = Message(N_("Run {id} was resumed or deleted meanwhile."), id=3)
    assert text == "Run 3 was resumed or deleted meanwhile." and text.params == {"id": 3}
    assert i18n.localized(text) == text  # outside a page: English
    assert WorkbenchError("plain {braces}").msgid is None  # not a message id: shown as it is
    assert str(WorkbenchError("plain {braces}")) == "plain {braces}"
