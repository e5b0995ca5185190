"""The math of one training step (teacher forcing, §5.4 label-smoothed loss, clipping), shared
by the training loop and the speed calibration, so that what is timed is what is trained."""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from core_model.batching import Batch
from core_model.training.config import TrainingError
from core_model.training.label_smoothing import label_smoothed_nll_loss
from core_model.training.precision import autocast


def forward_backward(
    net: nn.Module,
    batch: Batch,
    device: torch.device,
    amp: torch.dtype | None,
    label_smoothing: float,
    pad_id: int,
    per_tokens: float | None = None,
) -> tuple[float, float]:
    """Gradients of the batch's smoothed loss divided by `per_tokens` (default: its own target
    tokens, the mean per token); returns the loss sum and the forward pass's seconds.
    Data-parallel ranks divide by the update's tokens over all ranks / ranks, so that DDP's
    average of their gradients is the mean over the whole update, as one process would
    compute it. The forward pass is timed because it is a rank's own work (the backward waits
    for the other ranks' gradients): `pace.RankShares` compares the ranks by it (on a CPU:
    on a GPU the seconds are the kernels' launch)."""
    started = time.perf_counter()
    with autocast(device, amp):
        logits = net(batch.src, batch.tgt_in)  # [B, T, V]
    loss_sum, _ = label_smoothed_nll_loss(
        logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1), label_smoothing, pad_id
    )
    forward_s = time.perf_counter() - started
    (loss_sum / (per_tokens or batch.n_tokens)).backward()
    return float(loss_sum.detach()), forward_s


def clip_and_check(model: nn.Module, clip_norm: float | None, loss_sum: float, step: int) -> None:
    """Clip the gradients' norm; a NaN/inf loss or norm is a user-facing TrainingError."""
    gnorm = (
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        if clip_norm
        else torch.zeros(())
    )
    if not math.isfinite(loss_sum) or not math.isfinite(float(gnorm)):
        raise TrainingError(
            f"Training diverged: the loss became NaN/inf at step {step}; "
            "try a lower learning rate or precision 'fp32'."
        )
