"""The Streamlit pages under AppTest, on an empty and on a populated database.

Populated means real: the module fixture trains two tiny versions through the services (queue
a run, `run_worker(once=True)` in-process), so translating and comparing use real models.
Clicking Train in a test queues a run but starts no worker process (`ensure_worker` is
stubbed); the run is then cancelled from the page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.helpers import ROOT, module_home, train_version
from ui import navigation, train_page
from workbench import (
    corpora,
    demo,
    engines,
    glossary,
    pairs,
    pool,
    registry,
    run_info,
    runs,
    settings,
    significance,
    train_options,
    worker,
    worker_process,
)
from workbench.serving import api_keys, served
from workbench.settings import ENV_DB_URL, ENV_HOME

APP = ROOT / "streamlit_app.py"
PAGES = {
    "corpus": navigation.CORPUS,
    "train": navigation.TRAIN,
    "translate": navigation.TRANSLATE,
    "inspect": navigation.INSPECT,
    "models": navigation.MODELS,
    "review": navigation.REVIEW,
}
TIMEOUT = 120


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    if name != "corpus":
        # The pages are callables, which `AppTest.switch_page` cannot address (it knows page
        # files): ask for the page's script hash, the hash of its URL path, as a browser that
        # opens /<url_path> does.
        at._page_hash = calc_hash(PAGES[name].url_path)
        at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    """No traceback element on the page (errors must be one st.error line)."""
    assert not at.exception, [e.value for e in at.exception]


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


@pytest.fixture
def no_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty database stays empty (the demo corpus is tested on its own)."""
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)


@pytest.fixture
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)


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


# -------------------------------------------------------------------------- empty database


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


@pytest.mark.parametrize("page", list(PAGES))
def test_empty_database_says_what_to_do(wb_home: Path, no_demo: None, page: str) -> None:
    at = open_page(page)
    assert not at.error
    hint = texts(at.info)
    assert {
        "corpus": "No corpus yet",
        "train": "No corpus yet",
        "translate": "No model version yet",
        "inspect": "No model version yet",
        "models": "No model version yet",
        "review": "No corpus yet",
    }[page] in hint


def test_create_rename_and_delete_corpus(wb_home: Path, no_demo: None) -> None:
    at = open_page("corpus")
    at.text_input[0].input("Menus")
    at.button[0].click().run()  # the form's submit button
    assert_clean(at)
    assert [c.name for c in corpora.list_corpora()] == ["Menus"]
    assert "Created corpus" in texts(at.success)

    at.text_input(key=f"rename_{corpora.get_corpus('Menus').id}").input("Menus 2024")
    at.button(key="rename_corpus").click().run()
    assert [c.name for c in corpora.list_corpora()] == ["Menus 2024"]

    at.button(key="delete_corpus").click().run()
    assert corpora.list_corpora(), "deleting must ask first"
    at.button(key="delete_corpus_confirm").click().run()
    assert_clean(at)
    assert corpora.list_corpora() == []
    assert "No corpus yet" in texts(at.info)


def test_invalid_corpus_shows_one_error_line(wb_home: Path, no_demo: None) -> None:
    at = open_page("corpus")
    at.text_input[1].input("not a language!")
    at.text_input[0].input("Broken")
    at.button[0].click().run()
    assert_clean(at)
    assert "language code" in texts(at.error)
    assert corpora.list_corpora() == []
    typed = [t.value for t in at.text_input[:3]]
    assert typed == ["Broken", "not a language!", "en"], "a refused form keeps what was typed"
    at.text_input[1].input("zh")
    at.button[0].click().run()
    assert [c.name for c in corpora.list_corpora()] == ["Broken"]


# --------------------------------------------------------------------------- corpus editing


@pytest.fixture
def small_corpus(wb_home: Path, no_demo: None) -> int:
    info = corpora.create_corpus("Kitchen", "zh", "en")
    pairs.apply_edits(
        info.id,
        added=[
            {"source": "米饭", "target": "rice"},
            {"source": "面条", "target": "noodles"},
            {"source": "茶", "target": "tea"},
        ],
    )
    return info.id


def _edit(at: AppTest, **state) -> None:
    editor = at.data_editor[0]
    at.session_state[editor.key] = {
        "edited_rows": state.get("edited_rows", {}),
        "added_rows": state.get("added_rows", []),
        "deleted_rows": state.get("deleted_rows", []),
    }
    at.run()


def test_add_edit_and_delete_pairs_in_one_save(small_corpus: int) -> None:
    at = open_page("corpus")
    assert at.data_editor[0].value["source"].tolist() == ["米饭", "面条", "茶"]
    assert at.button(key="save_edits").disabled

    _edit(
        at,
        edited_rows={0: {"target": "cooked rice"}},
        added_rows=[{"source": "咖啡", "target": "coffee", "split": "test"}, {}],
        deleted_rows=[2],
    )
    assert "3 unsaved changes" in texts(at.caption)
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "Saved: 1 added, 1 edited, 1 deleted." in texts(at.success)
    rows = pairs.search_pairs(small_corpus).rows
    assert rows[["source", "target"]].values.tolist() == [
        ["米饭", "cooked rice"],
        ["面条", "noodles"],
        ["咖啡", "coffee"],
    ]
    assert rows["split"].tolist()[-1] == "test"
    assert at.data_editor[0].value["target"].tolist() == ["cooked rice", "noodles", "coffee"]


