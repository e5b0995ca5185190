"""§3.2 Attention: scaled dot-product attention and multi-head attention.

Two paths compute the same thing: `F.scaled_dot_product_attention` (fused, fast) for
training, and the paper's explicit softmax(QKᵀ/√d_k)V when the caller wants the attention
weights (heat-maps) or where it is faster (`_explicit_is_faster`: bf16 and decoding steps on a
CPU). `KeyValueCache` keeps the keys/values of incremental decoding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from core_model.transformer.dropout import apply_dropout


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
        weights = apply_dropout(weights, dropout)
    return weights @ v, weights


def _explicit_is_faster(q: torch.Tensor) -> bool:
    """On a CPU, equation (1) written out beats the fused kernel for
    - bf16: the fused kernel's backward pass is 3-8x slower for the short sequences of
      sentence-level MT (measured: 2.5k-token batches, T = 12-40), a quarter of a bf16 step;
    - decoding a step (no gradient, at most 8 query positions: one per hypothesis, or the K
      beams of a sentence): 1.2-1.6x faster for T_k = 10-40, where the fused kernel's tiling
      does not pay.
    fp32 training and GPUs keep the fused kernel."""
    if q.device.type != "cpu":
        return False
    return q.dtype == torch.bfloat16 or (q.size(-2) <= 8 and not q.requires_grad)


@dataclass
class KeyValueCache:
    """Keys and values kept between decoding steps.

    Self-attention writes one position per step into buffers [B, H, capacity, d_k] allocated
    up front (growing them with `torch.cat` would copy the whole history at every step) and
    reads the filled part [B, H, length, d_k]. Cross-attention keys/values are projected from
    the encoder memory once per sentence, [B, H, S, d_k], and then only read.
    """

    capacity: int = 0  # positions the self-attention buffers hold before they must grow
    key: torch.Tensor | None = None  # [B, H, capacity, d_k] (cross-attention: [B, H, S, d_k])
    value: torch.Tensor | None = None
    length: int = 0  # positions filled

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's k/v [B, H, T_new, d_k]; returns all keys/values so far (views)."""
        end = self.length + k.size(2)
        if self.key is None or end > self.key.size(2):
            self._grow(k, end)
        self.key[:, :, self.length : end] = k
        self.value[:, :, self.length : end] = v
        self.length = end
        return self.key[:, :, :end], self.value[:, :, :end]

    def _grow(self, k: torch.Tensor, needed: int) -> None:
        b, h, _, d_k = k.shape
        capacity = max(needed, self.capacity, 2 * (self.key.size(2) if self.key is not None else 0))
        key, value = k.new_empty(b, h, capacity, d_k), k.new_empty(b, h, capacity, d_k)
        if self.key is not None:
            key[:, :, : self.length] = self.key[:, :, : self.length]
            value[:, :, : self.length] = self.value[:, :, : self.length]
        self.key, self.value = key, value

    def store(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep cross-attention keys/values [B, H, S, d_k] for all later steps."""
        self.key, self.value, self.length = k, v, k.size(2)

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Rows `src` overwrite rows `dst` [M] in place, filled positions only (no row may
        be in both)."""
        if self.key is None or dst.numel() == 0:
            return
        for buffer in (self.key, self.value):
            filled = buffer[:, :, : self.length]
            filled.index_copy_(0, dst, filled.index_select(0, src))

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` [N'] (beam search picks which hypotheses survive and drops
        finished sentences); only the filled positions are copied."""
        if self.key is None:
            return
        self.key = _select_rows(self.key, index, self.length)
        self.value = _select_rows(self.value, index, self.length)


def _select_rows(buffer: torch.Tensor, index: torch.Tensor, length: int) -> torch.Tensor:
    """buffer [B, H, C, d_k] -> [N', H, C, d_k] holding buffer[index, :, :length]."""
    out = buffer.new_empty(index.numel(), *buffer.shape[1:])
    torch.index_select(buffer[:, :, :length], 0, index, out=out[:, :, :length])
    return out


class StackedProjection(nn.Linear):
    """The Q/K/V projections W^Q, W^K, W^V of §3.2.2 stacked into one [3D, D] matrix (as
    `nn.MultiheadAttention` stores them): self-attention projects all three with a single
    multiply; cross-attention projects the decoder state with the Q rows only and the encoder
    memory with the K/V rows only."""

    def query(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, L, D]
        d = self.in_features
        return F.linear(x, self.weight[:d], self.bias[:d])

    def key_value(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, L, 2D]
        d = self.in_features
        return F.linear(x, self.weight[d:], self.bias[d:])


class MultiHeadAttention(nn.Module):
    """§3.2.2: h parallel heads over learned projections, concatenated and projected by W^O."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.in_proj = StackedProjection(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # [B, L, D] -> [B, H, L, d_k]
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.d_head).transpose(1, 2)

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
        projects `memory` only on the first step. Cached cross-attention keys/values of n
        sentences may serve B = n·K single-position queries, K consecutive rows per sentence
        (beam search; mask then [n, 1, 1, Tk]).
        Returns (output [B, Tq, D], weights [B, H, Tq, Tk] or None).
        """
        if memory is None:
            q, k, v = (self._split_heads(t) for t in self.in_proj(query).chunk(3, dim=-1))
            if cache is not None:
                k, v = cache.append(k, v)  # [B, H, T_seen, d_k]
        else:
            q = self._split_heads(self.in_proj.query(query))
            if cache is not None and cache.key is not None:
                k, v = cache.key, cache.value
            else:
                k, v = (self._split_heads(t) for t in self.in_proj.key_value(memory).chunk(2, -1))
                if cache is not None:  # read at every step: laid out once for the matmuls
                    k, v = k.contiguous(), v.contiguous()
                    cache.store(k, v)

        rows, groups = q.size(0), k.size(0)
        if rows != groups:
            # Beam search: the K hypotheses of a sentence (consecutive rows, one position
            # each) attend to the same memory, read once: [n·K, H, 1, d_k] -> [n, H, K, d_k].
            q = q.reshape(groups, rows // groups, self.n_heads, self.d_head).transpose(1, 2)

        p = self.dropout if self.training else 0.0
        if need_weights or _explicit_is_faster(q):
            out, weights = scaled_dot_product_attention(q, k, v, mask, p)
            weights = weights if need_weights else None
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        b, h, tq, d_k = out.shape
        out = out.transpose(1, 2).reshape(b, tq, h * d_k)  # concat heads: [B, Tq, D]
        if rows != groups:  # back to one row per hypothesis: [n, K, D] -> [n·K, 1, D]
            out = out.reshape(rows, 1, h * d_k)
            if weights is not None:  # [n, H, K, S] -> [n·K, H, 1, S]
                weights = weights.transpose(1, 2).reshape(rows, h, 1, weights.size(-1))
        return self.out_proj(out), weights
