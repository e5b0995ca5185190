"""The kNN-MT datastore of a (version, corpus) follows the corpus: a saved correction is
followed by the next translation, a deleted pair is gone, a broken store is rebuilt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core_model.metrics import corpus_bleu
from core_model.retrieval import RetrievalMemory
from core_model.translator import translate
from tests.helpers import cli_in_process, module_home, toy_pairs, trained_home, training, wait_for
from workbench.corpus import corpora, pairs
from workbench.errors import WorkbenchError
from workbench.memory import datastore, recall
from workbench.memory import tuning as tuning_module
from workbench.models import registry, translation
from workbench.team import trash

NEW_SOURCE = "我的猫喜欢喝咖啡"  # not in the toy corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    built = trained_home(tmp_path_factory, "toy", training(preset="tiny"))
    with module_home(built.home) as home:
        yield {"home": home, "corpus_id": built.corpus_id, "version": built.version_ids[0]}


def _open(trained: dict, corpus: str | None = None) -> datastore.Store:
    return datastore.open_store(trained["version"], corpus)


def _translate(trained: dict, text: str, beam: int = 1) -> str:
    [result] = recall.decode(
        trained["version"], [text], translation.DecodingOptions(beam, knn=True)
    )
    return result.text


def test_the_store_holds_every_train_position_and_is_saved(trained: dict) -> None:
    store = _open(trained)
    train = pairs.search_pairs(trained["corpus_id"], split="train", page_size=1000).rows
    assert store.describe()["pairs"] == len(train) > 0
    assert store.faiss_store.size > len(train)  # a position per target token + EOS
    assert datastore.store_path(trained["version"], trained["corpus_id"]).is_file()
    state = datastore.store_state(trained["version"])
    assert state["state"] == "ready" and state["entries"] == store.faiss_store.size


def test_lambda_and_t_are_chosen_by_the_valid_splits_bleu(trained: dict) -> None:
    """`tune_store` keeps the setting whose translations of the valid pairs, greedy and with
    the default beam, score the best mean BLEU (λ 0 among the candidates: the memory never
    makes valid translations worse); decoding them again both ways with the chosen setting
    gives the BLEU it recorded."""
    store = _open(trained)
    train = pairs.search_pairs(trained["corpus_id"], split="train", page_size=1000).rows
    rows = train.head(12)
    sources, targets = rows["source"].tolist(), rows["target"].tolist()
    valid = [(s[:-1], t) for s, t in zip(sources, targets, strict=True)]  # near, not exact
    loaded = registry.load_version(trained["version"])
    examples = [ex for s, t in valid if (ex := datastore._encode(loaded, s, t))]
    knn, figures = tuning_module.tune_store(loaded, store.faiss_store, valid, examples)
    assert knn.lam in tuning_module.BLEU_LAMBDAS and figures["valid_bleu_pairs"] == len(valid)
    memory = RetrievalMemory(store.faiss_store, knn)
    sources, references = [s for s, _ in valid], [t for _, t in valid]
    scores = [
        corpus_bleu(
            [r.text for r in translate(loaded, sources, beam, retrieval=memory)], references
        )
        for beam in (1, translation.DEFAULT_BEAM)
    ]
    assert sum(scores) / 2 == pytest.approx(figures["valid_bleu_knn"])
    assert figures["valid_bleu_knn"] >= figures["valid_bleu_model"]


def test_a_synced_store_is_written_a_moment_later(
    trained: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The translation that syncs a saved pair does not wait for the file: it is written just
    after (another process then loads the pair from it)."""
    monkeypatch.setattr(datastore, "SAVE_DELAY_S", 0.2)
    _open(trained)
    path = datastore.store_path(trained["version"], trained["corpus_id"])
    written = path.stat().st_mtime_ns
    added = {"source": "他喜欢在图书馆喝茶", "target": "He works at the library.", "split": "train"}
    [pair_id] = pairs.apply_edits(trained["corpus_id"], added=[added]).added_ids
    try:
        assert pair_id in _open(trained).pairs  # in memory at once
        wait_for(lambda: path.stat().st_mtime_ns != written, 30, "the store to be written")
        info = registry.get_version(trained["version"])
        stored, _why = datastore._load(info, trained["corpus_id"])
        assert stored is not None and pair_id in stored.pairs
    finally:
        pairs.apply_edits(trained["corpus_id"], deleted=[pair_id])


