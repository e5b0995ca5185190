"""The Review page under AppTest: the pool, ranked, reviewed into pairs."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.ui.pages import APP, PAGES, TIMEOUT, Trained, assert_clean, open_page, texts
from ui import pickers
from workbench.corpus import corpora, pairs
from workbench.curation import pool
from workbench.training import worker


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


def test_a_reload_keeps_the_chosen_corpus(small_corpus: int) -> None:
    """Issue 37: a reload (a new session) showed the first corpus again, so the pool of the
    chosen one looked gone. The page's corpus is kept in the address, as ?lang= is."""
    other = corpora.create_corpus("Pool corpus", "zh", "en")
    pool.add_to_pool(other.id, "我想喝一杯茶。\n电脑坏了。\n".encode())
    at = open_page("review")
    assert at.selectbox(key="review_corpus").value == small_corpus
    at.selectbox(key="review_corpus").select(other.id).run()
    assert at.query_params[pickers.CORPUS_PARAM] == str(other.id)
    reloaded = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    reloaded.query_params[pickers.CORPUS_PARAM] = str(other.id)
    reloaded._page_hash = calc_hash(PAGES["review"].url_path)
    reloaded.run()
    assert_clean(reloaded)
    assert reloaded.selectbox(key="review_corpus").value == other.id
    assert {m.label: m.value for m in reloaded.metric}["In the pool"] == "2"
