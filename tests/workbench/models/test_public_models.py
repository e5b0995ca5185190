"""A public Marian (OPUS-MT) model becomes a version: `register FOLDER_OR_ZIP` on the command
line (or a zip on the Models page), then Translate, the CTranslate2 export and "Continue
from #N" take it like any version. The checkpoint is a tiny one built by the test
(bench/marian_checkpoint.py); bad zips are refused and change nothing."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import ctranslate2
import pytest

from bench.marian_checkpoint import sample_sentences, save_random_marian, toy_pairs
from core_model.artifact import TOKENIZER_DIR, load_model
from core_model.batching import encode_source
from core_model.marian import read_marian
from core_model.training import recipe
from tests.helpers import cli_in_process, module_home, train_version
from workbench import settings
from workbench.corpus import corpora, pairs
from workbench.errors import WorkbenchError
from workbench.models import archives, model_import, registry, translation
from workbench.training import continuation
from workbench.training.continuation import Continuation

CARD = (
    "# opus-mt-zh-en\n\n| testset | BLEU | chr-F |\n|---|---|---|\n"
    "| Tatoeba-test.zho.eng | 36.1 | 0.548 |\n"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf") / "opus-mt-zh-en"
    save_random_marian(folder, train_steps=120)
    (folder / "README.md").write_text(CARD, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def public(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The checkpoint registered from the command line, in a home of its own, with a corpus
    of its languages written in characters its vocabulary knows (so that the tokenizer-fit
    rule offers to continue it)."""
    tokenizers = read_marian(checkpoint).tokenizers
    src, tgt = tokenizers.src.known_characters(), tokenizers.tgt.known_characters()
    covered = [
        (s, t)
        for s, t in toy_pairs(300, 7)
        if set(s.replace(" ", "")) <= src and set(t.replace(" ", "")) <= tgt
    ][:60]
    assert len(covered) == 60
    with module_home(tmp_path_factory.mktemp("public_home")) as home:
        corpus = corpora.create_corpus("curated", "zh", "en")
        pairs.apply_edits(corpus.id, added=[{"source": s, "target": t} for s, t in covered])
        done = cli_in_process("register", str(checkpoint), "--corpus", "curated")
        assert done.returncode == 0, done.stderr
        yield {
            "home": home,
            "corpus_id": corpus.id,
            "version_id": json.loads(done.stdout)["version_id"],
        }