def test_a_bad_edit_changes_nothing_and_keeps_the_edits(small_corpus: int) -> None:
    at = open_page("corpus")
    _edit(at, added_rows=[{"source": "水", "target": "water"}, {"source": "汤", "target": ""}])
    _edit(
        at,
        added_rows=[{"source": "水", "target": "water"}, {"source": "米饭", "target": "rice"}],
    )
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "duplicates" in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3
    assert "2 unsaved changes" in texts(at.caption), "the user's edits must survive"


def test_unsaved_edits_hold_the_table_until_saved(small_corpus: int) -> None:
    """A search, split or page-size change waits for unsaved edits (it would drop them): the
    table keeps the edited rows and says why; saving applies the waiting view."""
    at = open_page("corpus")
    _edit(at, edited_rows={0: {"target": "cooked rice"}}, deleted_rows=[2])
    at.text_input(key="pairs_query").input("noodle").run()
    at.selectbox(key="pairs_split").select("train").run()
    at.selectbox(key="pairs_page_size").select(25).run()
    assert_clean(at)
    warning = texts(at.warning)
    assert "Save or discard your 2 unsaved changes first" in warning
    assert "the search “noodle”, the train split, 25 rows per page" in warning
    assert at.data_editor[0].value["source"].tolist() == ["米饭", "面条", "茶"]
    assert "2 unsaved changes" in texts(at.caption)
    assert at.text_input(key="pairs_query").value == "noodle", "what was typed stays"

    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert "Saved: 0 added, 1 edited, 1 deleted." in texts(at.success)
    assert not at.warning
    assert at.data_editor[0].value["target"].tolist() == ["noodles"]
    assert corpora.get_corpus(small_corpus).pair_count == 2


def test_pager_waits_for_unsaved_edits_until_discarded(small_corpus: int) -> None:
    pairs.apply_edits(
        small_corpus, added=[{"source": f"句子{i}", "target": f"sentence {i}"} for i in range(60)]
    )
    at = open_page("corpus")
    _edit(at, added_rows=[{"source": "汤", "target": "soup"}])
    at.pagination[0].set_value(2).run()
    assert_clean(at)
    assert "page 2 will apply" in texts(at.warning)
    assert len(at.data_editor[0].value) == 50, "still the page the row was added to"
    assert "1 unsaved change" in texts(at.caption)

    at.button(key="discard_edits").click().run()
    assert not at.warning
    assert at.data_editor[0].value["source"].iloc[0] == "句子47"
    assert corpora.get_corpus(small_corpus).pair_count == 63


def test_a_half_filled_new_row_is_named_and_kept(small_corpus: int) -> None:
    at = open_page("corpus")
    _edit(
        at,
        added_rows=[{"source": "汤", "target": "soup"}, {}, {"source": "水"}, {"note": "todo"}],
        edited_rows={0: {"target": "cooked rice"}},
    )
    assert "4 unsaved changes** (2 incomplete)" in texts(at.caption)
    at.button(key="save_edits").click().run()
    assert_clean(at)
    assert (
        "Nothing was saved: new row 3 has no target (en); new row 4 has no source (zh) and no "
        "target (en). Fill in both sides or delete those rows, then save again."
    ) in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3
    assert pairs.search_pairs(small_corpus, "cooked").total == 0
    assert "4 unsaved changes** (2 incomplete)" in texts(at.caption), "the rows stay"


def test_search_and_split_filter(small_corpus: int) -> None:
    at = open_page("corpus")
    at.text_input(key="pairs_query").input("noodle").run()
    assert at.data_editor[0].value["target"].tolist() == ["noodles"]
    at.text_input(key="pairs_query").input("").run()
    at.selectbox(key="pairs_split").select("test").run()
    assert at.data_editor[0].value.empty
    assert_clean(at)


def test_pagination_loads_one_page(small_corpus: int) -> None:
    pairs.apply_edits(
        small_corpus, added=[{"source": f"句子{i}", "target": f"sentence {i}"} for i in range(60)]
    )
    at = open_page("corpus")
    assert len(at.data_editor[0].value) == 50
    at.pagination[0].set_value(2).run()
    assert len(at.data_editor[0].value) == 13
    assert at.data_editor[0].value["source"].iloc[0] == "句子47"
    assert_clean(at)


def test_import_previews_before_writing(small_corpus: int) -> None:
    data = "source\ttarget\n汤\tsoup\n米饭\trice\n\tmissing source\n水\twater\n".encode()
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("menu.tsv", data, "text/tab-separated-values").run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 3, "a preview writes nothing"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Rows read": "4",
        "Will be added": "2",
        "Duplicates skipped": "1",
        "Invalid rows skipped": "1",
    }
    assert at.button(key="do_import").label == "Import 2 pairs"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 5
    assert "Imported 2 pairs" in texts(at.success)


def test_import_preview_keeps_only_a_sample_in_the_session(small_corpus: int) -> None:
    """The session holds counts, the capped report and the first rows, never the whole parse;
    the import reads the upload again."""
    data = "\n".join(f"句子{i}\t\x1bsentence {i}" for i in range(300)).encode()
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("many.tsv", data, "text/tab-separated-values").run()
    assert_clean(at)
    _ident, parsed = at.session_state["_import_preview"]
    assert parsed.accepted == 300 and len(parsed.pairs) == 20
    assert {m.label: m.value for m in at.metric}["Will be added"] == "300"
    assert at.button(key="do_import").label == "Import 300 pairs"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 303
    assert "control or invisible characters removed from 300 rows" in texts(at.success)


