"""Model folders: save/load round-trip, no pickle, one-line ArtifactError for every kind of damage;
and the text-level translator built on a loaded folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core_model.artifact import ArtifactError, LoadedModel, load_model, save_model
from core_model.tokenizer import TokenizerPair, train_tokenizers
from core_model.transformer import Transformer
from core_model.transformer.config import ModelConfig
from core_model.translator import translate
from tests.helpers import toy_pairs


def build(joint: bool) -> tuple[Transformer, TokenizerPair]:
    pairs = toy_pairs()
    tok = train_tokenizers(
        [s for s, _ in pairs], [t for _, t in pairs], vocab_size=200, joint=joint
    )
    cfg = ModelConfig.from_preset(
        "tiny",
        src_vocab_size=tok.src.vocab_size,
        tgt_vocab_size=tok.tgt.vocab_size,
        shared_vocab=tok.shared,
    )
    torch.manual_seed(0)
    return Transformer(cfg).eval(), tok


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tok = build(joint=False)
    d = tmp_path_factory.mktemp("model")
    save_model(d, model, tok, {"training": {"preset": "tiny"}, "metrics": {"bleu": 1.5}})
    return d


def copy_of(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("joint", [False, True])
def test_roundtrip_same_outputs(tmp_path: Path, joint: bool) -> None:
    model, tok = build(joint)
    save_model(tmp_path, model, tok, {"metrics": {"bleu": 12.0}})
    loaded = load_model(tmp_path)
    assert isinstance(loaded, LoadedModel) and not loaded.model.training
    assert loaded.config["metrics"] == {"bleu": 12.0}
    assert loaded.config["model"] == model.cfg.to_dict()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 7, 0]])
    with torch.no_grad():
        assert torch.equal(model(src, tgt), loaded.model(src, tgt))
    if joint:  # tied matrices are stored once and tied again after loading
        m = loaded.model
        assert m.generator.proj.weight.data_ptr() == m.src_embed.lookup.weight.data_ptr()
    text = toy_pairs()[0][0]
    assert loaded.tokenizers.src.encode(text) == tok.src.encode(text)


def test_folder_layout_has_no_pickle(saved: Path) -> None:
    names = sorted(p.name for p in saved.iterdir())
    assert names == ["config.json", "model.safetensors", "tokenizer"]
    assert not [p for p in saved.rglob("*") if p.suffix in {".pt", ".pth", ".pkl", ".bin"}]
    header_len = int.from_bytes((saved / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((saved / "model.safetensors").read_bytes()[8 : 8 + header_len])
    assert "encoder.layers.0.self_attn.in_proj.weight" in json.dumps(list(header))
    cfg = json.loads((saved / "config.json").read_text())
    assert cfg["format_version"] == 1 and len(cfg["weights_sha256"]) == 64


def _damage(kind: str, d: Path) -> None:
    weights = d / "model.safetensors"
    if kind == "missing_folder":
        import shutil

        shutil.rmtree(d)
    elif kind == "missing_config":
        (d / "config.json").unlink()
    elif kind == "bad_json":
        (d / "config.json").write_text("{not json")
    elif kind == "no_model_section":
        (d / "config.json").write_text("[1, 2]")
    elif kind == "bad_model_config":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model"]["n_heads"] = 7  # d_model 64 not divisible
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "unknown_model_key":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model"]["flux_capacitor"] = True
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "missing_weights":
        weights.unlink()
    elif kind == "truncated_weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif kind == "garbage_weights":
        weights.write_bytes(b"\x00" * 64)
    elif kind in ("shape_mismatch", "shape_mismatch_unverified"):
        cfg = json.loads((d / "config.json").read_text())
        cfg["model"]["d_ff"] = 128
        cfg.pop("weights_sha256")
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "layer_mismatch":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model"]["n_encoder_layers"] = 3
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "vocab_mismatch":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model"]["src_vocab_size"] += 1
        (d / "config.json").write_text(json.dumps(cfg))
    elif kind == "flipped_byte":
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif kind == "missing_tokenizer":
        import shutil

        shutil.rmtree(d / "tokenizer" / "tgt")
    elif kind == "corrupt_tokenizer":
        (d / "tokenizer" / "src" / "spm.model").write_bytes(b"garbage")


DAMAGES = [
    "missing_folder", "missing_config", "bad_json", "no_model_section", "bad_model_config",
    "unknown_model_key", "missing_weights", "truncated_weights", "garbage_weights",
    "shape_mismatch", "layer_mismatch", "vocab_mismatch", "flipped_byte", "missing_tokenizer",
    "corrupt_tokenizer",
]  # fmt: skip


@pytest.mark.parametrize("kind", DAMAGES)
def test_damaged_folder_raises_one_line_artifact_error(saved: Path, tmp_path: Path, kind: str):
    d = copy_of(saved, tmp_path / "m")
    _damage(kind, d)
    with pytest.raises(ArtifactError) as info:
        load_model(d)
    message = str(info.value)
    assert message and "\n" not in message


def test_shape_mismatch_detected_without_checksum(saved: Path, tmp_path: Path) -> None:
    d = copy_of(saved, tmp_path / "m")
    _damage("shape_mismatch", d)
    with pytest.raises(ArtifactError, match="shape"):
        load_model(d, verify=False)


def test_reserved_keys_rejected(tmp_path: Path) -> None:
    model, tok = build(False)
    with pytest.raises(ValueError):
        save_model(tmp_path, model, tok, {"model": {}})


# -- translator ---------------------------------------------------------------------------------


def test_translate_order_batching_and_empty_inputs(saved: Path) -> None:
    loaded = load_model(saved)
    texts = [*[s for s, _ in toy_pairs()][:6], "", "   ", "🙂" * 50]
    short = {"max_len_a": 0.5, "max_len_b": 4}  # a random model never says EOS: keep it short
    batched = translate(loaded, texts, **short)
    assert len(batched) == len(texts)
    assert batched[6].text == "" and batched[7].text == ""
    one_by_one = [translate(loaded, [t], **short)[0] for t in texts]
    assert [r.text for r in batched] == [r.text for r in one_by_one]
    beams = translate(loaded, texts, beam=3, **short)
    assert len(beams) == len(texts) and all(isinstance(r.text, str) for r in beams)


def test_translate_with_attention_shapes(saved: Path) -> None:
    loaded = load_model(saved)
    for beam in (1, 2):
        (res,) = translate(loaded, ["我每天早上喝一杯咖啡。"], beam=beam, with_attention=True)
        assert res.attention is not None
        assert tuple(res.attention.shape) == (len(res.out_pieces), len(res.src_pieces))
        assert res.src_pieces[-1] == "</s>"
        assert torch.allclose(res.attention.sum(-1), torch.ones(len(res.out_pieces)), atol=1e-4)
    (plain,) = translate(loaded, ["我每天早上喝一杯咖啡。"])
    assert plain.attention is None


def test_translate_very_long_line(saved: Path) -> None:
    loaded = load_model(saved)
    (res,) = translate(loaded, ["我" * 10_000], max_len_a=0.0, max_len_b=5)
    assert isinstance(res.text, str)


# ------------------------------------------------------------ hand-edited config values

GOOD = dict(src_vocab_size=50, tgt_vocab_size=60, d_model=32, n_heads=4, d_ff=64)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"n_heads": 0}, "n_heads must be between"),
        ({"max_len": 100_000_000}, "max_len must be between"),
        ({"d_model": -8}, "d_model must be between"),
        ({"src_vocab_size": 2}, "src_vocab_size must be between"),
        ({"tgt_vocab_size": 10**12}, "tgt_vocab_size must be between"),
        ({"n_encoder_layers": 0}, "n_encoder_layers must be between"),
        ({"n_decoder_layers": 100_000}, "n_decoder_layers must be between"),
        ({"d_ff": 2.5}, "d_ff must be an integer"),
        ({"d_model": True}, "d_model must be an integer"),
        ({"n_heads": "4"}, "n_heads must be an integer"),
        ({"dropout": 1.0}, "dropout must be at least 0 and below 1"),
        ({"dropout": float("nan")}, "dropout must be at least 0 and below 1"),
        ({"dropout": "0.1"}, "dropout must be a number"),
        ({"norm_first": "yes"}, "norm_first must be true or false"),
        ({"shared_vocab": 1}, "shared_vocab must be true or false"),
        ({"eos_id": 0}, "special token ids must differ"),
        ({"unk_id": 55}, "unk_id .* must be below the vocabulary size"),
        ({"d_model": 30}, "divisible"),
    ],
)
def test_model_config_values_are_bounded(change: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        ModelConfig(**{**GOOD, **change})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "edit",
    [
        {"n_heads": 0},  # used to be ZeroDivisionError ("internal error")
        {"max_len": 100_000_000},  # used to allocate a 25.6 GB positional table
        {"dropout": 2},
        {"d_ff": "big"},
        {"norm_first": None},
    ],
)
def test_hand_edited_config_values_give_one_line_errors(
    saved: Path, tmp_path: Path, edit: dict
) -> None:
    d = copy_of(saved, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model"].update(edit)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="invalid model config") as info:
        load_model(d)
    assert "\n" not in str(info.value)


def test_weights_are_checked_against_the_config_before_allocating(
    saved: Path, tmp_path: Path
) -> None:
    """A config far bigger than its weights (here ~350 GB of parameters) is refused from the
    safetensors header, before the model is built."""
    import resource

    d = copy_of(saved, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model"].update(d_model=8192, n_heads=8, d_ff=65_536, n_encoder_layers=64)
    (d / "config.json").write_text(json.dumps(cfg))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ArtifactError, match="does not match the model config"):
        load_model(d, verify=False)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB


def test_model_files_digest_and_copy(saved: Path, tmp_path: Path) -> None:
    from core_model.artifact import artifact_digest, copy_model, model_files

    files = model_files(saved)
    assert files == sorted(files)
    assert {"config.json", "model.safetensors", "tokenizer/tokenizer.json"} <= set(files)
    assert all(
        f in ("config.json", "model.safetensors") or f.startswith("tokenizer/") for f in files
    )
    copy_model(saved, tmp_path / "copy")
    assert artifact_digest(tmp_path / "copy") == artifact_digest(saved)
    cfg = json.loads((tmp_path / "copy" / "config.json").read_text())
    cfg["metrics"] = {"bleu": 99}  # descriptive keys are outside the digest
    (tmp_path / "copy" / "config.json").write_text(json.dumps(cfg, indent=4))
    assert artifact_digest(tmp_path / "copy") == artifact_digest(saved)
    cfg["model"]["dropout"] = 0.2
    (tmp_path / "copy" / "config.json").write_text(json.dumps(cfg))
    assert artifact_digest(tmp_path / "copy") != artifact_digest(saved)
