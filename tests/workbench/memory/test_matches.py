"""Memory matches: scores as CAT tools give them, exact matches, and an index that follows
every write to the pairs at once (save, edit, delete, import, undo)."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import make_toy_corpus, toy_pairs
from workbench.corpus import corpora as C
from workbench.corpus import importing as I
from workbench.corpus import pairs as P
from workbench.errors import WorkbenchError
from workbench.memory import matches as M
from workbench.team import history, undo


def test_scores_are_the_edit_distance_ratio_with_the_differing_words(wb_home: Path) -> None:
    corpus = C.create_corpus("m", "en", "de")
    P.apply_edits(
        corpus.id,
        added=[
            {"source": "The cat sat on the mat.", "target": "Die Katze saß auf der Matte."},
            {"source": "The dog sat on the mat today.", "target": "Der Hund saß heute da."},
            {"source": "Completely unrelated words here.", "target": "x"},
        ],
    )
    (found,) = M.find_matches(corpus.id, ["The  cat sat on the mat."], limit=3)
    assert [(m.score, m.exact) for m in found][:1] == [(100.0, True)]
    assert found[0].target == "Die Katze saß auf der Matte."
    (fuzzy,) = M.find_matches(corpus.id, ["The dog sat on the mat."], limit=3)
    best = fuzzy[0]
    assert best.source == "The dog sat on the mat today." and not best.exact
    assert 70 < best.score < 100
    assert [text for text, differs in best.spans if differs] == [" today"]
    assert all(m.score >= M.MIN_SCORE for ms in (found, fuzzy) for m in ms)
    assert "Completely unrelated words here." not in {m.source for m in fuzzy}
    with pytest.raises(WorkbenchError, match="ask for 1 to 10"):
        M.find_matches(corpus.id, ["x"], limit=11)


def test_the_index_follows_saves_edits_deletes_imports_and_undo(wb_home: Path) -> None:
    corpus_id = make_toy_corpus()
    source, target = toy_pairs()[0]
    assert M.find_matches(corpus_id, [source])[0][0].exact  # builds the index
    new = "这是一个全新的句子。"
    assert not any(m.exact for m in M.find_matches(corpus_id, [new])[0])
    pid = P.add_pair(corpus_id, new, "A brand new sentence.")
    (found,) = M.find_matches(corpus_id, [new])
    assert (found[0].pair_id, found[0].target, found[0].exact) == (
        pid,
        "A brand new sentence.",
        True,
    )
    P.apply_edits(corpus_id, edited={pid: {"target": "An edited sentence."}})
    assert M.find_matches(corpus_id, [new])[0][0].target == "An edited sentence."
    P.apply_edits(corpus_id, deleted=[pid])
    assert all(m.pair_id != pid for m in M.find_matches(corpus_id, [new])[0])
    I.import_file(corpus_id, f"{new}\tImported.\n".encode(), fmt="tsv")
    assert M.find_matches(corpus_id, [new])[0][0].target == "Imported."
    undo.undo_change(history.list_changes(corpus_id)[0].id)  # the import, the newest change
    assert not any(m.exact for m in M.find_matches(corpus_id, [new])[0])
    assert M.find_matches(corpus_id, [source])[0][0].target == target


def _trigram_set(text: str) -> set[str]:
    padded = f"  {text.lower()} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


@pytest.mark.parametrize("packed_bits", [63, 12])  # 12: too few, the codes are sorted instead
def test_the_postings_are_each_texts_distinct_trigrams(
    monkeypatch: pytest.MonkeyPatch, packed_bits: int
) -> None:
    monkeypatch.setattr(M, "_PACKED_BITS", packed_bits)
    rng = random.Random(5)
    alphabet = "abcAB İß é的一是😀"
    texts = ["", "a", "Hello world", "aaaa aaaa"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))) for _ in range(300)]
    codes, text_of = M._trigrams(texts)

    def code(gram: str) -> int:
        return ord(gram[0]) << 42 | ord(gram[1]) << 21 | ord(gram[2])

    expected = sorted((code(g), i) for i, text in enumerate(texts) for g in _trigram_set(text))
    assert list(zip(codes.tolist(), text_of.tolist(), strict=True)) == expected


def test_an_index_built_at_once_answers_as_one_built_pair_by_pair() -> None:
    rng = random.Random(9)
    words = ["cat", "dog", "mat", "sat", "on", "the", "猫", "坐在", "垫子上", "Über"]
    rows = [
        (i, " ".join(rng.choice(words) for _ in range(rng.randint(2, 8))), f"t{i}")
        for i in range(1, 400)
    ]
    at_once = M._Index(0, rows)
    one_by_one = M._Index(0)
    for row in rows:
        one_by_one.add(*row)
    for pid, source, target in rows[:40]:  # an edit: both hold it as a pair added since
        at_once.add(pid, source + " again", target)
        one_by_one.add(pid, source + " again", target)
    queries = [source for _, source, _ in rows[::25]] + ["the cat sat on the mat", "猫 坐在 垫子上"]
    for query in queries:
        assert at_once.search(query, 10, 0.0) == one_by_one.search(query, 10, 0.0)
        assert at_once.search(query, 10, 0.0)  # something found, so the equality says much


def test_the_candidates_are_the_pairs_of_best_overlap() -> None:
    """The pruned choice (most shared trigrams first) keeps the overlaps of a full ranking."""
    rng = np.random.default_rng(4)
    index = M._Index(0, [(i, f"s{i}", "t") for i in range(3000)])
    for trial in range(200):
        shared = rng.integers(0, 4 + trial % 30, len(index.ids)) * (rng.random(3000) < 0.5)
        if trial % 4 == 0:  # exactly CANDIDATES pairs share the most, a pair sharing less wins
            shared[:] = 0
            shared[: M.CANDIDATES] = 20
            shared[M.CANDIDATES : M.CANDIDATES + 5] = 19
        sizes = shared + rng.integers(0, 60, len(shared))
        if trial % 4 == 0:
            sizes[: M.CANDIDATES] = 200
        index.sizes = array("i", sizes.astype(np.int32).tobytes())
        overlap = shared / (70 + sizes)
        chosen = index._best_overlap(shared, 70)
        expected = np.sort(overlap[shared > 0])[::-1][: M.CANDIDATES]
        assert np.array_equal(np.sort(overlap[chosen])[::-1], expected)