def test_import_with_clean_up_options_shows_what_they_drop(small_corpus: int) -> None:
    data = "汤\tsoup\n麵條\tnoodle soup\n水\tDas Wasser ist heute sehr kalt und klar.\n".encode()
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("menu.tsv", data, "text/tab-separated-values").run()
    at.checkbox(key="import_clean_0_langid").check().run()
    at.selectbox(key="import_clean_0_chinese").select("t2s").run()
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Filtered by clean-up"] == "1" and metrics["Will be added"] == "2"
    report = at.session_state["_import_preview"][1].report
    assert {(i.kind, i.severity) for i in report} >= {
        ("lang_target", "filtered"),
        ("converted", "warning"),
    }
    assert corpora.get_corpus(small_corpus).pair_count == 3, "a preview writes nothing"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert "1 filtered by clean-up" in texts(at.success)
    assert "面条" in set(pairs.search_pairs(small_corpus, query="面").rows["source"])
    assert pairs.search_pairs(small_corpus, query="water").total == 0


def test_a_cleanup_asks_first_and_can_be_undone(small_corpus: int) -> None:
    pairs.apply_edits(small_corpus, added=[{"source": "米饭米饭", "target": "米饭米饭"}])
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/download: Export & clean up"
    at.run()
    at.checkbox(key="cleanup_copies").check().run()
    at.button(key="cleanup_preview").click().run()
    assert_clean(at)
    assert "**1 would be removed**" in texts(at.markdown)
    at.button(key="cleanup_apply").click().run()
    assert corpora.get_corpus(small_corpus).pair_count == 4, "nothing removed before confirming"
    at.button(key="cleanup_cancel").click().run()
    assert corpora.get_corpus(small_corpus).pair_count == 4
    at.button(key="cleanup_apply").click().run()
    at.button(key="cleanup_confirm").click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 3
    assert "removed 1 pair" in texts(at.success)
    [undo] = [b for b in at.button if b.key.startswith("cleanup_undo_")]
    undo.click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 4
    assert "1 pairs put back" in texts(at.success)


def test_the_upload_size_is_limited_on_purpose() -> None:
    import tomllib

    from workbench import formats

    config = tomllib.loads((APP.parent / ".streamlit" / "config.toml").read_text("utf-8"))
    limit = config["server"]["maxUploadSize"]  # MB; Streamlit's default (200) is not a choice
    assert isinstance(limit, int) and 1 <= limit < 200
    assert limit << 20 < formats.MAX_INPUT_BYTES


def test_unreadable_import_is_one_error_line(small_corpus: int) -> None:
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("bad.jsonl", b'{"source": "\xff"}\n', "application/jsonl").run()
    assert_clean(at)
    assert "line 1: not valid UTF-8" in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3


def test_a_line_without_a_tab_is_a_skipped_row_of_the_preview(small_corpus: int) -> None:
    """It used to reject the whole preview ("Line 11: expected 2 to 4 tab-separated
    columns"); now it is listed in the report with its line and reason, like an empty row,
    and nothing is written until the import is confirmed."""
    data = "汤\tsoup\nthis line has no tab\n水\twater\n".encode()
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("menu.tsv", data, "text/tab-separated-values").run()
    assert_clean(at)
    assert not at.error, texts(at.error)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Will be added"], metrics["Invalid rows skipped"]) == ("2", "1")
    report = next(df.value for df in at.dataframe if "message" in df.value.columns)
    [row] = report.to_dict(orient="records")
    assert (row["line"], row["severity"], row["kind"]) == (2, "error", "malformed")
    assert row["message"].startswith("expected 2 to 4 tab-separated columns")
    assert corpora.get_corpus(small_corpus).pair_count == 3, "a preview writes nothing"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 5
    assert "2 pairs" in texts(at.success) and "1 invalid rows skipped" in texts(at.success)


def test_export_statistics_and_dedupe(small_corpus: int) -> None:
    pairs.apply_edits(small_corpus, added=[{"source": "茶", "target": "Tea"}])
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/download: Export & clean up"
    at.run()
    assert_clean(at)
    assert at.download_button(key="export_download").label == "Download TSV"
    at.button(key="dedupe").click().run()
    at.button(key="dedupe_confirm").click().run()
    assert_clean(at)
    assert "Removed 1 near-duplicate pair." in texts(at.success)  # singular (n_)
    assert corpora.get_corpus(small_corpus).pair_count == 3

    at.session_state["corpus_tab"] = ":material/bar_chart: Statistics"
    at.run()
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Pairs (all splits)"] == "3" and metrics["Train"] == "3"


# ------------------------------------------------------------------ populated (real models)


@dataclass(frozen=True)
class Trained:
    home: Path
    corpus_id: int
    version_ids: list[int]  # newest first
    run_ids: list[int]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    """The demo corpus and two real tiny versions (a short and a shorter training)."""
    with module_home(tmp_path_factory.mktemp("ui_trained")) as home:
        info = demo.ensure_demo_corpus()
        assert info is not None
        run_ids = [train_version(info.id, preset="tiny", max_steps=steps)[0] for steps in (60, 30)]
        versions = [v.id for v in registry.list_versions()]
        yield Trained(home, info.id, versions, run_ids)


