"""The Corpus page under AppTest: corpora, the pairs table, imports, clean-ups, export."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.helpers import make_toy_corpus
from tests.ui.pages import APP, assert_clean, open_page, texts
from workbench.corpus import corpora, pairs
from workbench.training import run_info, runs


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
    assert "page 2 will apply" in texts(at.warning), "nothing discarded before the confirmation"
    at.button(key="discard_edits_cancel").click().run()
    assert "1 unsaved change" in texts(at.caption), "cancelled: the edit stays"
    at.button(key="discard_edits").click().run()
    at.button(key="discard_edits_confirm").click().run()
    assert_clean(at)
    assert "Discarded 1 unsaved change." in texts(at.success)
    assert not at.warning
    assert at.data_editor[0].value["source"].iloc[0] == "句子47"
    assert corpora.get_corpus(small_corpus).pair_count == 63


def test_empty_cells_and_new_rows_read_empty(small_corpus: int) -> None:
    """Issue 30 item 12: a new row's cells read "None" (Streamlit's text for a missing value)."""
    at = open_page("corpus")
    _edit(at, added_rows=[{}])
    editor = at.data_editor[0].proto
    assert editor.HasField("placeholder") and editor.placeholder == ""


def test_a_half_filled_new_row_is_named_and_kept(small_corpus: int) -> None:
    """New rows are counted as the caption counts them: a blank one is none (issue 30 item
    12: "new row 3" named the second row with something in it)."""
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
        "Nothing was saved: new row 2 has no target (en); new row 3 has no source (zh) and no "
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
    assert "1 pair put back" in texts(at.success)


def test_the_upload_size_is_limited_on_purpose() -> None:
    import tomllib

    from workbench.corpus import text_files

    config = tomllib.loads((APP.parent / ".streamlit" / "config.toml").read_text("utf-8"))
    limit = config["server"]["maxUploadSize"]  # MB; Streamlit's default (200) is not a choice
    assert isinstance(limit, int) and 1 <= limit < 200
    assert limit << 20 < text_files.MAX_INPUT_BYTES


def test_unreadable_import_is_one_error_line(small_corpus: int) -> None:
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("bad.jsonl", b'{"source": "\xff"}\n', "application/jsonl").run()
    assert_clean(at)
    assert "line 1: not valid UTF-8" in texts(at.error)
    assert corpora.get_corpus(small_corpus).pair_count == 3


def test_an_empty_file_says_it_has_no_rows(small_corpus: int) -> None:
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("empty.tsv", b"", "text/tab-separated-values").run()
    assert_clean(at)
    assert texts(at.warning) == "The file has no rows: nothing to import."
    assert "Every row is valid." not in texts(at.success)
    assert at.button(key="do_import").disabled


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


def test_import_preview_names_sources_the_corpus_translates_differently(
    small_corpus: int,
) -> None:
    """The walk's day2.csv: a row giving a corpus source another translation was listed as
    an ordinary addition; now the preview names it with the corpus's translation (or the
    line of the file that translates it first), and the user may leave it out (the default
    adds it, as before)."""
    data = "米饭\tcooked rice\n汤\tsoup\n茶\ttea\n汤\tbroth\n".encode()
    at = open_page("corpus")
    at.session_state["corpus_tab"] = ":material/upload: Import"
    at.run()
    at.file_uploader[0].upload("day2.tsv", data, "text/tab-separated-values").run()
    assert_clean(at)
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("2 rows give a source the corpus or the file already translates")
    assert "line 1: 米饭 → cooked rice (the corpus: rice)" in warning
    assert "line 4: 汤 → broth (line 2 translates it differently)" in warning
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Will be added"], metrics["Duplicates skipped"]) == ("3", "1")
    at.checkbox(key="skip_conflicts_0").check().run()
    assert_clean(at)
    assert {m.label: m.value for m in at.metric}["Will be added"] == "1"
    assert at.button(key="do_import").label == "Import 1 pair"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert (
        "2 rows whose source the corpus or the file translates differently were skipped."
        in texts(at.success)
    )
    assert set(pairs.search_pairs(small_corpus, query="米饭").rows["target"]) == {"rice"}
    assert corpora.get_corpus(small_corpus).pair_count == 4


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
    assert (row["line"], row["severity"], row["kind"]) == (2, "error", "malformed record")
    assert row["message"].startswith("expected 2 to 4 tab-separated columns")
    assert corpora.get_corpus(small_corpus).pair_count == 3, "a preview writes nothing"
    at.button(key="do_import").click().run()
    assert_clean(at)
    assert corpora.get_corpus(small_corpus).pair_count == 5
    assert "2 pairs" in texts(at.success) and "1 invalid row skipped" in texts(at.success)


def test_the_delete_dialog_names_the_runs_still_going_on_the_corpus(
    wb_home: Path, no_demo: None
) -> None:
    """Team walk, item 2: a corpus deleted while a run trained on it, and the version came
    back later named after the trash. The dialog says the runs go on and register theirs."""
    corpus_id = make_toy_corpus()
    running, queued = runs.enqueue_training(corpus_id), runs.enqueue_training(corpus_id)
    assert runs.claim_next_run("test-worker") == running
    at = open_page("corpus")
    at.button(key="delete_corpus").click().run()
    shown = texts(at.markdown)
    assert f"Run #{running} is training on it: it will finish and register its version." in shown
    assert f"Run #{queued} is queued on it: it will still train and register its version." in shown
    at.button(key="delete_corpus_confirm").click().run()
    assert_clean(at)
    assert [s for _, s in run_info.active_runs(corpus_id)] == ["running", "queued"]
