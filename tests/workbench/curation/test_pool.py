"""The pool: upload source sentences, translate and rank them in a real worker process, review
them into pairs with a note of where they came from."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from db.tables import PoolJob, RunStatus, utcnow
from tests.helpers import (
    module_home,
    start_worker,
    stop,
    toy_pairs,
    trained_home,
    training,
    wait_for,
)
from workbench.corpus import corpora, pairs
from workbench.corpus.text_rules import normalize_text
from workbench.curation import pool, pool_jobs, pool_translation
from workbench.errors import WorkbenchError
from workbench.models import translation
from workbench.storage import session_scope

UNSEEN = ["他们明天去北京开会。", "这个问题非常复杂。", "电脑坏了。"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The toy corpus and two tiny versions (the second trained much less)."""
    built = trained_home(
        tmp_path_factory, "toy", training(preset="tiny"), training(preset="tiny", max_steps=15)
    )
    with module_home(built.home) as home:
        v1, v2 = built.version_ids
        yield {"home": home, "corpus_id": built.corpus_id, "v1": v1, "v2": v2}


@pytest.fixture
def corpus(trained: dict) -> Iterator[int]:
    """A fresh corpus of the trained versions' languages, with an empty pool."""
    info = corpora.create_corpus(f"pool {utcnow().timestamp()}", "zh", "en")
    yield info.id
    corpora.delete_corpus(info.id)


def test_a_pool_is_uploaded_cleaned_and_deduplicated(corpus: int) -> None:
    data = "\n".join(["句子一", "  句子一 ", "", "句子二\x1b", "字" * 3000, "句子三"]).encode()
    result = pool.add_to_pool(corpus, data)
    assert (result.added, result.duplicates, result.skipped) == (3, 1, 1)
    again = pool.add_to_pool(corpus, "句子三\n句子四\n".encode())
    assert (again.added, again.duplicates) == (1, 1)
    stats = pool.pool_stats(corpus)
    assert (stats.total, stats.waiting, stats.translated) == (4, 4, 0)
    with pytest.raises(WorkbenchError, match="line 1"):
        pool.add_to_pool(corpus, b"\xff\xfe bad")
    assert pool.pool_stats(corpus).total == 4  # a bad file adds nothing


def test_the_worker_translates_and_ranks_the_pool(trained: dict, corpus: int) -> None:
    known = [s for s, _ in toy_pairs()]
    pool.add_to_pool(corpus, "\n".join(known + UNSEEN).encode())
    with pytest.raises(WorkbenchError, match="two different"):
        pool_jobs.enqueue_translation(corpus, trained["v1"], trained["v1"])
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"])
    with pytest.raises(WorkbenchError, match="being translated already"):
        pool_jobs.enqueue_translation(corpus, trained["v1"])
    worker = start_worker("--once")
    try:
        wait_for(lambda: worker.poll() is not None, 120, "the worker to do the pool job")
    finally:
        stop(worker)
    info = pool_jobs.job_info(job_id)
    assert (info.status, info.done, info.total, info.error) == (
        RunStatus.SUCCEEDED,
        len(known) + len(UNSEEN),
        len(known) + len(UNSEEN),
        None,
    )
    queue = pool.review_queue(corpus, limit=100)
    assert len(queue) == len(known) + len(UNSEEN)
    scores = [item.uncertainty for item in queue]
    assert scores == sorted(scores, reverse=True)
    # What the model learned it translates confidently; what it never saw, it guesses.
    rank = {item.source: i for i, item in enumerate(queue)}
    assert max(rank[s] for s in UNSEEN) < min(rank[s] for s in known)
    # The stored score is the length-normalised log-probability of greedy decoding.
    [result] = translation.translate(trained["v1"], [queue[0].source])
    assert queue[0].output == result.text
    assert queue[0].uncertainty == pytest.approx(pool_translation.uncertainty(result), abs=1e-5)
    assert queue[0].uncertainty == pytest.approx(-result.score / len(result.out_pieces), abs=1e-5)


def test_two_versions_rank_by_their_disagreement(trained: dict, corpus: int) -> None:
    pool.add_to_pool(corpus, "\n".join([s for s, _ in toy_pairs()][:4] + UNSEEN).encode())
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"], trained["v2"])
    assert pool_jobs.claim_next_job("me") == job_id
    assert pool_translation.execute_job(job_id, "me") == RunStatus.SUCCEEDED
    for item in pool.review_queue(corpus, limit=100):
        assert item.second_output is not None
        expected = pool_translation.disagreement(item.output or "", item.second_output)
        assert expected <= item.uncertainty <= expected + 1e-3


