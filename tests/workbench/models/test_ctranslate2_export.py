"""A second, independent check that our Transformer is the paper's: a trained version exported
to CTranslate2 (built from our weights alone) decodes what our own decoder decodes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from core_model.artifact import load_model, save_model
from core_model.tokenizer import TokenizerPair, WhitespaceTokenizer
from core_model.training import TrainConfig, train
from core_model.transformer import ModelConfig, Transformer
from core_model.translator import cross_attention, translate_ids
from tests.helpers import ROOT
from workbench.errors import WorkbenchError
from workbench.models.ctranslate2_export import export_ctranslate2
from workbench.models.ctranslate2_translator import load_export
from workbench.models.ctranslate2_translator import translate as ct2_translate
from workbench.models.engines import QUANTIZATIONS

DEMO = ROOT / "workbench" / "corpus" / "demo_zh_en.tsv"


def _pairs() -> list[tuple[str, str]]:
    lines = DEMO.read_text(encoding="utf-8").splitlines()[1:]
    return [(cols[0], cols[1]) for cols in (line.split("\t") for line in lines)]


def _sentences() -> list[str]:
    """The sources the model learnt, and as many it never saw (halves of two glued): there
    the model is unsure, outputs are long or hit the length bound, and beams disagree."""
    sources = [s for s, _ in _pairs()]
    rng = random.Random(0)
    mixed = [
        a[: len(a) // 2] + b[len(b) // 2 :]
        for a, b in zip(sources, rng.sample(sources, len(sources)), strict=True)
    ]
    return [*sources, *mixed, "", "   "]  # empty inputs translate to empty outputs


@pytest.fixture(scope="module", params=["pre-norm", "post-norm, shared vocabulary"])
def version(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained model folder: the 'tiny' preset (pre-norm, separate vocabularies), or
    the paper's post-norm with one joint vocabulary tied to the generator."""
    post = request.param.startswith("post")
    out = tmp_path_factory.mktemp("version") / "model"
    cfg = TrainConfig(
        preset="tiny",
        device="cpu",
        max_steps=300,
        model_overrides={"norm_first": not post},
        joint_vocab=post,
    )
    train(_pairs(), None, cfg, out_dir=out)
    assert load_model(out).model.cfg.shared_vocab == post
    return out


def _agreement(ours: list, theirs: list) -> float:
    return sum(a.out_pieces == b.out_pieces for a, b in zip(ours, theirs, strict=True)) / len(ours)


def test_ctranslate2_decodes_what_our_decoder_decodes(version: Path, tmp_path: Path) -> None:
    export = export_ctranslate2(version, tmp_path / "ct2", "float32")
    ct2 = load_export(export, threads=1)
    loaded = load_model(version)
    texts = _sentences()

    ours = translate_ids(loaded.model, loaded.tokenizers, texts)  # cached greedy
    theirs = ct2_translate(ct2, texts)
    assert [r.out_pieces for r in theirs] == [r.out_pieces for r in ours]
    assert [r.text for r in theirs] == [r.text for r in ours]
    for a, b in zip(ours, theirs, strict=True):
        assert b.score == pytest.approx(a.score, abs=1e-3)  # log-probabilities, fp32 noise
    # Heat-maps stay ours: our model's cross-attention over CTranslate2's output is the one
    # our decoder drew for the same output.
    drawn = translate_ids(loaded.model, loaded.tokenizers, texts[:8], with_attention=True)
    for a, b in zip(drawn, theirs[:8], strict=True):
        heat_map = cross_attention(loaded.model, b)
        assert heat_map.shape == (len(b.out_pieces), len(b.src_pieces))
        assert torch.allclose(heat_map, a.attention, atol=1e-5)

    # Beam search is the same algorithm in both, under either length penalty.
    for kind, at_least in (("power", 0.99), ("gnmt", 0.99)):
        ours = translate_ids(loaded.model, loaded.tokenizers, texts, 4, length_penalty_kind=kind)
        theirs = ct2_translate(ct2, texts, beam=4, length_penalty_kind=kind)
        assert _agreement(ours, theirs) >= at_least, kind
    assert _agreement(ours, translate_ids(loaded.model, loaded.tokenizers, texts)) < 1.0


def test_every_quantization_exports_with_the_tokenizers(version: Path, tmp_path: Path) -> None:
    sizes = {}
    for quantization in QUANTIZATIONS:
        out = export_ctranslate2(version, tmp_path / quantization, quantization)
        names = {p.name for p in out.iterdir()}
        assert {"model.bin", "config.json", "workbench.json", "tokenizer"} <= names
        assert {"source.spm", "target.spm"} <= names  # the SentencePiece models go along
        sizes[quantization] = (out / "model.bin").stat().st_size
        results = ct2_translate(load_export(out, threads=1), ["我喜欢喝茶。"])
        assert results[0].text
    assert sizes["int8"] < sizes["int16"] < sizes["float32"]


def test_refusals_are_one_line_and_write_nothing(version: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkbenchError, match="quantization"):
        export_ctranslate2(version, tmp_path / "a", "int4")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(WorkbenchError, match="not an empty folder"):
        export_ctranslate2(version, busy)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]

    # A word vocabulary with the same word twice (hand-edited): CTranslate2 looks tokens up by
    # their text, so it cannot tell the two ids apart.
    words = WhitespaceTokenizer(["<pad>", "<s>", "</s>", "<unk>", "tea", "tea", "I"])
    cfg = ModelConfig.from_preset("tiny", src_vocab_size=7, tgt_vocab_size=7)
    folder = save_model(tmp_path / "dup", Transformer(cfg), TokenizerPair(words, words, False))
    with pytest.raises(WorkbenchError, match="cannot express") as err:
        export_ctranslate2(folder, tmp_path / "dup-ct2")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "dup-ct2").exists() and list(tmp_path.glob(".dup-ct2*")) == []
