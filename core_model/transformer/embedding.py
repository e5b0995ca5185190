"""§3.4 Embeddings and Softmax: learned token embeddings scaled by √d_model."""

from __future__ import annotations

import math

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    """Maps token ids to vectors; the √d_model scale keeps them on par with the positions
    (`scaled=False`: × 1, for checkpoints trained without it)."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, scaled: bool = True) -> None:
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model) if scaled else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # ids [B, L] -> [B, L, D]
        return self.lookup(ids) * self.scale
