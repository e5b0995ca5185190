"""Which weights a run ends with (§6.1: the paper averages the last checkpoints).

Candidates: the last weights, the best epoch by validation, and the average of N snapshots:
N-1 taken evenly over the last fifth of the budget (by the clock or the steps, whichever
binds — epochs may be too few to average on a short budget) plus the final weights. With
enough validation pairs the candidate that validates best wins; without, the average (when
asked for) or the last weights, still scored on the validation pairs there are (a run that
validated reports its final weights' scores). The best-epoch bookkeeping also drives early
stopping (`Selector.should_stop`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from core_model.artifact import unique_state_dict

SCORE_KEYS = ("valid_loss", "bleu", "chrf")
AVERAGE_TAIL = 0.2  # snapshots for averaging are taken over this last share of the budget
# Early stopping (`Selector.should_stop`): never before this share of the budget, nor while
# the validation loss reached a new low within its last LOSS_FALLING_CHECKS validations.
EARLY_STOP_MIN_SHARE = 0.25
LOSS_FALLING_CHECKS = 3


def snapshot_points(n: int) -> list[float]:
    """Budget shares at which to snapshot the weights for an average of `n` (the n-th is the
    final weights): e.g. n=5 -> [0.8, 0.85, 0.9, 0.95]."""
    if n < 2:
        return []
    return [1.0 - AVERAGE_TAIL * (n - 1 - k) / (n - 1) for k in range(n - 1)]


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of state dicts (integer tensors: taken from the last one)."""
    if not states:
        raise ValueError("nothing to average")
    out = {}
    for k, v in states[0].items():
        if v.is_floating_point():
            out[k] = torch.stack([s[k].float() for s in states]).mean(0).to(v.dtype)
        else:
            out[k] = states[-1][k].clone()
    return out


def selection_score(record: dict[str, Any], metric: str) -> float | None:
    """Higher is better: BLEU (chrF breaks ties), or minus the validation loss."""
    if metric == "bleu" and record.get("bleu") is not None:
        return float(record["bleu"]) + 1e-3 * float(record.get("chrf") or 0.0)
    loss = record.get("valid_loss")
    if loss is not None and math.isfinite(loss):
        return -float(loss)
    return None


def loss_falling(history: Sequence[dict[str, Any]], checks: int = LOSS_FALLING_CHECKS) -> bool:
    """Whether the validation loss reached a new low (below every earlier one) at one of the
    last `checks` validations of `history` (a run's epoch records). The first validation has
    nothing to fall from: it is no evidence either way."""
    losses = [
        float(r["valid_loss"])
        for r in history
        if r.get("valid_loss") is not None and math.isfinite(r["valid_loss"])
    ]
    start = max(1, len(losses) - checks)
    return any(losses[i] < min(losses[:i]) for i in range(start, len(losses)))


class Selector:
    """Keeps the best epoch's weights and the averaging snapshots in the run's state
    (`TrainerState`, so a resumed run selects exactly as an uninterrupted one)."""

    def __init__(self, metric: str, use_validation: bool, keep_last: int) -> None:
        self.metric = metric
        self.use_validation = use_validation
        self.keep_last = keep_last

    def observe(
        self, state: Any, record: dict[str, Any], model: torch.nn.Module, warmed_up: bool = True
    ) -> None:
        """After an epoch's validation: update best / bad_epochs / the recent weights.

        An epoch that ends inside the warm-up is no evidence that learning has stalled (the
        rate is still rising, a short run's scores are noise near 0): it never counts towards
        early stopping, which had ended 4-minute runs at step 234 of a 200-step warm-up."""
        current = selection_score(record, self.metric) if self.use_validation else None
        if current is not None and (state.best_score is None or current > state.best_score):
            state.best_score, state.best_epoch, state.bad_epochs = current, state.epoch, 0
            state.best_weights = unique_state_dict(model)
        elif current is not None and warmed_up:
            state.bad_epochs += 1

    def should_stop(self, state: Any, patience: int | None, progress: float) -> bool:
        """Early stopping: `patience` validations in a row without a better score — but never
        in the first EARLY_STOP_MIN_SHARE of the budget (`progress`), and never while the
        validation loss still falls (a new low within its last LOSS_FALLING_CHECKS checks).

        Why: early in a run, and above all early in fine-tuning a pretrained model, BLEU of
        greedy translations is flat or noisy (near 0, or unmoved by small changes of the
        weights) while the model is still learning: a 2-minute run continuing an OPUS-MT model
        stopped after 12 s on a BLEU that had not moved for 5 checks while its validation loss
        was still falling. A falling loss is evidence of learning whatever BLEU says; the first
        quarter of the budget is too soon to call a plateau (the rate is still near its
        peak)."""
        if not (patience and self.use_validation) or state.bad_epochs < patience:
            return False
        return progress >= EARLY_STOP_MIN_SHARE and not loss_falling(state.history)

    def due(self, state: Any, progress: float) -> bool:
        """Whether the next averaging snapshot is due at this share of the budget."""
        points = snapshot_points(self.keep_last)
        taken = len(state.recent_weights)
        return taken < len(points) and progress >= points[taken]

    def snapshot(self, state: Any, model: torch.nn.Module) -> None:
        state.recent_weights = [*state.recent_weights, unique_state_dict(model)]

    def choose(
        self,
        state: Any,
        model: torch.nn.Module,
        validate: Callable[[], dict[str, Any]],
    ) -> tuple[str, dict[str, Any]]:
        """Load the final weights into `model`; return (their name, their validation scores)."""
        recent = [*state.recent_weights, unique_state_dict(model)] if state.recent_weights else []
        average = average_state_dicts(recent) if len(recent) > 1 else None
        last_record = state.history[-1] if state.history else {}
        if not self.use_validation:
            # Too few validation pairs to choose by, but they are still reported: the weights
            # the run ends with get their scores (the last epoch's, when it ended right here).
            if average is not None:
                model.load_state_dict(average, strict=False)
                name, record = f"average_last_{len(recent)}", validate()
            elif last_record.get("step") == state.step:
                name, record = "last", last_record
            else:
                name, record = "last", validate()
            return name, {k: record[k] for k in SCORE_KEYS if k in record}
        last_weights = unique_state_dict(model)
        if last_record.get("step") != state.step:  # stopped mid-epoch: score the last weights
            last_record = validate()
        candidates: list[tuple[str, dict[str, torch.Tensor], dict[str, Any]]] = [
            ("last", last_weights, last_record)
        ]
        if state.best_weights is not None and state.best_epoch != state.epoch:
            best_record = next((h for h in state.history if h["epoch"] == state.best_epoch), {})
            candidates.append(("best", state.best_weights, best_record))
        if average is not None:
            model.load_state_dict(average, strict=False)
            candidates.append((f"average_last_{len(recent)}", average, validate()))
        name, weights, record = max(
            candidates, key=lambda c: selection_score(c[2], self.metric) or float("-inf")
        )
        model.load_state_dict(weights, strict=False)
        return name, {k: record[k] for k in SCORE_KEYS if k in record}