def test_the_command_line_registers_and_translates_a_marian_folder(
    public: dict, checkpoint: Path
) -> None:
    version = registry.get_version(public["version_id"])
    assert (version.src_lang, version.tgt_lang, version.corpus_id) == (
        "zh",
        "en",
        public["corpus_id"],
    )
    assert version.notes == "Model card: Tatoeba-test.zho.eng: BLEU 36.1, chr-F 0.548"
    loaded = registry.load_version(version.id)
    assert loaded.config["pretrained"]["name"] == "opus-mt-zh-en"
    assert version.param_count == loaded.model.num_parameters()
    expected = [r.text for r in translation.translate(version.id, ["我喜欢喝茶。", "猫 很 好"])]
    for engine in ("handwritten", "ctranslate2"):
        done = cli_in_process(
            "translate",
            "--version",
            str(version.id),
            "--engine",
            engine,
            "我喜欢喝茶。",
            "猫 很 好",
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == expected


def test_a_zip_of_the_folder_is_the_same_version(
    public: dict, checkpoint: Path, tmp_path: Path
) -> None:
    nested = tmp_path / "nested.zip"  # the folder inside the zip
    with zipfile.ZipFile(nested, "w") as zf:
        for path in sorted(checkpoint.iterdir()):
            zf.write(path, f"opus-mt-zh-en/{path.name}")
    flat = tmp_path / "opus-mt-zh-en.zip"  # the files at the zip's root: its name names them
    with zipfile.ZipFile(flat, "w") as zf:
        for path in sorted(checkpoint.iterdir()):
            if path.name != "tokenizer_config.json":
                zf.write(path, path.name)
    first = registry.get_version(public["version_id"])
    for path in (nested, flat):
        version = registry.get_version(model_import.import_version(path, name=path.stem))
        assert version.sha256 == first.sha256  # the same model, weights and vocabulary
        assert (version.src_lang, version.tgt_lang) == ("zh", "en")
        registry.delete_version(version.id)
    upload = model_import.import_zip_upload(flat.read_bytes(), "opus-mt-zh-en.zip", marian=True)
    assert registry.get_version(upload).sha256 == first.sha256
    registry.delete_version(upload)


def _zip(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16  # a symbolic link
            zf.writestr(info, "/etc/passwd")
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("dotdot", r"has a member outside its folder \(../evil/config.json\)"),
        ("absolute", r"has a member outside its folder \(/tmp/config.json\)"),
        ("link", r"has a link or special file \(model/source.spm\)"),
        ("too_big", r"unpacks to more than 0 MiB"),
        ("no_model", r"holds no model: config.json should be at its root"),
        ("not_zip", r"model.zip is neither a model folder nor a zip"),
        ("ours_as_marian", r"holds no Marian model \(config.json: model_type None\)"),
        ("token_for_ours", r"is not a Marian model: a target-language token is only for those"),
        ("missing_weights", r"cannot import .*: .* has no model.safetensors or pytorch_model.bin"),
    ],
)
def test_bad_input_is_one_error_and_changes_nothing(
    public: dict,
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    message: str,
) -> None:
    before = [v.id for v in registry.list_versions()]
    config = (checkpoint / "config.json").read_bytes()
    options: dict = {}
    if case == "dotdot":
        path = _zip(tmp_path / "a.zip", {"../evil/config.json": config})
    elif case == "absolute":
        path = _zip(tmp_path / "a.zip", {"/tmp/config.json": config})
    elif case == "link":
        path = _zip(tmp_path / "a.zip", {"model/config.json": config}, link="model/source.spm")
    elif case == "too_big":
        monkeypatch.setattr(archives, "MAX_ARTIFACT_BYTES", 100)
        path = _zip(tmp_path / "a.zip", {"model/config.json": config})
    elif case == "no_model":
        path = _zip(tmp_path / "a.zip", {"a/config.json": config, "b/vocab.json": b"{}"})
    elif case == "not_zip":
        path = tmp_path / "model.zip"
        path.write_bytes(b"not a zip at all")
        options["marian"] = True
    elif case in ("ours_as_marian", "token_for_ours"):
        path = registry.artifact_dir(public["version_id"])  # a folder of ours
        options = {"marian": True} if case == "ours_as_marian" else {"target_token": ">>fra<<"}
    else:
        path = tmp_path / "opus-mt-zh-en"
        shutil.copytree(checkpoint, path)
        (path / "model.safetensors").unlink()
    with pytest.raises(WorkbenchError, match=message) as caught:
        model_import.import_version(path, src_lang="zh", tgt_lang="en", **options)
    assert "\n" not in str(caught.value)
    assert [v.id for v in registry.list_versions()] == before
    assert not settings.import_staging_dirs()
    if case == "dotdot":
        assert not (settings.runs_dir() / "evil").exists()


def test_the_ctranslate2_export_decodes_as_ctranslate2s_own_marian_converter(
    public: dict, checkpoint: Path, tmp_path: Path
) -> None:
    """Our export (from our weights) against CTranslate2's TransformersConverter (from the
    checkpoint through transformers): the same outputs and scores, greedy and beam 4."""
    from ctranslate2.converters import TransformersConverter

    from workbench.models.ctranslate2_export import export_version

    ours = ctranslate2.Translator(
        str(export_version(public["version_id"], tmp_path / "ours", "float32")), device="cpu"
    )
    converted = TransformersConverter(str(checkpoint)).convert(str(tmp_path / "theirs"))
    theirs = ctranslate2.Translator(converted, device="cpu")
    tokenizers = load_model(registry.artifact_dir(public["version_id"])).tokenizers
    ids = [encode_source(tokenizers, s, 512) for s in sample_sentences(200)]
    # our export appends </s> itself (add_source_eos); theirs takes the tokenizer's pieces
    mine = [tokenizers.src.ids_to_pieces(i[:-1]) for i in ids]
    given = [tokenizers.src.ids_to_pieces(i) for i in ids]
    for beam in (1, 4):
        options = {"beam_size": beam, "max_decoding_length": 12, "return_scores": True}
        a = ours.translate_batch(mine, **options)
        b = theirs.translate_batch(given, **options)
        assert [x.hypotheses[0] for x in a] == [y.hypotheses[0] for y in b]
        delta = max(abs(x.scores[0] - y.scores[0]) for x, y in zip(a, b, strict=True))
        assert delta < 1e-4, delta
    assert len({len(x.hypotheses[0]) for x in a}) >= 3  # outputs of varied lengths


