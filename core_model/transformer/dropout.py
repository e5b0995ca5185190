"""§5.4 Regularization: dropout — zero each activation with probability P_drop and scale
the survivors by 1/(1 − P_drop), so the expected activation is unchanged.

Written out rather than `nn.Dropout` because on CPU torch draws the mask with
`bernoulli_`, about half as fast as a uniform draw compared with P_drop; dropout masks
are a sixth of a CPU training step (bench/train_throughput.py). On accelerators
`F.dropout` is one fused kernel, and is used.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        # 1/(1-p) where kept, 0 where dropped; drawn in fp32 so P_drop is exact under bf16.
        keep = torch.rand(x.shape).ge_(self.p).div_(1.0 - self.p)
        return x * keep.to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"
