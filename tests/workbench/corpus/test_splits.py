"""Honest splits: no valid/test source or target sentence (normalised) is also in train.

A property over random corpora written through every write path (an import, data-editor
adds, explicit splits), and the upgrade of a database whose corpus still has the old
whole-pair-hash split (a real SQLite file migrated to 0006, filled, then opened by the app).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from db import dispose_engines
from db.engine import create_workbench_engine
from db.migrate import upgrade
from workbench.corpus import corpora as C
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.corpus import snapshots as S
from workbench.corpus import splits
from workbench.errors import WorkbenchError
from workbench.team import history, undo

# Few distinct sentences, so that pairs share sources and targets often.
SOURCES = st.sampled_from([f"句子{i}" for i in range(12)] + ["句子1 ", "ＡＢ", "ab"])
TARGETS = st.sampled_from([f"Sentence {i}." for i in range(12)] + ["sentence 3.", "AB"])
SPLIT = st.sampled_from([None, None, None, "train", "valid", "test"])


def _leaks(corpus_id: int) -> list[str]:
    """The valid/test sentences (normalised, either side) that train holds too."""
    train = S.split_pairs(corpus_id, "train")
    sources, targets = {s for s, _ in train}, {t for _, t in train}
    return [
        f"{split}: {s} → {t}"
        for split in ("valid", "test")
        for s, t in S.split_pairs(corpus_id, split)
        if s in sources or t in targets
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.lists(st.tuples(SOURCES, TARGETS), min_size=0, max_size=40),
    edits=st.lists(st.tuples(SOURCES, TARGETS, SPLIT), min_size=1, max_size=15),
)
def test_no_valid_or_test_sentence_is_in_train(
    wb_home: Path, first: list[tuple[str, str]], edits: list[tuple[str, str, str | None]]
) -> None:
    C.delete_corpus(C.get_or_create_corpus("prop", "zh", "en").id)  # one per example
    corpus = C.create_corpus("prop", "zh", "en")
    # filler pairs so the tiny-corpus rule (everything in train) does not decide alone
    filler = "\n".join(f"填充{i}\tfiller {i}" for i in range(30))
    tsv = "\n".join(f"{s}\t{t}" for s, t in first)
    I.import_file(corpus.id, f"{filler}\n{tsv}".encode(), fmt="tsv")
    assert _leaks(corpus.id) == []
    imported = _splits_by_pair(corpus.id)
    for source, target, split in edits:
        with contextlib.suppress(WorkbenchError):  # a duplicate pair is refused
            P.add_pair(corpus.id, source, target, split=split)
        assert _leaks(corpus.id) == []
    # undoing the edits one by one, newest first, passes back through honest splits only,
    # to the corpus as imported: the pairs an edit moved with their group move back
    edit_ids = [c.id for c in history.list_changes(corpus.id) if c.action == "edit"]
    for change_id in edit_ids:
        undo.undo_change(change_id)
        assert _leaks(corpus.id) == []
    assert _splits_by_pair(corpus.id) == imported


def _splits_by_pair(corpus_id: int) -> dict[tuple[str, str], str]:
    return {
        pair: split
        for split in ("train", "valid", "test")
        for pair in S.split_pairs(corpus_id, split)
    }


def test_explicit_split_takes_its_group_along(wb_home: Path) -> None:
    corpus = C.create_corpus("c", "zh", "en")
    added = [{"source": f"句子{i}", "target": f"sentence {i}"} for i in range(30)]
    P.apply_edits(corpus.id, added=added)
    P.apply_edits(corpus.id, added=[{"source": "句子0", "target": "another translation"}])
    result = P.apply_edits(
        corpus.id, added=[{"source": "别的", "target": "another translation", "split": "test"}]
    )
    assert result.regrouped == 2  # both pairs of 句子0 followed the explicit test pair
    test = S.split_pairs(corpus.id, "test")
    assert {("句子0", "sentence 0"), ("句子0", "another translation")} <= set(test)
    assert _leaks(corpus.id) == []
    assert "2 pairs moved" in P.corpus_stats(corpus.id).split_note


def test_undoing_a_change_of_split_moves_the_group_back(wb_home: Path) -> None:
    corpus = C.create_corpus("c", "zh", "en")
    added = [{"source": f"句子{i}", "target": f"sentence {i}", "split": "train"} for i in range(30)]
    P.apply_edits(corpus.id, added=added)
    pair = P.add_pair(corpus.id, "句子0", "another translation", split="train")
    assert P.set_split(corpus.id, [pair], "test") == 1
    assert set(S.split_pairs(corpus.id, "test")) == {
        ("句子0", "sentence 0"),  # moved along: same source
        ("句子0", "another translation"),
    }
    undo.undo_change(history.list_changes(corpus.id)[0].id)
    assert S.split_pairs(corpus.id, "test") == []  # both back in train: no group left split
    assert _leaks(corpus.id) == []


def test_a_change_of_split_leaves_other_corpora_alone(wb_home: Path) -> None:
    mine, other = C.create_corpus("mine", "zh", "en"), C.create_corpus("other", "zh", "en")
    added = [{"source": f"句子{i}", "target": f"sentence {i}", "split": "train"} for i in range(30)]
    P.apply_edits(mine.id, added=added)
    P.apply_edits(other.id, added=added)
    stranger = P.add_pair(other.id, "句子0", "another translation", split="test")
    assert P.set_split(mine.id, [stranger], "valid") == 0
    assert S.split_pairs(mine.id, "valid") == [] and S.split_pairs(other.id, "valid") == []


# ------------------------------------------------------------------------------ migration


def test_upgrade_regroups_an_old_split_and_says_what_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus from before 0008 whose test pairs share sentences with train pairs: opening
    it with the app moves them, notes how many, and leaves a clean corpus untouched."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    monkeypatch.delenv("WORKBENCH_DB_URL", raising=False)
    dispose_engines()
    engine = create_workbench_engine(f"sqlite:///{home / 'workbench.db'}")
    upgrade(engine, "0006")
    rows = [  # (corpus, source, target, split) as the old whole-pair hash left them
        (1, "我很忙。", "I am busy.", "train"),
        (1, "我很忙。", "I'm busy.", "test"),  # same source as a train pair
        (1, "我好忙。", "I am busy.", "valid"),  # same target as a train pair
        (1, "他走了。", "He left.", "test"),  # a clean test pair
        (1, "她来了。", "She came.", "train"),
        (2, "你好。", "Hello.", "train"),
        (2, "再见。", "Goodbye.", "test"),
    ]
    with engine.begin() as conn:
        for cid, name in ((1, "leaky"), (2, "clean")):
            conn.execute(
                text(
                    "INSERT INTO corpora (id, name, src_lang, tgt_lang, created_at) "
                    "VALUES (:id, :n, 'zh', 'en', '2026-01-01 00:00:00')"
                ),
                {"id": cid, "n": name},
            )
        for n, (cid, s, t, split) in enumerate(rows):
            conn.execute(
                text(
                    "INSERT INTO pairs (corpus_id, source, target, split, note, content_hash, "
                    "created_at, updated_at) VALUES (:c, :s, :t, :sp, '', :h, "
                    "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                ),
                {"c": cid, "s": s, "t": t, "sp": split, "h": f"h{n}"},
            )
    engine.dispose()

    stats = P.corpus_stats("leaky")  # the app opens (migrates, then regroups) the database
    assert _leaks(1) == []
    assert stats.split_counts == {"train": 4, "valid": 0, "test": 1}  # the oldest pair: train
    assert stats.split_note == (
        "Grouped splits after the upgrade to grouped splits: 2 pairs moved (1 test→train, "
        "1 valid→train) so that no valid or test sentence is also in train."
    )
    assert S.split_pairs(1, "test") == [("他走了。", "He left.")]
    clean = P.corpus_stats("clean")
    assert clean.split_counts == {"train": 1, "valid": 0, "test": 1} and clean.split_note == ""
    dispose_engines()
    assert P.corpus_stats("leaky").split_note == stats.split_note  # regrouped once only
    new = C.create_corpus("new", "zh", "en")
    with create_workbench_engine(f"sqlite:///{home / 'workbench.db'}").connect() as conn:
        grouped = conn.execute(text("SELECT id, splits_grouped FROM corpora ORDER BY id")).all()
    assert grouped == [(1, 1), (2, 1), (new.id, 1)]
    dispose_engines()


def test_fresh_splits_are_what_an_import_gives(wb_home: Path) -> None:
    """bench/data.py splits Tatoeba with ``fresh_splits``: the same as importing the pairs."""
    pairs = [(f"句子{i % 250}", f"Sentence {i % 270}.") for i in range(300)]  # short chains
    pairs = list(dict.fromkeys(pairs))
    corpus = C.create_corpus("fresh", "zh", "en")
    I.import_file(corpus.id, "\n".join(f"{s}\t{t}" for s, t in pairs).encode(), fmt="tsv")
    imported = {
        pair: split
        for split in ("train", "valid", "test")
        for pair in S.split_pairs(corpus.id, split)
    }
    expected = dict(zip(pairs, splits.fresh_splits(pairs), strict=True))
    assert imported == expected
    assert set(expected.values()) == {"train", "valid", "test"}
    assert _leaks(corpus.id) == []


def test_an_import_says_what_moved(wb_home: Path, tmp_path: Path, capsys) -> None:
    """An imported paraphrase of a test sentence joins the test split (its sentence was there
    first), and the CLI says so."""
    from workbench import cli as workbench_cli

    corpus = C.create_corpus("c", "zh", "en")
    P.apply_edits(corpus.id, added=[{"source": f"句{i}", "target": f"s {i}"} for i in range(40)])
    held_out = S.split_pairs(corpus.id, "test")[0]
    path = tmp_path / "more.tsv"
    path.write_text(f"source\ttarget\tsplit\n另一句\t{held_out[1]}\ttrain\n", encoding="utf-8")
    args = ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en", str(path)]
    assert workbench_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "1 pair moved to another split with their sentence group" in out
    assert ("另一句", held_out[1]) in S.split_pairs(corpus.id, "test")
    assert _leaks(corpus.id) == []
    # the move is a change of its own, after the import's: undone first, then the import
    regroup, imported = history.list_changes(corpus.id)[:2]
    assert (regroup.action, regroup.rows, imported.action) == ("split", 1, "import")
    with pytest.raises(WorkbenchError, match=f"changed by change #{regroup.id}"):
        undo.undo_change(imported.id)
    undo.undo_change(regroup.id)
    assert ("另一句", held_out[1]) in S.split_pairs(corpus.id, "train")
    undo.undo_change(imported.id)
    assert C.get_corpus(corpus.id).pair_count == 40


def test_regrouping_a_whole_corpus_keeps_only_shared_sentences_in_memory(
    wb_home: Path,
) -> None:
    """After an import the whole corpus is regrouped: it used to hold tuples and dictionaries
    of every pair (~520 bytes each: 560 MB at 1.3M pairs); now the pairs that share no
    sentence, nearly all, cost a few bytes each (what grows with the corpus is measured)."""
    import tracemalloc

    from workbench.storage import session_scope

    peaks = []
    for n in (10_000, 50_000):
        rows = [f"句子{i}\tSentence {i}." for i in range(n)]
        rows += ["句子1\tAnother one.", "又一句\tSentence 7."]  # two groups of two pairs
        corpus = C.create_corpus(f"c{n}", "zh", "en")
        I.import_file(corpus.id, "\n".join(rows).encode(), fmt="tsv")
        with session_scope() as s:
            tracemalloc.start()
            try:
                assert splits.settle_splits(s, corpus.id) == {}  # (the import settled them)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
        assert _leaks(corpus.id) == []
    per_pair = (peaks[1] - peaks[0]) / 40_000
    assert per_pair < 100, f"{per_pair:.0f} bytes per pair"
