"""§5.4 Label smoothing (ε_ls = 0.1): cross-entropy against a softened one-hot target.

"This hurts perplexity, as the model learns to be more unsure, but improves accuracy and BLEU."
The ε mass is spread uniformly over every class except PAD (which is never a valid output), and
padding positions contribute nothing.

With z the logits, lse = log Σ exp(z) and y the target, the loss of one position is

    (1-ε)·(lse - z_y) + ε/(V-1) · Σ_{c≠PAD} (lse - z_c)  =  lse - (1-ε)·z_y - ε/(V-1)·Σ_{c≠PAD} z_c

and its gradient is softmax(z) - (1-ε)·onehot(y) - ε/(V-1)·[c≠PAD]. Written as one autograd
function with that gradient, the backward pass makes two passes over [N, V] instead of autograd's
chain of gather/sum/log-softmax backwards: on a CPU, where the output layer's [N, V] work is a
large part of a small model's step, that is measurably faster.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Sum of the smoothed loss and of the plain NLL over non-pad positions (see module)."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # fp32 even for bf16 logits: a log-sum-exp over 8k+ classes needs the precision.
        lprobs = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
        keep = (target != ignore_index).to(lprobs.dtype)  # [N]
        nll = -lprobs.gather(1, target[:, None]).squeeze(1) * keep  # [N]
        if epsilon > 0.0:
            # mean of -log p_c over the V-1 classes that are not PAD
            smooth = -(lprobs.sum(dim=-1) - lprobs[:, ignore_index]) / (lprobs.size(-1) - 1)
            loss = (1.0 - epsilon) * nll + epsilon * smooth * keep
        else:
            loss = nll
        ctx.save_for_backward(lprobs, target, keep)
        ctx.epsilon, ctx.ignore_index, ctx.dtype = epsilon, ignore_index, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_nll: torch.Tensor) -> tuple:
        lprobs, target, keep = ctx.saved_tensors
        eps, pad = ctx.epsilon, ctx.ignore_index
        grad = lprobs.exp()  # softmax [N, V]
        if eps > 0.0:
            share = eps / (lprobs.size(-1) - 1)
            grad.sub_(share)
            grad[:, pad] += share  # PAD gets no smoothing mass
        grad.scatter_add_(1, target[:, None], grad.new_full((target.size(0), 1), eps - 1.0))
        grad.mul_((keep * grad_loss)[:, None])
        return grad.to(ctx.dtype), None, None, None


def label_smoothed_nll_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    epsilon: float = 0.1,
    ignore_index: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] (any float dtype), target [N] -> (smoothed loss sum, nll sum) over non-pad.

    Sums (not means) so that callers can normalise by the token count of the whole
    (possibly distributed) batch. The NLL carries no gradient (it is for reporting).
    """
    return _SmoothedCrossEntropy.apply(logits, target, float(epsilon), int(ignore_index))


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
