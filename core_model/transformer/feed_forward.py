"""§3.3 Position-wise Feed-Forward Networks: FFN(x) = max(0, xW1 + b1)W2 + b2."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core_model.transformer.dropout import Dropout


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, L, d_ff] -> [B, L, D]
        return self.w_2(self.dropout(F.relu(self.w_1(x))))
