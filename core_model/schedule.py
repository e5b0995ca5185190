"""§5.3 Optimizer learning-rate schedules.

The paper's "Noam" schedule, lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), rises
linearly for `warmup` steps and then decays with the inverse square root of the step. Small
corpora train for only a few hundred steps, where that curve barely leaves the ground, so a
constant rate (after a short linear warm-up) is offered too. For a fixed budget (a number of
steps or minutes known in advance) a linear decay to zero after the warm-up uses the budget
better than an open-ended 1/√step tail ("budgeted training"): 'linear'.
"""

from __future__ import annotations

from dataclasses import dataclass


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule (§5.3), optionally scaled by `factor`; steps count from 1."""
    step = max(1, step)
    warmup = max(1, warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def linear_decay_lr(step: int, lr: float, warmup: int, progress: float) -> float:
    """Linear warm-up to `lr`, then linear decay to 0 as `progress` (budget used, 0..1) -> 1."""
    ramp = max(1, step) / warmup if warmup > 0 else 1.0
    return lr * max(0.0, min(ramp, 1.0, 1.0 - progress))


def constant_lr(step: int, lr: float, warmup: int = 0) -> float:
    """`lr` after a linear warm-up of `warmup` steps (0 = none)."""
    if warmup > 0 and step < warmup:
        return lr * max(1, step) / warmup
    return lr


@dataclass
class LRSchedule:
    """Stateless on purpose: `lr_at(step)` is all the loop needs, so a resume needs the step."""

    kind: str  # 'noam' | 'constant' | 'linear'
    d_model: int
    warmup: int
    factor: float = 1.0  # noam scale
    lr: float = 1e-3  # constant rate / linear peak

    def __post_init__(self) -> None:
        if self.kind not in ("noam", "constant", "linear"):
            raise ValueError(f"unknown learning-rate schedule {self.kind!r}")

    def lr_at(self, step: int, progress: float = 0.0) -> float:
        """Rate for optimizer step `step` (from 1); `progress` = share of the budget used,
        only read by 'linear'."""
        if self.kind == "noam":
            return noam_lr(step, self.d_model, self.warmup, self.factor)
        if self.kind == "linear":
            return linear_decay_lr(step, self.lr, self.warmup, progress)
        return constant_lr(step, self.lr, self.warmup)

    def peak(self) -> float:
        """Highest rate the schedule reaches (for logging and sanity checks)."""
        if self.kind == "noam":
            return noam_lr(self.warmup, self.d_model, self.warmup, self.factor)
        return self.lr


def noam_factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """Factor that makes the Noam curve peak at `peak_lr` (at step = warmup)."""
    return peak_lr / (d_model**-0.5 * warmup**-0.5) if warmup > 0 else 1.0
