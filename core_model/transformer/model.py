"""§3 Model Architecture: the encoder-decoder Transformer, assembled from its parts."""

from __future__ import annotations

import torch
from torch import nn

from core_model.transformer.config import ModelConfig
from core_model.transformer.decoder import Decoder, DecoderCache
from core_model.transformer.embedding import TokenEmbedding
from core_model.transformer.encoder import Encoder
from core_model.transformer.generator import Generator
from core_model.transformer.masks import decoder_self_mask, padding_mask
from core_model.transformer.positional_encoding import PositionalEncoding


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = TokenEmbedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id)
        self.tgt_embed = (
            self.src_embed
            if cfg.shared_vocab
            else TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id)
        )
        self.positions = PositionalEncoding(cfg.d_model, cfg.max_len, cfg.dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab_size)
        self._init_weights()
        if cfg.shared_vocab:  # §3.4: one matrix for both embeddings and the pre-softmax layer
            self.generator.proj.weight = self.tgt_embed.lookup.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix (as the reference implementations do); zero pad rows."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        with torch.no_grad():
            for embed in {self.src_embed, self.tgt_embed}:
                embed.lookup.weight[self.cfg.pad_id].zero_()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights are counted once

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src_ids [B, S] -> (memory [B, S, D], src_mask [B, 1, 1, S])."""
        src_mask = padding_mask(src_ids, self.cfg.pad_id)
        memory = self.encoder(self.positions(self.src_embed(src_ids)), src_mask)
        return memory, src_mask

    def decode(
        self,
        tgt_in_ids: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tgt_in_ids [B, T] (BOS + prefix) -> (logits [B, T, V], cross-attention [B, T, S] | None).

        With a cache, pass only the newest token ([B, 1]): earlier positions' keys and values
        are in the cache, so no causal mask is needed.
        """
        offset = cache.length if cache is not None else 0
        tgt_mask = None if cache is not None else decoder_self_mask(tgt_in_ids, self.cfg.pad_id)
        y = self.positions(self.tgt_embed(tgt_in_ids), offset)
        hidden, weights = self.decoder(y, memory, tgt_mask, src_mask, cache, need_weights)
        return self.generator(hidden), weights

    def new_cache(self, capacity: int = 0) -> DecoderCache:
        """An empty decoding cache with room for `capacity` steps (0: grows as needed)."""
        return DecoderCache.empty(self.cfg.n_decoder_layers, capacity)

    def forward(self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src_ids [B, S], tgt_in_ids [B, T] -> logits [B, T, V]."""
        memory, src_mask = self.encode(src_ids)
        logits, _ = self.decode(tgt_in_ids, memory, src_mask)
        return logits
