"""Model registry and services on a version trained for real (tiny model, toy corpus)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import (
    IMPORT_LOG,
    cli,
    cli_in_process,
    imports_of,
    module_home,
    toy_pairs,
    train_version,
    trained_home,
    training,
)
from workbench import settings
from workbench.corpus import pairs
from workbench.errors import WorkbenchError
from workbench.evaluation import comparison_report, evaluation, significance
from workbench.models import model_import, registry, translation


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One home with two versions: v1 trained from scratch, v2 fine-tuned from v1."""
    built = trained_home(
        tmp_path_factory,
        "toy",
        training(preset="tiny"),  # the adaptive budget
        training(init=0, max_steps=20),
    )
    with module_home(built.home) as home:
        v1, v2 = built.version_ids
        yield {"home": home, "corpus_id": built.corpus_id, "v1": v1, "v2": v2}


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


@pytest.mark.parametrize("command", ["versions", "runs"])
def test_listing_versions_and_runs_does_not_import_torch(trained: dict, command: str) -> None:
    """`python -m workbench versions` and `runs` read the database and the model folders'
    configs only: without torch they answer in 2.0-2.2 s on a 2-core AVX2 laptop instead of
    4.8-5.9 s (torch's import is ~3.4 s there). Python's own import log says what the process
    imported."""
    done, imported = imports_of(cli(command, env=IMPORT_LOG))
    assert done.returncode == 0, done.stderr[-2000:]
    # the first version (by its name now: another test renames it), or why its run stopped
    says = registry.get_version(trained["v1"]).name if command == "versions" else "learned every"
    assert says in done.stdout, done.stdout
    assert "core_model.artifact" in imported  # the log is read: the registry's reader is there
    assert "torch" not in imported


def test_compare_puts_versions_side_by_side(trained: dict) -> None:
    pairs = toy_pairs()[:5]
    result = evaluation.compare([trained["v1"], trained["v2"]], pairs)
    assert list(result.metrics["version"]) == [trained["v1"], trained["v2"]]
    assert {"bleu", "chrf", "n"} <= set(result.metrics.columns)
    row = result.sentences.iloc[0]
    assert row["source"] == pairs[0][0] and row["reference"] == pairs[0][1]
    assert f"#{trained['v1']}" in result.sentences and f"chrF #{trained['v2']}" in result.sentences
    assert result.sentences["differs"].dtype == bool
    delta = result.sentences[f"Δ chrF #{trained['v2']}"]
    base, other = (
        result.sentences[f"chrF #{trained['v1']}"],
        result.sentences[f"chrF #{trained['v2']}"],
    )
    assert list(delta) == [round(o - b, 1) for o, b in zip(other, base, strict=True)]
    first, second = result.metrics.to_dict(orient="records")
    for row in (first, second):
        assert 0 <= row["bleu_low"] <= row["bleu"] <= row["bleu_high"] <= 100
        assert 0 <= row["chrf_low"] <= row["chrf"] <= row["chrf_high"] <= 100
    # 5 test pairs: scores and intervals, but no p-value and no verdict, and it says why
    assert result.withheld and "only 5 test pairs" in result.withheld
    assert result.verdicts == []
    assert first["p_value"] is None and second["p_value"] is None
    assert second["chrf_p_value"] is None
    enough = evaluation.compare([trained["v1"], trained["v2"]], _enough(toy_pairs()))
    first, second = enough.metrics.to_dict(orient="records")
    assert enough.withheld is None
    assert first["p_value"] is None or first["p_value"] != first["p_value"]  # the baseline
    assert 0 < second["p_value"] <= 1 and 0 < second["chrf_p_value"] <= 1
    [words] = enough.verdicts
    assert f"#{trained['v2']}" in words and f"#{trained['v1']}" in words and "p = " in words
    with pytest.raises(WorkbenchError, match="at least two"):
        evaluation.compare([trained["v1"]], pairs)
    with pytest.raises(WorkbenchError, match="at least two"):
        evaluation.compare([trained["v1"], trained["v1"]], pairs)
    with pytest.raises(WorkbenchError, match="test split"):
        evaluation.evaluate(trained["v1"], [])


