"""Cleaning at import and on demand: language identification, length ratio, copies and the
Chinese script; previews that write nothing, a clean-up in one transaction, and its undo."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from db.tables import Pair
from workbench.corpus import cleanups, corpora, importing, pairs
from workbench.corpus.cleaning import Cleaner, CleaningOptions
from workbench.errors import WorkbenchError
from workbench.storage import session_scope

ALL = CleaningOptions(language_id=True, max_ratio=3.0, drop_copies=True, chinese="t2s")

NOISY = [
    ("我想喝一杯茶。", "I would like a cup of tea."),  # clean
    ("這是我的書。", "This is my book."),  # Traditional: converted
    ("这是我的书。", "This is my book."),  # the same pair in Simplified: after conversion a dup
    ("今天天气很好。", "Heute ist das Wetter sehr schön und wir gehen spazieren."),  # target: de
    ("Hello world, how are you today my friend?", "Hello world, how are you today my friend?"),
    ("好。", "Okay, fine, as you wish, we will do it that way then tomorrow morning."),  # ratio
    ("住手！", "Stop!"),  # too short to be sure of: kept
]


def test_the_rules_one_pair_at_a_time() -> None:
    cleaner = Cleaner(ALL, "zh", "en")
    verdicts = [cleaner.check(s, t) for s, t in NOISY]
    assert [v.reason for v in verdicts] == [
        None,
        "converted",
        None,
        "lang_target",
        "lang_source",  # English is not Chinese, confidently
        "ratio",
        None,
    ]
    assert verdicts[1].source == "这是我的书。" and verdicts[1].target == "This is my book."
    assert "looks like de" in verdicts[3].detail
    copies = Cleaner(CleaningOptions(drop_copies=True), "en", "en")
    assert copies.check("Hello  World", "hello world").reason == "copy"
    to_traditional = Cleaner(CleaningOptions(chinese="s2t"), "en", "zh-TW")
    assert to_traditional.check("book", "书").target == "書"
    assert Cleaner(CleaningOptions(language_id=True), "xx", "en").unchecked_languages == ["xx"]
    with pytest.raises(WorkbenchError, match="Chinese conversion"):
        CleaningOptions(chinese="t2x")
    with pytest.raises(WorkbenchError, match="ratio"):
        CleaningOptions(max_ratio=0.5)


def _tsv(rows: list[tuple[str, str]]) -> bytes:
    return "".join(f"{s}\t{t}\n" for s, t in rows).encode()


def test_import_options_filter_and_convert_what_the_preview_showed(wb_home, db_fingerprint) -> None:
    corpus = corpora.create_corpus("noisy", "zh", "en")
    data = _tsv(NOISY)
    before = db_fingerprint()
    preview = importing.preview_import(corpus.id, data, fmt="tsv", cleaning=ALL)
    assert db_fingerprint() == before  # a preview writes nothing
    assert preview.issue_counts["lang_target"] == 1 and preview.issue_counts["ratio"] == 1
    assert preview.issue_counts["lang_source"] == 1 and preview.issue_counts["converted"] == 1
    assert preview.filtered == 3
    assert preview.issue_counts["duplicate_in_file"] == 1  # the converted pair's twin
    assert preview.accepted == 3
    kinds = {i.kind: i.severity for i in preview.report}
    assert kinds["lang_target"] == "filtered" and kinds["converted"] == "warning"

    result = importing.import_file(corpus.id, data, fmt="tsv", cleaning=ALL)
    assert (result.added, result.filtered) == (3, 3)
    stored = set(pairs.search_pairs(corpus.id).rows["source"])
    assert stored == {"我想喝一杯茶。", "这是我的书。", "住手！"}

    plain = corpora.create_corpus("plain", "zh", "en")
    assert importing.import_file(plain.id, data, fmt="tsv").added == len(NOISY)  # no options


def _rows(corpus_id: int) -> list[tuple]:
    with session_scope() as s:
        return [
            (p.id, p.source, p.target, p.split, p.note, p.content_hash)
            for p in s.scalars(select(Pair).where(Pair.corpus_id == corpus_id).order_by(Pair.id))
        ]


def test_a_cleanup_is_previewed_applied_and_undone(db_url: str) -> None:
    corpus = corpora.create_corpus("noisy", "zh", "en")
    pairs.apply_edits(
        corpus.id,
        added=[{"source": s, "target": t, "note": f"n{i}"} for i, (s, t) in enumerate(NOISY)],
    )
    original = _rows(corpus.id)

    preview = cleanups.preview_cleanup(corpus.id, ALL)
    assert _rows(corpus.id) == original
    # The Simplified twin is in the corpus: converting the Traditional pair would duplicate
    # it, so that pair is removed instead.
    assert preview.counts == {"duplicate": 1, "lang_target": 1, "lang_source": 1, "ratio": 1}
    assert (preview.removed, preview.changed, preview.pairs) == (4, 0, len(NOISY))
    duplicate = next(v for v in preview.sample if v.reason == "duplicate")
    assert (duplicate.source, duplicate.new_source) == ("這是我的書。", None)

    info = cleanups.apply_cleanup(corpus.id, ALL)
    assert info.summary == {"duplicate": 1, "lang_target": 1, "lang_source": 1, "ratio": 1}
    left = {r[1] for r in _rows(corpus.id)}
    assert left == {"我想喝一杯茶。", "这是我的书。", "住手！"}

    undone = cleanups.undo_cleanup(info.id)
    assert (undone.restored, undone.reverted, undone.skipped) == (4, 0, 0)
    assert _rows(corpus.id) == original  # the same ids, texts, splits and notes
    assert cleanups.list_cleanups(corpus.id)[0].undone_at is not None
    with pytest.raises(WorkbenchError, match="already undone"):
        cleanups.undo_cleanup(info.id)


def test_undo_reverts_conversions_and_leaves_later_edits(wb_home) -> None:
    corpus = corpora.create_corpus("trad", "zh", "en")
    pairs.apply_edits(
        corpus.id,
        added=[
            {"source": "這是我的書。", "target": "This is my book."},
            {"source": "我們愛學習。", "target": "We love learning."},
        ],
    )
    original = _rows(corpus.id)
    info = cleanups.apply_cleanup(corpus.id, CleaningOptions(chinese="t2s"))
    assert info.summary == {"converted": 2}
    first, second = _rows(corpus.id)
    assert (first[1], second[1]) == ("这是我的书。", "我们爱学习。")
    pairs.apply_edits(corpus.id, edited={second[0]: {"target": "We like to learn."}})
    undone = cleanups.undo_cleanup(info.id)
    assert (undone.restored, undone.reverted, undone.skipped) == (0, 1, 1)
    after = _rows(corpus.id)
    assert after[0] == original[0] and after[1][2] == "We like to learn."
    with pytest.raises(WorkbenchError, match="at least one"):
        cleanups.apply_cleanup(corpus.id, CleaningOptions())
