"""Large SQLite imports stage in short transactions and publish in one (workbench.corpus.importing).

SQLite has one write lock for the whole database: an import that held it throughout made a
training run's progress write and any edit in the UI wait until they gave up. These tests
use real SQLite files, real threads and a real SIGKILLed process.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db.tables import Corpus, Pair
from tests.helpers import killed_import
from workbench.corpus import corpora as C
from workbench.corpus import formats as F
from workbench.corpus import import_checks as K
from workbench.corpus import import_staging as ST
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.errors import WorkbenchError
from workbench.storage import session_scope

ROWS = [f"句子{i}\tsentence number {i}" for i in range(1, 1001)]  # line n holds pair n


def _all_rows() -> tuple[int, int]:
    """(corpora, pairs) in the database, hidden staging ones included."""
    with session_scope() as s:
        return s.scalar(select(func.count()).select_from(Corpus)), s.scalar(
            select(func.count()).select_from(Pair)
        )


def _soon(condition, seconds: float = 60) -> bool:
    """Whether ``condition()`` becomes true within ``seconds`` (the import runs on a thread)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_long_import_lets_other_writers_in_and_shows_nothing_until_published(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(I, "IMPORT_CHUNK", 100)
    info = C.create_corpus("big", "zh", "en")
    P.add_pair(info.id, "已有", "existing")
    paused, resume = threading.Event(), threading.Event()
    check = K.Validator.check

    def pausing_check(self: K.Validator, raw: F.Record):
        if raw[0] == 450:  # four chunks are staged or being staged by now
            paused.set()
            resume.wait(120)
        return check(self, raw)

    monkeypatch.setattr(K.Validator, "check", pausing_check)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = I.import_file(info.id, "\n".join(ROWS).encode(), fmt="tsv")
        except BaseException as exc:  # reported by the assertions below
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert paused.wait(60)
        # The hidden staging corpus holds the first chunk (so line 10 clashes at publish).
        assert _soon(lambda: _all_rows()[0] == 2 and _all_rows()[1] > 100), "nothing staged"
        # Another writer gets the write lock within seconds (it used to wait for the whole
        # import, which held the lock from its first row to its last).
        probe = sqlite3.connect(wb_home / "workbench.db", timeout=15)
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        probe.close()
        # A UI edit goes through: one pair the import has staged already, one it has not read.
        P.add_pair(info.id, "句子10", "sentence number 10")
        P.add_pair(info.id, "句子600", "sentence number 600")
        # Nothing of the import is visible yet.
        assert C.get_corpus(info.id).pair_count == 3
        assert [c.name for c in C.list_corpora()] == ["big"]
        assert P.search_pairs(info.id, "sentence number 3").total == 0
    finally:
        resume.set()
        worker.join(120)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert (result.added, result.duplicates) == (998, 2)
    clash = {i.line for i in result.report if i.kind == "duplicate_in_corpus"}
    assert clash == {10, 600}
    assert C.get_corpus(info.id).pair_count == 1001
    assert P.search_pairs(info.id, "sentence number 999").total == 1
    assert _all_rows() == (1, 1001)  # the staging corpus is gone
    assert not list(wb_home.glob("*.import-*.lock"))


def test_the_corpus_deleted_during_a_staged_import_fails_it_cleanly(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(I, "IMPORT_CHUNK", 10)
    info = C.create_corpus("doomed", "zh", "en")
    P.add_pair(info.id, "已有", "existing")  # not empty: staged apart, moved at the end
    check = K.Validator.check

    def deleting_check(self: K.Validator, raw: F.Record):
        if raw[0] == 50:
            C.delete_corpus(info.id)
        return check(self, raw)

    monkeypatch.setattr(K.Validator, "check", deleting_check)
    with pytest.raises(WorkbenchError, match="was deleted during the import"):
        I.import_file(info.id, "\n".join(ROWS[:80]).encode(), fmt="tsv")
    assert _all_rows() == (1, 1)  # the deleted corpus, in the trash with its one pair


def test_an_empty_corpus_receives_a_large_import_in_place(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into an empty corpus the pairs are staged under its own id while it is hidden (busy
    for everyone else), so publishing is un-hiding it: one row, whatever the size."""
    monkeypatch.setattr(I, "IMPORT_CHUNK", 100)
    info = C.create_corpus("empty", "zh", "en")
    C.create_corpus("other", "zh", "en")
    paused, resume = threading.Event(), threading.Event()
    check = K.Validator.check

    def pausing_check(self: K.Validator, raw: F.Record):
        if raw[0] == 450:
            paused.set()
            resume.wait(120)
        return check(self, raw)

    monkeypatch.setattr(K.Validator, "check", pausing_check)
    outcome: dict = {}
    worker = threading.Thread(
        target=lambda: outcome.update(r=I.import_file(info.id, "\n".join(ROWS).encode(), fmt="tsv"))
    )
    worker.start()
    try:
        assert paused.wait(60)
        assert _soon(lambda: [c.name for c in C.list_corpora()] == ["other"])
        for touch in (
            lambda: C.get_corpus("empty"),
            lambda: P.add_pair(info.id, "新", "new"),
            lambda: C.delete_corpus(info.id),
            lambda: I.import_file(info.id, b"a\tb\n", fmt="tsv"),
            lambda: I.import_file("empty", b"a\tb\n", fmt="tsv", create_langs=("zh", "en")),
        ):
            with pytest.raises(WorkbenchError, match="receiving a large import"):
                touch()
        assert _all_rows()[0] == 2  # no staging corpus of its own
    finally:
        resume.set()
        worker.join(120)
    assert outcome["r"].added == 1000 and outcome["r"].corpus_id == info.id
    assert C.get_corpus(info.id).pair_count == 1000
    assert [c.name for c in C.list_corpora()] == ["empty", "other"]


@pytest.mark.parametrize("skip", [False, True])
def test_a_staged_import_names_sources_the_corpus_translates_differently(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch, skip: bool
) -> None:
    """The staged path (a non-empty corpus, several chunks) finds them in every chunk, as
    the one-transaction import does: added with a warning, or left out."""
    monkeypatch.setattr(I, "IMPORT_CHUNK", 100)
    info = C.create_corpus("c", "zh", "en")
    I.import_file(info.id, "句子7\tseven, said otherwise\n句子450\told 450\n".encode(), fmt="tsv")
    result = I.import_file(info.id, "\n".join(ROWS).encode(), fmt="tsv", skip_conflicts=skip)
    assert (result.conflict_count, result.conflicts_skipped) == (2, skip)
    assert [(c.line, c.corpus_target) for c in result.conflicts] == [
        (7, "seven, said otherwise"),
        (450, "old 450"),
    ]
    assert result.added == (998 if skip else 1000)
    assert C.get_corpus(info.id).pair_count == result.added + 2


KILLED_IMPORT = 'I.import_file(sys.argv[1], sys.argv[2], fmt="tsv", create_langs=("zh", "en"))'


def test_a_killed_import_is_invisible_and_swept(wb_home: Path, tmp_path: Path) -> None:
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(ROWS), encoding="utf-8")
    C.create_corpus("other", "zh", "en")
    killed_import(wb_home, KILLED_IMPORT, "fresh", str(data))
    assert [c.name for c in C.list_corpora()] == ["other"]  # no empty "fresh" corpus
    assert _all_rows() == (2, 100)  # the dead import's staged chunks, hidden
    assert ST.sweep_import_staging() == 1
    assert _all_rows() == (1, 0)
    assert not list(wb_home.glob("*.import-*.lock"))
    # The next import sweeps by itself, and a live import is never swept.
    assert I.import_file("fresh", data, fmt="tsv", create_langs=("zh", "en")).added == 1000
    assert ST.sweep_import_staging() == 0
    # Killed while staging in place into an empty corpus: the sweep gives it back, empty.
    C.delete_corpus("fresh")
    C.create_corpus("fresh", "zh", "en")
    killed_import(wb_home, KILLED_IMPORT, "fresh", str(data))
    with pytest.raises(WorkbenchError, match="receiving a large import"):
        C.get_corpus("fresh")
    assert ST.sweep_import_staging() == 1
    # (the first "fresh", deleted above, waits in the trash with its 1,000 pairs)
    assert C.get_corpus("fresh").pair_count == 0 and _all_rows() == (3, 1000)
