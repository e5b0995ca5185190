"""Int8 CPU decoding: dynamic quantization of the linear layers (`torch.ao`).

Every matrix multiply of the network — the Q/K/V and output projections, the feed-forward
layers and the generator — runs on int8 weights with one scale per output row, and on
activations quantized on the fly per call. Embeddings, layer norms, softmax and the attention
itself stay fp32. The weights shrink 4x and, for the small matrices of sentence-level MT, the
multiplies run about 2-4x faster than fp32 on x86 CPUs with VNNI; outputs differ from fp32
by rounding only (bench/decode_speed.py measures the BLEU of both).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized import dynamic as dynamic_nn
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from core_model.transformer import Transformer
from core_model.transformer.attention import StackedProjection


def _int8_linear(weight: torch.Tensor, bias: torch.Tensor) -> dynamic_nn.Linear:
    """An int8 dynamic linear layer computing x weightᵀ + bias (weight [out, in])."""
    dense = nn.Linear(weight.size(1), weight.size(0))
    with torch.no_grad():
        dense.weight.copy_(weight)
        dense.bias.copy_(bias)
    dense.qconfig = per_channel_dynamic_qconfig
    return dynamic_nn.Linear.from_float(dense)


class Int8StackedProjection(nn.Module):
    """`StackedProjection` in int8: the whole [3D, D] matrix for self-attention, and its Q and
    K/V rows packed separately for cross-attention (a packed int8 matrix cannot be sliced)."""

    def __init__(self, proj: StackedProjection) -> None:
        super().__init__()
        d = proj.in_features
        w, b = proj.weight.detach(), proj.bias.detach()
        self.qkv = _int8_linear(w, b)
        self.q = _int8_linear(w[:d], b[:d])
        self.kv = _int8_linear(w[d:], b[d:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv(x)  # [B, L, D] -> [B, L, 3D]

    def query(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x)  # [B, L, D] -> [B, L, D]

    def key_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.kv(x)  # [B, L, D] -> [B, L, 2D]


def quantize_int8(model: Transformer) -> Transformer:
    """An int8 copy of `model` for CPU inference (eval mode); `model` itself is unchanged."""
    quantized = copy.deepcopy(model).to("cpu").float().eval()
    with warnings.catch_warnings():  # torch.ao announces its move to torchao; it still works
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        for module in list(quantized.modules()):
            for name, child in module.named_children():
                if isinstance(child, StackedProjection):
                    setattr(module, name, Int8StackedProjection(child))
        # The rest are plain nn.Linear: W^O, the feed-forward layers and the generator.
        quantize_dynamic(
            quantized, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
        )
    return quantized
