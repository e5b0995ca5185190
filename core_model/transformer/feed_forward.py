"""§3.3 Position-wise Feed-Forward Networks: FFN(x) = max(0, xW1 + b1)W2 + b2.

The paper's activation is ReLU; a checkpoint may use another (`ModelConfig.activation`):
Marian's OPUS-MT models use swish, x·sigmoid(x) (SiLU); BERT-style ones GELU."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from core_model.transformer.dropout import Dropout

ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "swish": F.silu,
    "gelu": F.gelu,  # the exact (erf) form
}


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, L, d_ff] -> [B, L, D]
        return self.w_2(self.dropout(self.activation(self.w_1(x))))