@pytest.fixture
def populated(trained: Trained, monkeypatch: pytest.MonkeyPatch) -> Trained:
    monkeypatch.setenv(ENV_HOME, str(trained.home))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    return trained


def test_populated_pages_render(populated: Trained) -> None:
    for page in PAGES:
        at = open_page(page)
        assert not at.error, texts(at.error)


def test_train_start_and_cancel_a_run(populated: Trained, no_worker: None) -> None:
    at = open_page("train")
    history = at.dataframe[-1].value
    assert set(history["status"]) == {"succeeded"}

    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert run.status == "queued" and run.config["preset"] == train_options.DEFAULT_PRESET
    assert run.config["epochs"] is None, "epochs default to the automatic budget"
    assert run.config["time_budget_s"] is None
    assert f"Run #{run.id} queued" in texts(at.success)
    assert f"Run #{run.id}" in texts(at.markdown)

    at.button(key=f"cancel_{run.id}").click().run()
    assert_clean(at)
    assert run_info.get_run(run.id).status == "cancelled"


def test_train_defaults_to_continuing_the_newest_version(
    populated: Trained, no_worker: None
) -> None:
    """The newest version of the corpus covers it: the default is to continue it, and a new
    model is one click away."""
    at = open_page("train")
    start = at.radio(key=f"train_start_{populated.corpus_id}")
    newest = populated.version_ids[0]
    assert start.value == newest
    assert start.options[:2] == [f"Continue from #{newest}", "Start a new model"]
    assert at.button(key="train_button").label == f"Continue from #{newest}"
    assert f"Version #{newest} was trained on this corpus" in texts(at.caption)
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert run.init_version_id == newest
    runs.cancel_run(run.id)


def test_train_starts_a_new_model_when_the_tokenizer_no_longer_fits(
    populated: Trained, no_worker: None
) -> None:
    """A corpus whose newest version's tokenizer cannot write most of its characters (here a
    copy of a demo version linked to a corpus in another script): 'Start a new model' is
    the default and the page says why."""
    greek = corpora.create_corpus("greek letters", "zh", "en")
    added = [{"source": f"αβγδεζηθ {i}", "target": f"letters {i}"} for i in range(25)]
    pairs.apply_edits(greek.id, added=added)
    copy = registry.import_version(
        registry.artifact_dir(populated.version_ids[0]), corpus="greek letters"
    )
    try:
        at = open_page("train")
        at.selectbox(key="train_corpus").select(greek.id).run()
        start = at.radio(key=f"train_start_{greek.id}")
        assert start.value == train_page.NEW_MODEL and start.options[0] == "Start a new model"
        assert at.button(key="train_button").label == "Train"
        assert f"The tokenizer of version #{copy} knows only" in texts(at.caption)
        assert "(continuing needs 99.0 %)" in texts(at.caption)
        at.button(key="train_button").click().run()
        run = run_info.list_runs()[0]
        assert run.init_version_id is None
        runs.cancel_run(run.id)
        runs.delete_run(run.id)
    finally:
        registry.delete_version(copy)
        corpora.delete_corpus(greek.id)


def test_train_with_options(populated: Trained, no_worker: None) -> None:
    at = open_page("train")
    assert not [n for n in at.number_input if n.key in ("train_epochs", "train_minutes")]
    at.button_group(key="train_for").set_value("epochs").run()
    at.number_input(key="train_epochs").set_value(3)
    older = populated.version_ids[1]
    at.radio(key=f"train_start_{populated.corpus_id}").set_value(older)
    at.number_input(key="train_max_steps").set_value(10)
    at.run()
    assert at.button(key="train_button").label == f"Continue from #{older}"
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["epochs"], run.config["max_steps"]) == (3, 10)
    assert run.init_version_id == older
    runs.cancel_run(run.id)

    at.radio(key=f"train_start_{populated.corpus_id}").set_value(train_page.NEW_MODEL).run()
    assert at.button(key="train_button").label == "Train"
    at.button(key="train_button").click().run()
    assert run_info.list_runs()[0].init_version_id is None
    runs.cancel_run(run_info.list_runs()[0].id)

    at.button_group(key="train_for").set_value("minutes").run()
    at.number_input(key="train_minutes").set_value(5.0)
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["time_budget_s"], run.config["epochs"]) == (300, None)
    runs.cancel_run(run.id)


def test_train_offers_a_token_budget_and_every_precision(
    populated: Trained, no_worker: None
) -> None:
    """Issue 20: "Train for: N million tokens" under Advanced, and core_model's precisions;
    a second budget beside it is one error line and queues nothing."""
    from core_model.training import config

    at = open_page("train")
    tokens = at.number_input(key="train_million_tokens")
    assert (tokens.label, tokens.value) == ("Train for: N million tokens", None)
    precision = at.selectbox(key="train_precision")
    assert (precision.options, precision.value) == (list(config.PRECISIONS), "auto")
    tokens.set_value(1.1)
    precision.select("fp32")
    at.button(key="train_button").click().run()
    assert_clean(at)
    run = run_info.list_runs()[0]
    assert (run.config["token_budget"], run.config["precision"]) == (1_100_000, "fp32")
    assert (run.config["epochs"], run.config["time_budget_s"], run.budget) == (
        None,
        None,
        "1.1M tokens",
    )
    assert f"Run #{run.id}" in texts(at.markdown) and "budget: 1.1M tokens" in texts(at.markdown)
    runs.cancel_run(run.id)

    at.button_group(key="train_for").set_value("minutes").run()
    at.button(key="train_button").click().run()
    assert_clean(at)
    assert "epochs, of minutes or of tokens: only one" in texts(at.error)
    assert run_info.list_runs()[0].id == run.id


