"""§3.4 the pre-softmax linear transformation ("generator"): hidden state -> vocabulary logits."""

from __future__ import annotations

import torch
from torch import nn


class Generator(nn.Module):
    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        # [B, T, D] -> logits [B, T, V]; softmax is left to the loss / the decoder
        return self.proj(y)
