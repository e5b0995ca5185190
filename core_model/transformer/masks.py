"""Masks (§3.2.3): hide padding keys, and hide future positions from the decoder.

Masks are boolean and mean "may attend" (True) — the convention of
`F.scaled_dot_product_attention`. They broadcast to [B, heads, T_query, T_key].
"""

from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """[B, L] ids -> [B, 1, 1, L]: True where the key is a real token."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """[1, 1, L, L]: position i may attend to positions ≤ i (auto-regression)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def decoder_self_mask(tgt_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """[B, 1, T, T]: causal and not padding. The first position is the start token, a key
    even where the decoder starts from PAD (Marian's decoders do)."""
    keys = padding_mask(tgt_ids, pad_id).clone()  # [B, 1, 1, T]
    keys[..., 0] = True
    return causal_mask(tgt_ids.size(1), tgt_ids.device) & keys
