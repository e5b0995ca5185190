"""The Review page under AppTest: the pool, ranked, reviewed into pairs."""

from __future__ import annotations

from tests.ui.pages import Trained, assert_clean, open_page, texts
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
