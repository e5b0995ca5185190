"""How long a run trains and at which learning rate: the budget and the §5.3 schedule together,
because a schedule has to know where the budget ends.

The budget is counted in optimizer steps (`plan_budget`), and a wall-clock or a token budget
can end it sooner; `progress` (the share of the budget used, by whichever limit binds) drives
the decay. A token budget ends a run at the same point of learning on any machine, which a
clock cannot: a CPU without bf16 trains about half as many tokens per minute.

The paper's "Noam" schedule, lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), rises
linearly for `warmup` steps and then decays with the inverse square root of the step. Small
corpora train for only a few hundred steps, where that curve barely leaves the ground, so a
constant rate (after a short linear warm-up) is offered too. For a fixed budget (a number of
steps or minutes known in advance) a linear decay to zero after the warm-up uses the budget
better than an open-ended 1/√step tail ("budgeted training"): 'linear'.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from core_model.training.config import TrainConfig, TrainingError


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule (§5.3), optionally scaled by `factor`; steps count from 1."""
    step = max(1, step)
    warmup = max(1, warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def linear_decay_lr(step: int, lr: float, warmup: int, progress: float) -> float:
    """Linear warm-up to `lr` over `warmup` steps, then linear decay to 0 as `progress` (the
    share of the budget used, 0..1) reaches 1.

    The warm-up is counted in steps, not as a share of the budget: Adam's moment estimates
    need about a hundred updates whatever the budget (tuned: docs/TRAINING.md).
    """
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


# the warm-up of a schedule given none (memorising: the recipe leaves it open): a tenth of
# the budget's steps, at most this many
SHORT_WARMUP_STEPS = 100
OPEN_ENDED_STEPS = 10**9  # the step count of a run that only its clock or tokens end


@dataclass
class Budget:
    """What `plan_budget` decided: steps per epoch (incl. repeats), epochs, total steps."""

    passes_per_epoch: int  # tiny corpora repeat inside an epoch
    steps_per_epoch: int
    epochs: int
    total_steps: int


class BudgetClock:
    """Where a run stands against its budget: optimizer steps and, if set, the wall clock and
    the training tokens (source + target, all ranks).

    `already_s` / `already_tokens` are the time and tokens of earlier attempts (a resumed run),
    so a budget counts the whole run, not each attempt. The trainer updates `tokens` after
    every step.
    """

    def __init__(
        self,
        budget: Budget,
        time_budget_s: float | None,
        step: int,
        already_s: float = 0.0,
        token_budget: int | None = None,
        already_tokens: int = 0,
    ) -> None:
        self.budget = budget
        self.time_budget_s = time_budget_s
        self.token_budget = token_budget
        self.t_start = time.monotonic() - already_s
        self.start_step = step  # steps before this attempt do not count for its speed
        self.resumed_s = already_s
        self.start_tokens = self.tokens = already_tokens
        self.mark = (already_s, already_tokens)  # (elapsed, tokens) of `recent_tokens_per_s`
        # seconds kept at the end of a time budget for choosing the final weights (their
        # validations): training, and its decay, end that much earlier
        self.reserve_s = 0.0
        self.reserves: list[float] = []  # this attempt's reserve asked at each epoch's end
        self.between_epochs_s = 0.0  # this attempt's validations and checkpoints

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def training_s(self) -> float | None:
        """The seconds of a time budget that train (the reserve kept apart)."""
        return None if self.time_budget_s is None else self.time_budget_s - self.reserve_s

    def keep_reserve(self, seconds: float, cap_s: float) -> None:
        """Keep for the final weights' choice the mean of the reserves asked at each epoch's
        end (at most `cap_s`), not the latest: a slow validation (an untrained model's greedy
        outputs run to their length limit) then a quick one swung the time left for steps,
        and with it the step estimate (2,359 → 1,038 → 2,526) and the rate's decay."""
        self.reserves.append(seconds)
        self.reserve_s = min(sum(self.reserves) / len(self.reserves), cap_s)

    def time_left(self) -> float | None:
        budget = self.training_s()
        return None if budget is None else budget - self.elapsed()

    def tokens_per_s(self, steps_only: bool = False) -> float | None:
        """This attempt's speed so far, validations included (None before its first step);
        `steps_only`: in its training steps alone, the validations and checkpoints between
        epochs left out — the figure a calibration, which times steps, predicts."""
        spent = self.elapsed() - self.resumed_s - (self.between_epochs_s if steps_only else 0.0)
        done = self.tokens - self.start_tokens
        return done / spent if done > 0 and spent > 0 else None

    def recent_tokens_per_s(self, min_s: float) -> float | None:
        """The speed since the previous measurement (the first: since this attempt began),
        validations included, once that is at least `min_s` seconds ago (else None, and the
        window goes on). A re-plan compares this, not the average since the start: a GPU's
        start-up (CUDA, first kernels) keeps the average rising long after the speed settled,
        and a core taken an hour into a run would weigh too little in it."""
        now = self.elapsed()
        since_s, since_tokens = now - self.mark[0], self.tokens - self.mark[1]
        if since_s < min_s:
            return None
        self.mark = (now, self.tokens)
        return since_tokens / since_s if since_tokens > 0 else None

    def restart_window(self) -> None:
        """The next `recent_tokens_per_s` measures from now on (the speed just changed)."""
        self.mark = (self.elapsed(), self.tokens)

    def tokens_left(self) -> int | None:
        return None if self.token_budget is None else self.token_budget - self.tokens

    def _shares(self, step: int) -> dict[str, float]:
        """The share of each budget used so far."""
        shares = {"steps": step / max(1, self.budget.total_steps)}
        if self.time_budget_s:
            shares["time"] = self.elapsed() / max(1e-9, self.training_s() or 0.0)
        if self.token_budget:
            shares["tokens"] = self.tokens / self.token_budget
        return shares

    def progress(self, step: int) -> float:
        """Share of the budget used, by whichever limit is closest to its end."""
        return min(1.0, max(self._shares(step).values()))

    def binding(self, step: int) -> str:
        """The limit expected to end the run: 'steps', 'time' or 'tokens'."""
        shares = self._shares(step)
        return max(shares, key=lambda k: (shares[k], k != "steps"))

    def _steps_per_s(self, step: int) -> float | None:
        done = step - self.start_step
        spent = self.elapsed() - self.resumed_s
        return done / spent if done > 0 and spent > 0 else None

    def _tokens_per_step(self, step: int) -> float | None:
        done = step - self.start_step
        return (self.tokens - self.start_tokens) / done if done > 0 else None

    def expected_total(self, step: int) -> int:
        """The step the run is expected to end at: the step budget, or, when the clock or the
        token budget binds, the steps the current speed reaches before it runs out; 0 while
        it is not known (an open-ended run before its first step gives it a speed: its step
        count, OPEN_ENDED_STEPS, is no end)."""
        total = self.budget.total_steps
        limit = self.binding(step)
        rate, left = self._steps_per_s(step), self.time_left()
        if limit == "time" and rate is not None and left is not None:
            total = min(total, step + int(max(0.0, left) * rate))
        per_step, tokens_left = self._tokens_per_step(step), self.tokens_left()
        if limit == "tokens" and per_step and tokens_left is not None:
            total = min(total, step + math.ceil(max(0, tokens_left) / per_step))
        if total >= OPEN_ENDED_STEPS:
            return 0
        return max(total, step)

    def eta(self, step: int) -> float | None:
        """Seconds until the budget ends (early stopping may come sooner)."""
        rate = self._steps_per_s(step)
        if rate is None:
            left = self.time_left()
            return None if left is None else max(0.0, left)
        return max(0.0, (self.expected_total(step) - step) / rate)


def plan_budget(
    n_batches: int, cfg: TrainConfig, memorise: bool = False, open_ended: bool = False
) -> Budget:
    """Adaptive budget (epochs=None) or the requested number of epochs.

    - `open_ended`: the user asked for minutes or tokens, so that limit alone ends the run
      (or `max_steps`, or early stopping): no step count is planned.

    - An epoch has at least `min_epoch_steps` steps: a corpus of 12 pairs (1 batch) is repeated
      50 times per epoch, so validation/checkpoints happen per ~50 steps, not per step.
    - Adaptive total = clamp(adaptive_passes · batches, min_steps, max_adaptive_steps): tiny
      corpora get enough steps to be memorised; a 30k corpus (~120 batches) gets ~30 passes,
      a 1M corpus a few passes; early stopping on validation trims the rest.
    - `memorise` (small corpus, no validation pairs): up to `memorise_max_steps`, because the
      run stops as soon as every training pair is reproduced (12 pairs: ~150 steps).
    """
    n_batches = max(1, n_batches)
    passes = max(1, math.ceil(cfg.min_epoch_steps / n_batches))
    spe = passes * n_batches
    if cfg.epochs is not None:
        epochs = max(1, int(cfg.epochs))
    elif open_ended:
        epochs = math.ceil(OPEN_ENDED_STEPS / spe)
    else:
        target = min(max(cfg.adaptive_passes * n_batches, cfg.min_steps), cfg.max_adaptive_steps)
        if memorise:
            target = max(target, cfg.memorise_max_steps)
        epochs = max(1, math.ceil(target / spe))
    total = epochs * spe
    if cfg.max_steps is not None:
        total = min(total, int(cfg.max_steps))
        epochs = min(epochs, math.ceil(total / spe))
    return Budget(passes, spe, epochs, total)


def make_schedule(cfg: TrainConfig, d_model: int, total_steps: int) -> LRSchedule:
    """The concrete schedule of a resolved config (`training.recipe` has decided 'auto').

    'linear' warms up over `warmup_steps` and decays to zero where the budget ends.
    'constant' holds `lr` after a short warm-up. 'noam' is the paper's curve; without an
    explicit warm-up it uses min(4000, total/10) steps, rescaled to peak at `lr` (default:
    the paper's peak for this width, d_model^-0.5 · 4000^-0.5).
    """
    kind = cfg.lr_schedule
    if kind not in ("noam", "constant", "linear"):
        raise TrainingError(f"Unknown learning-rate schedule {cfg.lr_schedule!r}.")
    paper_peak = noam_lr(4000, d_model, 4000) * cfg.lr_factor  # the paper's peak at this width
    if kind == "noam":
        if cfg.warmup_steps is not None and cfg.lr is None:  # the paper's curve exactly
            return LRSchedule("noam", d_model, cfg.warmup_steps, factor=cfg.lr_factor)
        warmup = cfg.warmup_steps or max(50, min(4000, total_steps // 10))
        # a shortened warm-up must not raise the peak
        factor = noam_factor_for_peak(cfg.lr or paper_peak, d_model, warmup)
        return LRSchedule("noam", d_model, warmup, factor=factor)
    warmup = (
        cfg.warmup_steps
        if cfg.warmup_steps is not None
        else min(SHORT_WARMUP_STEPS, total_steps // 10)
    )
    return LRSchedule(kind, d_model, warmup, lr=cfg.lr or paper_peak)
