"""§3.5 Positional Encoding: fixed sinusoids, so the model can attend by relative position."""

from __future__ import annotations

import math

import torch
from torch import nn

from core_model.transformer.dropout import Dropout


def sinusoid_table(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same); returns [max_len, D].

    `layout` "sines_then_cosines" holds the same values with all the sines first, then all
    the cosines (Marian's table: column i is sin for i < ⌈D/2⌉, then cos)."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # [L, 1]
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(max_len, d_model)
    if layout == "sines_then_cosines":
        sines = (d_model + 1) // 2
        table[:, :sines] = torch.sin(position * inv_freq)
        table[:, sines:] = torch.cos(position * inv_freq[: d_model // 2])
        return table
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """Adds the sinusoid of each position to the embeddings, then applies dropout (P_drop, §5.4)."""

    def __init__(
        self, d_model: int, max_len: int, dropout: float, layout: str = "interleaved"
    ) -> None:
        super().__init__()
        self.register_buffer("table", sinusoid_table(max_len, d_model, layout), persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        # x [B, L, D]; offset = index of x's first position (incremental decoding)
        length = x.size(1)
        if offset + length > self.table.size(0):
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_len {self.table.size(0)}"
            )
        return self.dropout(x + self.table[offset : offset + length].to(x.dtype))
