"""§3.1: the encoder and the decoder are each "a stack of N identical layers".

A pre-norm stack (``cfg.norm_first``) ends with a LayerNorm of its own: its layers add to the
residual stream without normalising it, where a post-norm layer (the paper's) normalises
its own output.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from core_model.transformer.config import ModelConfig


class LayerStack(nn.Module):
    """N layers made by `layer(cfg)`, then the final norm; the subclass's forward runs them."""

    def __init__(
        self, layer: Callable[[ModelConfig], nn.Module], n_layers: int, cfg: ModelConfig
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layer(cfg) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
