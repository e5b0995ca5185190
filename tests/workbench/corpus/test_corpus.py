"""Corpus services on real SQLite files and a real PostgreSQL (the ``db_url`` fixture)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from workbench.corpus import corpora as C
from workbench.corpus import pairs as P
from workbench.corpus import snapshots as S
from workbench.corpus import text_rules as T
from workbench.errors import WorkbenchError

ZH_EN = [
    ("我今天很忙。", "I am busy today."),
    ("外面在下雨。", "It is raining outside."),
    ("请把门关上。", "Please close the door."),
    ("这本书很有意思。", "This book is interesting."),
    ("我们明天见。", "See you tomorrow."),
    ("他在厨房做饭。", "He is cooking in the kitchen."),
]


def _corpus(name: str = "toy", pairs=ZH_EN) -> C.CorpusInfo:
    info = C.create_corpus(name, "zh", "en")
    if pairs:
        P.apply_edits(info.id, added=[{"source": s, "target": t} for s, t in pairs])
    return C.get_corpus(info.id)


# ----------------------------------------------------------------------------- text rules


def test_normalize_text() -> None:
    assert T.normalize_text("  a\t b\n\u3000c  ") == "a b c"
    assert T.normalize_text("e\u0301") == "\u00e9"  # NFC
    assert T.normalize_text(" \n ") == ""


def test_sentence_split_is_deterministic_and_roughly_90_5_5() -> None:
    sentences = [f"源{i}" for i in range(20_000)]
    counts = Counter(T.sentence_split(k) for k in sentences)
    assert 0.88 < counts["train"] / 20_000 < 0.92
    assert 0.04 < counts["valid"] / 20_000 < 0.06
    assert 0.04 < counts["test"] / 20_000 < 0.06
    assert [T.sentence_split(k) for k in sentences[:50]] == [
        T.sentence_split(k) for k in sentences[:50]
    ]
    assert T.default_split("源0", T.TINY_CORPUS - 1) == "train"
    assert T.default_split("源0", 100) == T.sentence_split("源0")


def test_split_groups_join_shared_sources_and_targets() -> None:
    pairs = [("a", "x"), ("b", "y"), ("a", "z"), ("c", "y"), ("d", "w"), ("c", "v")]
    # the a pairs share a source; b and c share the target y, and c's other pair joins them
    assert T.split_groups(pairs) == [0, 1, 0, 1, 4, 1]


def test_rough_token_count() -> None:
    assert T.rough_token_count("我今天很忙。") == 6  # 5 characters + the full stop
    assert T.rough_token_count("I am busy today.") == 4
    assert T.rough_token_count("用 Python 写") == 3


# ---------------------------------------------------------------------------- corpora


def test_create_list_rename_delete(db_url: str) -> None:
    a = C.create_corpus("  daily  zh-en ", "zh", "en")
    assert a.name == "daily zh-en" and a.pair_count == 0
    C.create_corpus("other", "de", "en")
    with pytest.raises(WorkbenchError, match="already exists"):
        C.create_corpus("daily zh-en", "zh", "en")
    for bad in ("", "   ", "x" * 201):
        with pytest.raises(WorkbenchError):
            C.create_corpus(bad, "zh", "en")
    with pytest.raises(WorkbenchError, match="language"):
        C.create_corpus("bad lang", "chinese!", "en")
    P.apply_edits(a.id, added=[{"source": "你好", "target": "hello"}])
    listed = {c.name: c.pair_count for c in C.list_corpora()}
    assert listed == {"daily zh-en": 1, "other": 0}
    assert C.get_corpus("daily zh-en").id == a.id == C.get_corpus(a.id).id
    assert C.get_corpus(str(a.id)).id == a.id
    with pytest.raises(WorkbenchError, match="already exists"):
        C.rename_corpus(a.id, "other")
    assert C.rename_corpus(a.id, "renamed").name == "renamed"
    C.delete_corpus("renamed")
    assert [c.name for c in C.list_corpora()] == ["other"]
    with pytest.raises(WorkbenchError, match="no corpus"):
        C.get_corpus(a.id)


def test_get_or_create_checks_languages(wb_home: Path) -> None:
    a = C.get_or_create_corpus("c", "zh", "en")
    assert C.get_or_create_corpus("c", "zh", "en").id == a.id
    with pytest.raises(WorkbenchError, match="zh→en"):
        C.get_or_create_corpus("c", "en", "zh")


# ------------------------------------------------------------------------------- edits


def test_tiny_corpus_goes_to_train_and_explicit_split_wins(wb_home: Path) -> None:
    info = _corpus()
    assert P.corpus_stats(info.id).split_counts == {"train": 6, "valid": 0, "test": 0}
    P.add_pair(info.id, "新的句子。", "A new sentence.", split="test")
    assert S.split_pairs(info.id, "test") == [("新的句子。", "A new sentence.")]


def test_large_write_splits_by_source_group(wb_home: Path) -> None:
    info = C.create_corpus("big", "zh", "en")
    added = [{"source": f"句子{i}", "target": f"sentence {i}"} for i in range(400)]
    P.apply_edits(info.id, added=added)
    counts = P.corpus_stats(info.id).split_counts
    assert counts["valid"] > 0 and counts["test"] > 0 and counts["train"] > 300
    for split in ("train", "valid", "test"):
        for s, _t in S.split_pairs(info.id, split):
            assert T.sentence_split(s) == split


def test_apply_edits_is_one_validated_transaction(db_url: str, db_fingerprint) -> None:
    info = _corpus()
    rows = P.search_pairs(info.id).rows
    ids = rows["id"].tolist()
    before = db_fingerprint()
    bad_changes = [
        {"added": [{"source": "  ", "target": "x"}]},
        {"added": [{"source": "x", "target": None}]},
        {"added": [{"source": "我们明天见。", "target": "See  you tomorrow."}]},  # duplicate
        {"added": [{"source": "a", "target": "b"}, {"source": "a", "target": "b"}]},
        {"added": [{"source": "a", "target": "b", "split": "dev"}]},
        {"edited": {ids[0]: {"target": ""}}},
        {"edited": {ids[0]: {"source": ZH_EN[1][0], "target": ZH_EN[1][1]}}},  # dup of ids[1]
        {"edited": {ids[0]: {"colour": "red"}}},
        {"deleted": [999_999]},
        # one good change plus one bad: the good one must not be written either
        {"added": [{"source": "好的", "target": "OK"}], "deleted": [ids[0], 424242]},
    ]
    for change in bad_changes:
        with pytest.raises(WorkbenchError):
            P.apply_edits(info.id, **change)
        assert db_fingerprint() == before, change
    with pytest.raises(WorkbenchError, match=r"duplicates existing pair \d+"):
        P.apply_edits(info.id, added=[{"source": "我们明天见。", "target": "See you tomorrow."}])

    result = P.apply_edits(
        info.id,
        added=[{"source": "好的", "target": "OK", "note": "  new  "}],
        edited={ids[0]: {"target": "I'm  busy today.", "split": "valid"}},
        deleted=[ids[1]],
    )
    assert (result.added, result.updated, result.deleted) == (1, 1, 1)
    page = P.search_pairs(info.id).rows.set_index("id")
    assert page.loc[ids[0], "target"] == "I'm busy today." and page.loc[ids[0], "split"] == "valid"
    assert ids[1] not in page.index
    assert page.loc[result.added_ids[0], "note"] == "new"
    # Re-adding the deleted pair and swapping two pairs' content are both fine.
    P.apply_edits(info.id, added=[{"source": ZH_EN[1][0], "target": ZH_EN[1][1]}])
    a, b = ids[2], ids[3]
    P.apply_edits(
        info.id,
        edited={
            a: {"source": ZH_EN[3][0], "target": ZH_EN[3][1]},
            b: {"source": ZH_EN[2][0], "target": ZH_EN[2][1]},
        },
    )
    page = P.search_pairs(info.id).rows.set_index("id")
    assert page.loc[a, "source"] == ZH_EN[3][0] and page.loc[b, "source"] == ZH_EN[2][0]


def test_add_pair_rejects_duplicates(db_url: str) -> None:
    info = _corpus(pairs=[])
    pid = P.add_pair(info.id, "你好。", "Hello.")
    assert isinstance(pid, int)
    with pytest.raises(WorkbenchError, match="duplicates"):
        P.add_pair(info.id, " 你好。 ", "Hello.")
    other = C.create_corpus("other", "zh", "en")
    P.add_pair(other.id, "你好。", "Hello.")  # unique per corpus only


def test_ids_are_never_reused(wb_home: Path) -> None:
    info = _corpus(pairs=[])
    first = P.add_pair(info.id, "一", "one")
    P.apply_edits(info.id, deleted=[first])
    assert P.add_pair(info.id, "二", "two") > first


# ------------------------------------------------------------------------------ search


def test_search_substring_split_and_pages(db_url: str) -> None:
    info = _corpus()
    assert P.search_pairs(info.id).total == 6
    hit = P.search_pairs(info.id, "RAIN")  # case-insensitive, >= 3 chars (index)
    assert hit.total == 1 and hit.rows.loc[0, "target"] == "It is raining outside."
    assert P.search_pairs(info.id, "下雨").total == 1  # 2 chars (LIKE fallback)
    assert P.search_pairs(info.id, "很有意思").total == 1  # Chinese, 4 chars (index)
    assert P.search_pairs(info.id, "the  door").total == 1  # query normalised too
    assert P.search_pairs(info.id, "o").total == 6
    assert P.search_pairs(info.id, "nothing like this").total == 0
    assert list(P.search_pairs(info.id).rows.columns) == ["id", "source", "target", "split", "note"]
    P.apply_edits(
        info.id, edited={P.search_pairs(info.id, "door").rows.loc[0, "id"]: {"split": "test"}}
    )
    assert P.search_pairs(info.id, "door", split="test").total == 1
    assert P.search_pairs(info.id, "door", split="train").total == 0
    p1 = P.search_pairs(info.id, page=1, page_size=4)
    p2 = P.search_pairs(info.id, page=2, page_size=4)
    assert len(p1.rows) == 4 and len(p2.rows) == 2 and p1.page_count == 2
    assert p1.rows["id"].tolist() + p2.rows["id"].tolist() == sorted(
        P.search_pairs(info.id).rows["id"]
    )
    with pytest.raises(WorkbenchError):
        P.search_pairs(info.id, split="dev")


def test_search_special_characters(db_url: str) -> None:
    info = _corpus(
        pairs=[
            ("百分之百", '100% "sure"'),
            ("下划线", "snake_case name"),
            ("反斜杠", r"a\b path"),
            ("普通", "100 percent sure"),
        ]
    )
    assert P.search_pairs(info.id, "100%").total == 1
    assert P.search_pairs(info.id, '"sure"').total == 1
    assert P.search_pairs(info.id, "e_c").total == 1
    assert P.search_pairs(info.id, "_").total == 1
    assert P.search_pairs(info.id, r"a\b").total == 1
    assert P.search_pairs(info.id, "AND").total == 0  # FTS syntax is not interpreted
    assert P.search_pairs(info.id, "*").total == 0


def test_search_follows_edits_and_deletes(db_url: str, db_fingerprint) -> None:
    info = _corpus()
    pid = P.search_pairs(info.id, "kitchen").rows.loc[0, "id"]
    P.apply_edits(info.id, edited={pid: {"target": "He cooks in the garden."}})
    assert P.search_pairs(info.id, "kitchen").total == 0
    assert P.search_pairs(info.id, "garden").total == 1
    P.apply_edits(info.id, deleted=[pid])
    assert P.search_pairs(info.id, "garden").total == 0
    db_fingerprint()  # runs the FTS integrity check on SQLite


def test_search_count_is_capped(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = C.create_corpus("many", "zh", "en")
    P.apply_edits(info.id, added=[{"source": f"句{i}", "target": f"row {i}"} for i in range(30)])
    monkeypatch.setattr(P, "COUNT_CAP", 10)
    page = P.search_pairs(info.id, "row", page_size=5)
    assert page.total == 10 and not page.total_is_exact and len(page.rows) == 5
    assert P.search_pairs(info.id).total == 30  # unfiltered counts stay exact


def test_search_is_scoped_to_corpus(db_url: str) -> None:
    a = _corpus("a")
    b = _corpus("b", pairs=ZH_EN[:2])
    assert P.search_pairs(a.id, "raining").total == 1
    assert P.search_pairs(b.id, "door").total == 0
    assert P.search_pairs(b.id).total == 2


# ---------------------------------------------------------------- stats, dedup, snapshot


def test_corpus_stats_sample_is_bounded(wb_home: Path) -> None:
    info = C.create_corpus("s", "zh", "en")
    P.apply_edits(
        info.id, added=[{"source": "字" * (i % 7 + 1), "target": f"w {i}"} for i in range(300)]
    )
    stats = P.corpus_stats(info.id, sample_size=50)
    assert stats.total == 300 and sum(stats.split_counts.values()) == 300
    assert 30 <= stats.sample_size <= 50 and len(stats.lengths) == stats.sample_size
    assert set(stats.lengths.columns) == {
        "source_chars",
        "target_chars",
        "source_tokens",
        "target_tokens",
    }
    assert stats.lengths["source_chars"].between(1, 7).all()
    assert P.corpus_stats(info.id, sample_size=50).lengths.equals(stats.lengths)  # stable


def test_deduplicate_removes_loose_duplicates(db_url: str) -> None:
    info = _corpus(
        pairs=[
            ("你好！", "Hello!"),
            ("你好!", "hello!"),  # half-width "!" and lower case: same under NFKC + casefold
            ("ＡＢＣ", "abc"),
            ("ABC", "ABC"),
            ("不同", "Different"),
        ]
    )
    first = P.search_pairs(info.id).rows["id"].min()
    assert P.deduplicate(info.id) == 2
    rows = P.search_pairs(info.id).rows
    assert len(rows) == 3 and first in set(rows["id"])
    assert P.deduplicate(info.id) == 0


def test_snapshot_and_reload(db_url: str) -> None:
    info = C.create_corpus("snap", "zh", "en")
    P.apply_edits(
        info.id,
        added=[{"source": f"句子{i}", "target": f"s {i}"} for i in range(200)]
        + [{"source": "测试", "target": "held out", "split": "test"}],
    )
    snap = S.snapshot(info.id)
    assert snap.size == 200 - P.corpus_stats(info.id).split_counts["test"] + 1
    assert ("测试", "held out") not in snap.train_pairs + snap.valid_pairs
    assert len(snap.valid_pairs) == len(snap.valid_ids) > 0
    assert snap.train_pairs == S.split_pairs(info.id, "train")
    again = S.snapshot_from_ids(info.id, snap.pair_ids)
    assert again.content_hash == snap.content_hash and again.train_pairs == snap.train_pairs
    P.apply_edits(info.id, edited={snap.train_ids[0]: {"target": "changed"}})
    assert S.snapshot_from_ids(info.id, snap.pair_ids).content_hash != snap.content_hash
    assert S.snapshot(info.id).content_hash != snap.content_hash


def test_short_query_count_is_bounded(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = C.create_corpus("short", "zh", "en")
    P.apply_edits(info.id, added=[{"source": f"雨{i}", "target": f"r {i}"} for i in range(40)])
    assert P.search_pairs(info.id, "雨").total == 40
    assert P.search_pairs(info.id, "雨3").total == 11  # "雨3", "雨30".."雨39"
    monkeypatch.setattr(P, "LIKE_SCAN_CAP", 25)
    page = P.search_pairs(info.id, "雨", page=2, page_size=15)
    assert not page.total_is_exact and page.total >= 25 and len(page.rows) == 15


def test_numpy_ids_are_accepted(wb_home: Path) -> None:
    info = _corpus()
    rows = P.search_pairs(info.id).rows
    cid = rows["id"].dtype.type(info.id)  # numpy.int64, as handed back by DataFrames
    assert C.get_corpus(cid).id == info.id
    res = P.apply_edits(
        cid, edited={rows["id"].iloc[0]: {"note": "n"}}, deleted=[rows["id"].iloc[1]]
    )
    assert (res.updated, res.deleted) == (1, 1)


# ------------------------------------------------------------------ text rule and names


def test_every_write_path_applies_the_one_text_rule(db_url: str) -> None:
    """NUL, ESC, BEL, bidi overrides, stray BOMs and lone surrogates never reach the database
    (on PostgreSQL a NUL used to be an internal DataError), and the removal is counted."""
    info = _corpus(pairs=[])
    res = P.apply_edits(
        info.id,
        added=[
            {"source": "你\x00好\x1b[2J", "target": "\ufeffhel\u202elo\x07", "note": "n\ud800"},
            {"source": "再见", "target": "bye"},
        ],
    )
    assert res.added == 2 and res.cleaned == 6
    pid = P.add_pair(info.id, "谢谢\x00", "thanks\u2066", note="\x1bcorrection")
    pid2 = P.apply_edits(info.id, edited={pid: {"target": "thank\x9b you"}}).updated
    assert pid2 == 1
    rows = P.search_pairs(info.id).rows
    stored = list(zip(rows["source"], rows["target"], rows["note"], strict=True))
    assert stored == [
        ("你好[2J", "hello", "n"),
        ("再见", "bye", ""),
        ("谢谢", "thank you", "correction"),
    ]
    with pytest.raises(WorkbenchError, match="source is empty"):
        P.add_pair(info.id, "\u200b\u200d", "zero-width only")
    with pytest.raises(WorkbenchError, match="duplicates"):  # identity is the cleaned text
        P.add_pair(info.id, "你好[2J", "hello")


def test_one_name_rule_for_corpora_and_versions(db_url: str) -> None:
    from db.tables import ModelVersion
    from workbench.models import registry
    from workbench.storage import session_scope

    info = C.create_corpus("names", "zh", "en")
    with session_scope() as s:
        version = ModelVersion(name="v", artifact_path="models/x", metrics={})
        s.add(version)
        s.flush()
        vid = version.id
    for bad in ("evil\x1b[31m", "nul\x00", "rtl\u202eexe", "7", "#7"):
        with pytest.raises(WorkbenchError):
            C.create_corpus(bad, "zh", "en")
        with pytest.raises(WorkbenchError):
            C.rename_corpus(info.id, bad)
        with pytest.raises(WorkbenchError):
            registry.rename_version(vid, bad)
    registry.rename_version(vid, "  good   name ")
    registry.set_notes(vid, "line one\x1b\nline two\x00")
    got = registry.get_version(vid)
    assert (got.name, got.notes) == ("good name", "line one\nline two")
    assert [c.name for c in C.list_corpora()] == ["names"]


def test_a_numeric_name_never_hides_a_corpus_id(db_url: str) -> None:
    """New names may not be numbers; a legacy corpus named like another's id is ambiguous
    as a bare number, and '#N' always means the id."""
    from db.tables import Corpus
    from workbench.storage import session_scope

    first = C.create_corpus("first", "zh", "en")
    with session_scope() as s:  # a database from before the name rule
        s.add(Corpus(name=str(first.id), src_lang="de", tgt_lang="en"))
    legacy = next(c for c in C.list_corpora() if c.name == str(first.id))
    with pytest.raises(WorkbenchError, match=f"'#{first.id}'"):
        C.get_corpus(str(first.id))
    assert C.get_corpus(f"#{first.id}").id == first.id
    assert C.get_corpus(f"id:{legacy.id}").id == legacy.id
    assert C.get_corpus(str(legacy.id)).id == legacy.id  # unambiguous: no corpus of that name
    for huge in (2**40, 2**70, f"#{2**70}", str(2**70)):
        with pytest.raises(WorkbenchError, match="no corpus"):
            C.get_corpus(huge)
