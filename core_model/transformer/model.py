"""§3 Model Architecture: the encoder-decoder Transformer, assembled from its parts."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace

import torch
from torch import nn

from core_model.transformer.attention import MultiHeadAttention
from core_model.transformer.config import ModelConfig
from core_model.transformer.decoder import Decoder, DecoderCache, LayerWeights
from core_model.transformer.dropout import Dropout
from core_model.transformer.embedding import TokenEmbedding
from core_model.transformer.encoder import Encoder
from core_model.transformer.generator import Generator
from core_model.transformer.masks import decoder_self_mask, padding_mask
from core_model.transformer.positional_encoding import PositionalEncoding

# Pre-norm initialisation (see Transformer._init_weights): the matrices' standard deviation,
# and the sub-layer outputs that are added to the residual stream (W^O of every attention,
# W_2 of every feed-forward network).
RESIDUAL_INIT_STD = 0.02
_RESIDUAL_WRITERS = ("out_proj.weight", "w_2.weight")


@dataclass
class AttentionMaps:
    """Every layer's attention weights, per head, of one teacher-forced pass. Each row sums
    to 1 over the keys its mask allows; masked keys get exactly 0 (softmax of -inf)."""

    encoder_self: list[torch.Tensor]  # per encoder layer [B, H, S, S]
    decoder_self: list[torch.Tensor]  # per decoder layer [B, H, T, T]: 0 above the diagonal
    cross: list[torch.Tensor]  # per decoder layer [B, H, T, S]


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        scaled = cfg.scale_embeddings
        self.src_embed = TokenEmbedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id, scaled)
        self.tgt_embed = (
            self.src_embed
            if cfg.shared_vocab
            else TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id, scaled)
        )
        self.positions = PositionalEncoding(
            cfg.d_model, cfg.max_len, cfg.dropout, cfg.sinusoid_layout
        )
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab_size)
        self._init_weights()
        if cfg.shared_vocab:  # §3.4: one matrix for both embeddings and the pre-softmax layer
            self.generator.proj.weight = self.tgt_embed.lookup.weight

    def _init_weights(self) -> None:
        """The paper does not say. Post-norm (the paper's layout): Xavier-uniform for every
        matrix, as the reference implementations do. Pre-norm: GPT-2's scheme (Radford et al.
        2019, §2.3) — N(0, 0.02) for every matrix, and the projections that write into the
        residual stream (W^O, W_2) 1/√(2·layers) smaller, so the stream starts near the
        identity and its variance does not grow with depth: a short budget learns faster
        (Tatoeba zh→en, 1.1M tokens, fp32: 15.8 valid BLEU against 13.7 with Xavier).
        Pad rows are zero."""
        residual_std = RESIDUAL_INIT_STD / math.sqrt(
            2 * (self.cfg.n_encoder_layers + self.cfg.n_decoder_layers)
        )
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # biases and LayerNorm gains keep PyTorch's defaults
            if not self.cfg.norm_first:
                nn.init.xavier_uniform_(p)
            elif name.endswith(_RESIDUAL_WRITERS):
                nn.init.normal_(p, 0.0, residual_std)
            else:
                nn.init.normal_(p, 0.0, RESIDUAL_INIT_STD)
        with torch.no_grad():
            for embed in {self.src_embed, self.tgt_embed}:
                embed.lookup.weight[self.cfg.pad_id].zero_()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights are counted once

    def set_dropout(self, p: float) -> None:
        """Every dropout of the model to `p` (a run re-planned for fewer or more passes over
        its corpus, `training.recipe.replan`); the config says so, and is saved so. Only for
        models whose attention and feed-forward dropouts follow `dropout` (ours, not an
        imported Marian model's)."""
        if self.cfg.attention_dropout is not None or self.cfg.activation_dropout is not None:
            raise ValueError("this model sets its attention/activation dropout apart")
        self.cfg = replace(self.cfg, dropout=p)
        for module in self.modules():
            if isinstance(module, Dropout):
                module.p = p
            elif isinstance(module, MultiHeadAttention):
                module.dropout = p

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src_ids [B, S] -> (memory [B, S, D], src_mask [B, 1, 1, S])."""
        memory, src_mask, _ = self._encode(src_ids)
        return memory, src_mask

    def _encode(
        self, src_ids: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """`encode`, plus each encoder layer's self-attention [B, H, S, S] when asked."""
        src_mask = padding_mask(src_ids, self.cfg.pad_id)
        x = self.positions(self.src_embed(src_ids))
        memory, weights = self.encoder(x, src_mask, need_weights)
        return memory, src_mask, weights

    def decode_states(
        self,
        tgt_in_ids: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tgt_in_ids [B, T] (BOS + prefix) -> (the decoder's final hidden states [B, T, D],
        cross-attention [B, T, S] | None). §3.4's pre-softmax projection, `self.generator`,
        turns the states into logits [B, T, V]; kNN-MT (``core_model.retrieval``) searches its
        datastore with the states themselves.

        With a cache, pass only the newest token ([B, 1]): earlier positions' keys and values
        are in the cache, so no causal mask is needed. The cross-attention drawn on the
        Translate page is the last layer's, averaged over heads: only that layer pays for it.
        """
        last = self.cfg.n_decoder_layers - 1
        hidden, weights = self._decode(
            tgt_in_ids, memory, src_mask, cache, (last,) if need_weights else ()
        )
        return hidden, (weights[last].cross_attn.mean(dim=1) if need_weights else None)

    def _decode(
        self,
        tgt_in_ids: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: DecoderCache | None,
        weights_of: Collection[int],
    ) -> tuple[torch.Tensor, dict[int, LayerWeights]]:
        """`decode_states`, with the per-head weights of the decoder layers `weights_of`."""
        offset = cache.length if cache is not None else 0
        tgt_mask = None if cache is not None else decoder_self_mask(tgt_in_ids, self.cfg.pad_id)
        y = self.positions(self.tgt_embed(tgt_in_ids), offset)
        return self.decoder(y, memory, tgt_mask, src_mask, cache, weights_of)

    def attention_maps(
        self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor
    ) -> tuple[torch.Tensor, AttentionMaps]:
        """Teacher forcing that also returns every layer's and head's attention weights (for
        looking inside; training and decoding never call it): src_ids [B, S], tgt_in_ids
        [B, T] -> (logits [B, T, V], AttentionMaps)."""
        memory, src_mask, encoder_self = self._encode(src_ids, need_weights=True)
        layers = range(self.cfg.n_decoder_layers)
        hidden, weights = self._decode(tgt_in_ids, memory, src_mask, None, layers)
        return self.generator(hidden), AttentionMaps(
            encoder_self,
            [weights[i].self_attn for i in layers],
            [weights[i].cross_attn for i in layers],
        )

    def new_cache(self, capacity: int = 0) -> DecoderCache:
        """An empty decoding cache with room for `capacity` steps (0: grows as needed)."""
        return DecoderCache.empty(self.cfg.n_decoder_layers, capacity)

    def forward(self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src_ids [B, S], tgt_in_ids [B, T] -> logits [B, T, V]."""
        memory, src_mask = self.encode(src_ids)
        hidden, _ = self.decode_states(tgt_in_ids, memory, src_mask)
        return self.generator(hidden)
