"""§3.1 Decoder: N layers of masked self-attention, cross-attention over the encoder
output, and feed-forward. Supports step-by-step decoding with a key/value cache."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn

from core_model.transformer.attention import KeyValueCache, MultiHeadAttention
from core_model.transformer.config import ModelConfig
from core_model.transformer.feed_forward import PositionwiseFeedForward
from core_model.transformer.layer_stack import LayerStack
from core_model.transformer.residual import ResidualSublayer


class LayerWeights(NamedTuple):
    """One decoder layer's attention weights, per head."""

    self_attn: torch.Tensor  # masked self-attention [B, H, T, T] (T_seen keys with a cache)
    cross_attn: torch.Tensor  # attention over the encoder output [B, H, T, S]


@dataclass
class LayerCache:
    self_attn: KeyValueCache = field(default_factory=KeyValueCache)
    cross_attn: KeyValueCache = field(default_factory=KeyValueCache)


@dataclass
class DecoderCache:
    """Everything incremental decoding keeps between steps: per-layer K/V and the step count."""

    layers: list[LayerCache]
    length: int = 0  # positions already decoded = offset of the next position

    @classmethod
    def empty(cls, n_layers: int, capacity: int = 0) -> DecoderCache:
        """`capacity`: decoding steps to allocate self-attention room for (0: grow as needed)."""
        return cls([LayerCache(KeyValueCache(capacity)) for _ in range(n_layers)])

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Self-attention rows `src` overwrite rows `dst` [M] in place (beam search: a
        hypothesis's further children take the rows of hypotheses that ended)."""
        for layer in self.layers:
            layer.self_attn.move(dst, src)

    def reorder(self, rows: torch.Tensor, memories: torch.Tensor | None = None) -> None:
        """Keep self-attention rows `rows` [N'] (the hypotheses that go on) and cross-attention
        rows `memories` (the sentences that go on; None: all)."""
        for layer in self.layers:
            layer.self_attn.reorder(rows)
            if memories is not None:
                layer.cross_attn.reorder(memories)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout_p)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout_p)
        self.feed_forward = PositionwiseFeedForward(
            cfg.d_model, cfg.d_ff, cfg.activation_dropout_p, cfg.activation
        )
        self.self_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.cross_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ff_block = ResidualSublayer(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self,
        y: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, LayerWeights | None]:
        """y [B, T, D] and its mask (the masked self-attention's), memory [B, S, D] and its
        mask (the attention over the encoder's output) -> ([B, T, D], the layer's weights or
        None)."""
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        y, self_weights = self.self_block(
            y,
            lambda h: self.self_attn(h, mask=tgt_mask, cache=self_cache, need_weights=need_weights),
        )
        y, cross_weights = self.cross_block(
            y,
            lambda h: self.cross_attn(
                h, memory, mask=src_mask, cache=cross_cache, need_weights=need_weights
            ),
        )
        y, _ = self.ff_block(y, lambda h: (self.feed_forward(h), None))
        if not need_weights:
            return y, None
        return y, LayerWeights(self_weights, cross_weights)


class Decoder(LayerStack):
    """N = cfg.n_decoder_layers decoder layers; with a cache, a step at a time."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(DecoderLayer, cfg.n_decoder_layers, cfg)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        src_mask: torch.Tensor,
        cache: DecoderCache | None = None,
        weights_of: Collection[int] = (),
    ) -> tuple[torch.Tensor, dict[int, LayerWeights]]:
        """Returns (hidden [B, T, D], the attention weights of the layers `weights_of`, by
        layer index). Only those layers compute attention the slow, explicit way."""
        weights = {}
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            y, layer_weights = layer(y, tgt_mask, memory, src_mask, layer_cache, i in weights_of)
            if layer_weights is not None:
                weights[i] = layer_weights
        if cache is not None:
            cache.length += y.size(1)
        return self.final_norm(y), weights