def test_live_panel_follows_the_tokens_of_a_token_budget(
    populated: Trained, no_worker: None
) -> None:
    """Under a token budget the bar and its text follow the tokens trained, not steps."""
    from db.models import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id, tokens=1_100_000)
    try:
        with session_scope() as s:
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.5,
                "limit": "tokens",
                "elapsed_s": 60.0,
            }
        at = open_page("train")
        assert at.progress[0].value == 50
        assert at.progress[0].text == "550k of 1.1M tokens · step 50 of about 200 · 50 %"
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_a_minutes_run_on_the_demo_corpus_says_the_clock_ended_it(
    wb_home: Path, no_worker: None
) -> None:
    """Issue 19 item 4: "Train for 2 minutes" on the demo corpus ended long before its time
    with "finished its planned epochs". A real worker trains a minutes run (a small automatic
    step count that used to end it); the clock ends it, and every page says so."""
    from tests.helpers import train_version

    info = demo.ensure_demo_corpus()
    assert info is not None
    run_id, version_id = train_version(
        info.id, preset="tiny", minutes=0.1, min_steps=20, adaptive_passes=1
    )
    run = run_info.get_run(run_id)
    assert (run.stop_reason, run.stopped_because) == ("time_budget", "time budget reached")
    assert registry.get_version(version_id).metrics["train_time_s"] >= 6.0

    at = open_page("train")
    said = texts(at.success) + texts(at.caption)
    assert f"stopped at step {run.progress_step:,}: time budget reached." in said
    assert "epoch" not in said
    assert at.dataframe[-1].value.set_index("run").loc[run_id, "stopped because"] == (
        "time budget reached"
    )
    at = open_page("models")
    assert "**stopped by** time budget reached" in texts(at.markdown)


