"""Memory matches: scores as CAT tools give them, exact matches, and an index that follows
every write to the pairs at once (save, edit, delete, import, undo)."""

from __future__ import annotations

from pathlib import Path

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
    I.import_file(corpus_id, f"{new}\tImported.\n".encode(), "tsv")
    assert M.find_matches(corpus_id, [new])[0][0].target == "Imported."
    undo.undo_change(history.list_changes(corpus_id)[0].id)  # the import, the newest change
    assert not any(m.exact for m in M.find_matches(corpus_id, [new])[0])
    assert M.find_matches(corpus_id, [source])[0][0].target == target
