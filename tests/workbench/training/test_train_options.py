"""The training choices a person sees (`workbench.training.train_options`) say what the code
does: each preset's description names the layers and width its preset has."""

from __future__ import annotations

from core_model.training.config import PRESET_CHOICES
from core_model.transformer.config import PRESETS
from workbench.training import train_options


def test_each_preset_is_described_with_the_layers_and_width_it_has() -> None:
    assert list(train_options.PRESET_DESCRIPTIONS) == list(PRESET_CHOICES)
    for name, preset in PRESETS.items():
        size = f"{preset['n_encoder_layers']}+{preset['n_decoder_layers']} layers"
        shown = train_options.PRESET_DESCRIPTIONS[name]
        assert shown.startswith(f"{size}, d={preset['d_model']}: "), (name, shown)
