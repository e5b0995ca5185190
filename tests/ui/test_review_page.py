"""The Review page under AppTest: the pool, ranked, reviewed into pairs."""

from __future__ import annotations

from tests.ui.pages import Trained, assert_clean, open_page, texts
from workbench.corpus import corpora, pairs
from workbench.curation import pool
from workbench.training import worker


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