@pytest.mark.parametrize("beam", [1, 4])
def test_a_saved_correction_is_followed_at_once_and_a_deleted_one_is_gone(
    trained: dict, beam: int
) -> None:
    correction = "He works at the library."  # words the toy tokenizer knows
    [plain_before] = translation.translate(trained["version"], [NEW_SOURCE], beam=beam)
    before = _translate(trained, NEW_SOURCE, beam=beam)
    assert before != correction
    [pair_id] = pairs.apply_edits(
        trained["corpus_id"], added=[{"source": NEW_SOURCE, "target": correction, "split": "train"}]
    ).added_ids
    try:
        assert _translate(trained, NEW_SOURCE, beam=beam) == correction
        # without the memory the model's own output is unchanged
        [plain] = translation.translate(trained["version"], [NEW_SOURCE], beam=beam)
        assert plain.text == plain_before.text
    finally:
        pairs.apply_edits(trained["corpus_id"], deleted=[pair_id])
    assert _translate(trained, NEW_SOURCE, beam=beam) != correction


def test_a_corrupt_store_is_rebuilt_not_a_crash(trained: dict) -> None:
    _open(trained)
    path = datastore.store_path(trained["version"], trained["corpus_id"])
    datastore._stores.clear()  # another process: nothing in memory
    path.write_bytes(b"not a store")
    assert datastore.store_state(trained["version"])["state"] == "missing"
    text = _translate(trained, toy_pairs()[0][0])
    assert text == toy_pairs()[0][1]  # the rebuilt store knows the pair's exact context
    assert datastore.store_state(trained["version"])["state"] == "ready"


def test_ctranslate2_with_memory_is_refused_clearly(trained: dict) -> None:
    with pytest.raises(WorkbenchError, match="handwritten decoder"):
        recall.decode(
            trained["version"],
            ["你好"],
            translation.DecodingOptions(engine="ctranslate2", knn=True),
        )


def test_a_corpus_that_does_not_exist_is_refused(trained: dict) -> None:
    with pytest.raises(WorkbenchError):
        _open(trained, "no such corpus")


def test_the_cli_translates_with_memory(trained: dict, tmp_path: Path) -> None:
    source, target = toy_pairs()[1]
    out = cli_in_process("translate", "--version", str(trained["version"]), "--memory", source)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == target
    bad = cli_in_process(
        "translate",
        "--version",
        str(trained["version"]),
        "--memory",
        "--memory-corpus",
        "nope",
        "x",
    )
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1
    assert corpora.list_corpora()  # nothing else changed


def test_a_corpus_in_the_trash_gives_no_memory_to_either_kind(trained: dict) -> None:
    """Team walk, item 3: with the version's corpus in the trash, the memory matches were
    gone but the kNN memory (``memory: true``) still decoded with its pairs. Neither uses it
    now: the matches are none, the kNN memory is refused by name, and asking for the trashed
    corpus by id is no corpus for both."""
    source, target = toy_pairs()[0]
    assert _translate(trained, source) == target  # a store built and cached
    corpora.delete_corpus(trained["corpus_id"])
    try:
        [found] = recall.recall(trained["version"], [source])
        assert (found.matches, found.exact) == ([], None)
        for knn in (
            lambda: _translate(trained, source),
            lambda: datastore.store_state(trained["version"]),
            lambda: datastore.build_in_background(trained["version"]),
        ):
            with pytest.raises(WorkbenchError, match=r"'toy', is in the trash: it gives no memory"):
                knn()
        ref = f"#{trained['corpus_id']}"
        with pytest.raises(WorkbenchError, match="no corpus"):
            recall.recall(trained["version"], [source], corpus=ref)
        with pytest.raises(WorkbenchError, match="no corpus"):
            _open(trained, ref)
    finally:
        trash.restore_corpus(trained["corpus_id"])
    assert _translate(trained, source) == target
