"""§3.1 Encoder: a stack of N identical layers, each self-attention then feed-forward."""

from __future__ import annotations

import torch
from torch import nn

from core_model.transformer.attention import MultiHeadAttention
from core_model.transformer.config import ModelConfig
from core_model.transformer.feed_forward import PositionwiseFeedForward
from core_model.transformer.layer_stack import LayerStack
from core_model.transformer.residual import ResidualSublayer


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout_p)
        self.feed_forward = PositionwiseFeedForward(
            cfg.d_model, cfg.d_ff, cfg.activation_dropout_p, cfg.activation
        )
        self.attn_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ff_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, S, D]; src_mask [B, 1, 1, S] -> ([B, S, D], self-attn [B, H, S, S] or None)."""
        x, weights = self.attn_block(
            x, lambda h: self.self_attn(h, mask=src_mask, need_weights=need_weights)
        )
        x, _ = self.ff_block(x, lambda h: (self.feed_forward(h), None))
        return x, weights


class Encoder(LayerStack):
    """N = cfg.n_encoder_layers encoder layers."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(EncoderLayer, cfg.n_encoder_layers, cfg)

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """[B, S, D] -> (memory [B, S, D], each layer's self-attention [B, H, S, S] when
        `need_weights`, else an empty list: only then is attention computed the slow way)."""
        weights = []
        for layer in self.layers:
            x, layer_weights = layer(x, src_mask, need_weights)
            if layer_weights is not None:
                weights.append(layer_weights)
        return self.final_norm(x), weights