def _enough(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs repeated up to the smallest test that gets p-values and verdicts."""
    times = -(-significance.MIN_VERDICT_PAIRS // len(pairs))
    return (pairs * times)[: max(len(pairs), significance.MIN_VERDICT_PAIRS)]


def test_compare_command_prints_intervals_and_p_values_that_sacrebleu_agrees_with(
    trained: dict, tmp_path: Path
) -> None:
    pairs = _enough(toy_pairs())
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    ref.write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    v1, v2 = trained["v1"], trained["v2"]
    done = cli_in_process(
        "compare", "--versions", str(v2), str(v1), "--src", str(src), "--ref", str(ref)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert [v["version"] for v in report["versions"]] == [v2, v1]
    assert report["resamples"] == 1000 and report["seed"] == "12345"
    assert report["verdict_withheld"] is None and report["min_verdict_pairs"] == 50
    assert report["interval"] == "bootstrap percentile interval"
    baseline, other = report["versions"]
    assert baseline["p_value"] is None
    for version in report["versions"]:
        assert 0 <= version["bleu_ci95"][0] <= version["bleu"] <= version["bleu_ci95"][1] <= 100
        assert 0 <= version["chrf_ci95"][0] <= version["chrf"] <= version["chrf_ci95"][1] <= 100
    # sacreBLEU's own CLI on the same outputs gives the same p-value.
    outputs = {}
    for v in (v2, v1):
        outputs[v] = tmp_path / f"out{v}.txt"
        texts = [r.text for r in translation.translate(v, [s for s, _ in pairs])]
        outputs[v].write_text("\n".join(texts) + "\n", encoding="utf-8")
    exe = Path(sys.executable).parent / "sacrebleu"
    table = subprocess.run(
        [str(exe), str(ref), "-i", str(outputs[v2]), str(outputs[v1]), "--paired-bs",
         "-m", "bleu", "chrf", "-f", "text"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cli_p = [float(p) for p in re.findall(r"p = ([\d.]+)", table)]
    assert cli_p == pytest.approx([other["p_value"], other["chrf_p_value"]], abs=1e-4)
    assert done.stdout.splitlines()[0].startswith(("no significant", f"#{v1} is"))

    bad = cli_in_process("compare", "--versions", str(v1), "--src", str(src), "--ref", str(ref))
    assert bad.returncode == 2 and "at least two" in bad.stderr


def test_compare_command_gives_no_verdict_on_too_few_pairs(trained: dict, tmp_path: Path) -> None:
    """4 test pairs: the scores with intervals inside [0, 100], no p-value, no verdict, and
    the JSON (and the line above it) says why."""
    pairs = toy_pairs()[:4]
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    ref.write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    v1, v2 = trained["v1"], trained["v2"]
    done = cli_in_process(
        "compare", "--versions", str(v2), str(v1), "--src", str(src), "--ref", str(ref)
    )
    assert done.returncode == 0, done.stderr
    *words, last = done.stdout.splitlines()
    report = json.loads(last)
    why = report["verdict_withheld"]
    assert why.startswith("only 4 test pairs: below 50") and "no p-value or verdict" in why
    assert words == [why] and report["verdicts"] == []
    assert " is better than " not in done.stdout and " is worse than " not in done.stdout
    for version in report["versions"]:
        assert version["p_value"] is None and version["chrf_p_value"] is None
        assert 0 <= version["bleu_ci95"][0] <= version["bleu_ci95"][1] <= 100


def test_a_comparison_downloads_as_csv_and_self_contained_html(trained: dict) -> None:
    pairs = [*toy_pairs()[:3], ("<script>alert(1)</script>", "a & b")]
    result = evaluation.compare([trained["v1"], trained["v2"]], pairs)
    table = pd.read_csv(io.BytesIO(comparison_report.comparison_csv(result)))
    assert list(table["source"]) == [s for s, _ in pairs]
    assert f"Δ chrF #{trained['v2']}" in table.columns
    page = comparison_report.comparison_html(result, "v1 vs v2 <b>", "test · 4 pairs")
    assert page.startswith("<!doctype html>") and "</html>" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)" in page
    assert "v1 vs v2 &lt;b&gt;" in page and "a &amp; b" in page
    assert not re.search(r"(src|href)=|@import|url\(", page)  # nothing fetched from anywhere
    assert result.withheld and result.withheld in page  # 4 pairs: no verdict, and why
    assert "bootstrap percentile interval" in page


def test_a_correction_becomes_a_pair(trained: dict) -> None:
    pair_id = translation.save_correction(trained["corpus_id"], "我很好。", "I am fine.")
    page = pairs.search_pairs(trained["corpus_id"], query="I am fine")
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
        model_import.import_version(folder, corpus="no such corpus")
    assert registry.list_versions() == before

    new = model_import.import_version(folder, corpus="toy")
    try:
        info = registry.get_version(new)
        assert (info.corpus_name, info.src_lang, info.tgt_lang) == ("toy", "zh", "en")
        assert info.name == f"toy v{new}" and info.run_id is None
        assert info.origin is not None
        assert (info.origin["file"], info.origin["format"]) == ("exported", "workbench")
        assert info.origin["model_type"] == "transformer" and info.origin["licence"] is None
        assert info.sha256 == registry.get_version(trained["v1"]).sha256
        assert folder.is_dir()  # the user's folder is left where it was
        source, target = toy_pairs()[0]
        assert translation.translate(new, [source])[0].text == target
    finally:
        registry.delete_version(new)


# ------------------------------------------------- folders from elsewhere: links, checksums


@pytest.fixture
def outside_folder(wb_home: Path, tmp_path: Path) -> Path:
    """A small model folder made outside the workbench (untrained: only its files matter)."""
    import torch

    from core_model import ModelConfig, Transformer
    from core_model.artifact import save_model
    from core_model.tokenizer import train_tokenizers

    pairs = toy_pairs()
    tok = train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], vocab_size=120)
    cfg = ModelConfig.from_preset(
        "tiny", src_vocab_size=tok.src.vocab_size, tgt_vocab_size=tok.tgt.vocab_size
    )
    torch.manual_seed(0)
    folder = tmp_path / "outside"
    extra = {"corpus": {"src_lang": "zh", "tgt_lang": "en"}, "metrics": {"bleu": 1.0}}
    save_model(folder, Transformer(cfg), tok, extra)
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_register_copies_only_the_model_files(outside_folder: Path, tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:secret-hash")
    big_dir = tmp_path / "system"
    for i in range(5):
        (big_dir / f"d{i}").mkdir(parents=True)
        (big_dir / f"d{i}" / "f").write_text("x")
    model_files = _files(outside_folder)
    (outside_folder / "notes.txt").symlink_to(secret)
    (outside_folder / "system").symlink_to(big_dir, target_is_directory=True)
    (outside_folder / "README.md").write_text("not part of the model")
    version = model_import.import_version(outside_folder, name="from outside")
    stored = registry.artifact_dir(version)
    assert _files(stored) == model_files
    assert not any(p.is_symlink() for p in stored.rglob("*"))
    names = zipfile.ZipFile(io.BytesIO(registry.version_zip(version))).namelist()
    assert sorted(names) == [f"version-{version}/{f}" for f in model_files]
    # A file that found its way into a version folder is never zipped either.
    (stored / "leak.txt").symlink_to(secret)
    names = zipfile.ZipFile(io.BytesIO(registry.version_zip(version))).namelist()
    assert f"version-{version}/leak.txt" not in names
    assert registry.get_version(version).name == "from outside"


@pytest.mark.parametrize("damage", ["weights_link", "tokenizer_link", "tokenizer_dir_link", "fifo"])
@pytest.mark.timeout(60)
def test_register_refuses_links_and_special_files_among_model_files(
    outside_folder: Path, tmp_path: Path, damage: str
) -> None:
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    if damage == "weights_link":
        (outside_folder / "model.safetensors").rename(moved / "w")
        (outside_folder / "model.safetensors").symlink_to(moved / "w")
    elif damage == "tokenizer_link":
        (outside_folder / "tokenizer" / "src" / "spm.model").rename(moved / "spm")
        (outside_folder / "tokenizer" / "src" / "spm.model").symlink_to(moved / "spm")
    elif damage == "tokenizer_dir_link":
        (outside_folder / "tokenizer").rename(moved / "tok")
        (outside_folder / "tokenizer").symlink_to(moved / "tok", target_is_directory=True)
    else:
        (outside_folder / "tokenizer" / "tgt" / "spm.model").unlink()
        os.mkfifo(outside_folder / "tokenizer" / "tgt" / "spm.model")  # reading would block
    with pytest.raises(WorkbenchError, match=r"link|not a regular file"):
        model_import.import_version(outside_folder)
    assert registry.list_versions() == []
    assert not list((settings.home() / "runs").glob("import-*"))


def test_register_bounds_the_size_and_checks_names_languages_metrics(
    outside_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from core_model import artifact

    with pytest.raises(WorkbenchError, match="control or invisible"):
        model_import.import_version(outside_folder, name="v\x1b[2J")
    with pytest.raises(WorkbenchError, match="language"):
        model_import.import_version(outside_folder, src_lang="zh\x1b", tgt_lang="en")
    config = json.loads((outside_folder / "config.json").read_text())
    config["metrics"] = {"parameters": "many", "train_pairs": 1e300, "bleu": 2.5, "x\x00": 1}
    (outside_folder / "config.json").write_text(json.dumps(config))
    version = model_import.import_version(outside_folder)
    info = registry.get_version(version)
    assert info.param_count > 1000 and info.train_pair_count == 0  # counted, not trusted
    assert info.metrics["bleu"] == 2.5 and "x" in info.metrics
    monkeypatch.setattr(artifact, "MAX_ARTIFACT_BYTES", 10_000)
    with pytest.raises(WorkbenchError, match="larger than"):
        model_import.import_version(outside_folder)
    assert [v.id for v in registry.list_versions()] == [version]


def test_the_recorded_checksum_covers_the_model_config(outside_folder: Path) -> None:
    """A hand-edited config.json of a stored version is caught like a flipped weight byte;
    versions recorded with the weights-only sha256 of older releases still load."""
    import json

    from core_model.artifact import sha256_file
    from db.tables import ModelVersion
    from workbench.storage import session_scope

    version = model_import.import_version(outside_folder)
    folder = registry.artifact_dir(version)
    registry.load_version(version)
    config_path = folder / "config.json"
    original = config_path.read_text()
    edited = json.loads(original)
    edited["model"]["dropout"] = 0.3  # loads fine, computes differently
    config_path.write_text(json.dumps(edited))
    registry._load_cached.cache_clear()
    with pytest.raises(WorkbenchError, match="corrupt or was edited"):
        registry.load_version(version)
    config_path.write_text(original)
    edited = json.loads(original)
    edited["metrics"] = {"bleu": 99.0}  # descriptive keys are not part of the model
    config_path.write_text(json.dumps(edited))
    registry._load_cached.cache_clear()
    registry.load_version(version)
    with session_scope() as s:  # a version registered by an older release
        s.get(ModelVersion, version).sha256 = sha256_file(folder / "model.safetensors")
    registry._load_cached.cache_clear()
    registry.load_version(version)
    with pytest.raises(WorkbenchError, match="does not exist"):
        registry.get_version(2**63)


def test_a_run_with_few_validation_pairs_records_its_final_scores(wb_home: Path) -> None:
    """The demo corpus has 3 validation pairs (too few to choose weights by): a run that ends
    on averaged weights records their validation loss, BLEU and chrF, and the note says what
    they were measured on. They were None (shown as "None" on the Models page)."""
    from workbench.corpus import demo

    info = demo.ensure_demo_corpus()
    _, version_id = train_version(info.id, preset="tiny", max_steps=40, average_last=3)
    metrics = registry.get_version(version_id).metrics
    assert metrics["selected"] == "average_last_3"
    assert all(isinstance(metrics[k], float) for k in ("valid_loss", "bleu", "chrf")), metrics
    assert evaluation.training_scores_note(version_id) == "validation · 3 pairs · greedy"
    table = registry.versions_table()
    assert table.loc[0, "valid loss"] == metrics["valid_loss"]
