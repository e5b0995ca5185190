"""§3.2 Attention: scaled dot-product attention and multi-head attention.

Two paths compute the same thing: `F.scaled_dot_product_attention` (fused, fast)
for training and decoding, and the paper's explicit softmax(QKᵀ/√d_k)V when the
caller wants the attention weights (heat-maps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation (1), written out. q [B,H,Tq,dk], k/v [B,H,Tk,dk], mask broadcastable to [B,H,Tq,Tk].

    Returns (output [B,H,Tq,dk], weights [B,H,Tq,Tk]).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B,H,Tq,Tk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout > 0.0:
        weights = F.dropout(weights, p=dropout)
    return weights @ v, weights


def _explicit_is_faster(q: torch.Tensor) -> bool:
    """bf16 on a CPU: the fused kernel's backward pass is 3-8x slower than equation (1) written
    out for the short sequences of sentence-level MT (measured: 2.5k-token batches, T = 12-40),
    and was a quarter of a bf16 training step. fp32 and GPUs keep the fused kernel."""
    return q.device.type == "cpu" and q.dtype == torch.bfloat16


@dataclass
class KeyValueCache:
    """Keys and values kept between decoding steps, each [B, H, T_seen, d_k].

    Self-attention appends one position per step; cross-attention keys/values are
    computed from the encoder memory once per sentence and then only read.
    """

    key: torch.Tensor | None = None
    value: torch.Tensor | None = None

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (beam search picks which hypotheses survive)."""
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """§3.2.2: h parallel heads over learned projections, concatenated and projected by W^O.

    The Q/K/V projections are stored as one [3D, D] matrix (as `nn.MultiheadAttention`
    does), so self-attention runs a single matrix multiply for all three.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, H, L, d_k]
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.d_head).transpose(1, 2)

    def _project_kv(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.out_proj.in_features
        kv = F.linear(source, self.in_proj.weight[d:], self.in_proj.bias[d:])  # [B, L, 2D]
        k, v = kv.chunk(2, dim=-1)
        return self._split_heads(k), self._split_heads(v)

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KeyValueCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention when `memory` is None, else cross-attention over `memory`.

        query [B, Tq, D]; memory [B, Tk, D]; mask broadcastable to [B, H, Tq, Tk].
        With a cache, self-attention appends this step's keys/values and cross-attention
        projects `memory` only on the first step.
        Returns (output [B, Tq, D], weights [B, H, Tq, Tk] or None).
        """
        d = self.out_proj.in_features
        if memory is None:
            q, k, v = (self._split_heads(t) for t in self.in_proj(query).chunk(3, dim=-1))
            if cache is not None:
                if cache.key is not None:
                    k = torch.cat([cache.key, k], dim=2)
                    v = torch.cat([cache.value, v], dim=2)
                cache.key, cache.value = k, v
        else:
            q = self._split_heads(F.linear(query, self.in_proj.weight[:d], self.in_proj.bias[:d]))
            if cache is not None and cache.key is not None:
                k, v = cache.key, cache.value
            else:
                k, v = self._project_kv(memory)
                if cache is not None:
                    cache.key, cache.value = k, v

        p = self.dropout if self.training else 0.0
        if need_weights or _explicit_is_faster(q):
            out, weights = scaled_dot_product_attention(q, k, v, mask, p)
            weights = weights if need_weights else None
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        b, _, tq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, tq, d)  # concat heads: [B, Tq, D]
        return self.out_proj(out), weights
