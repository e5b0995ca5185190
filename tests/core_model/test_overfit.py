"""The promise of the Train button: a dozen pairs, the tiny preset, the default (adaptive)
budget on a CPU — and greedy decoding then reproduces every training target exactly.

In fp32, forced: what ``auto`` picks depends on the CPU. How fast it learns is the CPU's
too: ``bench.first_click`` measures that, not a test."""

from __future__ import annotations

from core_model.training import TrainConfig, train
from core_model.translator import translate_ids
from tests.helpers import toy_pairs


def test_tiny_model_memorises_a_dozen_pairs() -> None:
    pairs = toy_pairs()
    assert len(pairs) >= 12
    result = train(pairs, None, TrainConfig(preset="tiny", device="cpu", precision="fp32"))
    outputs = translate_ids(result.model, result.tokenizers, [s for s, _ in pairs])
    wrong = [(o.text, t) for o, (_, t) in zip(outputs, pairs, strict=True) if o.text != t]
    assert not wrong, f"not reproduced: {wrong}"
    assert result.metrics["epochs"] >= 1 and not result.cancelled
    assert result.metrics["precision"] == "fp32"
