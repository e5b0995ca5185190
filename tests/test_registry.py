"""Model registry and services on a version trained for real (tiny model, toy corpus)."""

from __future__ import annotations

import io
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_helpers import make_toy_corpus, toy_pairs

from db.engine import ENV_DB_URL, ENV_HOME, dispose_engines
from workbench import corpus, evaluation, jobs, registry, translation, worker
from workbench.errors import WorkbenchError


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One home with two versions: v1 trained from scratch, v2 fine-tuned from v1."""
    home = tmp_path_factory.mktemp("registry_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_HOME, str(home))
        mp.delenv(ENV_DB_URL, raising=False)
        dispose_engines()
        corpus_id = make_toy_corpus()
        first = jobs.enqueue_training(corpus_id, preset="tiny")  # the adaptive budget
        assert worker.run_worker(once=True) == 1
        v1 = jobs.get_run(first).version_id
        assert v1 is not None, jobs.get_run(first).error
        tuned = jobs.enqueue_training(corpus_id, init_version_id=v1, max_steps=20)
        assert worker.run_worker(once=True) == 1
        v2 = jobs.get_run(tuned).version_id
        assert v2 is not None, jobs.get_run(tuned).error
        yield {"home": home, "corpus_id": corpus_id, "v1": v1, "v2": v2}
        dispose_engines()


def test_a_small_corpus_is_learned_by_one_click(trained: dict) -> None:
    pairs = toy_pairs()
    outputs = translation.translate(trained["v1"], [s for s, _ in pairs])
    assert [o.text for o in outputs] == [t for _, t in pairs]
    scores = evaluation.evaluate(trained["v1"], pairs)
    assert scores == {"bleu": 100.0, "chrf": 100.0, "n": len(pairs)}


def test_translation_with_attention_and_beam(trained: dict) -> None:
    source, target = toy_pairs()[0]
    [greedy] = translation.translate(trained["v1"], [source], with_attention=True)
    assert greedy.attention is not None
    assert tuple(greedy.attention.shape) == (len(greedy.out_pieces), len(greedy.src_pieces))
    [beam] = translation.translate(trained["v1"], [source], beam=4)
    assert beam.text == target
    odd = translation.translate(trained["v1"], ["", "😀\x00" * 50, "字" * 10_000])
    assert odd[0].text == "" and len(odd) == 3
    with pytest.raises(WorkbenchError, match="Beam size"):
        translation.translate(trained["v1"], [source], beam=0)


def test_fine_tuned_version_keeps_the_tokenizer(trained: dict) -> None:
    v1, v2 = registry.load_version(trained["v1"]), registry.load_version(trained["v2"])
    assert v1.tokenizers.src.vocab_size == v2.tokenizers.src.vocab_size
    assert v1.tokenizers.tgt.pieces("I drink") == v2.tokenizers.tgt.pieces("I drink")
    assert registry.get_version(trained["v2"]).run_id != registry.get_version(trained["v1"]).run_id


def test_versions_are_listed_renamed_annotated_and_zipped(trained: dict) -> None:
    table = registry.versions_table()
    assert list(table["id"]) == [trained["v2"], trained["v1"]]
    assert {"name", "corpus", "pairs", "parameters", "BLEU", "chrF"} <= set(table.columns)
    registry.rename_version(trained["v1"], "  first   model ")
    registry.set_notes(trained["v1"], "learned the toy corpus")
    info = registry.get_version(trained["v1"])
    assert (info.name, info.notes, info.corpus_name) == (
        "first model",
        "learned the toy corpus",
        "toy",
    )
    with pytest.raises(WorkbenchError, match="empty"):
        registry.rename_version(trained["v1"], "   ")
    names = zipfile.ZipFile(io.BytesIO(registry.version_zip(trained["v1"]))).namelist()
    assert f"version-{trained['v1']}/model.safetensors" in names
    assert f"version-{trained['v1']}/config.json" in names


def test_compare_puts_versions_side_by_side(trained: dict) -> None:
    pairs = toy_pairs()[:5]
    result = evaluation.compare([trained["v1"], trained["v2"]], pairs)
    assert list(result.metrics["version"]) == [trained["v1"], trained["v2"]]
    assert {"bleu", "chrf", "n"} <= set(result.metrics.columns)
    row = result.sentences.iloc[0]
    assert row["source"] == pairs[0][0] and row["reference"] == pairs[0][1]
    assert f"#{trained['v1']}" in result.sentences and f"chrF #{trained['v2']}" in result.sentences
    assert result.sentences["differs"].dtype == bool
    with pytest.raises(WorkbenchError, match="at least two"):
        evaluation.compare([trained["v1"]], pairs)
    with pytest.raises(WorkbenchError, match="test split"):
        evaluation.evaluate(trained["v1"], [])


def test_a_correction_becomes_a_pair(trained: dict) -> None:
    pair_id = translation.save_correction(trained["corpus_id"], "我很好。", "I am fine.")
    page = corpus.search_pairs(trained["corpus_id"], query="I am fine")
    assert pair_id in list(page.rows["id"])
    with pytest.raises(WorkbenchError):
        translation.save_correction(trained["corpus_id"], "我很好。", "I am fine.")  # duplicate


def test_corrupt_and_deleted_versions_give_clear_errors(trained: dict) -> None:
    v2 = trained["v2"]
    weights = registry.artifact_dir(v2) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF  # one flipped byte inside a tensor still parses: only the hash knows
    weights.write_bytes(bytes(data))
    registry._load_cached.cache_clear()
    with pytest.raises(WorkbenchError, match=f"version {v2} cannot be loaded: .*corrupt"):
        registry.load_version(v2)
    folder = registry.artifact_dir(v2)
    registry.delete_version(v2)
    assert not Path(folder).exists()
    with pytest.raises(WorkbenchError, match="does not exist"):
        registry.get_version(v2)
    assert [v.id for v in registry.list_versions()] == [trained["v1"]]


def test_a_model_folder_from_elsewhere_is_imported_as_a_copy(trained: dict, tmp_path: Path) -> None:
    folder = tmp_path / "exported"
    shutil.copytree(registry.artifact_dir(trained["v1"]), folder)
    before = registry.list_versions()
    with pytest.raises(WorkbenchError, match="no corpus"):
        registry.import_version(folder, corpus="no such corpus")
    assert registry.list_versions() == before

    new = registry.import_version(folder, corpus="toy")
    try:
        info = registry.get_version(new)
        assert (info.corpus_name, info.src_lang, info.tgt_lang) == ("toy", "zh", "en")
        assert info.name == f"toy v{new}" and info.run_id is None
        assert info.sha256 == registry.get_version(trained["v1"]).sha256
        assert folder.is_dir()  # the user's folder is left where it was
        source, target = toy_pairs()[0]
        assert translation.translate(new, [source])[0].text == target
    finally:
        registry.delete_version(new)