def test_review_turns_sentences_into_pairs_with_their_provenance(
    trained: dict, corpus: int
) -> None:
    pool.add_to_pool(corpus, "\n".join(UNSEEN).encode())
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"])
    assert pool_jobs.claim_next_job("me") == job_id
    pool_translation.execute_job(job_id, "me")
    first, second, third = pool.review_queue(corpus)
    accepted = pool.review(first.id, "accept")
    edited = pool.review(second.id, "edit", "The computer is broken.")
    assert pool.review(third.id, "skip") is None
    rows = pairs.search_pairs(corpus).rows.set_index("id")
    assert (rows.loc[accepted, "source"], rows.loc[accepted, "target"]) == (
        first.source,
        normalize_text(first.output or ""),  # stored by the text rule, as every pair
    )
    assert rows.loc[edited, "target"] == "The computer is broken."
    assert rows.loc[accepted, "note"].startswith(f"pool review: version #{trained['v1']}'s")
    assert "accepted" in rows.loc[accepted, "note"] and "corrected" in rows.loc[edited, "note"]
    assert f"pool job {job_id}" in rows.loc[edited, "note"]
    stats = pool.pool_stats(corpus)
    assert stats.by_status == {"new": 0, "accepted": 1, "edited": 1, "skipped": 1}
    assert pool.review_queue(corpus) == []
    with pytest.raises(WorkbenchError, match="already reviewed"):
        pool.review(first.id, "accept")
    with pytest.raises(WorkbenchError, match="Unknown review action"):
        pool.review(first.id, "keep")


def test_an_empty_correction_changes_nothing(trained: dict, corpus: int) -> None:
    pool.add_to_pool(corpus, "早上好\n".encode())
    [item_id] = [item.id for item in _translated(trained, corpus)]
    with pytest.raises(WorkbenchError, match="empty"):
        pool.review(item_id, "edit", "   ")
    assert pool.pool_stats(corpus).waiting == 1 and corpora.get_corpus(corpus).pair_count == 0


def _translated(trained: dict, corpus: int) -> list[pool.PoolItem]:
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"])
    assert pool_jobs.claim_next_job("me") == job_id
    pool_translation.execute_job(job_id, "me")
    return pool.review_queue(corpus)


def test_cancel_and_a_dead_workers_job_goes_on_where_it_stopped(
    trained: dict, corpus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool.add_to_pool(corpus, "\n".join(f"第{i}句话。" for i in range(10)).encode())
    queued = pool_jobs.enqueue_translation(corpus, trained["v1"])
    assert pool_jobs.cancel_job(queued) == RunStatus.CANCELLED
    assert pool_jobs.claim_next_job("me") is None

    monkeypatch.setattr(pool_translation, "CHUNK", 4)
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"])
    assert pool_jobs.claim_next_job("dead") == job_id
    # The dead worker wrote one chunk, then stopped beating.
    chunk = pool_translation._next_chunk(pool_jobs.job_info(job_id), 0)
    outputs = translation.translate(trained["v1"], [s for _, s in chunk])
    pool_translation._write(
        [
            {
                "b_id": i,
                "output": o.text,
                "second_output": None,
                "uncertainty": 1.0,
                "job_id": job_id,
            }
            for (i, _), o in zip(chunk, outputs, strict=True)
        ]
    )
    with session_scope() as s:
        s.execute(
            update(PoolJob)
            .where(PoolJob.id == job_id)
            .values(heartbeat_at=utcnow() - timedelta(hours=1))
        )
    assert pool_jobs.job_info(job_id).worker_lost
    assert pool_jobs.reap_stale_jobs() == 1
    assert pool_jobs.job_info(job_id).status == RunStatus.QUEUED
    assert pool_jobs.finish_job(job_id, "dead", RunStatus.SUCCEEDED) is False  # not its own
    assert pool_jobs.claim_next_job("alive") == job_id
    translated = []
    real = translation.translate
    monkeypatch.setattr(
        translation, "translate", lambda v, texts, **k: translated.extend(texts) or real(v, texts)
    )
    assert pool_translation.execute_job(job_id, "alive") == RunStatus.SUCCEEDED
    assert len(translated) == 6  # only what the dead worker had not written
    assert pool_jobs.job_info(job_id).done == 10
    assert pool.pool_stats(corpus).translated == 10


def test_a_job_for_a_deleted_version_fails_with_a_sentence(trained: dict, corpus: int) -> None:
    pool.add_to_pool(corpus, "你好\n".encode())
    job_id = pool_jobs.enqueue_translation(corpus, trained["v1"])
    with session_scope() as s:
        s.execute(update(PoolJob).where(PoolJob.id == job_id).values(version_id=None))
    assert pool_jobs.claim_next_job("me") == job_id
    assert pool_translation.execute_job(job_id, "me") == RunStatus.FAILED
    assert "deleted" in (pool_jobs.job_info(job_id).error or "")


def test_versions_of_other_languages_and_empty_pools_are_refused(
    trained: dict, corpus: int, tmp_path: Path
) -> None:
    with pytest.raises(WorkbenchError, match="no sentences waiting"):
        pool_jobs.enqueue_translation(corpus, trained["v1"])
    other = corpora.create_corpus(f"de-en {utcnow().timestamp()}", "de", "en")
    try:
        pool.add_to_pool(other.id, b"Hallo\n")
        with pytest.raises(WorkbenchError, match="translates zh"):
            pool_jobs.enqueue_translation(other.id, trained["v1"])
    finally:
        corpora.delete_corpus(other.id)
