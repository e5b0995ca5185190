"""§5.4 Regularization: dropout — zero each activation with probability P_drop and scale
the survivors by 1/(1 − P_drop), so the expected activation is unchanged.

Written out rather than `nn.Dropout` because the CPU's random numbers are the cost: torch
draws them one at a time from one generator (mt19937, on one thread), and `bernoulli_` or
`torch.rand` take one 32-bit draw per element. Here one 64-bit number (two draws) gives four
15-bit numbers, each compared with P_drop · 2^15: half the draws, a mask 1.8× faster, a step
with dropout on 1.05× (bf16) and 1.11× (fp32, AVX2) as fast (docs/TRAINING.md, "Dropout's
cost"). The
drop rate is P_drop rounded to 1/32,768 (0.1 → 0.100006), and the survivors are scaled by
that rate, so the expectation stays exact; seeded by torch's generator as any torch draw. On
accelerators `F.dropout` is one fused kernel, and is used.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

_LEVELS = 1 << 15  # the values of a 15-bit number: four per 63-bit draw (random_'s int64 range)


def apply_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """`x` with each element zeroed with probability `p` and the rest scaled (training)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    dropped = round(p * _LEVELS)
    if dropped == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_()  # uniform in [0, 2^63)
    numbers = draws.view(torch.int16)[:n].view(x.shape).bitwise_and_(_LEVELS - 1)
    dropped = min(dropped, _LEVELS - 1)  # (p within 2^-16 of 1 would drop everything)
    keep = numbers.ge_(dropped)  # [x.shape] 0/1 (int16)
    return x * keep.to(x.dtype) * (_LEVELS / (_LEVELS - dropped))


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"