def test_the_page_offers_every_preset_of_core_model(
    populated: Trained, no_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import add_preset

    add_preset(monkeypatch, "micro")
    at = open_page("train")
    assert "micro" in at.button_group(key="train_preset").options[-1]


def _fake_running_run(corpus_id: int, **enqueue: Any) -> int:
    """A run as a worker leaves it mid-training: progress on the row, metric rows streamed."""
    from db.models import RunMetric, TrainingRun, utcnow
    from workbench.storage import session_scope

    run_id = runs.enqueue_training(corpus_id, preset="tiny", **enqueue)
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        run.status, run.heartbeat_at, run.attempts = "running", utcnow(), 1
        run.progress_step, run.progress_total, run.eta_s = 50, 200, 75.0
        run.progress_detail = {
            "fraction": 0.3,
            "limit": "steps",
            "watch": {"rule": "memorise", "reproduced": 0.75, "pairs": 41},
        }
        for kind, step, loss, valid in (
            ("step", 10, 5.0, None),
            ("step", 30, 4.0, None),
            ("epoch", 50, 3.2, 4.5),
        ):
            s.add(
                RunMetric(
                    run_id=run_id, kind=kind, step=step, epoch=1, train_loss=loss,
                    valid_loss=valid, lr=1e-3, tokens_per_s=1500.0,
                )
            )  # fmt: skip
    return run_id


def test_live_panel_shows_progress_against_what_will_end_the_run(
    populated: Trained, no_worker: None
) -> None:
    """A run that may stop early (here: once it reproduces its training pairs) shows its step
    budget as an upper bound, the rule and how close it is; under a time budget the bar
    follows the clock."""
    from db.models import TrainingRun
    from workbench.storage import session_scope

    run_id = _fake_running_run(populated.corpus_id)  # the automatic budget
    try:
        at = open_page("train")
        assert at.progress[0].value == 30  # the share of the budget, not 50 / 200
        assert at.progress[0].text == "step 50 of at most 200 · 30 %"
        captions = texts(at.caption)
        assert "Stops early once it reproduces every training pair: 75% of 41 now." in captions
        assert "44 pairs in the snapshot (training + validation)" in captions
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["ETA"] == "≤ 1 min 15 s"
        assert metrics["Tokens / s"] == "1,500"
        assert metrics["Training loss"] == "4.000"  # the latest window, not the epoch's mean
        assert metrics["Validation loss"] == "4.500"

        with session_scope() as s:  # its clock binds: 90 s are 30 % of its 5-minute ceiling
            s.get(TrainingRun, run_id).progress_detail = {
                "fraction": 0.3,
                "limit": "time",
                "elapsed_s": 90.0,
            }
        at = open_page("train")
        assert at.progress[0].text == "1 min 30 s of 5 min 00 s · step 50 of about 200 · 30 %"
        assert {m.label: m.value for m in at.metric}["ETA"] == "1 min 15 s"
        at.button(key=f"cancel_{run_id}").click().run()
        assert run_info.get_run(run_id).cancel_requested
    finally:
        with session_scope() as s:
            s.get(TrainingRun, run_id).status = "cancelled"


def test_history_says_why_runs_stopped_with_one_type_per_column(
    populated: Trained, no_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow takes the History table as it is: no server-log traceback and no 'None' for a
    run without a version, whatever mix of budgets the runs had."""
    from streamlit import dataframe_util

    fixed = []
    fix = dataframe_util.fix_arrow_incompatible_column_types
    monkeypatch.setattr(
        dataframe_util,
        "fix_arrow_incompatible_column_types",
        lambda df, *a, **k: fixed.append(list(df.columns)) or fix(df, *a, **k),
    )
    cancelled = runs.enqueue_training(populated.corpus_id, epochs=3)  # beside 'automatic' ones
    runs.cancel_run(cancelled)
    try:
        at = open_page("train")
        assert not fixed, f"History needed Arrow fixes (mixed types): {fixed}"
        table = at.dataframe[-1].value.set_index("run")
        assert (table.loc[cancelled, "version"], table.loc[cancelled, "trained for"]) == (
            "",
            "3 epochs",
        )
        for run_id in populated.run_ids:
            run = run_info.get_run(run_id)
            row = table.loc[run_id]
            assert row["version"] == f"#{run.version_id}"
            assert row["steps"] == run.progress_step  # the real end, not a planned total
            assert row["stopped because"] == run.stopped_because != ""
        last = run_info.get_run(populated.run_ids[-1])  # 30 steps: too few to learn the pairs
        at.selectbox(key="history_run").select(last.id).run()
        assert f"Stopped at step {last.progress_step:,}: reached its step limit." in texts(
            at.caption
        )
    finally:
        runs.delete_run(cancelled)


def test_resume_and_delete_a_run_from_the_page(populated: Trained, no_worker: None) -> None:
    import json

    run_id = runs.enqueue_training(populated.corpus_id)
    runs.cancel_run(run_id)
    at = open_page("train")
    at.selectbox(key="history_run").select(run_id).run()
    assert "resume_run" not in [b.key for b in at.button]  # no checkpoint: nothing to resume
    state = settings.run_dir(run_id) / "checkpoint" / "state.json"  # what an epoch end leaves
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"step": 40}))

    at = open_page("train")
    assert f"Run #{run_id} was cancelled" in texts(at.info)
    assert at.button(key="resume_last").label == "Resume from step 40"
    at.selectbox(key="history_run").select(run_id).run()
    at.button(key="resume_run").click().run()
    assert_clean(at)
    assert run_info.get_run(run_id).status == "queued"
    assert f"Run #{run_id} resumes from step 40" in texts(at.success)

    runs.cancel_run(run_id)  # queued: cancelled at once
    at = open_page("train")
    at.selectbox(key="history_run").select(run_id).run()
    at.button(key="delete_run").click().run()
    assert run_info.get_run(run_id), "deleting must ask first"
    at.button(key="delete_run_confirm").click().run()
    assert_clean(at)
    assert f"Deleted run #{run_id}." in texts(at.success)
    assert run_id not in [r.id for r in run_info.list_runs()]
    assert not settings.run_dir(run_id).exists()


def test_curves_take_epoch_ends_from_the_row_kind() -> None:
    """Validation points are the epoch rows, even when validation repeats its loss; an epoch
    row's whole-epoch training mean and the final 'done' row stay off the training curve."""
    from ui import charts

    metrics = pd.DataFrame(
        {
            "kind": ["start", "step", "step", "epoch", "step", "epoch", "done"],
            "step": [0, 10, 20, 20, 30, 40, 40],
            "train_loss": [None, 5.0, 4.0, 4.6, 3.0, 3.3, 3.3],
            "valid_loss": [None, None, None, 4.0, 4.0, 4.0, 3.8],
        }
    )
    long = charts._long_losses(metrics, None)
    training, validation = (long[long["curve"] == c] for c in ("training", "validation"))
    assert training["step"].tolist() == [10, 20, 30]
    assert validation[["step", "loss"]].values.tolist() == [[20, 4.0], [40, 4.0]]


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
    pytest.importorskip("ctranslate2")
    at = open_page("translate")
    at.button_group(key="translate_engine").set_value("ctranslate2").run()
    at.text_area(key="translate_input").input("我想喝一杯茶。\n谢谢你的帮助。")
    at.button(key="translate").click().run()
    assert_clean(at)
    assert "greedy · CTranslate2" in texts(at.caption)
    assert all(isinstance(t, str) and t for t in at.dataframe[0].value["translation"])
    assert len(at.get("vega_lite_chart")) == 1


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


def test_models_offers_a_ctranslate2_download(populated: Trained) -> None:
    pytest.importorskip("ctranslate2")
    at = open_page("models")
    version_id = populated.version_ids[0]
    assert at.selectbox(key=f"ct2_weights_{version_id}").options == list(engines.QUANTIZATIONS)
    button = at.download_button(key=f"download_ct2_{version_id}")
    assert button.label == "Download for CTranslate2"


def test_models_compare_versions(populated: Trained) -> None:
    at = open_page("models")
    table = at.dataframe[0].value
    assert sorted(table["id"]) == sorted(populated.version_ids)
    assert table["scored on"].tolist() == ["validation · 3 pairs · greedy"] * 2
    at.button(key="compare").click().run()
    assert_clean(at)
    metrics = at.dataframe[1].value
    assert sorted(metrics["version"]) == sorted(populated.version_ids)
    assert {"BLEU", "BLEU 95 % interval", "chrF"} <= set(metrics.columns)
    other = f"#{metrics['version'].iloc[1]}"
    # 4 test pairs: the warning, and no p-value or verdict right below it
    assert "no p-value or verdict is given" in texts(at.warning)
    shown = texts(at.markdown) + texts(at.caption)
    assert " is better than " not in shown and " is worse than " not in shown
    assert "no significant difference" not in shown and "p = " not in shown
    assert metrics["p (BLEU)"].isna().all() and metrics["p (chrF)"].isna().all()
    for interval in metrics["BLEU 95 % interval"]:
        low, high = (float(x) for x in interval.split(" – "))
        assert 0 <= low <= high <= 100
    sentences = at.dataframe[2].value
    assert len(sentences) == 4  # the demo corpus' test split
    assert {"source", "reference", "differs", f"Δ chrF {other}"} <= set(sentences.columns)
    at.selectbox(key="compare_sort").select("largest chrF loss first").run()
    assert_clean(at)
    deltas = list(at.dataframe[2].value[f"Δ chrF {other}"])
    assert deltas == sorted(deltas)
    downloads = [b.proto.label for b in at.get("download_button")]
    assert {"Download CSV", "Download HTML report"} <= set(downloads)
    assert f"Scores on “{demo.DEMO_NAME}”** · test · 4 pairs · greedy" in texts(at.markdown)
    assert "Only 4 test pairs" in texts(at.warning)

    at.button_group(key="compare_mode").set_value("Beam search").run()
    at.button(key="compare").click().run()
    assert_clean(at)
    assert "test · 4 pairs · beam 4" in texts(at.markdown)


def test_models_compare_gives_a_verdict_from_the_minimum_test_size(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the minimum (lowered to the demo's 4 test pairs here) the verdict and p-values are
    shown, and the warning is not."""
    monkeypatch.setattr(significance, "MIN_VERDICT_PAIRS", 4)
    at = open_page("models")
    at.button(key="compare").click().run()
    assert_clean(at)
    metrics = at.dataframe[1].value
    baseline, other = (f"#{v}" for v in metrics["version"])
    verdict = texts(at.markdown)
    assert f"{other} is better than {baseline}" in verdict or "no significant difference" in verdict
    assert "significant below p = 0.05" in texts(at.caption)
    assert not any("no p-value or verdict" in w for w in texts(at.warning).splitlines())


def test_review_pool_to_pairs(populated: Trained, no_worker: None) -> None:
    """Upload a pool, rank it (the worker's job, run here in-process), review the most
    uncertain sentences into pairs."""
    target = corpora.create_corpus("Pool review", "zh", "en")
    try:
        at = open_page("review")
        at.selectbox(key="review_corpus").select(target.id).run()
        sentences = "我想喝一杯茶。\n他们明天去北京开会。\n电脑坏了。\n"
        at.file_uploader(key="pool_upload_0").upload("pool.txt", sentences.encode(), "text/plain")
        at.run()
        at.button(key="pool_add").click().run()
        assert_clean(at)
        assert "Added 3 sentences" in texts(at.success)
        assert {m.label: m.value for m in at.metric}["In the pool"] == "3"
        at.button(key="pool_rank").click().run()
        assert_clean(at)
        assert "queued" in texts(at.success)
        assert worker.run_worker(once=True) == 1  # the pool job
        at.run()
        assert {m.label: m.value for m in at.metric}["Translated and ranked"] == "3"
        queue = pool.review_queue(target.id)
        assert len(queue) == 3
        first, second, third = queue
        assert f"**{first.source}**" in texts(at.markdown)  # most uncertain first
        at.button(key=f"pool_accept_{first.id}").click().run()
        at.text_input(key=f"pool_text_{second.id}").input("The computer broke.").run()
        assert at.button(key=f"pool_accept_{second.id}").label == "Save correction"
        at.button(key=f"pool_accept_{second.id}").click().run()
        at.button(key=f"pool_skip_{third.id}").click().run()
        assert_clean(at)
        rows = pairs.search_pairs(target.id).rows
        assert set(rows["source"]) == {first.source, second.source}
        assert "The computer broke." in set(rows["target"])
        assert all(note.startswith("pool review:") for note in rows["note"])
        assert pool.pool_stats(target.id).waiting == 0
    finally:
        corpora.delete_corpus(target.id)


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


def test_models_show_each_versions_lineage(populated: Trained) -> None:
    """Parent and the tokens and minutes behind each version: in the table and the detail."""
    at = open_page("models")
    table = at.dataframe[0].value
    assert {"parent", "train tokens", "cumulative tokens", "cumulative minutes"} <= set(table)
    newest = registry.get_version(populated.version_ids[0])
    row = table[table["id"] == newest.id].iloc[0]
    assert row["cumulative tokens"] == newest.train_tokens > 0  # a new model: its own only
    assert f"**New model** · **trained on** {newest.cumulative_tokens / 1e6:,.2f}M tokens" in (
        texts(at.markdown)
    )


def test_models_rename_and_notes(populated: Trained) -> None:
    at = open_page("models")
    version_id = populated.version_ids[0]
    assert "trained on 41 pairs (snapshot)" in texts(at.markdown)
    at.text_input[0].input("first try")
    at.text_area[0].input("demo corpus, tiny")
    at.button[0].click().run()  # the form's Save
    assert_clean(at)
    info = registry.get_version(version_id)
    assert (info.name, info.notes) == ("first try", "demo corpus, tiny")


def test_models_and_train_pages_say_who_trained_each_version(populated: Trained) -> None:
    """The fixture's runs were queued by the services as the local admin (as the CLI is)."""
    who = settings.local_admin_name()
    assert run_info.get_run(populated.run_ids[0]).started_by == who
    at = open_page("models")
    assert f"**Trained by** {who}" in texts(at.markdown)
    assert set(at.dataframe[0].value["trained by"]) == {who}


def test_models_serve_a_version_and_show_the_request(populated: Trained) -> None:
    version_id = populated.version_ids[0]
    at = open_page("models")
    at.selectbox(key="models_version").select(version_id).run()
    assert "not served" in texts(at.markdown)
    assert "curl -s http://127.0.0.1:5000/translate" in texts(at.code)
    at.button(key="serve_version").click().run()
    assert_clean(at)
    try:
        assert served.serving_of(version_id) is not None
        assert f"Version #{version_id} now answers zh→en requests" in texts(at.success)
        assert "answers zh→en requests" in texts(at.markdown)
        versions = at.dataframe[0].value
        assert versions.set_index("id")["served"].to_dict() == {
            v: "zh→en" if v == version_id else "" for v in populated.version_ids
        }
        table = at.dataframe[-1].value  # the HTTP API tab's served pairs
        assert table["version"].tolist() == [version_id]
        at.button(key="stop_serving").click().run()
        assert_clean(at)
        assert served.list_served() == []
    finally:
        for pair in served.list_served():
            served.stop_serving(pair.version_id)


def test_models_api_keys_are_shown_once_and_revoked(populated: Trained) -> None:
    def labelled(widgets, label: str):
        return next(w for w in widgets if w.label == label)

    at = open_page("models")
    labelled(at.text_input, "New key for").input("CAT plugin")
    labelled(at.number_input, "Requests per minute").set_value(30)
    labelled(at.button, "Create key").click().run()
    assert_clean(at)
    [info] = api_keys.list_keys()
    [shown] = [c.value for c in at.code if c.value.startswith(api_keys.KEY_PREFIX)]
    assert api_keys.find_active_key(shown) == info and info.requests_per_minute == 30
    assert "shown only this once" in texts(at.success)
    at.run()
    assert shown not in texts(at.code), "the key is shown once"
    at.button(key="revoke_key").click().run()
    assert api_keys.find_active_key(shown) is not None, "revoking must ask first"
    at.button(key="revoke_key_confirm").click().run()
    assert_clean(at)
    assert api_keys.find_active_key(shown) is None
    assert f"Revoked API key #{info.id}." in texts(at.success)
    labelled(at.text_input, "New key for").input("")
    labelled(at.button, "Create key").click().run()
    assert "Key name must not be empty" in texts(at.error)


def test_compare_without_test_pairs_says_so(populated: Trained) -> None:
    empty = corpora.create_corpus("No tests", "zh", "en")
    try:
        at = open_page("models")
        at.selectbox(key="compare_corpus").select(empty.id).run()
        at.button(key="compare").click().run()
        assert_clean(at)
        assert "has no test pairs" in texts(at.warning)
    finally:
        corpora.delete_corpus(empty.id)


def test_unexpected_error_is_one_line(populated: Trained, monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(registry, "versions_table", boom)
    at = open_page("models")
    assert "RuntimeError: disk on fire" in texts(at.error)


def test_models_delete_asks_first(populated: Trained) -> None:
    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny", max_steps=5)
    assert worker.run_worker(once=True) == 1
    doomed = run_info.get_run(run_id).version_id
    assert doomed is not None
    at = open_page("models")
    at.selectbox(key="models_version").select(doomed).run()
    at.button(key="delete_version").click().run()
    assert registry.get_version(doomed), "deleting must ask first"
    at.button(key="delete_version_confirm").click().run()
    assert_clean(at)
    assert doomed not in [v.id for v in registry.list_versions()]
    assert f"Deleted version #{doomed}." in texts(at.success)


def test_a_dead_workers_run_waits_for_a_worker_to_resume_it(
    populated: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from db.models import TrainingRun, utcnow
    from workbench.storage import session_scope

    started = []
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: started.append(1))
    run_id = runs.enqueue_training(populated.corpus_id, preset="tiny")
    assert runs.claim_next_run("a worker that then died") == run_id
    with session_scope() as s:
        run = s.get(TrainingRun, run_id)
        run.created_at = run.heartbeat_at = utcnow() - timedelta(minutes=5)
    try:
        at = open_page("train")  # listing the runs re-queues the stale one
        assert "No worker is running" in texts(at.warning)
        assert runs.RESUME_NOTE in texts(at.caption)
        at.button(key="start_worker").click().run()
        assert started == [1]
    finally:
        runs.cancel_run(run_id)
