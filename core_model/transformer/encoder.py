"""§3.1 Encoder: a stack of N identical layers, each self-attention then feed-forward."""

from __future__ import annotations

import torch
from torch import nn

from core_model.transformer.attention import MultiHeadAttention
from core_model.transformer.config import ModelConfig
from core_model.transformer.feed_forward import PositionwiseFeedForward
from core_model.transformer.residual import ResidualSublayer


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.feed_forward = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.attn_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ff_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        # x [B, S, D]; src_mask [B, 1, 1, S]
        x, _ = self.attn_block(x, lambda h: self.self_attn(h, mask=src_mask))
        x, _ = self.ff_block(x, lambda h: (self.feed_forward(h), None))
        return x


class Encoder(nn.Module):
    """N = cfg.n_encoder_layers layers; pre-norm stacks end with a LayerNorm of their own."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        # [B, S, D] -> memory [B, S, D]
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x)