def test_the_train_pages_plan_of_a_public_model_is_measured_on_it(public: dict) -> None:
    """Issue 37: the note said "about 0× the arithmetic … 328,370 tokens/s … 3195.0 passes"
    (the first guess for a small public model, and a ratio rounded to nothing); the run
    trained ~17k tokens/s. The plan is now timed on the model itself, on the corpus' sentence
    length: its parameters are the version's, passes = tokens / the corpus' tokens, and the
    note says the measured speed and a cost ratio above 0 against the model a new run of the
    corpus would train."""
    import re

    corpus_id, imported = public["corpus_id"], public["version_id"]
    version = registry.get_version(imported)
    plan = continuation.continued_plan(Continuation(imported, corpus_id, minutes=2))
    assert plan is not None and plan.calibration is not None
    assert plan.calibration.parameters == version.param_count
    speed = plan.calibration.tokens_per_s
    bought = plan.calibration.tokens_in(120)  # the steady speed, less the shapes' first steps
    assert plan.budget_tokens == pytest.approx(bought * recipe.RUN_SHARE_OF_CALIBRATION)
    facts = recipe.CorpusFacts.of(list(continuation._training_pairs(corpus_id)), None)
    assert plan.corpus_tokens == facts.tokens > 0
    assert plan.passes == pytest.approx(plan.budget_tokens / facts.tokens)
    note = continuation.fine_tune_note(Continuation(imported, corpus_id, minutes=2))
    assert f"it trains at {speed:,.0f} tokens/s, measured here on this model" in note
    assert f"{plan.budget_tokens:,.0f} tokens, {plan.passes:.1f} passes" in note
    times = float(re.search(r"about ([0-9.e+-]+)× the arithmetic of the “tiny” model", note)[1])
    assert times > 0
    # on a GPU the page does not time (the run plans at the first guess there too)
    on_gpu = Continuation(imported, corpus_id, device="cuda")
    assert "a first guess" in continuation.fine_tune_note(on_gpu)


def test_continue_from_the_imported_version_fine_tunes_it_gently(public: dict) -> None:
    """The tokenizer-fit rule offers the imported version (its vocabulary covers the corpus),
    the run takes the recipe's branch for pretrained models (low peak rate, the checkpoint's
    dropout, one pass an epoch), keeps the vocabulary and records where it came from."""
    corpus_id, imported = public["corpus_id"], public["version_id"]
    start = continuation.default_start(corpus_id)
    assert start.version_id == imported, start.reason
    note = continuation.fine_tune_note(Continuation(imported, corpus_id, epochs=1))
    assert note is not None and "is a pretrained model of" in note
    assert continuation.fine_tune_note(Continuation(imported, corpus_id, minutes=5)) != note
    _, tuned = train_version(corpus_id, init_version_id=imported, epochs=1, precision="fp32")
    version = registry.get_version(tuned)
    peak = version.metrics["peak_lr"]
    assert (peak, version.metrics["lr_schedule"]) == (recipe.PRETRAINED_PEAK_LR, "linear")
    warmup = version.metrics["warmup_steps"]
    assert version.metrics["epochs"] == 1 and warmup <= recipe.PRETRAINED_WARMUP_STEPS
    assert version.parent_version_id == imported
    loaded = registry.load_version(tuned)
    assert loaded.config["pretrained"]["name"] == "opus-mt-zh-en"  # carried on
    assert loaded.config["training"]["dropout"] == 0.1  # the checkpoint's
    imported_files, tuned_files = (
        {p.relative_to(f): p.read_bytes() for p in sorted(f.rglob("*")) if p.is_file()}
        for f in (registry.artifact_dir(v) / TOKENIZER_DIR for v in (imported, tuned))
    )
    assert tuned_files == imported_files  # Marian's vocabulary is kept, never retrained
    # the note is for pretrained models (and their descendants) only
    assert continuation.fine_tune_note(Continuation(tuned, corpus_id)) is not None
    _, scratch = train_version(corpus_id, preset="tiny", max_steps=3)
    assert continuation.fine_tune_note(Continuation(scratch, corpus_id)) is None
