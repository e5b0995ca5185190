"""§5.4 "Residual Dropout" around every sub-layer: LayerNorm(x + Dropout(Sublayer(x))).

The paper normalises after the residual add (post-norm). Pre-norm,
x + Dropout(Sublayer(LayerNorm(x))), trains deeper stacks more stably and is an option.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from core_model.transformer.dropout import Dropout

Extra = TypeVar("Extra")


class ResidualSublayer(nn.Module):
    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], tuple[torch.Tensor, Extra]]
    ) -> tuple[torch.Tensor, Extra]:
        """x [B, L, D]; `sublayer` returns (output [B, L, D], anything else, e.g. weights)."""
        if self.norm_first:
            out, extra = sublayer(self.norm(x))
            return x + self.dropout(out), extra
        out, extra = sublayer(x)
        return self.norm(x + self.dropout(out)), extra
