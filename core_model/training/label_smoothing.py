"""§5.4 Label smoothing (ε_ls = 0.1): cross-entropy against a softened one-hot target.

"This hurts perplexity, as the model learns to be more unsure, but improves accuracy and BLEU."
The ε mass is spread uniformly over every class except PAD (which is never a valid output), and
padding positions contribute nothing.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def label_smoothed_nll_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    epsilon: float = 0.1,
    ignore_index: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] (any float dtype), target [N] -> (smoothed loss sum, nll sum) over non-pad.

    Sums (not means) so that callers can normalise by the token count of the whole
    (possibly distributed) batch. Computed in fp32 for bf16 logits: log-softmax over 8k+ classes
    in bf16 loses too much precision.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # [N, V]
    keep = (target != ignore_index).to(lprobs.dtype)  # [N]; masking avoids copying [n, V]
    nll = -lprobs.gather(1, target[:, None]).squeeze(1) * keep  # [N]
    if epsilon > 0.0:
        vocab = lprobs.size(-1)
        # uniform over V-1 classes (PAD excluded): mean of -log p over non-pad classes
        smooth = -(lprobs.sum(-1) - lprobs[:, ignore_index]) / (vocab - 1) * keep  # [N]
        loss = (1.0 - epsilon) * nll + epsilon * smooth
    else:
        loss = nll
    return loss.sum(), nll.sum().detach()


class LabelSmoothingLoss(nn.Module):
    """Module wrapper: logits [B, T, V], target [B, T] -> mean smoothed loss per real token."""

    def __init__(self, epsilon: float = 0.1, ignore_index: int = 0) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.ignore_index = ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss, _ = label_smoothed_nll_loss(
            logits.reshape(-1, logits.size(-1)),
            target.reshape(-1),
            self.epsilon,
            self.ignore_index,
        )
        return loss / (target != self.ignore_index).sum().clamp(min=1)
