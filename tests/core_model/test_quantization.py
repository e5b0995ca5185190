"""Int8 CPU decoding: every linear layer runs on int8 weights, and a trained model translates
(almost) as in fp32 — the benchmark holds it to BLEU within 0.3 on a validation set."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.ao.nn.quantized import dynamic as dynamic_nn

from core_model.artifact import load_model
from core_model.quantization import Int8StackedProjection, quantize_int8
from core_model.training import TrainConfig, train
from core_model.translator import translate_ids
from tests.helpers import ROOT

DEMO = ROOT / "workbench" / "corpus" / "demo_zh_en.tsv"


def test_int8_model_translates_as_fp32(tmp_path: Path) -> None:
    lines = DEMO.read_text(encoding="utf-8").splitlines()[1:]
    pairs = [(cols[0], cols[1]) for cols in (line.split("\t") for line in lines)]
    train(pairs, None, TrainConfig(preset="tiny", device="cpu", max_steps=300), out_dir=tmp_path)
    loaded = load_model(tmp_path)
    fp32 = loaded.model
    int8 = quantize_int8(fp32)

    linears = [m for m in int8.modules() if isinstance(m, torch.nn.Linear)]
    assert linears == []  # none left in fp32 ...
    n_projections = fp32.cfg.n_encoder_layers + 2 * fp32.cfg.n_decoder_layers
    assert sum(isinstance(m, Int8StackedProjection) for m in int8.modules()) == n_projections
    assert isinstance(int8.generator.proj, dynamic_nn.Linear)
    assert isinstance(fp32.generator.proj, torch.nn.Linear)  # ... and the original untouched

    sources = [s for s, _ in pairs]
    for beam in (1, 4):
        ours = translate_ids(fp32, loaded.tokenizers, sources, beam=beam)
        quantized = translate_ids(int8, loaded.tokenizers, sources, beam=beam)
        same = sum(a.text == b.text for a, b in zip(ours, quantized, strict=True))
        assert same >= 0.9 * len(sources), f"beam {beam}: {same}/{len(sources)} equal"
        for a, b in zip(ours, quantized, strict=True):
            if a.text == b.text:
                assert abs(a.score - b.score) < 0.1 * max(1.0, abs(a.score))
