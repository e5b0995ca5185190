"""The app as a whole under AppTest: its layers, the demo corpus, empty and populated pages,
errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.ui.pages import APP, PAGES, Trained, open_page, texts
from workbench.corpus import corpora, demo, pairs
from workbench.models import registry


def test_pages_hold_no_sql_and_no_torch() -> None:
    """The UI calls only `workbench`: no module of ui/ (nor the app) imports the database
    layer, SQLAlchemy or torch."""
    import ast

    forbidden = ("db", "sqlalchemy", "torch", "core_model")
    for path in [APP, *sorted((ROOT / "ui").glob("*.py"))]:
        tree = ast.parse(path.read_text("utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in forbidden], path.name


def test_demo_corpus_is_added_once(wb_home: Path) -> None:
    info = demo.ensure_demo_corpus()
    assert info is not None and info.pair_count == 48
    assert (info.src_lang, info.tgt_lang) == ("zh", "en")
    assert pairs.corpus_stats(info.id).split_counts == {"train": 41, "valid": 3, "test": 4}
    assert demo.ensure_demo_corpus() is None
    assert len(corpora.list_corpora()) == 1


def test_first_start_seeds_the_demo_corpus(wb_home: Path) -> None:
    at = open_page("corpus")
    assert [c.name for c in corpora.list_corpora()] == [demo.DEMO_NAME]
    assert at.selectbox(key="corpus_page_corpus").options == [
        f"{demo.DEMO_NAME} · zh→en · 48 pairs (all splits)"
    ]
    assert len(at.data_editor) == 1
    assert len(at.data_editor[0].value) == 48


# What a page works on, read from the page itself (so a new page in ui.navigation needs no
# entry here): the shared picker it draws (ui.pickers), and the hint it gives without any.
SHARED_PICKERS = {"Corpus": "No corpus yet", "Model version": "No model version yet"}
# Where an empty page sends the user (feedback.empty_state): a page needing a version to Train,
# Train to Corpus; the Corpus page creates its corpus itself, the Review page names the page.
EMPTY_LINKS = {
    "train": ["Go to Corpus"],
    "translate": ["Go to Train"],
    "inspect": ["Go to Train"],
    "models": ["Go to Train"],
}


@pytest.mark.parametrize("page", list(PAGES))
def test_empty_database_says_what_to_do(wb_home: Path, no_demo: None, page: str) -> None:
    at = open_page(page)
    assert not at.error
    assert not [s for s in at.selectbox if s.label in SHARED_PICKERS]  # nothing to pick yet
    hint = texts(at.info)
    assert [h for h in SHARED_PICKERS.values() if h in hint], hint
    assert [link.value for link in at.get("page_link")] == EMPTY_LINKS.get(page, [])


@pytest.mark.parametrize("page", list(PAGES))
def test_populated_pages_show_their_title_and_what_they_work_on(
    populated: Trained, page: str
) -> None:
    """Each page under its navigation title, with one picker of the shared kinds, listing the
    demo corpus or the two versions (newest first)."""
    at = open_page(page)
    assert not at.error, texts(at.error)
    assert [t.value for t in at.title] == [PAGES[page].title]
    (picker,) = [s for s in at.selectbox if s.label in SHARED_PICKERS]
    if picker.label == "Corpus":
        assert picker.options == [f"{demo.DEMO_NAME} · zh→en · 48 pairs (all splits)"]
    else:
        assert [o.split(" ")[0] for o in picker.options] == [f"#{i}" for i in populated.version_ids]


def test_unexpected_error_is_one_line(populated: Trained, monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(registry, "versions_table", boom)
    at = open_page("models")
    assert "RuntimeError: disk on fire" in texts(at.error)
