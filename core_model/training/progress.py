"""What a run reports while it trains (`ProgressEvent`) and why it ended (`StopReason`).

The workbench stores both (run rows, metric rows) and the pages say them in words, so a user
sees progress against what will actually happen, not against a step count the run never
reaches. The loss curve comes from the steps themselves ('loss' events, `loss_stride`), not
from the clock: a run of short epochs draws its whole curve too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    """Why a run ended. Values are stored in the database (`training_runs.stop_reason`)."""

    EPOCHS = "epochs"  # every epoch the user asked for was trained
    STEP_LIMIT = "max_steps"  # the user's step cap (max_steps) ran out
    AUTO_STEPS = "auto_steps"  # the automatic budget's planned passes over the corpus ran out
    TIME_BUDGET = "time_budget"  # the wall-clock budget ran out
    TOKEN_BUDGET = "token_budget"  # the budget of training tokens ran out
    EARLY_STOPPING = "early_stopping"  # validation stopped improving for `patience` epochs
    MEMORISED = "memorised"  # a small corpus is reproduced exactly
    CANCELLED = "cancelled"


LOSS_POINTS = 128  # 'loss' events per doubling of the step count (every step up to twice this)


def loss_stride(step: int) -> int:
    """Steps per 'loss' event around `step`: 1 up to 2 · LOSS_POINTS steps, then a window
    that doubles with the step count. A run of N steps draws min(N, 2 · LOSS_POINTS) points
    or more (156 steps: 156; a million: about 1,800), densest early, where the loss moves
    fastest. Powers of two, so each window ends on a multiple of the next one's length."""
    return 1 << max(0, (step // LOSS_POINTS).bit_length() - 1)


@dataclass
class ProgressEvent:
    """What a run reports while it trains (`kind`: 'start' | 'step' | 'loss' | 'epoch' |
    'done').

    'step' comes every `progress_every_s` seconds (progress, speed: no loss); 'loss' is the
    mean training loss of the steps since the previous one (`loss_stride`); 'epoch' follows
    validation, with the epoch's mean training loss.

    Progress follows what will actually happen: `limit` says which budget binds ('steps',
    'time' or 'tokens'), `fraction` is the share of it used, and `total_steps` is the step the
    run is expected to end at (projected from the current speed under a time or token budget;
    0 while not known: a minutes or tokens run before its first step).
    `watch` says what may end the run earlier: {"rule": "patience", "bad_epochs": k,
    "patience": p} or {"rule": "memorise", "reproduced": share of the `pairs` it can reproduce,
    "unreproducible": pairs not waited for (a target character its tokenizer lacks)}, empty
    when nothing does. `pace`: the real speed against the planned one and what was changed for it.
    """

    step: int
    total_steps: int
    epoch: int
    train_loss: float | None
    valid_loss: float | None
    lr: float
    tokens_per_s: float  # source + target tokens per second (all ranks)
    eta_s: float | None
    bleu: float | None = None
    chrf: float | None = None
    kind: str = "step"
    elapsed_s: float = 0.0
    fraction: float = 0.0
    limit: str = "steps"
    watch: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None  # a StopReason value, on the 'done' event
    # the run against its plan (`Trainer._pace`): planned and real tokens/s, the re-plans,
    # the threads and their changes
    pace: dict[str, Any] = field(default_factory=dict)
